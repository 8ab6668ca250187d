package cancelreconciler

// This file is one partition scan: the backlog entries admitted from the
// host's window and the look-ahead past it, the writes that ride along
// with the stages (stages.go), and what the scan leaves for the next one.

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

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
