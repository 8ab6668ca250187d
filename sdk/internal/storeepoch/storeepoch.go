// Package storeepoch holds the store epoch as this process last saw it,
// and what to drop when it changes. Both sides of the SDK reach it: a
// scanner's memories register here (scannerapi.OnStoreRewound), and the
// code that calls a scanner's scan reports each request's epoch first
// (the plugin server behind scannerapi.Serve; a host running a scanner
// in its own process, through pluginhost.ObserveStoreEpoch).
package storeepoch

import "sync"

// Memory derived from the store is the process's (every scanutil.Memory
// registers itself), so the epoch is too: one change drops all of it,
// which costs one re-read per remembered entry and is rare (a failover,
// a restart).
var state struct {
	mu    sync.Mutex
	seen  uint64
	hooks []func()
}

// OnRewound registers f to be called whenever Observe sees an epoch
// other than the last one seen.
func OnRewound(f func()) {
	state.mu.Lock()
	state.hooks = append(state.hooks, f)
	state.mu.Unlock()
}

// Observe is called with each scan request's StoreEpoch before the
// scanner runs. When the epoch changed, every registered hook runs before
// Observe returns, so no scan of the new epoch can read memory of the old
// one. Epoch 0 (a host that does not track it) changes nothing.
func Observe(e uint64) {
	if e == 0 {
		return
	}
	state.mu.Lock()
	defer state.mu.Unlock()
	if e == state.seen {
		return
	}
	first := state.seen == 0
	state.seen = e
	if first {
		return // a fresh process has nothing to drop
	}
	for _, f := range state.hooks {
		f()
	}
}
