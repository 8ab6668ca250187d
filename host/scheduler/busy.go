package scheduler

// The partitions with a call in flight, which no sweep reads again.

import (
	"sync"

	"github.com/ffscan/ffscan/keys"
)

// busySet is the partitions with a call in flight (or about to be).
type busySet struct {
	mu sync.Mutex
	m  map[uint16]bool
}

// mark notes that a call of partition p is in flight (or about to be),
// or no longer.
func (b *busySet) mark(p uint16, busy bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !busy {
		delete(b.m, p)
		return
	}
	if b.m == nil {
		b.m = map[uint16]bool{}
	}
	b.m[p] = true
}

// skip leaves out (and counts) the partitions whose call from an earlier
// sweep is still in flight: reading them again would hand their entries
// to a second call at once.
func (b *busySet) skip(parts []keys.Partition, sum *Summary) []keys.Partition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) == 0 {
		return parts
	}
	kept := parts[:0:0]
	for _, p := range parts {
		if b.m[p.Index] {
			sum.Busy++
			continue
		}
		kept = append(kept, p)
	}
	return kept
}
