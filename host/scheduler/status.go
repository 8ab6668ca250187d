package scheduler

// The runner's status and metrics: what each sweep adds to them.

import (
	"sync"
	"time"
)

// Status is the runner's view for /v1/status.
type Status struct {
	Cycle        uint64
	LastCycleAt  time.Time
	LastDuration time.Duration
	Processed    int64
	Skipped      int64
	Errors       int64
	Backlog      int64
	BacklogKnown bool
	LastError    string
	// Failed counts partitions whose fetch or call failed, over all
	// cycles.
	Failed int64
	// CycleErrors counts cycles that could not run at all (scanner
	// unavailable, no server time).
	CycleErrors int64
	// InFlight is the ScanPartition calls running now.
	InFlight int
	// Wakeups counts the sweeps of partitions woken at their due time
	// between two interval sweeps; WokenPartitions the partitions they
	// read; LastWakeAt when the latest began.
	Wakeups         uint64
	WokenPartitions int64
	LastWakeAt      time.Time
	// Scheduled is the partitions with a wake-up scheduled now.
	Scheduled int
	// Quiet is the partitions read empty that the sweeps skip until one
	// of their keys is created (new-key events).
	Quiet int
	// Late counts the calls that ended after their dispatch stopped
	// waiting for them (a node whose calls stalled; dispatch.go).
	Late int64
}

// Status returns a snapshot of the runner's counters.
func (r *Runner) Status() Status { return r.status.get() }

// statusBook is the runner's Status, which the sweep, the calls and the
// event feed update while the host reads it.
type statusBook struct {
	mu sync.Mutex
	st Status
}

func (b *statusBook) get() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st
}

// update changes the status under its lock.
func (b *statusBook) update(f func(st *Status)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.st)
}

// scheduled is how many partitions have a wake-up, the schedule of an
// epoch past dropped first (a failure in the sweep just ended may have
// moved the epoch).
func (r *Runner) scheduled() int {
	r.checkWakeEpoch()
	return r.wakeups.Len()
}

// finish records the cycle's metrics and status.
func (r *Runner) finish(sum *Summary, start time.Time, fullCycle bool) {
	sum.Duration = r.since(start)
	if fullCycle {
		r.rec.Cycle(r.cfg.Name, sum.Duration)
	}
	r.recordCounts(sum)
	r.status.update(func(st *Status) {
		st.Cycle = sum.Cycle
		st.LastCycleAt = start
		st.LastDuration = sum.Duration
		st.count(sum)
		if sum.BacklogKnown {
			st.Backlog, st.BacklogKnown = sum.Backlog, true
		}
		st.Scheduled = r.scheduled()
		st.Quiet = r.quietCount()
		r.cfg.Changes.Notify()
	})
}

// finishWake records a wake-up sweep's metrics and status: its items,
// errors and partitions count as a cycle's, its duration does not.
func (r *Runner) finishWake(sum *Summary, start time.Time) {
	sum.Duration = r.since(start)
	r.recordCounts(sum)
	r.status.update(func(st *Status) {
		st.Wakeups++
		st.WokenPartitions += int64(sum.Partitions)
		st.LastWakeAt = start
		st.count(sum)
		st.Scheduled = r.scheduled()
	})
	r.cfg.Changes.Notify()
}

// recordCounts records a sweep's items, errors and partitions.
func (r *Runner) recordCounts(sum *Summary) {
	r.rec.Items(r.cfg.Name, sum.Processed, sum.Skipped)
	for k, n := range sum.Errors {
		r.rec.Errors(r.cfg.Name, k.Class, k.Code, n)
	}
	r.rec.Partitions(r.cfg.Name, "scanned", sum.Scanned)
	r.rec.Partitions(r.cfg.Name, "empty", sum.Empty)
	r.rec.Partitions(r.cfg.Name, "failed", sum.Failed)
}

// count adds a sweep's counts to the status.
func (st *Status) count(sum *Summary) {
	st.Processed += sum.Processed
	st.Skipped += sum.Skipped
	st.Errors += sum.ErrorTotal()
	st.Failed += int64(sum.Failed)
}

func (r *Runner) cycleError() {
	r.status.update(func(st *Status) { st.CycleErrors++ })
	r.cfg.Changes.Notify()
}

// inFlight counts a call starting (+1) or ending (-1).
func (r *Runner) inFlight(delta int) {
	r.status.update(func(st *Status) { st.InFlight += delta })
	r.cfg.Changes.Notify()
}

func (r *Runner) setLastError(s string) {
	r.status.update(func(st *Status) { st.LastError = s })
	r.cfg.Changes.Notify()
}
