package unblock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// item is one blocked execution on its way through the waves.
type item struct {
	src, lane, key, member string
	id                     keys.ExecutionID
	core                   map[string]string
	blocked                bool // a check found it still blocked (or could not tell)
	pending                int  // budget reads still owed before the decision
	quota                  *quotaCheck
	quotaID                keys.QuotaID
	budgets                []keys.BudgetID
	ns                     string
	decision               decision // what the scan decided for it (tally.go)
}

// scan is one ScanPartition call, or the dry run Explain makes of one
// entry. Each wave sends what the queues hold; each reply's check moves
// its item on to the queue of its next read, until the last queue calls
// the library. The checks are in checks.go (budgets, quotas) and
// routes.go (capabilities); what each item came to is counted by the
// tally.
type scan struct {
	req    *scannerapi.ScanRequest
	filter scannerapi.Filter
	parts  keys.PartitionConfig // read by readPartitions
	t      tally
	next   queues // what the next wave reads or calls
	routes routes
}

// queues are what the next wave reads or calls.
type queues struct {
	remove   []*item  // entries whose core is gone (ZREM)
	read     []*item  // cores and the filter's fields
	budget   []*item  // every attached budget's limits and usage
	quotaDef []*item  // the quota's definition
	quota    []*item  // the quota's window and concurrency
	workers  []string // namespaces whose worker index is read
	caps     []string // namespaces whose workers' capabilities are read
	act      []*item  // ff_unblock_execution
}

// newScan starts a scan of items that counts into t (its result and
// failure tracker).
func newScan(ctx context.Context, req *scannerapi.ScanRequest, filter scannerapi.Filter, t tally, items []*item) *scan {
	t.cycle, t.log = req.Cycle, scannerapi.Logger(ctx)
	sc := &scan{req: req, filter: filter, t: t}
	sc.next.read = items
	sc.routes = newRoutes(&sc.next, &sc.t)
	return sc
}

// run reads the partition counts when needed, then sends waves until
// every item is decided. A failed wave's error is wrapped with what.
func (sc *scan) run(ctx context.Context, host scannerapi.Host, what string) error {
	if err := sc.readPartitions(ctx, host); err != nil {
		return err
	}
	if _, err := scanutil.Waves(ctx, host, 0, sc.build); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// readPartitions reads the deployment's partition counts (budgets and
// quotas live on {b:M} and {q:K} by them) when a budget or quota entry is
// to be checked: read per scan, never remembered. Without them those
// entries stay blocked and are counted.
func (sc *scan) readPartitions(ctx context.Context, host scannerapi.Host) error {
	need := false
	for _, it := range sc.next.read {
		need = need || it.src != "route"
	}
	if !need {
		return nil
	}
	rs, err := host.Exec(ctx, []scannerapi.Command{{"HGETALL", keys.ConfigPartitions}})
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	var perr error
	if len(rs) != 1 || rs[0].Failed() {
		perr = fmt.Errorf("read %s failed", keys.ConfigPartitions)
	} else {
		sc.parts, perr = keys.ParsePartitionHash(hashOf(rs[0]))
	}
	if perr == nil {
		return nil
	}
	sc.t.log.Error("cannot locate budgets and quotas; their blocked executions stay blocked", "error", perr)
	kept := sc.next.read[:0]
	for _, it := range sc.next.read {
		if it.src == "route" {
			kept = append(kept, it)
			continue
		}
		sc.t.fail(it, scannerapi.ErrServer, "partition_config")
	}
	sc.next.read = kept
	return nil
}

// build fills the next wave from the queues.
func (sc *scan) build(b *scanutil.Batch) {
	sc.next.caps = sc.routes.withWorkers(sc.next.caps)
	w := sc.next
	sc.next = queues{}
	for _, it := range w.remove {
		b.Add(nil, scannerapi.Command{"ZREM", it.key, it.member})
	}
	for _, it := range w.read {
		it := it
		nf := len(sc.filter.ReadCommands(it.id))
		b.Add(func(r []scannerapi.Reply) { sc.readCore(it, r[0], r[1:1+nf]) },
			append([]scannerapi.Command{append(scannerapi.Command{"HMGET", keys.Exec(it.id).Core()}, coreFields...)},
				sc.filter.ReadCommands(it.id)...)...)
	}
	for _, it := range w.budget {
		sc.addBudgetReads(b, it)
	}
	for _, it := range w.quotaDef {
		sc.addQuotaDefRead(b, it)
	}
	for _, it := range w.quota {
		sc.addQuotaWindowReads(b, it)
	}
	sc.routes.addReads(b, w.workers, w.caps)
	for _, it := range w.act {
		sc.addCall(b, it)
	}
}

// addCall adds the library's call that unblocks it; a dry run only says
// it would.
func (sc *scan) addCall(b *scanutil.Batch, it *item) {
	if sc.req.DryRun {
		sc.t.res.Processed++
		sc.t.res.Note("would unblock %s (%s)", it.member, it.src)
		it.decide(scannerapi.VerdictActs, Function, "what blocked it (%s) has cleared: the next scan makes it eligible again", reasons[it.src])
		return
	}
	b.Add(func(r []scannerapi.Reply) { sc.record(it, r[0]) },
		scannerapi.FCall(Function, []string{keys.Exec(it.id).Core(), it.key, keys.FlowPart(sc.req.Partition).LaneEligible(it.lane)},
			it.member, strconv.FormatInt(sc.req.NowMs, 10), reasons[it.src]))
}

// readCore decides what an execution's reason needs, and queues it.
func (sc *scan) readCore(it *item, r scannerapi.Reply, filter []scannerapi.Reply) {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		sc.t.fail(it, class, "core_read_"+code)
		return
	}
	it.core = coreOf(r)
	switch judgeCore(it.core, it.src, !sc.filter.IsNoop() && !sc.filter.Decide(filter)) {
	case coreGone:
		// Nothing can ever unblock it.
		sc.t.skip(it, "core_gone", "its core is gone: the scan removes the entry from %s", it.key)
		it.decision.inconsistent = append(it.decision.inconsistent, it.key+" holds an execution whose core is gone")
		if !sc.req.DryRun {
			sc.next.remove = append(sc.next.remove, it)
		}
		sc.t.res.Note("%s: core gone; removed from %s", it.member, it.key)
	case coreFiltered:
		sc.t.skip(it, "filtered", "outside this scanner's filter (%s)", sc.filter.String())
	case coreOtherReason:
		sc.t.skip(it, "other_blocking_reason", "blocked for %q, not %q: not this scanner's to unblock", it.core["blocking_reason"], reasons[it.src])
		it.decision.inconsistent = append(it.decision.inconsistent,
			fmt.Sprintf("in %s while its core's blocking_reason is %q", it.key, it.core["blocking_reason"]))
	case coreNoNamespace:
		sc.t.fail(it, scannerapi.ErrInvalid, "missing_namespace")
	case coreCheck:
		switch it.src {
		case "budget":
			sc.checkBudgets(it)
		case "quota":
			sc.checkQuota(it)
		case "route":
			sc.routes.check(it)
		}
	}
}

// record reads one ff_unblock_execution reply.
func (sc *scan) record(it *item, r scannerapi.Reply) {
	switch o := classifyReply(r); o.kind {
	case outUnblocked:
		sc.t.unblocked(it, false)
	case outMovedOn:
		// It moved on since the read: nothing to do.
		sc.t.unblocked(it, true)
	default:
		sc.t.fail(it, o.class, o.code)
	}
}
