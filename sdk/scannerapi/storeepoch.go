package scannerapi

import "github.com/ffscan/ffscan/sdk/internal/storeepoch"

// OnStoreRewound registers f to be called whenever a scan request carries
// a StoreEpoch other than the last one seen: f drops what the scanner
// remembers from the store. scanutil.NewMemory registers the memory's
// Reset; a scanner keeping knowledge of another kind registers its own
// (cursors are hints, not knowledge, and need not). The epoch is the
// process's: the plugin server observes each request's before the scan,
// and so does a host running a scanner in its own process
// (pluginhost.ObserveStoreEpoch).
func OnStoreRewound(f func()) { storeepoch.OnRewound(f) }
