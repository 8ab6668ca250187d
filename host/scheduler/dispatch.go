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

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/valkeyreply"
)

// scanAll calls ScanPartition for every partition with candidates, with
// bounded concurrency. It returns the partitions that said More and the
// backlogs the plugin reported in its results.
func (sw *sweep) dispatch(ctx context.Context, states []*partState, nowMs int64, followUp bool) ([]keys.Partition, map[uint16]int64) {
	r, scanner, info, sum := sw.r, sw.scanner, sw.info, sw.sum
	var work []*partState
	for _, st := range states {
		if len(st.cands) == 0 {
			// Follow-up passes revisit partitions already counted.
			switch {
			case st.fetchError && !followUp:
				sum.Failed++
			case !st.fetchError:
				if !followUp {
					sum.Empty++
				}
				r.commitCursors(st)
			}
			continue
		}
		work = append(work, st)
	}
	var (
		mu            sync.Mutex
		more          []keys.Partition
		pluginBacklog = map[uint16]int64{}
		wg            sync.WaitGroup
		next          = make(chan *partState)
	)
	workers := min(r.Tuning().Concurrency, len(work))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for st := range next {
				lease, err := r.lease(scanner, info)
				if err == nil && !sameSchedule(info, lease.Info) {
					release(lease)
					mu.Lock()
					sum.Deferred++
					mu.Unlock()
					continue
				}
				var res *scannerapi.ScanResult
				if err == nil {
					res, err = sw.scanOne(lease, st, nowMs)
					if lease.Outcome != nil {
						// A deadline of the call's own, not the host's
						// shutdown cutting calls short.
						lease.Outcome(errors.Is(err, context.DeadlineExceeded) && r.cfg.CallParent.Err() == nil)
					}
					release(lease)
				}
				mu.Lock()
				if err != nil {
					sum.Failed++
					sum.addErr(scannerapi.ErrTransport, rpcCode(err), 1)
					r.setLastError(fmt.Sprintf("%s: %v", st.p.Tag(), err))
					mu.Unlock()
					continue
				}
				sum.Scanned++
				sum.Processed += res.Processed
				sum.Skipped += res.Skipped
				for _, e := range res.Errors {
					if e.Class == scannerapi.ErrTransport {
						// The scanner's commands got no reply: the
						// store may be failing over.
						r.cfg.Epoch.Bump()
					}
					sum.addErr(e.Class, e.Code, e.Count)
				}
				for _, n := range res.Notes {
					sum.Notes = append(sum.Notes, st.p.Tag()+": "+n)
				}
				if res.More {
					more = append(more, st.p)
				}
				if res.HasBacklog {
					pluginBacklog[st.p.Index] = res.Backlog
				}
				st.settled = max(0, res.Settled)
				st.hasLag, st.lag = res.HasLag, max(0, res.Lag)
				mu.Unlock()
				if !st.fetchError {
					r.commitCursors(st)
				}
			}
		}()
	}
	// Dispatch stops when ctx is done (shutdown); calls already running
	// finish under their own deadline.
dispatch:
	for _, st := range work {
		select {
		case next <- st:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(next)
	wg.Wait()
	sort.Slice(more, func(i, j int) bool { return more[i].Index < more[j].Index })
	return more, pluginBacklog
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
	ctx, cancel := context.WithTimeout(r.cfg.CallParent, r.Tuning().CallTimeout)
	defer cancel()
	req := &scannerapi.ScanRequest{
		Scanner:    r.cfg.Name,
		Partition:  st.p,
		NowMs:      nowMs,
		Cycle:      r.cycle,
		Batch:      sw.batch,
		Lanes:      sw.lanes,
		Candidates: st.cands,
		DryRun:     sw.dryRun,
		StoreEpoch: r.cfg.Epoch.Load(),
	}
	// A scanner linked into the host process keeps its memories here.
	scannerapi.ObserveStoreEpoch(req.StoreEpoch)
	t0 := r.clk.Now()
	res, err := scanner.ScanPartition(ctx, host, req)
	r.rec.RPC(r.cfg.Name, "scan_partition", r.since(t0))
	if err == nil && res == nil {
		err = errors.New("scanner returned no result")
	}
	return res, err
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
