package scannerapi

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/sdk/internal/scancall"
)

// Logger returns the logger a scanner method should log through: in a
// plugin process it writes to stderr, where the host picks the lines up and
// logs them with the scanner's name; linked in, it is the host's logger. It
// never returns nil.
func Logger(ctx context.Context) hclog.Logger {
	if l, ok := scancall.Logger(ctx); ok {
		return l
	}
	return hclog.NewNullLogger()
}
