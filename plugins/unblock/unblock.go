// Package unblock is the unblock scanner (scanners.md §8.4): executions an
// admission check parked in a lane's blocked:budget, blocked:quota or
// blocked:route set are made eligible again (ff_unblock_execution) once
// what blocked them has cleared: every attached budget is under its hard
// limits, the quota's window and concurrency have room, or a worker of the
// namespace advertises every required capability.
//
// The host reads each lane's three sets by rank, a rotating window per
// partition and lane (a set whose head stays blocked cannot hide the
// entries behind it: FlowFabric's P3). Per scan: one wave reads the cores
// (and the filter), one reads what the reasons need (budget limits and
// usage, quota definitions, the namespace's worker index), one more reads
// quota windows and worker capabilities where needed, and the last calls
// the library for the executions that may go. An empty partition costs
// nothing.
//
// What the Go side decides differently (docs/compat.md, "unblock"):
//
//   - Read errors keep the execution blocked and are counted (FlowFabric
//     unblocks on a failed budget_ids or capabilities read, or a failed
//     worker-index load: P11).
//   - The quota check only reads (ZCOUNT over the live window); FlowFabric
//     trims the window from the scanner, a write outside the library
//     (P10).
//   - A hard limit is breached when usage >= limit (FlowFabric's unblock
//     rule; a report at the limit could not spend anything), for the
//     budgets named in budget_ids (P9).
//   - A {0, code} reply is a result: execution_not_eligible and
//     execution_not_found mean the execution moved on (counted skipped),
//     other codes are Lua errors (P2).
//   - An entry whose core is gone is removed from its set.
//   - The namespace / instance-tag filter applies (P13).
package unblock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Name, version, function.
const (
	Name     = "unblock"
	Version  = "1.0.0"
	Function = "ff_unblock_execution"
)

// The three blocked sets and the blocking reason each expects.
var reasons = map[string]string{
	"budget": "waiting_for_budget",
	"quota":  "waiting_for_quota",
	"route":  "waiting_for_capable_worker",
}

// sourceNames are the sources, one per reason.
var sourceNames = []string{"budget", "quota", "route"}

// coreFields are read from each candidate's core.
var coreFields = []string{"execution_id", "blocking_reason", "namespace", "budget_ids", "quota_policy_id",
	"required_capabilities"}

// Scanner is the unblock scanner. Safe for concurrent use by partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker
	filter   scanutil.FilterSetting
}

// New returns the scanner with default options.
func New() *Scanner { return &Scanner{failures: scannerapi.NewFailureTracker()} }

// Info implements scannerapi.Scanner.
func (s *Scanner) Info() scannerapi.Info {
	var sources []scannerapi.CandidateSource
	var own []string
	for _, src := range sourceNames {
		s := scannerapi.CandidateSource{Name: src, Kind: scannerapi.SourceZSetRotate,
			Key: "ff:idx:{p}:lane:{lane}:blocked:" + src, Backlog: scannerapi.BacklogSize}
		sources = append(sources, s)
		own = append(own, s.KeyPattern())
	}
	return scannerapi.Info{
		Name: Name, Version: Version, APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow,
		DefaultInterval: 5 * time.Second, DefaultBatch: 100, Sources: sources,
		// HMGET/HGET: cores, quota definitions, capabilities and the
		// filter. HGETALL: budget limits and usage. ZCOUNT: the quota
		// window. GET: quota concurrency. SMEMBERS: the namespace's
		// workers. ZREM: entries whose core is gone. HGETALL also reads
		// ff:config:partitions (where budgets and quotas live).
		Commands:  []string{"HGET", "HMGET", "HGETALL", "ZCOUNT", "GET", "SMEMBERS", "ZREM"},
		KeyScopes: []scannerapi.KeyScope{{Command: "ZREM", Patterns: own}},
		Functions: []string{Function},
		Options:   scannerapi.FilterOptions(),
	}
}

// Configure implements scannerapi.Scanner.
func (s *Scanner) Configure(ctx context.Context, options map[string]string) error {
	return s.filter.Configure(ctx, s.Info().Options, options)
}

// item is one blocked execution on its way through the waves.
type item struct {
	src, lane, key, member string
	id                     keys.ExecutionID
	core                   map[string]string
	blocked                bool // a check found it still blocked (or could not tell)
	pending                int  // reads still owed before the decision
	quota                  *quotaCheck
	quotaID                keys.QuotaID
	budgets                []keys.BudgetID
	ns                     string
}

// quotaCheck is a quota's definition, read before its window.
type quotaCheck struct {
	keys                        keys.QuotaKeys
	rate, windowSec, concurrent int64
}

// scan is one ScanPartition call.
type scan struct {
	s      *Scanner
	req    *scannerapi.ScanRequest
	filter scannerapi.Filter
	parts  keys.PartitionConfig // read by readPartitions
	res    *scannerapi.ScanResult
	log    hclog.Logger

	toRead, toQuota, toAct []*item
	toBudget, toQuotaDef   []*item
	routeWait              map[string][]*item // namespace -> items waiting for its capabilities
	caps                   map[string]map[string]bool
	loadWorkers, loadCaps  []string // namespaces whose worker index / capabilities are read next
	instances              map[string][]string
	failedNS               map[string]bool
	toRemove               []*item
	// ex, when set, is an explanation this scan makes instead of acting
	// (Explain): the scan's own decisions say why, and it changes none of
	// the scanner's state.
	ex *scannerapi.Explanation
}

// skip counts an item left blocked on purpose, and says why when
// explaining.
func (sc *scan) skip(reason, format string, args ...any) {
	sc.res.Skipped++
	sc.explain(scannerapi.VerdictSkips, reason, format, args...)
}

// explain records the verdict of an explaining scan (the first one that
// settles the item).
func (sc *scan) explain(v scannerapi.Verdict, reason, format string, args ...any) {
	if sc.ex != nil && sc.ex.Verdict == "" {
		*sc.ex = *scannerapi.Explains(v, reason, format, args...)
	}
}

// ScanPartition implements scannerapi.Scanner.
func (s *Scanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	sc := s.newScan(ctx, req)
	// Each blocked-set entry is its own piece of work; members that are
	// not execution ids are counted and left.
	in := s.intake().Begin(ctx, req, sc.res)
	for _, c := range req.Candidates {
		id, v := in.Admit(c)
		if v != scanutil.Take {
			continue
		}
		sc.toRead = append(sc.toRead, &item{src: c.Source, lane: c.Lane, key: c.Key, member: c.Member, id: id})
	}
	if err := sc.readPartitions(ctx, host); err != nil {
		return nil, err
	}
	if _, err := scanutil.Waves(ctx, host, 0, sc.build); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return sc.res, nil
}

func (s *Scanner) newScan(ctx context.Context, req *scannerapi.ScanRequest) *scan {
	return &scan{s: s, req: req, filter: s.filter.Get(), res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx),
		routeWait: map[string][]*item{}, caps: map[string]map[string]bool{}, instances: map[string][]string{},
		failedNS: map[string]bool{}}
}

// intake is the scanner's rule for blocked-set members, the scan's and
// Explain's.
func (s *Scanner) intake() scanutil.Intake[keys.ExecutionID] {
	return scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDs, Sources: sourceNames, PerIndex: true,
		Failures: s.failures}
}

// readPartitions reads the deployment's partition counts (budgets and
// quotas live on {b:M} and {q:K} by them) when a budget or quota entry is
// to be checked: read per scan, never remembered. Without them those
// entries stay blocked and are counted.
func (sc *scan) readPartitions(ctx context.Context, host scannerapi.Host) error {
	need := false
	for _, it := range sc.toRead {
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
	kept := sc.toRead[:0]
	for _, it := range sc.toRead {
		if it.src == "route" {
			kept = append(kept, it)
			continue
		}
		sc.fail(it, scannerapi.ErrServer, "partition_config")
	}
	sc.toRead = kept
	return nil
}

// build fills the next wave from the queues.
func (sc *scan) build(b *scanutil.Batch) {
	for _, it := range sc.toRemove {
		b.Add(nil, scannerapi.Command{"ZREM", it.key, it.member})
	}
	sc.toRemove = nil
	// A namespace without workers decides its executions now (nothing to
	// read), before this wave's calls are taken.
	var loadCaps []string
	for _, ns := range sc.loadCaps {
		if len(sc.instances[ns]) == 0 {
			sc.caps[ns] = map[string]bool{}
			sc.decideRoute(ns)
			continue
		}
		loadCaps = append(loadCaps, ns)
	}
	sc.loadCaps = nil
	read, quota, act := sc.toRead, sc.toQuota, sc.toAct
	budget, quotaDef := sc.toBudget, sc.toQuotaDef
	sc.toRead, sc.toQuota, sc.toAct, sc.toBudget, sc.toQuotaDef = nil, nil, nil, nil, nil
	for _, it := range read {
		it := it
		nf := len(sc.filter.ReadCommands(it.id))
		b.Add(func(r []scannerapi.Reply) { sc.readCore(it, r[0], r[1:1+nf]) },
			append([]scannerapi.Command{append(scannerapi.Command{"HMGET", keys.Exec(it.id).Core()}, coreFields...)},
				sc.filter.ReadCommands(it.id)...)...)
	}
	for _, it := range budget {
		sc.addBudgetReads(b, it)
	}
	for _, it := range quotaDef {
		it := it
		qk := keys.Quota(sc.parts, it.quotaID)
		b.Add(func(r []scannerapi.Reply) { sc.quotaDef(it, qk, r[0]) },
			scannerapi.Command{"HMGET", qk.Definition(), "max_requests_per_window", "requests_per_window_seconds", "active_concurrency_cap"})
	}
	for _, it := range quota {
		it := it
		q := it.quota
		from := strconv.FormatInt(sc.req.NowMs-q.windowSec*1000, 10)
		b.Add(func(r []scannerapi.Reply) { sc.quotaWindow(it, r[0], r[1]) },
			scannerapi.Command{"ZCOUNT", q.keys.Window("requests_per_window"), "(" + from, "+inf"},
			scannerapi.Command{"GET", q.keys.Concurrency()})
	}
	for _, ns := range sc.loadWorkers {
		ns := ns
		b.Add(func(r []scannerapi.Reply) { sc.workers(ns, r[0]) }, scannerapi.Command{"SMEMBERS", keys.WorkersIndex(ns)})
	}
	sc.loadWorkers = nil
	for _, ns := range loadCaps {
		ns := ns
		var cmds []scannerapi.Command
		for _, iid := range sc.instances[ns] {
			cmds = append(cmds, scannerapi.Command{"HGET", keys.WorkerCaps(ns, iid), "caps_csv"})
		}
		b.Add(func(r []scannerapi.Reply) { sc.capsOf(ns, r) }, cmds...)
	}
	for _, it := range act {
		it := it
		if sc.req.DryRun {
			sc.res.Processed++
			sc.res.Note("would unblock %s (%s)", it.member, it.src)
			sc.explain(scannerapi.VerdictActs, Function, "what blocked it (%s) has cleared: the next scan makes it eligible again", reasons[it.src])
			continue
		}
		b.Add(func(r []scannerapi.Reply) { sc.record(it, r[0]) },
			scannerapi.FCall(Function, []string{keys.Exec(it.id).Core(), it.key, keys.FlowPart(sc.req.Partition).LaneEligible(it.lane)},
				it.member, strconv.FormatInt(sc.req.NowMs, 10), reasons[it.src]))
	}
}

// fail counts a failed read or call and keeps the item blocked.
func (sc *scan) fail(it *item, class scannerapi.ErrorClass, code string) {
	it.blocked = true
	sc.res.AddError(class, code, 1)
	if sc.ex != nil {
		sc.explain(scannerapi.VerdictSkips, code, "stays blocked: a check failed (%s %s); the scan counts it and tries again", class, code)
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
	it.core = map[string]string{}
	for i, f := range coreFields {
		if i < len(r.Array) {
			it.core[f], _ = r.Array[i].Text()
		}
	}
	switch {
	case it.core["execution_id"] == "":
		// The core is gone: nothing can ever unblock it.
		sc.skip("core_gone", "its core is gone: the scan removes the entry from %s", it.key)
		if sc.ex != nil {
			sc.ex.Inconsistent = append(sc.ex.Inconsistent, it.key+" holds an execution whose core is gone")
		}
		if !sc.req.DryRun {
			sc.toRemove = append(sc.toRemove, it)
		}
		sc.res.Note("%s: core gone; removed from %s", it.member, it.key)
		return
	case !sc.filter.IsNoop() && !sc.filter.Decide(filter):
		sc.skip("filtered", "outside this scanner's filter (%s)", sc.filter.String())
		return
	case it.core["blocking_reason"] != reasons[it.src]:
		// Blocked for another reason (e.g. paused_by_flow_cancel): not ours.
		sc.skip("other_blocking_reason", "blocked for %q, not %q: not this scanner's to unblock", it.core["blocking_reason"], reasons[it.src])
		if sc.ex != nil {
			sc.ex.Inconsistent = append(sc.ex.Inconsistent, fmt.Sprintf("in %s while its core's blocking_reason is %q", it.key, it.core["blocking_reason"]))
		}
		return
	case it.core["namespace"] == "":
		// Never unblocked without a namespace (no cross-tenant admission).
		sc.fail(it, scannerapi.ErrInvalid, "missing_namespace")
		return
	}
	switch it.src {
	case "budget":
		sc.checkBudgets(it)
	case "quota":
		sc.checkQuota(it)
	case "route":
		sc.checkRoute(it)
	}
}

// checkBudgets queues the reads of every attached budget's limits and
// usage.
func (sc *scan) checkBudgets(it *item) {
	var ids []keys.BudgetID
	for _, raw := range strings.Split(it.core["budget_ids"], ",") {
		if raw = strings.TrimSpace(raw); raw == "" {
			continue
		}
		id, form := keys.ClassifyBudgetID(raw)
		if form != keys.IDCanonical {
			// No such budget can exist under this id: it blocks nothing.
			sc.res.AddError(scannerapi.ErrInvalid, "invalid_budget_id", 1)
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		sc.toAct = append(sc.toAct, it)
		return
	}
	it.budgets = ids
	sc.toBudget = append(sc.toBudget, it)
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
				sc.toAct = append(sc.toAct, it)
			}
		}, scannerapi.Command{"HGETALL", bk.Limits()}, scannerapi.Command{"HGETALL", bk.Usage()})
	}
}

// breached reads a budget's limits and usage: a positive hard limit that
// usage has reached.
func breached(limits, usage scannerapi.Reply) bool {
	l, u := hashOf(limits), hashOf(usage)
	for f, v := range l {
		dim, ok := strings.CutPrefix(f, "hard:")
		if !ok {
			continue
		}
		limit, err := strconv.ParseFloat(v, 64)
		if err != nil || limit <= 0 {
			continue
		}
		used, _ := strconv.ParseFloat(u[dim], 64)
		if used >= limit {
			return true
		}
	}
	return false
}

// hashOf reads an HGETALL reply.
func hashOf(r scannerapi.Reply) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(r.Array); i += 2 {
		k, _ := r.Array[i].Text()
		v, _ := r.Array[i+1].Text()
		m[k] = v
	}
	return m
}

// checkQuota queues the quota's definition read (then, in quotaDef, its
// window).
func (sc *scan) checkQuota(it *item) {
	raw := it.core["quota_policy_id"]
	if raw == "" {
		sc.toAct = append(sc.toAct, it)
		return
	}
	u, form := keys.ClassifyBudgetID(raw) // a bare uuid, like a budget id
	if form != keys.IDCanonical {
		sc.res.AddError(scannerapi.ErrInvalid, "invalid_quota_id", 1)
		sc.toAct = append(sc.toAct, it)
		return
	}
	it.quotaID = keys.QuotaIDFrom(u.UUID())
	sc.toQuotaDef = append(sc.toQuotaDef, it)
}

func (sc *scan) quotaDef(it *item, qk keys.QuotaKeys, r scannerapi.Reply) {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		sc.fail(it, class, "quota_read_"+code)
		return
	}
	num := func(i int, def int64) int64 {
		if i >= len(r.Array) {
			return def
		}
		s, _ := r.Array[i].Text()
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return def
		}
		return int64(n)
	}
	q := &quotaCheck{keys: qk, rate: num(0, 0), windowSec: num(1, 60), concurrent: num(2, 0)}
	if q.rate <= 0 && q.concurrent <= 0 {
		sc.toAct = append(sc.toAct, it)
		return
	}
	it.quota = q
	sc.toQuota = append(sc.toQuota, it)
}

func (sc *scan) quotaWindow(it *item, window, concurrency scannerapi.Reply) {
	for _, r := range []scannerapi.Reply{window, concurrency} {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			sc.fail(it, class, "quota_read_"+code)
			return
		}
	}
	q := it.quota
	if q.rate > 0 && window.Int >= q.rate {
		sc.skip("quota_window_full", "quota %s: %d of %d requests in its %d s window", it.quotaID, window.Int, q.rate, q.windowSec)
		return
	}
	if q.concurrent > 0 {
		s, _ := concurrency.Text()
		n, _ := strconv.ParseFloat(s, 64)
		if int64(n) >= q.concurrent {
			sc.skip("quota_concurrency_full", "quota %s: %d of %d concurrent admissions in use", it.quotaID, int64(n), q.concurrent)
			return
		}
	}
	sc.toAct = append(sc.toAct, it)
}

// checkRoute waits for the namespace's capability union.
func (sc *scan) checkRoute(it *item) {
	if it.core["required_capabilities"] == "" {
		sc.toAct = append(sc.toAct, it)
		return
	}
	ns := it.core["namespace"]
	it.ns = ns
	if _, ok := sc.caps[ns]; ok {
		sc.routeDecide(it)
		return
	}
	if len(sc.routeWait[ns]) == 0 {
		sc.loadWorkers = append(sc.loadWorkers, ns)
	}
	sc.routeWait[ns] = append(sc.routeWait[ns], it)
}

func (sc *scan) workers(ns string, r scannerapi.Reply) {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		sc.nsFailed(ns, class, "workers_read_"+code)
		return
	}
	for _, e := range r.Array {
		if s, ok := e.Text(); ok && s != "" {
			sc.instances[ns] = append(sc.instances[ns], s)
		}
	}
	sc.loadCaps = append(sc.loadCaps, ns)
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
		for _, tok := range strings.Split(s, ",") {
			if tok != "" {
				union[tok] = true
			}
		}
	}
	sc.caps[ns] = union
	sc.decideRoute(ns)
}

// nsFailed keeps every execution waiting on the namespace blocked.
func (sc *scan) nsFailed(ns string, class scannerapi.ErrorClass, code string) {
	for _, it := range sc.routeWait[ns] {
		sc.fail(it, class, code)
	}
	delete(sc.routeWait, ns)
}

func (sc *scan) decideRoute(ns string) {
	for _, it := range sc.routeWait[ns] {
		sc.routeDecide(it)
	}
	delete(sc.routeWait, ns)
}

func (sc *scan) routeDecide(it *item) {
	have := sc.caps[it.ns]
	for _, tok := range strings.Split(it.core["required_capabilities"], ",") {
		if tok != "" && !have[tok] {
			// No worker of the namespace can run it yet.
			sc.skip("capability_missing", "no worker of namespace %q advertises capability %q", it.ns, tok)
			return
		}
	}
	sc.toAct = append(sc.toAct, it)
}

// record reads one ff_unblock_execution reply.
func (sc *scan) record(it *item, r scannerapi.Reply) {
	fr, err := scannerapi.ParseFunctionReply(r)
	switch {
	case err != nil:
		class, code := scanutil.Classify(err)
		sc.fail(it, class, code)
	case fr.Success:
		sc.res.Processed++
		sc.s.failures.RecordSuccess(it.member)
	case fr.Code == "execution_not_eligible" || fr.Code == "execution_not_found":
		// It moved on since the read: nothing to do.
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(it.member)
	default:
		sc.fail(it, scannerapi.ErrLua, fr.Code)
	}
}
