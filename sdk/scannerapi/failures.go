package scannerapi

import "sync"

// FailureTracker defaults (FlowFabric's values).
const (
	// DefaultFailureThreshold is the number of consecutive failures after
	// which an item is backed off.
	DefaultFailureThreshold = 3
	// DefaultBackoffCycles is how many cycles a backed-off item is skipped.
	DefaultBackoffCycles = 10
	// DefaultTrackerGCSize is the number of entries above which the
	// tracker collects stale ones.
	DefaultTrackerGCSize = 500
	// DefaultTrackerGCEvery is how many cycles apart collections run.
	DefaultTrackerGCEvery = 50
)

// FailureTracker keeps a poison item (one whose command keeps failing)
// from being retried every cycle: after Threshold consecutive failures the
// item is skipped for Backoff cycles, then gets Threshold fresh attempts.
// It follows FlowFabric's FailureTracker with two deliberate fixes:
//
//   - The cycle is the one the host passes in ScanRequest.Cycle, given on
//     every call, instead of a counter that only moves when partition 0 gets
//     past its reads (pitfall P16: a failing partition 0 froze every
//     backoff). If the cycle goes backwards (a restarted host) by more than
//     the backoff, pending backoffs are released rather than stretched.
//   - Collection (every GCEvery cycles while more than GCSize entries are
//     held) drops entries that are not in backoff and whose last failure is
//     at least GCEvery cycles old, instead of every partial count.
//
// It is safe for concurrent use by the partitions of one scanner. Key items
// by a stable id (an execution id, a waitpoint id).
type FailureTracker struct {
	// Threshold, Backoff, GCSize and GCEvery default to the Default*
	// constants when zero. Set them before first use.
	Threshold int    // consecutive failures before a backoff
	Backoff   uint64 // cycles an item is skipped
	GCSize    int    // entries above which collection runs
	GCEvery   uint64 // cycles between collections

	mu      sync.Mutex
	entries map[string]*failureEntry
	lastGC  uint64
}

type failureEntry struct {
	failures    int
	skipUntil   uint64 // valid when failures >= threshold
	lastFailure uint64
}

// NewFailureTracker returns a tracker with FlowFabric's defaults
// (threshold 3, backoff 10 cycles).
func NewFailureTracker() *FailureTracker { return &FailureTracker{} }

func (t *FailureTracker) threshold() int {
	if t.Threshold > 0 {
		return t.Threshold
	}
	return DefaultFailureThreshold
}

func (t *FailureTracker) backoff() uint64 {
	if t.Backoff > 0 {
		return t.Backoff
	}
	return DefaultBackoffCycles
}

// ShouldSkip reports whether key is backed off at cycle. Once its backoff
// has passed, the item's count is reset (it gets fresh attempts) and
// ShouldSkip returns false.
func (t *FailureTracker) ShouldSkip(key string, cycle uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maybeGC(cycle)
	e, ok := t.entries[key]
	if !ok || e.failures < t.threshold() {
		return false
	}
	if t.backedOffLocked(e, cycle) {
		return true
	}
	delete(t.entries, key)
	return false
}

// backedOffLocked is the backoff predicate, one for ShouldSkip and
// BackoffUntil: an item at the threshold is skipped until skipUntil,
// unless the cycle went back by more than the backoff (a restarted host).
func (t *FailureTracker) backedOffLocked(e *failureEntry, cycle uint64) bool {
	return e.failures >= t.threshold() && e.skipUntil > cycle && e.skipUntil-cycle <= t.backoff()
}

// BackoffUntil reports whether key is backed off at cycle and the first
// cycle at which it is tried again, without changing anything (an
// explanation asks it; ShouldSkip is what a scan asks, by the same rule).
func (t *FailureTracker) BackoffUntil(key string, cycle uint64) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[key]
	if !ok || !t.backedOffLocked(e, cycle) {
		return 0, false
	}
	return e.skipUntil, true
}

// Failures is how many consecutive failures key has had (0 when none
// are counted), without changing anything.
func (t *FailureTracker) Failures(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.entries[key]; ok {
		return e.failures
	}
	return 0
}

// RecordFailureClass is RecordFailure for a failure of the given class:
// a failure of class transport (no reply: a connection, a timeout, or the
// cluster declining for a moment with TRYAGAIN, MOVED, CLUSTERDOWN,
// LOADING, READONLY...) says nothing about the item and is not counted;
// the item is simply tried again next time. Nor is a write held back in
// shadow mode (ErrShadow).
func (t *FailureTracker) RecordFailureClass(key string, cycle uint64, class ErrorClass) bool {
	if class == ErrTransport || class == ErrShadow {
		return false
	}
	return t.RecordFailure(key, cycle)
}

// RecordFailure counts a failure of key at cycle. It returns true when this
// failure starts a backoff (the count reached the threshold and the item
// was not already backed off), so the caller can log it once.
func (t *FailureTracker) RecordFailure(key string, cycle uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maybeGC(cycle)
	if t.entries == nil {
		t.entries = make(map[string]*failureEntry)
	}
	e, ok := t.entries[key]
	if !ok {
		e = &failureEntry{}
		t.entries[key] = e
	}
	e.failures++
	e.lastFailure = cycle
	if e.failures >= t.threshold() && e.skipUntil <= cycle {
		e.skipUntil = cycle + t.backoff()
		return true
	}
	return false
}

// RecordSuccess forgets key.
func (t *FailureTracker) RecordSuccess(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.entries, key)
}

// Len is the number of items the tracker holds.
func (t *FailureTracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// BackedOff is the number of items currently in backoff at cycle.
func (t *FailureTracker) BackedOff(cycle uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, e := range t.entries {
		if e.failures >= t.threshold() && e.skipUntil > cycle {
			n++
		}
	}
	return n
}

func (t *FailureTracker) maybeGC(cycle uint64) {
	every := t.GCEvery
	if every == 0 {
		every = DefaultTrackerGCEvery
	}
	size := t.GCSize
	if size == 0 {
		size = DefaultTrackerGCSize
	}
	if cycle < t.lastGC {
		t.lastGC = cycle // the host restarted counting
	}
	if cycle-t.lastGC < every || len(t.entries) <= size {
		return
	}
	t.lastGC = cycle
	th := t.threshold()
	for k, e := range t.entries {
		inBackoff := e.failures >= th && e.skipUntil > cycle
		if !inBackoff && (cycle < e.lastFailure || cycle-e.lastFailure >= every) {
			delete(t.entries, k)
		}
	}
}
