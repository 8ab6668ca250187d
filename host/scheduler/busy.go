package scheduler

// The partitions with a call in flight, which no sweep reads again.

import (
	"github.com/ffscan/ffscan/keys"
)

// markBusy notes that a call of partition p is in flight (or about to
// be), or no longer.
func (r *Runner) markBusy(p uint16, busy bool) {
	r.busyMu.Lock()
	defer r.busyMu.Unlock()
	if !busy {
		delete(r.busy, p)
		return
	}
	if r.busy == nil {
		r.busy = map[uint16]bool{}
	}
	r.busy[p] = true
}

// skipBusy leaves out (and counts) the partitions whose call from an
// earlier sweep is still in flight: reading them again would hand their
// entries to a second call at once.
func (r *Runner) skipBusy(parts []keys.Partition, sum *Summary) []keys.Partition {
	r.busyMu.Lock()
	defer r.busyMu.Unlock()
	if len(r.busy) == 0 {
		return parts
	}
	kept := parts[:0:0]
	for _, p := range parts {
		if r.busy[p.Index] {
			sum.Busy++
			continue
		}
		kept = append(kept, p)
	}
	return kept
}
