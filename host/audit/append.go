package audit

import (
	"context"
	"strconv"

	"github.com/valkey-io/valkey-go"
)

// Append writes one entry at once, outside any Recorder: the record of an
// operator action taken by a command that runs no host (`ffscan plugins
// approve`, `ffscan plugins pin --write`), which no running host's
// recorder sees. e must carry its kind, host and channel; its time is the
// store's, as for every entry.
func Append(ctx context.Context, client valkey.Client, maxEntries int64, e Entry) error {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	args := append([]string{"MAXLEN", "~", strconv.FormatInt(maxEntries, 10), "*"}, e.fields()...)
	return client.Do(ctx, client.B().Arbitrary("XADD").Keys(streamOf(e)).Args(args...).Build()).Error()
}
