package unblock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/hashicorp/go-hclog"

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
}

// scan is one ScanPartition call, or the dry run Explain makes of one
// entry. Each wave sends what the queues hold; each reply's check moves
// its item on to the queue of its next read, until the last queue calls
// the library.
type scan struct {
	s      *Scanner
	req    *scannerapi.ScanRequest
	filter scannerapi.Filter
	parts  keys.PartitionConfig // read by readPartitions
	res    *scannerapi.ScanResult
	log    hclog.Logger

	next   queues // what the next wave reads or calls
	routes routes
	// ex is set when Explain runs the scan: it keeps the first verdict
	// the scan's decisions reach, and the scan changes none of the
	// scanner's state (see explain.go). Nil in a scan.
	ex *explaining
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

// routes is what the scan learned of the namespaces' workers, for the
// blocked:route entries.
type routes struct {
	wait      map[string][]*item         // namespace -> items waiting for its capabilities
	caps      map[string]map[string]bool // namespace -> every capability its workers advertise
	instances map[string][]string        // namespace -> its worker instances
}

func (s *Scanner) newScan(ctx context.Context, req *scannerapi.ScanRequest) *scan {
	return &scan{s: s, req: req, filter: s.filter.Get(), res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx),
		routes: routes{wait: map[string][]*item{}, caps: map[string]map[string]bool{}, instances: map[string][]string{}}}
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
	sc.log.Error("cannot locate budgets and quotas; their blocked executions stay blocked", "error", perr)
	kept := sc.next.read[:0]
	for _, it := range sc.next.read {
		if it.src == "route" {
			kept = append(kept, it)
			continue
		}
		sc.fail(it, scannerapi.ErrServer, "partition_config")
	}
	sc.next.read = kept
	return nil
}

// build fills the next wave from the queues.
func (sc *scan) build(b *scanutil.Batch) {
	// A namespace without workers decides its executions now (nothing to
	// read), before this wave's calls are taken.
	var caps []string
	for _, ns := range sc.next.caps {
		if len(sc.routes.instances[ns]) == 0 {
			sc.routes.caps[ns] = map[string]bool{}
			sc.decideRoute(ns)
			continue
		}
		caps = append(caps, ns)
	}
	sc.next.caps = caps
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
		it := it
		qk := keys.Quota(sc.parts, it.quotaID)
		b.Add(func(r []scannerapi.Reply) { sc.quotaDef(it, qk, r[0]) },
			append(scannerapi.Command{"HMGET", qk.Definition()}, quotaDefFields...))
	}
	for _, it := range w.quota {
		it := it
		q := it.quota
		from := strconv.FormatInt(sc.req.NowMs-q.windowSec*1000, 10)
		b.Add(func(r []scannerapi.Reply) { sc.quotaWindow(it, r[0], r[1]) },
			scannerapi.Command{"ZCOUNT", q.keys.Window("requests_per_window"), "(" + from, "+inf"},
			scannerapi.Command{"GET", q.keys.Concurrency()})
	}
	for _, ns := range w.workers {
		ns := ns
		b.Add(func(r []scannerapi.Reply) { sc.workers(ns, r[0]) }, scannerapi.Command{"SMEMBERS", keys.WorkersIndex(ns)})
	}
	for _, ns := range w.caps {
		ns := ns
		var cmds []scannerapi.Command
		for _, iid := range sc.routes.instances[ns] {
			cmds = append(cmds, scannerapi.Command{"HGET", keys.WorkerCaps(ns, iid), "caps_csv"})
		}
		b.Add(func(r []scannerapi.Reply) { sc.capsOf(ns, r) }, cmds...)
	}
	for _, it := range w.act {
		it := it
		if sc.req.DryRun {
			sc.res.Processed++
			sc.res.Note("would unblock %s (%s)", it.member, it.src)
			sc.ex.say(scannerapi.VerdictActs, Function, "what blocked it (%s) has cleared: the next scan makes it eligible again", reasons[it.src])
			continue
		}
		b.Add(func(r []scannerapi.Reply) { sc.record(it, r[0]) },
			scannerapi.FCall(Function, []string{keys.Exec(it.id).Core(), it.key, keys.FlowPart(sc.req.Partition).LaneEligible(it.lane)},
				it.member, strconv.FormatInt(sc.req.NowMs, 10), reasons[it.src]))
	}
}

// skip counts an item left blocked on purpose.
func (sc *scan) skip(reason, format string, args ...any) {
	sc.res.Skipped++
	sc.ex.say(scannerapi.VerdictSkips, reason, format, args...)
}

// fail counts a failed read or call and keeps the item blocked.
func (sc *scan) fail(it *item, class scannerapi.ErrorClass, code string) {
	it.blocked = true
	sc.res.AddError(class, code, 1)
	if sc.ex != nil {
		// Explaining records no failure.
		sc.ex.say(scannerapi.VerdictSkips, code, "stays blocked: a check failed (%s %s); the scan counts it and tries again", class, code)
		return
	}
	if sc.s.failures.RecordFailureClass(it.member, sc.req.Cycle, class) {
		sc.log.Error("persistent failure; skipping the execution for a while", "execution_id", it.member,
			"class", class, "code", code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
	}
}

// readCore decides what an execution's reason needs, and queues it.
func (sc *scan) readCore(it *item, r scannerapi.Reply, filter []scannerapi.Reply) {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		sc.fail(it, class, "core_read_"+code)
		return
	}
	it.core = coreOf(r)
	switch judgeCore(it.core, it.src, !sc.filter.IsNoop() && !sc.filter.Decide(filter)) {
	case coreGone:
		// Nothing can ever unblock it.
		sc.skip("core_gone", "its core is gone: the scan removes the entry from %s", it.key)
		sc.ex.inconsistent(it.key + " holds an execution whose core is gone")
		if !sc.req.DryRun {
			sc.next.remove = append(sc.next.remove, it)
		}
		sc.res.Note("%s: core gone; removed from %s", it.member, it.key)
	case coreFiltered:
		sc.skip("filtered", "outside this scanner's filter (%s)", sc.filter.String())
	case coreOtherReason:
		sc.skip("other_blocking_reason", "blocked for %q, not %q: not this scanner's to unblock", it.core["blocking_reason"], reasons[it.src])
		sc.ex.inconsistent(fmt.Sprintf("in %s while its core's blocking_reason is %q", it.key, it.core["blocking_reason"]))
	case coreNoNamespace:
		sc.fail(it, scannerapi.ErrInvalid, "missing_namespace")
	case coreCheck:
		switch it.src {
		case "budget":
			sc.checkBudgets(it)
		case "quota":
			sc.checkQuota(it)
		case "route":
			sc.checkRoute(it)
		}
	}
}

// checkBudgets queues the reads of every attached budget's limits and
// usage.
func (sc *scan) checkBudgets(it *item) {
	ids, invalid := budgetIDs(it.core["budget_ids"])
	if invalid > 0 {
		sc.res.AddError(scannerapi.ErrInvalid, "invalid_budget_id", int64(invalid))
	}
	if len(ids) == 0 {
		sc.next.act = append(sc.next.act, it)
		return
	}
	it.budgets = ids
	sc.next.budget = append(sc.next.budget, it)
}

// addBudgetReads adds an item's budget reads to the wave.
func (sc *scan) addBudgetReads(b *scanutil.Batch, it *item) {
	it.pending = len(it.budgets)
	for _, id := range it.budgets {
		bk := keys.Budget(sc.parts, id)
		b.Add(func(r []scannerapi.Reply) {
			if !it.blocked {
				for _, rr := range r {
					if rr.Failed() {
						class, code := scanutil.ClassifyReply(rr)
						sc.fail(it, class, "budget_read_"+code)
						break
					}
				}
				if !it.blocked && breached(r[0], r[1]) {
					it.blocked = true
					sc.skip("budget_breached", "budget %s is at a hard limit: it stays blocked until the budget resets or its limit rises", id)
				}
			}
			it.pending--
			if it.pending == 0 && !it.blocked {
				sc.next.act = append(sc.next.act, it)
			}
		}, scannerapi.Command{"HGETALL", bk.Limits()}, scannerapi.Command{"HGETALL", bk.Usage()})
	}
}

// checkQuota queues the quota's definition read (then, in quotaDef, its
// window).
func (sc *scan) checkQuota(it *item) {
	id, ok, invalid := quotaIDOf(it.core["quota_policy_id"])
	if invalid {
		sc.res.AddError(scannerapi.ErrInvalid, "invalid_quota_id", 1)
	}
	if !ok {
		sc.next.act = append(sc.next.act, it)
		return
	}
	it.quotaID = id
	sc.next.quotaDef = append(sc.next.quotaDef, it)
}

func (sc *scan) quotaDef(it *item, qk keys.QuotaKeys, r scannerapi.Reply) {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		sc.fail(it, class, "quota_read_"+code)
		return
	}
	q, limited := quotaLimits(r)
	if !limited {
		sc.next.act = append(sc.next.act, it)
		return
	}
	q.keys = qk
	it.quota = &q
	sc.next.quota = append(sc.next.quota, it)
}

func (sc *scan) quotaWindow(it *item, window, concurrency scannerapi.Reply) {
	for _, r := range []scannerapi.Reply{window, concurrency} {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			sc.fail(it, class, "quota_read_"+code)
			return
		}
	}
	switch reason, used, limit := quotaFull(*it.quota, window.Int, concurrency); reason {
	case "quota_window_full":
		sc.skip(reason, "quota %s: %d of %d requests in its %d s window", it.quotaID, used, limit, it.quota.windowSec)
	case "quota_concurrency_full":
		sc.skip(reason, "quota %s: %d of %d concurrent admissions in use", it.quotaID, used, limit)
	default:
		sc.next.act = append(sc.next.act, it)
	}
}

// checkRoute waits for the namespace's capability union.
func (sc *scan) checkRoute(it *item) {
	if it.core["required_capabilities"] == "" {
		sc.next.act = append(sc.next.act, it)
		return
	}
	ns := it.core["namespace"]
	it.ns = ns
	if _, ok := sc.routes.caps[ns]; ok {
		sc.routeDecide(it)
		return
	}
	if len(sc.routes.wait[ns]) == 0 {
		sc.next.workers = append(sc.next.workers, ns)
	}
	sc.routes.wait[ns] = append(sc.routes.wait[ns], it)
}

func (sc *scan) workers(ns string, r scannerapi.Reply) {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		sc.nsFailed(ns, class, "workers_read_"+code)
		return
	}
	for _, e := range r.Array {
		if s, ok := e.Text(); ok && s != "" {
			sc.routes.instances[ns] = append(sc.routes.instances[ns], s)
		}
	}
	sc.next.caps = append(sc.next.caps, ns)
}

func (sc *scan) capsOf(ns string, rs []scannerapi.Reply) {
	union := map[string]bool{}
	for _, r := range rs {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			sc.nsFailed(ns, class, "caps_read_"+code)
			return
		}
		s, _ := r.Text()
		addCaps(union, s)
	}
	sc.routes.caps[ns] = union
	sc.decideRoute(ns)
}

// nsFailed keeps every execution waiting on the namespace blocked.
func (sc *scan) nsFailed(ns string, class scannerapi.ErrorClass, code string) {
	for _, it := range sc.routes.wait[ns] {
		sc.fail(it, class, code)
	}
	delete(sc.routes.wait, ns)
}

func (sc *scan) decideRoute(ns string) {
	for _, it := range sc.routes.wait[ns] {
		sc.routeDecide(it)
	}
	delete(sc.routes.wait, ns)
}

func (sc *scan) routeDecide(it *item) {
	if tok, missing := missingCapability(it.core["required_capabilities"], sc.routes.caps[it.ns]); missing {
		// No worker of the namespace can run it yet.
		sc.skip("capability_missing", "no worker of namespace %q advertises capability %q", it.ns, tok)
		return
	}
	sc.next.act = append(sc.next.act, it)
}

// record reads one ff_unblock_execution reply.
func (sc *scan) record(it *item, r scannerapi.Reply) {
	switch o := classifyReply(r); o.kind {
	case outUnblocked:
		sc.res.Processed++
		sc.s.failures.RecordSuccess(it.member)
	case outMovedOn:
		// It moved on since the read: nothing to do.
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(it.member)
	default:
		sc.fail(it, o.class, o.code)
	}
}
