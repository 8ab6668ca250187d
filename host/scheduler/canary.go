package scheduler

// This file is the canary's place in a sweep: a new version of the
// scanner, run in shadow beside the running one (host/canary), is handed
// every partition first, with the same request, so that both decide on
// the same state; the comparison of their decisions ends with the sweep.

import (
	"context"
)

// Canary is a new version compared with the running one.
type Canary interface {
	// Acquire leases the canary's instance for one call.
	Acquire() (Lease, error)
	// Failed notes a canary call that failed (the sweep is not compared
	// in full).
	Failed()
	// StartCycle starts a sweep that hands the canary its partitions.
	StartCycle()
	// EndCycle ends it.
	EndCycle(cycle uint64)
}

type canaryBox struct{ c Canary }

// SetCanary makes c the runner's canary from the next sweep on (nil:
// none). A sweep under way keeps the canary it started with.
func (r *Runner) SetCanary(c Canary) {
	if c == nil {
		r.canary.Store(nil)
		return
	}
	r.canary.Store(&canaryBox{c})
}

// canaryNow is the canary a new sweep runs with.
func (r *Runner) canaryNow() Canary {
	if b := r.canary.Load(); b != nil {
		return b.c
	}
	return nil
}

// canaryCall hands one partition to the canary before the running
// version gets it: the same request, under the canary's own lease and
// deadline. Its result is not the sweep's: only its decisions count,
// and they reach the comparison through the callback service.
func (sw *sweep) canaryCall(st *partState, nowMs int64) {
	c := sw.canary
	if c == nil {
		return
	}
	lease, err := c.Acquire()
	if err != nil {
		c.Failed()
		return
	}
	defer release(lease)
	r := sw.r
	ctx, cancel := context.WithTimeout(r.calls, r.Tuning().CallTimeout)
	defer cancel()
	host := lease.Host
	if host == nil {
		host = r.host
	}
	res, err := lease.Scanner.ScanPartition(ctx, host, sw.request(st, nowMs))
	if lease.Outcome != nil {
		lease.Outcome(err != nil && ctx.Err() != nil && r.calls.Err() == nil)
	}
	if err != nil || res == nil {
		c.Failed()
	}
}

// startCanary starts the sweep's comparison.
func (sw *sweep) startCanary() {
	if sw.canary != nil {
		sw.canary.StartCycle()
	}
}

// endCanary ends the sweep's comparison.
func (sw *sweep) endCanary() {
	if sw.canary != nil {
		sw.canary.EndCycle(sw.sum.Cycle)
	}
}
