package retention

// This file is one partition scan: the host's window and the look-ahead
// past it per lane, the walk between the two cutoffs, the remembered
// entries that are due, and the waves that carry their reads.

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// item is one index entry the scan works on.
type item struct {
	member string // as in the index
	id     keys.ExecutionID
	lane   string
	score  float64
	head   bool // from the head (window or look-ahead), older than the default cutoff
	purge  purgeKeys
}

// scan is the state of one ScanPartition call: a pipeline of waves, each
// ONE Exec (split only above the host's batch limit) carrying everything
// that is ready: page reads, policy reads of walked entries, the batched
// reads of examined executions, their deletes and their final deletes.
type scan struct {
	s     *Scanner
	host  scannerapi.Host
	req   *scannerapi.ScanRequest
	cfg   config
	pk    keys.FlowPartKeys
	res   *scannerapi.ScanResult
	log   hclog.Logger
	batch int

	cutDef, cutMin int64 // score bounds: head <= cutDef < walk <= cutMin

	in    *scanutil.Intake[keys.ExecutionID]
	queue scanutil.Batch // for the next wave

	progress      bool // something was purged or cleaned
	more          bool // due work was left (a full window, a look-ahead or memory with entries left)
	walkLeft      bool // the walk stopped on its budget with entries left
	stageErr      bool
	backlog       int64
	backlogOK     bool
	purgedFromDue int64 // entries removed this scan that the backlog counted
}

// ScanPartition implements scannerapi.Scanner.
func (s *Scanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	s.mu.Lock()
	cfg := s.cfg
	for _, l := range req.Lanes {
		s.lanes[l] = true
	}
	s.mu.Unlock()
	sc := &scan{
		s: s, host: host, req: req, cfg: cfg,
		pk:     keys.FlowPart(req.Partition),
		res:    &scannerapi.ScanResult{},
		log:    scannerapi.Logger(ctx),
		batch:  req.Batch,
		cutDef: req.NowMs - cfg.ret.def.Milliseconds(),
		cutMin: req.NowMs - cfg.ret.min.Milliseconds(),
	}
	sc.in = s.intake().Begin(ctx, req, sc.res)
	if sc.batch <= 0 {
		sc.batch = DefaultBatch
	}

	// The host's windows, per lane, in index order.
	windows := map[string][]scannerapi.Candidate{}
	var lanes []string
	for _, c := range req.Candidates {
		if c.Source != sourceName || keys.ValidateLane(c.Lane) != nil {
			continue
		}
		if _, ok := windows[c.Lane]; !ok {
			lanes = append(lanes, c.Lane)
		}
		windows[c.Lane] = append(windows[c.Lane], c)
	}
	for _, l := range req.Lanes {
		if _, ok := windows[l]; !ok && keys.ValidateLane(l) == nil {
			windows[l] = nil
			lanes = append(lanes, l)
		}
	}
	sort.Strings(lanes)

	sc.queueBacklog(lanes)
	for _, lane := range lanes {
		sc.startHead(lane, windows[lane])
		sc.startWalk(lane)
	}
	sc.queueRemembered()
	if err := sc.run(ctx); err != nil {
		return nil, err
	}
	sc.finish()
	return sc.res, nil
}

// queueBacklog counts, per lane, the entries older than the default cutoff.
func (sc *scan) queueBacklog(lanes []string) {
	if len(lanes) == 0 {
		return
	}
	cmds := make([]scannerapi.Command, len(lanes))
	for i, l := range lanes {
		cmds[i] = scannerapi.Command{"ZCOUNT", sc.pk.LaneTerminal(l), "-inf", strconv.FormatInt(sc.cutDef, 10)}
	}
	sc.queue.Add(func(rs []scannerapi.Reply) {
		sc.backlogOK = true
		for _, r := range rs {
			if r.Failed() || r.Kind != scannerapi.KindInt {
				sc.backlogOK = false
				return
			}
			sc.backlog += r.Int
		}
	}, cmds...)
}

// startHead admits the host's window of a lane and, when it is full and
// holds entries left in place, starts the look-ahead past it.
func (sc *scan) startHead(lane string, window []scannerapi.Candidate) {
	blocked, acted, n := 0, 0, 0
	for _, c := range window {
		if float64(sc.cutDef) < c.Score {
			break // the walk's range
		}
		n++
		if sc.admitHead(lane, c.Member, c.Score) {
			acted++
		} else {
			blocked++
		}
	}
	if n == 0 || len(window) < sc.batch || n < len(window) {
		return // the window reached past the head: nothing hidden behind it
	}
	if acted > 0 {
		sc.more = true // a full window: more may be due behind it
	}
	if blocked == 0 || sc.cfg.lookahead == 0 {
		return
	}
	var scores []scannerapi.ScoredMember
	for _, c := range window {
		scores = append(scores, scannerapi.ScoredMember{Member: c.Member, Score: c.Score})
	}
	_, pos := scanutil.From(math.Inf(-1)).Fresh(scores)
	lk := laneKey{sc.req.Partition.Index, lane}
	if c, ok := sc.s.heads.Get(lk); ok && (c.Score > pos.Score || c.Score == pos.Score && c.Member > pos.Member) {
		pos = c
	}
	sc.queueHeadPage(lane, pos, sc.cfg.lookahead, acted)
}

// queueHeadPage reads the next look-ahead page of a lane's head.
func (sc *scan) queueHeadPage(lane string, pos scanutil.ZPos, budget, acted int) {
	n := min(pageSize, budget)
	key := sc.pk.LaneTerminal(lane)
	lk := laneKey{sc.req.Partition.Index, lane}
	cmd := append(scannerapi.Command{"ZRANGE", key}, pos.Reread(float64(sc.cutDef), n)...)
	sc.queue.Add(func(rs []scannerapi.Reply) {
		page, err := scannerapi.ParseScoredMembers(rs[0])
		if err != nil {
			class, code := scanutil.ClassifyReply(rs[0])
			sc.res.AddError(class, "lookahead_"+code, 1)
			return
		}
		fresh, next := pos.Fresh(page)
		for _, e := range fresh {
			if sc.admitHead(lane, e.Member, e.Score) {
				acted++
			}
		}
		if len(page) < n+pos.Skip {
			sc.setHeadCursor(lk, nil) // reached the default cutoff
			return
		}
		if budget-n > 0 && acted < sc.batch {
			sc.queueHeadPage(lane, next, budget-n, acted)
			return
		}
		sc.setHeadCursor(lk, &next)
		if acted > 0 {
			sc.more = true
		}
	}, cmd)
}

// admitHead classifies an entry of the head; true when it will be
// examined.
func (sc *scan) admitHead(lane, m string, score float64) bool {
	key := sc.pk.LaneTerminal(lane)
	id, v := sc.in.Admit(scannerapi.Candidate{Key: key, Member: m, Score: score})
	if v == scanutil.Remove {
		sc.queue.Add(func(rs []scannerapi.Reply) {
			if rs[0].Failed() {
				class, code := scanutil.ClassifyReply(rs[0])
				sc.res.AddError(class, "remove_invalid_"+code, 1)
				return
			}
			sc.purgedFromDue++
		}, scannerapi.Command{"ZREM", key, m})
	}
	if v != scanutil.Take {
		return false
	}
	if e, ok := sc.s.memo.Recall(sc.req.Partition.Index, m, score, sc.req.Cycle); ok && !memoDue(e, sc.req.NowMs, sc.req.Cycle) {
		sc.res.Skipped++ // remembered and not yet due
		return false
	}
	sc.examine(&item{member: m, id: id, lane: lane, score: score, head: true})
	return true
}

// startWalk reads the next pages of a lane between the two cutoffs.
func (sc *scan) startWalk(lane string) {
	if sc.cutDef >= sc.cutMin || sc.cfg.lookahead == 0 {
		return
	}
	lk := laneKey{sc.req.Partition.Index, lane}
	pos := scanutil.From(float64(sc.cutDef))
	if c, ok := sc.s.walks.Get(lk); ok && c.Score >= pos.Score {
		pos = c
	}
	sc.queueWalkPage(lane, pos, sc.cfg.lookahead)
}

func (sc *scan) queueWalkPage(lane string, pos scanutil.ZPos, budget int) {
	n := min(pageSize, budget)
	key := sc.pk.LaneTerminal(lane)
	lk := laneKey{sc.req.Partition.Index, lane}
	cmd := append(scannerapi.Command{"ZRANGE", key}, pos.Reread(float64(sc.cutMin), n)...)
	sc.queue.Add(func(rs []scannerapi.Reply) {
		page, err := scannerapi.ParseScoredMembers(rs[0])
		if err != nil {
			class, code := scanutil.ClassifyReply(rs[0])
			sc.res.AddError(class, "walk_"+code, 1)
			return
		}
		fresh, next := pos.Fresh(page)
		var walked []*item
		for _, e := range fresh {
			c := scannerapi.Candidate{Key: key, Member: e.Member, Score: e.Score}
			if sc.in.Taken(c) {
				continue
			}
			id, kind := keys.ClassifyExecutionIDIn(e.Member, sc.req.Partition)
			if kind != keys.IDCanonical {
				continue // counted when it reaches the head
			}
			if _, ok := sc.s.memo.Recall(sc.req.Partition.Index, e.Member, e.Score, sc.req.Cycle); ok {
				continue // known; queued by queueRemembered when due
			}
			sc.in.Claim(c)
			walked = append(walked, &item{member: e.Member, id: id, lane: lane, score: e.Score})
		}
		sc.classify(walked)
		if !sc.req.DryRun {
			sc.s.walks.Set(lk, next)
		}
		if len(page) == n+pos.Skip {
			if budget-n > 0 {
				sc.queueWalkPage(lane, next, budget-n)
			} else {
				sc.walkLeft = true
			}
		}
	}, cmd)
}

// classify reads the policy (and the filter) of walked entries and decides
// from the policy alone: remember an override with its due time, examine
// one already due, forget one with the default (the head will reach it).
func (sc *scan) classify(items []*item) {
	if len(items) == 0 {
		return
	}
	var cmds []scannerapi.Command
	per := 1
	for _, it := range items {
		cmds = append(cmds, scannerapi.Command{"GET", keys.Exec(it.id).Policy()})
		fc := sc.cfg.filter.ReadCommands(it.id)
		per = 1 + len(fc)
		cmds = append(cmds, fc...)
	}
	sc.queue.Add(func(rs []scannerapi.Reply) {
		for i, it := range items {
			r := rs[i*per : (i+1)*per]
			if !sc.cfg.filter.Decide(r[1:]) {
				continue // another tenant's: never ours to remember
			}
			if r[0].Failed() {
				class, code := scanutil.ClassifyReply(r[0])
				sc.res.AddError(class, "policy_read_"+code, 1)
				// Look at it properly in the next scan.
				sc.remember(it, memo{dueAt: sc.req.NowMs})
				continue
			}
			policy, _ := r[0].Text()
			ms, override := sc.cfg.ret.of(policy, !r[0].IsNil())
			due := satAdd(int64(it.score), ms)
			switch {
			case due <= sc.req.NowMs:
				sc.examine(it)
			case override:
				sc.remember(it, memo{dueAt: due})
			}
		}
	}, cmds...)
}

// queueRemembered examines the partition's remembered entries that are
// due (at most a few batches per scan; the rest wait for the next).
func (sc *scan) queueRemembered() {
	due, total := sc.s.dueMemos(sc.req.Partition.Index, sc.req.NowMs, sc.req.Cycle, 4*sc.batch)
	if total > len(due) {
		sc.more = true
	}
	for _, c := range due {
		if _, v := sc.in.Admit(scannerapi.Candidate{Key: sc.pk.LaneTerminal(c.lane), Member: c.member, Score: c.score}); v != scanutil.Take {
			continue
		}
		sc.examine(&item{member: c.member, id: c.id, lane: c.lane, score: c.score})
	}
}

func (sc *scan) setHeadCursor(lk laneKey, c *scanutil.ZPos) {
	switch {
	case sc.req.DryRun:
	case c == nil:
		sc.s.heads.Clear(lk)
	default:
		sc.s.heads.Set(lk, *c)
	}
}

// run executes waves until nothing is queued.
func (sc *scan) run(ctx context.Context) error {
	carried := 0
	waves, err := scanutil.Waves(ctx, sc.host, execChunk, func(b *scanutil.Batch) {
		*b, sc.queue = sc.queue, scanutil.Batch{}
		carried = b.Groups()
	})
	if err == nil {
		return nil
	}
	// What the failed wave's commands did is unknown (the failure may be
	// a failover): forget what was derived from the store.
	sc.s.dropDerived()
	if waves == 0 {
		return fmt.Errorf("exec: %w", err)
	}
	// Earlier waves did their work; what this one carried is retried next
	// cycle.
	sc.log.Warn("exec failed", "error", err)
	sc.res.AddError(scannerapi.ErrTransport, "exec", int64(carried))
	sc.stageErr = true
	return nil
}

// finish reports the backlog and whether the host should come back at once.
func (sc *scan) finish() {
	if sc.backlogOK {
		sc.res.Backlog, sc.res.HasBacklog = max(0, sc.backlog-sc.purgedFromDue), true
	}
	if sc.req.DryRun {
		return // nothing changed: a rescan would see the same
	}
	// Come back at once only for work a rescan would do: due entries left
	// while this scan made progress (never for a partition whose due
	// entries are all left in place), or a walk that is not done.
	sc.res.More = sc.progress && (sc.more || sc.stageErr) || sc.walkLeft
}

// intake is the scanner's rule for candidates, the scan's and Explain's:
// members that are not execution ids of this partition are removed; a
// non-canonical spelling is left.
func (s *Scanner) intake() scanutil.Intake[keys.ExecutionID] {
	return scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, Remove: []keys.IDForm{keys.IDInvalid, keys.IDForeign},
		Failures: s.failures}
}
