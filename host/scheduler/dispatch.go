package scheduler

// This file is a cycle's second step: ScanPartition calls for the
// partitions with candidates, bounded in concurrency, each under a call
// lease and deadline.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/internal/plaintext"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/valkeyreply"
)

// dispatch calls ScanPartition for every partition with candidates, with
// bounded concurrency, and returns the partitions that said More and the
// backlogs the plugin reported in its results. It feeds no more calls once
// stop is closed (a node's lane cut loose, nodes.go); progress, when set,
// hears of every call that ended.
func (sw *sweep) dispatch(ctx context.Context, states []*partState, nowMs int64, followUp bool, stop <-chan struct{}, progress func()) ([]keys.Partition, map[uint16]int64) {
	r := sw.r
	work := sw.withCandidates(states, followUp)
	out := &dispatched{pluginBacklog: map[uint16]int64{}}
	var wg sync.WaitGroup
	next := make(chan *partState)
	for range min(r.Tuning().Concurrency, len(work)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for st := range next {
				sw.call(st, nowMs, out)
				r.busy.mark(st.p.Index, false)
				if progress != nil {
					progress()
				}
			}
		}()
	}
	// Dispatch stops when ctx is done (shutdown) or stop is closed; calls
	// already running finish under their own deadline.
feed:
	for _, st := range work {
		select {
		case next <- st:
		case <-ctx.Done():
			break feed
		case <-stop:
			break feed
		}
	}
	close(next)
	wg.Wait()
	sort.Slice(out.more, func(i, j int) bool { return out.more[i].Index < out.more[j].Index })
	return out.more, out.pluginBacklog
}

// withCandidates returns the partitions to call; the others are counted
// (empty, or failed to fetch) and their cursors committed.
func (sw *sweep) withCandidates(states []*partState, followUp bool) []*partState {
	var work []*partState
	for _, st := range states {
		if len(st.cands) > 0 {
			work = append(work, st)
			continue
		}
		// Follow-up passes revisit partitions already counted.
		switch {
		case st.fetchError && !followUp:
			sw.sum.Failed++
		case !st.fetchError:
			if !followUp {
				sw.sum.Empty++
			}
			sw.r.commitCursors(st)
		}
	}
	return work
}

// dispatched is what a dispatch's calls reported beyond the summary.
type dispatched struct {
	mu            sync.Mutex // guards these and the sweep's summary
	more          []keys.Partition
	pluginBacklog map[uint16]int64
}

// call runs one partition's ScanPartition under a lease and records its
// result.
func (sw *sweep) call(st *partState, nowMs int64, out *dispatched) {
	r, sum := sw.r, sw.sum
	if !sw.dryRun && r.pausedNow() {
		// Paused at its action budget: the partition's items stay in
		// the store for after the resume (its cursors do not move).
		out.mu.Lock()
		sum.Paused++
		out.mu.Unlock()
		return
	}
	lease, err := r.lease(sw.scanner, sw.info)
	if err == nil && !sameSchedule(sw.info, lease.Info) {
		release(lease)
		out.mu.Lock()
		sum.Deferred++
		out.mu.Unlock()
		return
	}
	var res *scannerapi.ScanResult
	if err == nil {
		// The canary first: the running version's writes would change
		// what it sees.
		sw.canaryCall(st, nowMs)
		r.inFlight(1)
		res, err = sw.scanOne(lease, st, nowMs)
		r.inFlight(-1)
		if lease.Outcome != nil {
			// A deadline of the call's own, not the host's shutdown
			// cutting calls short.
			lease.Outcome(errors.Is(err, context.DeadlineExceeded) && r.calls.Err() == nil)
		}
		release(lease)
	}
	out.mu.Lock()
	if err != nil {
		sum.Failed++
		sum.addErr(scannerapi.ErrTransport, rpcCode(err), 1)
		// The error's text is the plugin's: one bounded line.
		r.setLastError(plaintext.Line(fmt.Sprintf("%s: %v", st.p.Tag(), err), plaintext.Max))
		out.mu.Unlock()
		return
	}
	sw.record(st, res, out)
	out.mu.Unlock()
	if !sw.dryRun {
		r.noteActions(res.Processed, max(int64(len(st.cands)), res.Processed+res.Skipped))
	}
	if !st.fetchError {
		r.commitCursors(st)
	}
}

// record adds a partition's result to the summary. out.mu must be held.
func (sw *sweep) record(st *partState, res *scannerapi.ScanResult, out *dispatched) {
	sum := sw.sum
	sum.Scanned++
	sum.Processed += res.Processed
	sum.Skipped += res.Skipped
	for _, e := range res.Errors {
		if e.Class == scannerapi.ErrTransport {
			// The scanner's commands got no reply: the store may be
			// failing over.
			sw.r.cfg.Epoch.Bump()
		}
		sum.addErr(e.Class, e.Code, e.Count)
	}
	// Notes are the plugin's text: each one bounded line, and a bounded
	// number of them per call.
	for i, n := range res.Notes {
		if i == MaxNotes {
			sum.Notes = append(sum.Notes, fmt.Sprintf("%s: …[%d more notes not kept]", st.p.Tag(), len(res.Notes)-MaxNotes))
			break
		}
		sum.Notes = append(sum.Notes, st.p.Tag()+": "+plaintext.Line(n, plaintext.Max))
	}
	if res.More {
		out.more = append(out.more, st.p)
	}
	if res.HasBacklog {
		out.pluginBacklog[st.p.Index] = res.Backlog
	}
	st.settled = max(0, res.Settled)
	st.hasLag, st.lag = res.HasLag, max(0, res.Lag)
}

// lease returns the scanner for one call: per call from an Acquirer (a hot
// swap may switch instances between two calls), else the cycle's.
func (r *Runner) lease(scanner scannerapi.Scanner, info scannerapi.Info) (Lease, error) {
	if a, ok := r.target.(Acquirer); ok {
		l, err := a.Acquire()
		if err != nil {
			return Lease{}, fmt.Errorf("%w: %w", errUnavailable, err)
		}
		return l, nil
	}
	return Lease{Scanner: scanner, Info: info}, nil
}

func release(l Lease) {
	if l.Release != nil {
		l.Release()
	}
}

// errUnavailable marks calls that found no running scanner.
var errUnavailable = errors.New("scanner unavailable")

// sameSchedule reports whether candidates fetched for a cycle planned with
// a can be handed to a scanner whose Info is b.
func sameSchedule(a, b scannerapi.Info) bool {
	return a.Name == b.Name && a.Family == b.Family && slices.Equal(a.Sources, b.Sources)
}

func (sw *sweep) scanOne(lease Lease, st *partState, nowMs int64) (*scannerapi.ScanResult, error) {
	r := sw.r
	scanner, host := lease.Scanner, lease.Host
	if host == nil {
		host = r.host
	}
	ctx, cancel := context.WithTimeout(r.calls, r.Tuning().CallTimeout)
	defer cancel()
	req := sw.request(st, nowMs)
	// A scanner linked into the host process keeps its memories here.
	pluginhost.ObserveStoreEpoch(req.StoreEpoch)
	t0 := r.clk.Now()
	res, err := scanner.ScanPartition(ctx, host, req)
	r.rec.RPC(r.cfg.Name, "scan_partition", r.since(t0))
	if err == nil && res == nil {
		err = errors.New("scanner returned no result")
	}
	return res, err
}

// request is a partition's ScanPartition request in this sweep.
func (sw *sweep) request(st *partState, nowMs int64) *scannerapi.ScanRequest {
	r := sw.r
	return &scannerapi.ScanRequest{
		Scanner:    r.cfg.Name,
		Partition:  st.p,
		NowMs:      nowMs,
		Cycle:      sw.sum.Cycle,
		Batch:      sw.batch,
		Lanes:      sw.lanes,
		Candidates: st.cands,
		DryRun:     sw.dryRun,
		StoreEpoch: r.cfg.Epoch.Load(),
	}
}

// classify maps a valkey-go error to an error class.
func classify(err error) scannerapi.ErrorClass {
	if verr, ok := valkey.IsValkeyErr(err); ok && !valkeyreply.Transient(verr) {
		return scannerapi.ErrServer
	}
	return scannerapi.ErrTransport
}

// rpcCode names a failed plugin call: the process died, a timeout, a
// cancellation (shutdown), or any other failure.
func rpcCode(err error) string {
	if errors.Is(err, errUnavailable) {
		return "plugin_unavailable"
	}
	if errors.Is(err, pluginhost.ErrPluginExited) {
		return "plugin_exited"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "rpc_timeout"
	}
	if errors.Is(err, context.Canceled) {
		return "rpc_canceled"
	}
	return "rpc_error"
}
