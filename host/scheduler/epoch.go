package scheduler

import (
	"strings"
	"sync"
	"sync/atomic"
)

// StoreEpoch counts the signs a host saw that the store may have lost or
// rewound state: a read or clock read that got no reply (a node failing
// over, a server restarting), a scanner reporting transport errors, a
// change in the set of nodes the client routes to. Scan requests carry it
// (ScanRequest.StoreEpoch) and the SDK drops a plugin's memories when it
// changes: a plugin cannot tell by itself that the master it read from
// was replaced by a replica that missed some writes, since its partitions
// are simply not scanned while the failover runs. One epoch serves every
// scanner of a host: the store is shared.
type StoreEpoch struct {
	n     atomic.Uint64
	mu    sync.Mutex
	nodes string
}

// NewStoreEpoch starts at 1 (0 means "not tracked" to a scanner).
func NewStoreEpoch() *StoreEpoch {
	e := &StoreEpoch{}
	e.n.Store(1)
	return e
}

// Load returns the current epoch (0 for a nil epoch).
func (e *StoreEpoch) Load() uint64 {
	if e == nil {
		return 0
	}
	return e.n.Load()
}

// Bump starts a new epoch.
func (e *StoreEpoch) Bump() {
	if e != nil {
		e.n.Add(1)
	}
}

// ObserveNodes bumps the epoch when the set of nodes differs from the one
// last observed (a failover or a reshard changes it).
func (e *StoreEpoch) ObserveNodes(nodes []string) {
	if e == nil || len(nodes) == 0 {
		return
	}
	set := strings.Join(nodes, ",")
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nodes != "" && e.nodes != set {
		e.n.Add(1)
	}
	e.nodes = set
}
