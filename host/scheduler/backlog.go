package scheduler

// This file is a cycle's last step: the backlog total from the host's
// counts, the scanners' own numbers, and SampleBacklog where asked.

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// backlog totals the cycle's backlog: per partition the plugin's own
// number when its scan result carried one (it replaces the host's sample),
// otherwise the host's counts plus, for sources with plugin backlog, one
// batched SampleBacklog call for all remaining partitions. It returns false
// when some partition could not be sampled.
func (sw *sweep) backlog(ctx context.Context, states []*partState, got map[uint16]int64) bool {
	info, sum := sw.info, sw.sum
	ok := true
	var ask []keys.Partition
	var askIdx []int
	for i, st := range states {
		if v, has := got[st.p.Index]; has {
			st.backlog = v
			continue
		}
		// Entries the scan knows are settled are not work to do.
		st.backlog = max(0, st.backlog-st.settled)
		if needsPluginBacklog(info) && (st.pluginKeys == 0 || st.pluginAbsent < st.pluginKeys) {
			ask = append(ask, st.p)
			askIdx = append(askIdx, i)
		}
	}
	if len(ask) > 0 {
		vals, err := sw.sampleBacklog(ctx, ask)
		if err != nil {
			sum.addErr(scannerapi.ErrTransport, "sample_backlog", 1)
			sw.r.log.Debug("SampleBacklog failed", "error", err)
			ok = false
		} else {
			for j, v := range vals {
				states[askIdx[j]].backlog += v
			}
		}
	}
	for _, st := range states {
		sum.Backlog += st.backlog
	}
	return ok
}

func (sw *sweep) sampleBacklog(ctx context.Context, ask []keys.Partition) ([]int64, error) {
	r := sw.r
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lease, err := r.lease(sw.scanner, sw.info)
	if err != nil {
		return nil, err
	}
	defer release(lease)
	// Launched and linked scanners always answer; a bare scanner that
	// measures nothing itself has no backlog to report between scans.
	sampler, ok := lease.Scanner.(scannerapi.BacklogSampler)
	if !ok {
		return nil, nil
	}
	host := lease.Host
	if host == nil {
		host = r.host
	}
	cctx, cancel := context.WithTimeout(r.calls, r.Tuning().CallTimeout)
	defer cancel()
	t0 := r.clk.Now()
	vals, err := sampler.SampleBacklog(cctx, host, ask)
	r.rec.RPC(r.cfg.Name, "sample_backlog", r.since(t0))
	if err != nil {
		return nil, err
	}
	if vals == nil {
		return nil, nil // not measured
	}
	if len(vals) != len(ask) {
		return nil, fmt.Errorf("SampleBacklog returned %d values for %d partitions", len(vals), len(ask))
	}
	return vals, nil
}

func needsPluginBacklog(info scannerapi.Info) bool {
	for _, s := range info.Sources {
		if s.Backlog == scannerapi.BacklogPlugin {
			return true
		}
	}
	return false
}

func hasBacklog(info scannerapi.Info) bool {
	for _, s := range info.Sources {
		if s.Backlog != scannerapi.BacklogNone {
			return true
		}
	}
	return false
}

func hasDueSource(info scannerapi.Info) bool {
	for _, s := range info.Sources {
		if s.Kind == scannerapi.SourceZSetDue || s.Kind == scannerapi.SourcePostgres {
			return true
		}
	}
	return false
}
