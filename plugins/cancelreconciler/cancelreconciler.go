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
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
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
	stuck    *scanutil.Memory[struct{}] // backlog entries (flow, score) left in place without progress
	cursors  scanutil.Cursors[uint16]   // partition -> where the next look-ahead resumes

	mu  sync.Mutex
	cfg config
}

type config struct {
	filter    scannerapi.Filter
	lookahead int
	members   int
}

// New returns a scanner with default options.
func New() *Scanner {
	return &Scanner{
		failures: scannerapi.NewFailureTracker(),
		stuck:    scanutil.NewMemory[struct{}](stuckLimit),
		cfg:      config{lookahead: DefaultLookahead, members: DefaultMembersPerFlow},
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
		Commands: []string{"EXISTS", "SRANDMEMBER", "HGET", "HMGET", "ZRANGE", "ZREM", "DEL"},
		KeyScopes: []scannerapi.KeyScope{
			{Command: "ZREM", Patterns: []string{"ff:idx:{fp:*}:cancel_backlog"}},
			{Command: "DEL", Patterns: []string{"ff:flow:{fp:*}:*:pending_cancels"}},
		},
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
	o, err := scanutil.ParseOptions(s.Info().Options, options)
	if err != nil {
		return err
	}
	var cfg config
	if cfg.filter, err = scannerapi.ParseFilter(o.Map()); err != nil {
		return err
	}
	if cfg.lookahead, err = o.Int(OptionLookahead, 0, 1_000_000); err != nil {
		return err
	}
	if cfg.members, err = o.Int(OptionMembersPerFlow, 1, MaxMembersPerFlow); err != nil {
		return err
	}
	s.mu.Lock()
	s.cfg = cfg
	s.mu.Unlock()
	// What was stuck under the old options (a filter) may not be now.
	s.dropDerived()
	scannerapi.Logger(ctx).Info("configured", "filter", cfg.filter.String(), "lookahead", cfg.lookahead, "members_per_flow", cfg.members)
	return nil
}

// dropDerived forgets everything the scanner derived from the store.
func (s *Scanner) dropDerived() {
	s.stuck.Reset()
	s.cursors.Reset()
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
	core scanutil.CancelCore
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

	// flowIn admits backlog entries, memberIn pending members.
	flowIn   *scanutil.Intake[keys.FlowID]
	memberIn *scanutil.Intake[keys.ExecutionID]
	flows    []*flow
	// writes ride along with the next stage's Exec (plain commands and acks
	// of garbage members), each with what to do with its reply.
	writes  scanutil.Batch
	nWrites int
	// What decides More, and whether flows without progress are stuck.
	windowFull    bool
	lookaheadLeft bool
	stageErr      bool // an Exec failed as a whole after the first stage
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
	}
	// Backlog entries that are not flow ids are removed. A pending member
	// that is not an execution id in any spelling is acknowledged (dropped
	// from its flow's set); a non-canonical spelling is left pending.
	sc.flowIn = scanutil.Intake[keys.FlowID]{Parse: parseFlow, Remove: []keys.IDForm{keys.IDInvalid}, Noun: "flow_id",
		Failures: s.failures, BackoffPrefix: flowKeyPrefix}.Begin(ctx, req, sc.res)
	sc.memberIn = scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDs, Remove: []keys.IDForm{keys.IDInvalid},
		PerIndex: true, Failures: s.failures}.Begin(ctx, req, sc.res)
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
			s.dropDerived()
			return nil, err
		}
	}
	if err := sc.run(ctx); err != nil {
		s.dropDerived()
		return nil, err
	}
	return sc.res, nil
}

// admit classifies a backlog entry read from the host's window or a
// look-ahead page. It returns false when the flow is skipped (stuck, backed
// off) or not a flow id, so the look-ahead knows the window holds entries
// it must see past.
func (sc *scan) admit(m string, score float64) bool {
	id, v := sc.flowIn.Admit(scannerapi.Candidate{Key: sc.backlog, Member: m, Score: score})
	switch v {
	case scanutil.Duplicate:
		return true
	case scanutil.Remove:
		sc.write(scannerapi.Command{"ZREM", sc.backlog, m}, nil)
	}
	if v != scanutil.Take {
		return false
	}
	if _, stuck := sc.s.stuck.Recall(sc.req.Partition.Index, m, score, sc.req.Cycle); stuck {
		sc.res.Skipped++
		return false
	}
	sc.flows = append(sc.flows, &flow{member: m, id: id, score: score, keys: keys.FlowIn(sc.req.Partition, id)})
	return true
}

// parseFlow reads a backlog member: a flow id in its one spelling, or
// invalid (ff_cancel_flow writes the canonical id; anything else is
// removed).
func parseFlow(m string, _ keys.Partition) (keys.FlowID, keys.IDForm) {
	id, err := keys.ParseFlowID(m)
	if err != nil {
		return keys.FlowID{}, keys.IDInvalid
	}
	return id, keys.IDCanonical
}

// lookahead reads backlog pages past the host's window until the scan has a
// batch of flows it can work on, the due range ends or the budget is spent.
// Each page re-reads the ties of its start (LIMIT 0 n+Skip; admit drops
// what was seen), so flows acknowledged between two scans cannot make a
// cursor skip one it has not seen.
func (sc *scan) lookahead(ctx context.Context, window []scannerapi.Candidate, batch int) error {
	scores := make([]float64, len(window))
	for i, c := range window {
		scores[i] = c.Score
	}
	pos := scanutil.From(window[0].Score).Next(scores)
	part := sc.req.Partition.Index
	if c, ok := sc.s.cursors.Get(part); ok && c.Score >= pos.Score && c.Score <= float64(sc.req.NowMs) {
		pos = c
	}
	budget := sc.cfg.lookahead
	for len(sc.flows) < batch && budget > 0 {
		n := min(budget, max(batch, 100))
		budget -= n
		var page []scannerapi.ScoredMember
		var perr error
		var b scanutil.Batch
		b.Add(func(r []scannerapi.Reply) {
			if page, perr = scannerapi.ParseScoredMembers(r[0]); perr != nil {
				class, code := scanutil.ClassifyReply(r[0])
				sc.res.AddError(class, "lookahead_"+code, 1)
			}
		}, append(scannerapi.Command{"ZRANGE", sc.backlog}, scanutil.From(pos.Score).Range(float64(sc.req.NowMs), false, n+pos.Skip)...))
		if err := b.Exec(ctx, sc.host); err != nil {
			return err
		}
		if perr != nil {
			return nil
		}
		pageScores := make([]float64, len(page))
		for i, e := range page {
			pageScores[i] = e.Score
			sc.admit(e.Member, e.Score)
		}
		if len(page) < n+pos.Skip {
			sc.setCursor(nil) // reached the end of the due range
			return nil
		}
		pos = scanutil.From(pos.Score).Next(pageScores)
	}
	// Stopped with entries left: the next scan goes on from here.
	sc.setCursor(&pos)
	sc.lookaheadLeft = true
	return nil
}

// setCursor stores where the partition's next look-ahead resumes (not in
// a dry run, which must leave no trace).
func (sc *scan) setCursor(pos *scanutil.ZPos) {
	switch {
	case sc.req.DryRun:
	case pos == nil:
		sc.s.cursors.Clear(sc.req.Partition.Index)
	default:
		sc.s.cursors.Set(sc.req.Partition.Index, *pos)
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

// write queues a write to ride along with the next stage. done (nil: count
// a failure as write_<code>) reads its reply.
func (sc *scan) write(cmd scannerapi.Command, done func(r scannerapi.Reply)) {
	sc.nWrites++
	sc.writes.Add(func(r []scannerapi.Reply) {
		if done != nil {
			done(r[0])
		} else if r[0].Failed() {
			class, code := scanutil.ClassifyReply(r[0])
			sc.res.AddError(class, "write_"+code, 1)
		}
	}, cmd)
}

// stage starts a stage's batch with the writes waiting to ride along.
func (sc *scan) stage() (b *scanutil.Batch, writes int) {
	w := sc.writes
	writes = sc.nWrites
	sc.writes, sc.nWrites = scanutil.Batch{}, 0
	return &w, writes
}

// exec runs a stage's batch through the host in chunks the host accepts.
// An error means the first chunk could not be run at all.
func (sc *scan) exec(ctx context.Context, b *scanutil.Batch) error {
	return b.ExecChunked(ctx, sc.host, execChunk)
}

// readFlows is stage 1: existence, a sample of pending members and the
// cancel reason of every flow, in one Exec. Writes queued by admit (ZREM
// of unparsable entries) ride along.
func (sc *scan) readFlows(ctx context.Context) ([]*member, error) {
	b, _ := sc.stage()
	var members []*member
	for _, f := range sc.flows {
		f := f
		b.Add(func(r []scannerapi.Reply) { members = append(members, sc.absorbFlow(f, r)...) },
			scannerapi.Command{"EXISTS", f.keys.Core()},
			scannerapi.Command{"SRANDMEMBER", f.keys.PendingCancels(), strconv.Itoa(sc.cfg.members)},
			scannerapi.Command{"HGET", f.keys.Core(), "cancel_reason"})
	}
	if err := sc.exec(ctx, b); err != nil {
		return nil, fmt.Errorf("flow reads: %w", err)
	}
	return members, nil
}

// absorbFlow reads a flow's three replies and returns its pending members.
func (sc *scan) absorbFlow(f *flow, r []scannerapi.Reply) []*member {
	if bad, ok := firstFailure(r); ok {
		class, code := scanutil.ClassifyReply(bad)
		sc.res.AddError(class, "flow_read_"+code, 1)
		f.retry = true
		if sc.s.failures.RecordFailureClass(flowKeyPrefix+f.member, sc.req.Cycle, class) {
			sc.log.Error("flow keeps failing; skipping it for a while", "flow_id", f.member, "class", class, "code", code)
		}
		return nil
	}
	if r[0].Kind != scannerapi.KindInt || r[1].Kind != scannerapi.KindArray && !r[1].IsNil() {
		sc.res.AddError(scannerapi.ErrServer, "flow_read_malformed_reply", 1)
		f.retry = true
		return nil
	}
	sc.s.failures.RecordSuccess(flowKeyPrefix + f.member)
	if r[0].Int == 0 {
		sc.flowGone(f)
		return nil
	}
	f.reason = flowReason(r[2])
	f.sampled = len(r[1].Array)
	if f.sampled == 0 {
		sc.flowDrained(f)
		return nil
	}
	var members []*member
	for _, e := range r[1].Array {
		if m, ok := e.Text(); ok {
			members = append(members, &member{f: f, raw: m})
		}
	}
	return members
}

// flowGone handles a backlog entry whose flow core no longer exists: its
// owed cancels go with it.
func (sc *scan) flowGone(f *flow) {
	if sc.req.DryRun {
		sc.res.Note("would drop vanished flow %s from the backlog", f.member)
		sc.res.Processed++
		return
	}
	sc.write(scannerapi.Command{"DEL", f.keys.PendingCancels()}, nil)
	sc.write(scannerapi.Command{"ZREM", sc.backlog, f.member}, func(r scannerapi.Reply) {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			sc.res.AddError(class, "backlog_remove_"+code, 1)
			return
		}
		f.progress, f.removed = true, true
		sc.res.Processed++
	})
}

// flowDrained removes a flow with nothing pending from the backlog (the
// last acknowledgement normally does that; this covers a crash between the
// SREM and the ZREM, or a set emptied by hand).
func (sc *scan) flowDrained(f *flow) {
	if sc.req.DryRun {
		sc.res.Note("would drop drained flow %s from the backlog", f.member)
		return
	}
	sc.write(scannerapi.Command{"ZREM", sc.backlog, f.member}, func(r scannerapi.Reply) {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			sc.res.AddError(class, "backlog_remove_"+code, 1)
			return
		}
		f.progress, f.removed = true, true
	})
}

// readMembers is stage 2: the core (and filter reads) of every pending
// member of every flow, in one Exec, with stage 1's writes and the acks of
// garbage members riding along. It returns the members to cancel.
func (sc *scan) readMembers(ctx context.Context, members []*member) []*member {
	var toRead []*member
	for _, m := range members {
		id, v := sc.memberIn.Admit(scannerapi.Candidate{Key: m.f.keys.PendingCancels(), Member: m.raw})
		if v == scanutil.Remove {
			mm := m
			sc.write(sc.ackCommand(m), func(r scannerapi.Reply) {
				if o := classifyAck(r); o != nil {
					sc.res.AddError(o.Class, "ack_"+o.Code, 1)
					return
				}
				mm.f.progress = true
			})
		}
		if v != scanutil.Take {
			continue
		}
		m.id = id
		toRead = append(toRead, m)
	}
	b, writes := sc.stage()
	var toCancel []*member
	for _, m := range toRead {
		m := m
		cmds := append([]scannerapi.Command{append(scannerapi.Command{"HMGET", keys.Exec(m.id).Core()}, scanutil.CancelCoreFields...)},
			sc.cfg.filter.ReadCommands(m.id)...)
		b.Add(func(r []scannerapi.Reply) {
			if sc.absorbCore(m, r) {
				toCancel = append(toCancel, m)
			}
		}, cmds...)
	}
	if err := sc.exec(ctx, b); err != nil {
		sc.stageFailed(err, writes, toRead)
		return nil
	}
	return toCancel
}

// absorbCore reads a member's core (and filter) replies; true when the
// member goes on to the cancel stage.
func (sc *scan) absorbCore(m *member, r []scannerapi.Reply) bool {
	if r[0].Failed() {
		class, code := scanutil.ClassifyReply(r[0])
		sc.memberFailed(m, class, "core_read_"+code)
		return false
	}
	m.core = scanutil.ParseCancelCore(r[0])
	if !m.core.BadReply && !m.core.Exists {
		// Gone (e.g. purged by retention): nothing to cancel, whoever's it
		// was, and nothing the filter could read.
		m.gone = true
		m.out = outcome{Kind: outNotFound, Code: codeNotFound}
		return true
	}
	if !sc.cfg.filter.Decide(r[1:]) {
		sc.res.Skipped++
		return false
	}
	if _, err := scanutil.CancelKeys(m.id, m.core); err != nil {
		sc.memberFailed(m, scannerapi.ErrInvalid, err.Error())
		return false
	}
	return true
}

// cancel is stage 3: ff_cancel_execution for every member, in one Exec.
// It returns the members that are done.
func (sc *scan) cancel(ctx context.Context, members []*member) []*member {
	var done, called []*member
	var b scanutil.Batch
	for _, m := range members {
		if m.gone {
			done = append(done, m)
			continue
		}
		if sc.req.DryRun {
			m.out = scanutil.PredictCancel(m.core)
			done = append(done, m)
			continue
		}
		m := m
		ks, _ := scanutil.CancelKeys(m.id, m.core)
		called = append(called, m)
		b.Add(func(r []scannerapi.Reply) {
			m.out = scanutil.ClassifyCancel(r[0])
			if m.out.Kind.Done() {
				done = append(done, m)
				return
			}
			sc.memberFailed(m, m.out.Class, m.out.Code)
		}, scanutil.CancelCall(m.id, ks, m.f.reason, Source))
	}
	if err := sc.exec(ctx, &b); err != nil {
		sc.stageFailed(err, 0, called)
	}
	return done
}

// ack is stage 4: ff_ack_cancel_member for every member that is done, in
// one Exec. A dry run only reports.
func (sc *scan) ack(ctx context.Context, done []*member) {
	if sc.req.DryRun {
		for _, m := range done {
			sc.res.Processed++
			sc.res.Note("%s of flow %s: %s", m.raw, m.f.member, m.out.Code)
		}
		return
	}
	var b scanutil.Batch
	for _, m := range done {
		m := m
		b.Add(func(r []scannerapi.Reply) {
			if o := classifyAck(r[0]); o != nil {
				sc.memberFailed(m, o.Class, "ack_"+o.Code)
				return
			}
			sc.res.Processed++
			m.f.progress = true
			sc.s.failures.RecordSuccess(m.raw)
		}, sc.ackCommand(m))
	}
	if err := sc.exec(ctx, &b); err != nil {
		sc.stageFailed(err, 0, done)
	}
}

func (sc *scan) ackCommand(m *member) scannerapi.Command {
	return scannerapi.FCall(FunctionAck, []string{m.f.keys.PendingCancels(), sc.backlog}, m.raw, m.f.member)
}

// finish remembers flows on which the scan made no progress although
// nothing failed that is worth retrying (every member left was filtered,
// backed off or corrupt: what the scan read back), and decides whether the
// host should come back at once: only when the scan made progress and work
// is left.
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
			if stored, first := sc.s.stuck.Remember(sc.req.Partition.Index, f.member, f.score, struct{}{}, sc.req.Cycle, stuckCycles); !stored && first {
				sc.log.Warn("stuck-flow memory is full; stuck flows are re-read until it drains", "limit", stuckLimit)
			}
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
	if sc.s.failures.RecordFailureClass(m.raw, sc.req.Cycle, class) {
		sc.log.Error("member cancel keeps failing; skipping it for a while",
			"execution_id", m.raw, "flow_id", m.f.member, "class", class, "code", code,
			"backoff_cycles", scannerapi.DefaultBackoffCycles)
	}
}

// stageFailed accounts for a stage whose Exec failed as a whole after an
// earlier stage did its work: its members are retried next cycle, and
// what the scanner derived from the store is dropped (the outcome of the
// stage's commands is unknown; the failure may be a failover).
func (sc *scan) stageFailed(err error, writes int, members []*member) {
	sc.log.Warn("exec failed", "error", err)
	sc.res.AddError(scannerapi.ErrTransport, "exec", int64(writes+len(members)))
	sc.stageErr = true
	sc.s.dropDerived()
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
