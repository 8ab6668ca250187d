// Command retentionbuild is the retention_trimmer plugin rebuilt the way
// a site might: with its own built-in retention, set at link time with
// -ldflags "-X main.age=1h" (empty keeps the stock one). The canary
// tests compare such builds with the stock plugin.
package main

import (
	"context"
	"maps"

	"github.com/ffscan/ffscan/plugins/retention"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// age, when set, is this build's default_retention: it replaces the
// option the operator gave.
var age string

// build is the stock scanner with its options rewritten.
type build struct{ *retention.Scanner }

func (b build) Configure(ctx context.Context, options map[string]string) error {
	if age != "" {
		options = maps.Clone(options)
		if options == nil {
			options = map[string]string{}
		}
		options[retention.OptionDefaultRetention] = age
	}
	return b.Scanner.Configure(ctx, options)
}

func main() {
	scannerapi.Serve(build{retention.New()})
}
