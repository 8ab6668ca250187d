// Package cancelreconciler is the cancel_reconciler scanner (scanners.md
// §10.2): the safety net for the member cancels of a flow cancelled with
// policy cancel_all. ff_cancel_flow puts every member in the flow's
// pending_cancels set and the flow in ff:idx:{fp:N}:cancel_backlog, scored
// by the end of its grace window; the live dispatch (or
// client.DrainFlowCancels) cancels and acknowledges members during the
// grace; whatever is still owed afterwards is done here.
//
// # One scan
//
// The host reads the due head of the backlog (lowest scores first, up to
// the batch of 50 flows) and calls ScanPartition for partitions with due
// flows. The scan then runs four pipelined stages, each ONE Exec for every
// flow of the partition (split only above the host's batch limit):
//
//  1. per flow: EXISTS flow core, SRANDMEMBER pending_cancels 500, HGET
//     cancel_reason. A flow whose core is gone gets DEL pending_cancels and
//     ZREM from the backlog; a flow with nothing pending is removed from the
//     backlog; an unparsable flow id is removed and counted.
//  2. per member: HMGET of its core (lane_id, current_attempt_index,
//     current_waitpoint_id, current_worker_instance_id, plus execution_id
//     and lifecycle_phase) and, with a namespace or instance-tag filter, the
//     filter's reads. Garbage member ids are acknowledged (that is, SREMed
//     through ff_ack_cancel_member) and counted.
//  3. ff_cancel_execution for every member kept, with the keys of its real
//     lane, attempt, waitpoint and worker (21 KEYS), ARGV [eid, reason,
//     "operator_override", "", ""].
//  4. ff_ack_cancel_member for every member that is done.
//
// A cancel is done when it succeeded or its Lua code is execution_not_active
// (the member had ended) or execution_not_found (it is gone). That is
// FlowFabric's stated intent; its Valkey path turned those codes into
// transport errors and retried them forever (pitfall P6). A member whose core
// is missing is acknowledged without a cancel (the library would answer
// execution_not_found). Any other Lua code is counted by code (class lua),
// failed commands by class, and both feed a FailureTracker: a member that
// fails three cycles in a row is left alone for ten, without holding up the
// other members or flows. A member whose existing core has no lane is
// corruption: it is counted (invalid, missing_lane) and skipped, never
// cancelled with a guessed lane.
//
// # Flows that cannot finish (pitfall P3)
//
// A flow leaves the backlog only when its last owed member is acknowledged.
// Members this scanner must leave alone (another tenant's, per the filter;
// backed off; corrupt) keep their flow in the backlog with its old score, so
// a head window of such flows would hide every flow behind it, and
// FlowFabric re-reads the same 50 every cycle. Here a flow on which a scan
// made no progress is remembered, with its score, as stuck for ten cycles
// and skipped without reads; when the host's window is full and holds stuck
// flows, the scan reads further pages of the due backlog (ZRANGE BYSCORE,
// at most "lookahead" entries per scan, resuming at a per-partition cursor
// when one scan cannot get past them all) until it has a batch of flows it
// can work on. Changing the options forgets the stuck set.
//
// More is reported only when the scan made progress and there is work left
// that it saw or could not see: a flow that had more pending members than
// one scan takes, a full host window, a look-ahead that ran out of budget
// with flows left. A partition whose due flows are all stuck says no More,
// so the host does not spin on it.
//
// # Results
//
// Processed counts members acknowledged (cancelled, already ended or gone)
// plus flows removed from the backlog because the flow itself is gone.
// Skipped counts flows skipped as stuck or backed off, and members left
// pending on purpose (filtered, backed off). The backlog gauge is the host's
// ZCARD of the backlog (every entry, also those still in their grace), as
// FlowFabric's ff_cancel_backlog_depth; the host writes it only from cycles
// that sampled every partition (P8).
package cancelreconciler

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Name is the scanner's name.
const Name = "cancel_reconciler"

// Version is the scanner's version.
const Version = "1.0.0"

// Library functions the scanner calls.
const (
	FunctionCancel = "ff_cancel_execution"
	FunctionAck    = "ff_ack_cancel_member"
)

// Defaults and limits.
const (
	DefaultInterval = 15 * time.Second
	DefaultBatch    = 50
	// DefaultMembersPerFlow is how many pending members of one flow a scan
	// takes (SRANDMEMBER count).
	DefaultMembersPerFlow = 500
	MaxMembersPerFlow     = 10000
	// DefaultLookahead bounds the backlog entries read past the host's
	// window per scan when it holds stuck flows.
	DefaultLookahead = 500
	// DefaultReason is the cancel reason when the flow has none recorded.
	DefaultReason = "flow_cancelled"
	// Source is the cancel source: like FlowFabric's reconciler, an
	// operator override (lease checks are skipped, the completion is
	// published).
	Source = "operator_override"
)

// Option names.
const (
	OptionLookahead      = "lookahead"
	OptionMembersPerFlow = "members_per_flow"
)

const (
	sourceName = "cancel_backlog"
	// stuckCycles is how long a flow without progress is skipped.
	stuckCycles = 10
	// stuckLimit bounds the memory of stuck flows.
	stuckLimit = 100_000
	// execChunk bounds the commands of one Exec, well below
	// scannerapi.MaxExecBatch so one callback stays short.
	execChunk = 4000
	// flowKeyPrefix marks flow entries in the failure tracker (members are
	// keyed by their execution id).
	flowKeyPrefix = "flow:"
)

// Scanner is the cancel_reconciler scanner. Its methods are safe for
// concurrent use by different partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker

	mu      sync.Mutex
	cfg     config
	stuck   map[string]stuckFlow // backlog member -> the entry left in place
	stuckGC uint64               // cycle of the last collection
	cursors map[uint16]pagePos   // partition -> where the next look-ahead resumes
}

type config struct {
	filter    scannerapi.Filter
	lookahead int
	members   int
}

type stuckFlow struct {
	score float64
	until uint64 // cycle from which the flow is looked at again
}

// New returns a scanner with default options.
func New() *Scanner {
	return &Scanner{
		failures: scannerapi.NewFailureTracker(),
		cfg:      config{lookahead: DefaultLookahead, members: DefaultMembersPerFlow},
		stuck:    make(map[string]stuckFlow),
		cursors:  make(map[uint16]pagePos),
	}
}

// Info implements scannerapi.Scanner.
func (s *Scanner) Info() scannerapi.Info {
	return scannerapi.Info{
		Name:            Name,
		Version:         Version,
		APIVersion:      scannerapi.APIVersion,
		Family:          keys.FamilyFlow,
		DefaultInterval: DefaultInterval,
		DefaultBatch:    DefaultBatch,
		Sources: []scannerapi.CandidateSource{{
			Name:    sourceName,
			Kind:    scannerapi.SourceZSetDue,
			Key:     "ff:idx:{p}:cancel_backlog",
			Backlog: scannerapi.BacklogSize,
		}},
		// EXISTS, SRANDMEMBER, HGET: flow reads (HGET also the filter's).
		// HMGET: member cores. ZRANGE: look-ahead pages. ZREM, DEL: backlog
		// entries of unparsable or vanished flows, and a vanished flow's
		// pending_cancels.
		Commands:  []string{"EXISTS", "SRANDMEMBER", "HGET", "HMGET", "ZRANGE", "ZREM", "DEL"},
		Functions: []string{FunctionCancel, FunctionAck},
		Options: append(scannerapi.FilterOptions(),
			scannerapi.OptionSpec{Name: OptionLookahead, Type: scannerapi.OptionInt, Default: strconv.Itoa(DefaultLookahead),
				Description: "backlog entries read past the host's window per scan when it holds stuck flows (0: off)"},
			scannerapi.OptionSpec{Name: OptionMembersPerFlow, Type: scannerapi.OptionInt, Default: strconv.Itoa(DefaultMembersPerFlow),
				Description: "pending members of one flow cancelled per scan (1.." + strconv.Itoa(MaxMembersPerFlow) + ")"},
		),
	}
}

// Configure implements scannerapi.Scanner.
func (s *Scanner) Configure(ctx context.Context, options map[string]string) error {
	for k := range options {
		switch k {
		case scannerapi.OptionNamespace, scannerapi.OptionInstanceTag, OptionLookahead, OptionMembersPerFlow:
		default:
			return fmt.Errorf("unknown option %q", k)
		}
	}
	f, err := scannerapi.ParseFilter(options)
	if err != nil {
		return err
	}
	cfg := config{filter: f, lookahead: DefaultLookahead, members: DefaultMembersPerFlow}
	if cfg.lookahead, err = intOption(options, OptionLookahead, DefaultLookahead, 0, 1_000_000); err != nil {
		return err
	}
	if cfg.members, err = intOption(options, OptionMembersPerFlow, DefaultMembersPerFlow, 1, MaxMembersPerFlow); err != nil {
		return err
	}
	s.mu.Lock()
	s.cfg = cfg
	// What was stuck under the old options (a filter) may not be now.
	s.stuck = make(map[string]stuckFlow)
	s.cursors = make(map[uint16]pagePos)
	s.mu.Unlock()
	scannerapi.Logger(ctx).Info("configured", "filter", f.String(), "lookahead", cfg.lookahead, "members_per_flow", cfg.members)
	return nil
}

func intOption(options map[string]string, name string, def, lo, hi int) (int, error) {
	v, ok := options[name]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("option %s: %q is not an integer in %d..%d", name, v, lo, hi)
	}
	return n, nil
}

// flow is one backlog entry the scan works on.
type flow struct {
	member string // as stored in the backlog (ZREM and ack use it verbatim)
	id     keys.FlowID
	score  float64
	keys   keys.FlowKeys
	reason string

	sampled  int  // members SRANDMEMBER returned
	progress bool // a member was acknowledged or the flow left the backlog
	removed  bool // the flow left the backlog
	retry    bool // a read or member failed in a way worth retrying next cycle
}

// member is one pending member the scan works on.
type member struct {
	f    *flow
	raw  string
	id   keys.ExecutionID
	core memberCore
	gone bool // no core: nothing to cancel
	out  outcome
}

// scan is the state of one ScanPartition call.
type scan struct {
	s       *Scanner
	host    scannerapi.Host
	req     *scannerapi.ScanRequest
	cfg     config
	backlog string
	res     *scannerapi.ScanResult
	log     hclog.Logger

	seen  map[string]bool
	flows []*flow
	// writes queued for the next stage's Exec (plain commands and acks of
	// garbage members), with what to do with their replies.
	writes []pendingWrite
	// What decides More, and whether flows without progress are stuck.
	windowFull    bool
	lookaheadLeft bool
	stageErr      bool // an Exec failed as a whole after the first stage
}

// pendingWrite is a write riding along with a stage, and how its reply is
// accounted.
type pendingWrite struct {
	cmd  scannerapi.Command
	done func(r scannerapi.Reply)
}

// ScanPartition implements scannerapi.Scanner.
func (s *Scanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	sc := &scan{
		s: s, host: host, req: req, cfg: cfg,
		backlog: keys.FlowPart(req.Partition).CancelBacklog(),
		res:     &scannerapi.ScanResult{},
		log:     scannerapi.Logger(ctx),
		seen:    make(map[string]bool, len(req.Candidates)),
	}
	s.gcStuck(req.Cycle)
	batch := req.Batch
	if batch <= 0 {
		batch = DefaultBatch
	}

	var window []scannerapi.Candidate
	for _, c := range req.Candidates {
		if c.Source == sourceName {
			window = append(window, c)
		}
	}
	skipped := 0
	for _, c := range window {
		if !sc.admit(c.Member, c.Score) {
			skipped++
		}
	}
	sc.windowFull = len(window) >= batch
	if sc.windowFull && skipped > 0 && cfg.lookahead > 0 {
		if err := sc.lookahead(ctx, window, batch); err != nil {
			return nil, err
		}
	}
	if err := sc.run(ctx); err != nil {
		return nil, err
	}
	return sc.res, nil
}

// admit classifies a backlog entry read from the host's window or a
// look-ahead page. It returns false when the flow is skipped (stuck, backed
// off) or not a flow id, so the look-ahead knows the window holds entries
// it must see past.
func (sc *scan) admit(m string, score float64) bool {
	if sc.seen[m] {
		return true
	}
	sc.seen[m] = true
	id, err := keys.ParseFlowID(m)
	if err != nil {
		sc.res.AddError(scannerapi.ErrInvalid, "invalid_flow_id", 1)
		if sc.req.DryRun {
			sc.note("would remove invalid backlog entry %q", m)
			return false
		}
		sc.log.Warn("removing a backlog entry that is not a flow id", "index", sc.backlog, "member", m)
		sc.writes = append(sc.writes, pendingWrite{cmd: scannerapi.Command{"ZREM", sc.backlog, m}})
		return false
	}
	if sc.s.isStuck(m, score, sc.req.Cycle) || sc.s.failures.ShouldSkip(flowKeyPrefix+m, sc.req.Cycle) {
		sc.res.Skipped++
		return false
	}
	sc.flows = append(sc.flows, &flow{member: m, id: id, score: score, keys: keys.FlowIn(sc.req.Partition, id)})
	return true
}

// lookahead reads backlog pages past the host's window until the scan has a
// batch of flows it can work on, the due range ends or the budget is spent.
func (sc *scan) lookahead(ctx context.Context, window []scannerapi.Candidate, batch int) error {
	scores := make([]float64, len(window))
	for i, c := range window {
		scores[i] = c.Score
	}
	pos := pagePos{score: window[0].Score}.after(scores)
	part := sc.req.Partition.Index
	if c, ok := sc.s.cursor(part); ok && c.score >= pos.score && c.score <= float64(sc.req.NowMs) {
		pos = c
	}
	budget := sc.cfg.lookahead
	for len(sc.flows) < batch && budget > 0 {
		n := min(budget, max(batch, 100))
		budget -= n
		replies, err := sc.exec(ctx, []scannerapi.Command{{"ZRANGE", sc.backlog,
			formatScore(pos.score), strconv.FormatInt(sc.req.NowMs, 10), "BYSCORE",
			"LIMIT", "0", strconv.Itoa(n + pos.ties), "WITHSCORES"}})
		if err != nil {
			return err
		}
		page, perr := scannerapi.ParseScoredMembers(replies[0])
		if perr != nil {
			class, code := replyFailure(replies[0])
			sc.res.AddError(class, "lookahead_"+code, 1)
			return nil
		}
		pageScores := make([]float64, len(page))
		for i, e := range page {
			pageScores[i] = e.Score
			sc.admit(e.Member, e.Score)
		}
		if len(page) < n+pos.ties {
			sc.setCursor(nil) // reached the end of the due range
			return nil
		}
		pos = pos.after(pageScores)
	}
	// Stopped with entries left: the next scan goes on from here.
	sc.setCursor(&pos)
	sc.lookaheadLeft = true
	return nil
}

// setCursor stores where the partition's next look-ahead resumes (not in
// a dry run, which must leave no trace).
func (sc *scan) setCursor(pos *pagePos) {
	if !sc.req.DryRun {
		sc.s.setCursor(sc.req.Partition.Index, pos)
	}
}

// run does the four stages for the flows admitted.
func (sc *scan) run(ctx context.Context) error {
	members, err := sc.readFlows(ctx)
	if err != nil {
		return err
	}
	toCancel := sc.readMembers(ctx, members)
	done := sc.cancel(ctx, toCancel)
	sc.ack(ctx, done)
	sc.finish()
	return nil
}

// readFlows is stage 1: existence, a sample of pending members and the
// cancel reason of every flow, in one Exec. Writes queued by admit (ZREM
// of unparsable entries) ride along.
func (sc *scan) readFlows(ctx context.Context) ([]*member, error) {
	if len(sc.flows) == 0 && len(sc.writes) == 0 {
		return nil, nil
	}
	cmds, writes := sc.takeWrites()
	first := len(cmds)
	for _, f := range sc.flows {
		cmds = append(cmds,
			scannerapi.Command{"EXISTS", f.keys.Core()},
			scannerapi.Command{"SRANDMEMBER", f.keys.PendingCancels(), strconv.Itoa(sc.cfg.members)},
			scannerapi.Command{"HGET", f.keys.Core(), "cancel_reason"})
	}
	replies, err := sc.exec(ctx, cmds)
	if err != nil {
		return nil, fmt.Errorf("flow reads: %w", err)
	}
	sc.absorbWrites(writes, replies[:first])
	var members []*member
	for i, f := range sc.flows {
		r := replies[first+3*i : first+3*i+3]
		if bad, ok := firstFailure(r); ok {
			class, code := replyFailure(bad)
			sc.res.AddError(class, "flow_read_"+code, 1)
			f.retry = true
			if sc.s.failures.RecordFailure(flowKeyPrefix+f.member, sc.req.Cycle) {
				sc.log.Error("flow keeps failing; skipping it for a while", "flow_id", f.member, "class", class, "code", code)
			}
			continue
		}
		if r[0].Kind != scannerapi.KindInt || r[1].Kind != scannerapi.KindArray && !r[1].IsNil() {
			sc.res.AddError(scannerapi.ErrServer, "flow_read_malformed_reply", 1)
			f.retry = true
			continue
		}
		sc.s.failures.RecordSuccess(flowKeyPrefix + f.member)
		if r[0].Int == 0 {
			sc.flowGone(f)
			continue
		}
		f.reason = flowReason(r[2])
		f.sampled = len(r[1].Array)
		if f.sampled == 0 {
			sc.flowDrained(f)
			continue
		}
		for _, e := range r[1].Array {
			m, ok := e.Text()
			if !ok {
				continue
			}
			members = append(members, &member{f: f, raw: m})
		}
	}
	return members, nil
}

// flowGone handles a backlog entry whose flow core no longer exists: its
// owed cancels go with it.
func (sc *scan) flowGone(f *flow) {
	if sc.req.DryRun {
		sc.note("would drop vanished flow %s from the backlog", f.member)
		sc.res.Processed++
		return
	}
	sc.writes = append(sc.writes,
		pendingWrite{cmd: scannerapi.Command{"DEL", f.keys.PendingCancels()}},
		pendingWrite{cmd: scannerapi.Command{"ZREM", sc.backlog, f.member}, done: func(r scannerapi.Reply) {
			if r.Failed() {
				class, code := replyFailure(r)
				sc.res.AddError(class, "backlog_remove_"+code, 1)
				return
			}
			f.progress, f.removed = true, true
			sc.res.Processed++
		}})
}

// flowDrained removes a flow with nothing pending from the backlog (the
// last acknowledgement normally does that; this covers a crash between the
// SREM and the ZREM, or a set emptied by hand).
func (sc *scan) flowDrained(f *flow) {
	if sc.req.DryRun {
		sc.note("would drop drained flow %s from the backlog", f.member)
		return
	}
	sc.writes = append(sc.writes, pendingWrite{cmd: scannerapi.Command{"ZREM", sc.backlog, f.member}, done: func(r scannerapi.Reply) {
		if r.Failed() {
			class, code := replyFailure(r)
			sc.res.AddError(class, "backlog_remove_"+code, 1)
			return
		}
		f.progress, f.removed = true, true
	}})
}

// readMembers is stage 2: the core (and filter reads) of every pending
// member of every flow, in one Exec, with stage 1's writes and the acks of
// garbage members riding along. It returns the members to cancel.
func (sc *scan) readMembers(ctx context.Context, members []*member) []*member {
	var toRead []*member
	for _, m := range members {
		id, kind := keys.ClassifyExecutionID(m.raw)
		switch kind {
		case keys.IDInvalid:
			sc.res.AddError(scannerapi.ErrInvalid, "invalid_member", 1)
			if sc.req.DryRun {
				sc.note("would drop invalid member %q of flow %s", m.raw, m.f.member)
				continue
			}
			sc.log.Warn("dropping a pending cancel that is not an execution id", "flow_id", m.f.member, "member", m.raw)
			mm := m
			sc.writes = append(sc.writes, pendingWrite{cmd: sc.ackCommand(m), done: func(r scannerapi.Reply) {
				if o := classifyAck(r); o != nil {
					sc.res.AddError(o.class, "ack_"+o.code, 1)
					return
				}
				mm.f.progress = true
			}})
			continue
		case keys.IDNonCanonical:
			sc.res.AddError(scannerapi.ErrInvalid, "non_canonical_member", 1)
			sc.note("left non-canonical member %q of flow %s pending", m.raw, m.f.member)
			continue
		}
		if sc.s.failures.ShouldSkip(m.raw, sc.req.Cycle) {
			sc.res.Skipped++
			continue
		}
		m.id = id
		toRead = append(toRead, m)
	}
	cmds, writes := sc.takeWrites()
	first := len(cmds)
	per := 1
	for _, m := range toRead {
		cmds = append(cmds, append(scannerapi.Command{"HMGET", keys.Exec(m.id).Core()}, coreFields...))
		fc := sc.cfg.filter.ReadCommands(m.id)
		per = 1 + len(fc)
		cmds = append(cmds, fc...)
	}
	if len(cmds) == 0 {
		return nil
	}
	replies, err := sc.exec(ctx, cmds)
	if err != nil {
		sc.stageFailed(err, len(writes), toRead)
		return nil
	}
	sc.absorbWrites(writes, replies[:first])
	var toCancel []*member
	for i, m := range toRead {
		r := replies[first+per*i : first+per*(i+1)]
		if r[0].Failed() {
			class, code := replyFailure(r[0])
			sc.memberFailed(m, class, "core_read_"+code)
			continue
		}
		m.core = parseCore(r[0])
		if !m.core.badReply && !m.core.exists {
			// Gone (e.g. purged by retention): nothing to cancel, whoever's
			// it was, and nothing the filter could read.
			m.gone = true
			m.out = outcome{kind: outNotFound, code: codeNotFound}
			toCancel = append(toCancel, m)
			continue
		}
		if !sc.cfg.filter.Decide(r[1:]) {
			sc.res.Skipped++
			continue
		}
		if _, err := cancelKeys(m.id, m.core); err != nil {
			sc.memberFailed(m, scannerapi.ErrInvalid, err.Error())
			continue
		}
		toCancel = append(toCancel, m)
	}
	return toCancel
}

// cancel is stage 3: ff_cancel_execution for every member, in one Exec.
// It returns the members that are done.
func (sc *scan) cancel(ctx context.Context, members []*member) []*member {
	var done []*member
	var cmds []scannerapi.Command
	var called []*member
	for _, m := range members {
		if m.gone {
			done = append(done, m)
			continue
		}
		if sc.req.DryRun {
			m.out = predict(m.core)
			done = append(done, m)
			continue
		}
		ks, _ := cancelKeys(m.id, m.core)
		cmds = append(cmds, scannerapi.FCall(FunctionCancel, ks, m.id.String(), m.f.reason, Source, "", ""))
		called = append(called, m)
	}
	if len(cmds) == 0 {
		return done
	}
	replies, err := sc.exec(ctx, cmds)
	if err != nil {
		sc.stageFailed(err, 0, called)
		return done
	}
	for i, m := range called {
		m.out = classifyCancel(replies[i])
		if m.out.kind.done() {
			done = append(done, m)
			continue
		}
		sc.memberFailed(m, m.out.class, m.out.code)
	}
	return done
}

// ack is stage 4: ff_ack_cancel_member for every member that is done, in
// one Exec. A dry run only reports.
func (sc *scan) ack(ctx context.Context, done []*member) {
	if sc.req.DryRun {
		for _, m := range done {
			sc.res.Processed++
			sc.note("%s of flow %s: %s", m.raw, m.f.member, m.out.code)
		}
		return
	}
	if len(done) == 0 {
		return
	}
	cmds := make([]scannerapi.Command, len(done))
	for i, m := range done {
		cmds[i] = sc.ackCommand(m)
	}
	replies, err := sc.exec(ctx, cmds)
	if err != nil {
		sc.stageFailed(err, 0, done)
		return
	}
	for i, m := range done {
		if o := classifyAck(replies[i]); o != nil {
			sc.memberFailed(m, o.class, "ack_"+o.code)
			continue
		}
		sc.res.Processed++
		m.f.progress = true
		sc.s.failures.RecordSuccess(m.raw)
	}
}

func (sc *scan) ackCommand(m *member) scannerapi.Command {
	return scannerapi.FCall(FunctionAck, []string{m.f.keys.PendingCancels(), sc.backlog}, m.raw, m.f.member)
}

// finish remembers flows on which the scan made no progress although
// nothing failed that is worth retrying (every member left was filtered,
// backed off or corrupt), and decides whether the host should come back at
// once: only when the scan made progress and work is left.
func (sc *scan) finish() {
	if sc.req.DryRun {
		return // nothing changed: a rescan would see the same
	}
	progress, capped := false, false
	for _, f := range sc.flows {
		if f.progress {
			progress = true
			if !f.removed && f.sampled >= sc.cfg.members {
				capped = true // more members than one scan takes
			}
			continue
		}
		if !f.retry && !f.removed && !sc.stageErr {
			sc.s.rememberStuck(f.member, f.score, sc.req.Cycle)
		}
	}
	sc.res.More = progress && (capped || sc.windowFull || sc.lookaheadLeft || sc.stageErr)
}

// memberFailed counts a member that is not done and feeds the tracker.
// Only corrupt members (class invalid) leave their flow without a reason to
// retry it next cycle.
func (sc *scan) memberFailed(m *member, class scannerapi.ErrorClass, code string) {
	sc.res.AddError(class, code, 1)
	if class != scannerapi.ErrInvalid {
		m.f.retry = true
	}
	if sc.s.failures.RecordFailure(m.raw, sc.req.Cycle) {
		sc.log.Error("member cancel keeps failing; skipping it for a while",
			"execution_id", m.raw, "flow_id", m.f.member, "class", class, "code", code,
			"backoff_cycles", scannerapi.DefaultBackoffCycles)
	}
}

// stageFailed accounts for a stage whose Exec failed as a whole after an
// earlier stage did its work: its members are retried next cycle.
func (sc *scan) stageFailed(err error, writes int, members []*member) {
	sc.log.Warn("exec failed", "error", err)
	sc.res.AddError(scannerapi.ErrTransport, "exec", int64(writes+len(members)))
	sc.stageErr = true
}

func (sc *scan) takeWrites() ([]scannerapi.Command, []pendingWrite) {
	writes := sc.writes
	sc.writes = nil
	cmds := make([]scannerapi.Command, 0, len(writes))
	for _, w := range writes {
		cmds = append(cmds, w.cmd)
	}
	return cmds, writes
}

func (sc *scan) absorbWrites(writes []pendingWrite, replies []scannerapi.Reply) {
	for i, w := range writes {
		if w.done != nil {
			w.done(replies[i])
		} else if replies[i].Failed() {
			class, code := replyFailure(replies[i])
			sc.res.AddError(class, "write_"+code, 1)
		}
	}
}

// exec runs commands through the host in chunks the host accepts. An error
// means the first chunk could not be run at all.
func (sc *scan) exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	return scannerapi.ExecChunked(ctx, sc.host, cmds, execChunk)
}

func (sc *scan) note(format string, args ...any) {
	if len(sc.res.Notes) < 100 {
		sc.res.Notes = append(sc.res.Notes, fmt.Sprintf(format, args...))
	}
}

// firstFailure returns the first failed reply of a group.
func firstFailure(rs []scannerapi.Reply) (scannerapi.Reply, bool) {
	for _, r := range rs {
		if r.Failed() {
			return r, true
		}
	}
	return scannerapi.Reply{}, false
}

// isStuck reports a flow remembered as stuck with this exact score, until
// its recheck cycle.
func (s *Scanner) isStuck(member string, score float64, cycle uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.stuck[member]
	if !ok {
		return false
	}
	if e.score != score || e.until <= cycle || e.until > cycle+stuckCycles {
		delete(s.stuck, member)
		return false
	}
	return true
}

func (s *Scanner) rememberStuck(member string, score float64, cycle uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.stuck[member]; !ok && len(s.stuck) >= stuckLimit {
		return
	}
	s.stuck[member] = stuckFlow{score: score, until: cycle + stuckCycles}
}

// gcStuck drops entries past their recheck cycle, once per cycle.
func (s *Scanner) gcStuck(cycle uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cycle == s.stuckGC {
		return
	}
	s.stuckGC = cycle
	for k, e := range s.stuck {
		if e.until <= cycle || e.until > cycle+stuckCycles {
			delete(s.stuck, k)
		}
	}
}

func (s *Scanner) cursor(part uint16) (pagePos, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cursors[part]
	return c, ok
}

func (s *Scanner) setCursor(part uint16, pos *pagePos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos == nil {
		delete(s.cursors, part)
	} else {
		s.cursors[part] = *pos
	}
}
