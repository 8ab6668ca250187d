package scannerapi

import "sync"

// The store epoch as this process last saw it, and what to drop when it
// changes. Memory derived from the store is the process's (every
// scanutil.Memory registers itself), so the epoch is too: one change
// drops all of it, which costs one re-read per remembered entry and is
// rare (a failover, a restart).
var storeEpoch struct {
	mu    sync.Mutex
	seen  uint64
	hooks []func()
}

// OnStoreRewound registers f to be called whenever a scan request carries
// a StoreEpoch other than the last one seen: f drops what the scanner
// remembers from the store. scanutil.NewMemory registers the memory's
// Reset; a scanner keeping knowledge of another kind registers its own
// (cursors are hints, not knowledge, and need not).
func OnStoreRewound(f func()) {
	storeEpoch.mu.Lock()
	storeEpoch.hooks = append(storeEpoch.hooks, f)
	storeEpoch.mu.Unlock()
}

// ObserveStoreEpoch is called with each scan request's StoreEpoch before
// the scanner runs (the plugin server does it; a host calling a scanner in
// its own process does it too). When the epoch changed, every registered
// hook runs before ObserveStoreEpoch returns, so no scan of the new epoch
// can read memory of the old one. Epoch 0 (a host that does not track it)
// changes nothing.
func ObserveStoreEpoch(e uint64) {
	if e == 0 {
		return
	}
	storeEpoch.mu.Lock()
	defer storeEpoch.mu.Unlock()
	if e == storeEpoch.seen {
		return
	}
	first := storeEpoch.seen == 0
	storeEpoch.seen = e
	if first {
		return // a fresh process has nothing to drop
	}
	for _, f := range storeEpoch.hooks {
		f()
	}
}
