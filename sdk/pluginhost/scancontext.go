package pluginhost

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/sdk/internal/scancall"
	"github.com/ffscan/ffscan/sdk/internal/storeepoch"
	"github.com/ffscan/ffscan/sdk/internal/wire"
)

// MinAPIVersion is the oldest contract version this SDK still runs: a
// host built with it launches plugins built against any version from
// MinAPIVersion to scannerapi.APIVersion, and scannerapi.Serve serves
// scanners that declare one of them.
const MinAPIVersion = wire.MinAPIVersion

// WithLogger returns a context that carries l for scannerapi.Logger: what
// a host hands the methods of a scanner it calls in its own process
// (Linked gives its calls the scanner's named logger itself).
func WithLogger(ctx context.Context, l hclog.Logger) context.Context {
	return scancall.WithLogger(ctx, l)
}

// ObserveStoreEpoch is called with each scan request's StoreEpoch before
// a scanner in the host's own process runs it (the plugin server does the
// same in a plugin process). When the epoch changed, every hook a scanner
// registered with scannerapi.OnStoreRewound runs before ObserveStoreEpoch
// returns, so no scan of the new epoch can read memory of the old one.
// Epoch 0 (a host that does not track it) changes nothing. The epoch is
// the process's, like the memories it drops.
func ObserveStoreEpoch(e uint64) { storeepoch.Observe(e) }
