package scheduler

// This file is a scanner's schedule of due-time wake-ups: the partitions
// whose next due entry a read revealed, by the instant it falls due.

import (
	"container/heap"
	"sync"
	"time"

	"github.com/ffscan/ffscan/keys"
)

// Wakeups is one scanner's schedule of partition wake-ups: for each
// partition at most one instant, the one its latest read revealed (the
// score of its first entry not yet due), ordered by time. So it holds at
// most one entry per partition of the scanner's family, however many
// entries the sources hold.
//
// A wake-up is a hint derived from a read, never the truth: the entry may
// be renewed, removed or joined by an earlier one after the read. The
// interval's sweep stays the safety net for all of that; the schedule only
// lets the runner come back to a partition at the instant something there
// falls due instead of at the next sweep. It is dropped whole when the
// store may have changed under it (Reset on a new store epoch).
//
// Safe for concurrent use; the zero Wakeups is ready.
type Wakeups struct {
	mu    sync.Mutex
	h     wakeHeap
	at    map[uint16]*wakeEntry
	epoch uint64 // the store epoch the schedule was learned in (Sync)
}

type wakeEntry struct {
	p   keys.Partition
	at  time.Time
	pos int // index in the heap
}

// Set schedules p at at, replacing what was scheduled for it: the latest
// read of a partition is the best knowledge of it, earlier or later.
func (w *Wakeups) Set(p keys.Partition, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setLocked(p, at)
}

func (w *Wakeups) setLocked(p keys.Partition, at time.Time) {
	if w.at == nil {
		w.at = map[uint16]*wakeEntry{}
	}
	if e, ok := w.at[p.Index]; ok {
		e.at = at
		heap.Fix(&w.h, e.pos)
		return
	}
	e := &wakeEntry{p: p, at: at}
	w.at[p.Index] = e
	heap.Push(&w.h, e)
}

// Drop removes p's wake-up (its read showed nothing to come, or failed).
func (w *Wakeups) Drop(p uint16) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.at[p]; ok {
		heap.Remove(&w.h, e.pos)
		delete(w.at, p)
	}
}

// Next returns the earliest scheduled instant.
func (w *Wakeups) Next() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.h) == 0 {
		return time.Time{}, false
	}
	return w.h[0].at, true
}

// Due removes and returns the partitions scheduled at or before now,
// earliest first.
func (w *Wakeups) Due(now time.Time) []keys.Partition {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []keys.Partition
	for len(w.h) > 0 && !w.h[0].at.After(now) {
		e := heap.Pop(&w.h).(*wakeEntry)
		delete(w.at, e.p.Index)
		out = append(out, e.p)
	}
	return out
}

// At returns p's scheduled instant.
func (w *Wakeups) At(p uint16) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.at[p]; ok {
		return e.at, true
	}
	return time.Time{}, false
}

// Len returns the number of partitions scheduled.
func (w *Wakeups) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.h)
}

// Sync drops every wake-up when epoch (the store epoch now, which only
// grows) is past the one the schedule was learned in.
func (w *Wakeups) Sync(epoch uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.syncLocked(epoch)
}

func (w *Wakeups) syncLocked(epoch uint64) {
	if epoch > w.epoch {
		w.h, w.at, w.epoch = nil, nil, epoch
	}
}

// Learn is Set for a wake-up a read made in store epoch epoch: one of an
// epoch already past is not kept, one of a newer epoch drops the others
// first.
func (w *Wakeups) Learn(epoch uint64, p keys.Partition, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.syncLocked(epoch)
	if epoch < w.epoch {
		return
	}
	w.setLocked(p, at)
}

// Reset drops every wake-up.
func (w *Wakeups) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.h = nil
	w.at = nil
}

// wakeHeap orders entries by instant, then by partition (a stable order
// for equal instants).
type wakeHeap []*wakeEntry

func (h wakeHeap) Len() int { return len(h) }
func (h wakeHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].p.Index < h[j].p.Index
	}
	return h[i].at.Before(h[j].at)
}
func (h wakeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *wakeHeap) Push(x any) {
	e := x.(*wakeEntry)
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *wakeHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
