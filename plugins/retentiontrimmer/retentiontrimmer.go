// Package retentiontrimmer is the retention_trimmer scanner (scanners.md §8.2):
// it deletes terminal executions once their retention has passed, every key
// of them, and their index entries.
//
// # Finding what is due, including shorter per-execution retentions
//
// The candidates are the members of ff:idx:{fp:N}:lane:<lane>:terminal,
// scored by the time each execution ended. Retention is default_retention
// (24 h) unless the execution's :policy JSON says
// stream_policy.retention_ttl_ms; that override may be longer or, unlike
// FlowFabric (pitfall P4), shorter, down to the floor min_retention (1 h):
// nothing is purged younger than the floor.
//
// FlowFabric reads only entries older than the 24 h default, so a shorter
// override is never seen. Reading everything older than the floor instead
// does not work either: ordered by age, the oldest entries come first, and
// in a steady state those are default-retention executions a little short
// of 24 h old; an execution with a two-hour override sits behind all of
// them. So the index is split at the two cutoffs and read two ways:
//
//   - The head: entries older than now - default_retention. All of them are
//     due except those with a longer override. The host reads the head of
//     every lane (zset_due, lowest scores first, batch per lane; its cutoff
//     is the fixed floor of one minute because Info cannot depend on
//     options, and entries younger than the default cutoff in that window
//     are ignored here).
//   - The walk: entries between the two cutoffs, read forward from a
//     per-lane cursor a page at a time (at most "lookahead" entries per
//     scan), each classified by its policy alone (one GET) once, when it
//     becomes older than the floor. One with an override is remembered with
//     its due time; one without is forgotten, the head will reach it. The
//     cursor only moves forward, so each execution is walked once, not
//     once per sweep. A restarted plugin starts the walk again at the
//     default cutoff.
//
// Remembered executions whose due time has come are examined when their
// partition is scanned next (their entry is older than the floor, so the
// host has candidates for that partition).
//
// # Head-of-line blocking (pitfall P3)
//
// Entries left in place keep their score: longer overrides, another
// tenant's executions (filter), stale entries of executions that are not
// terminal, entries backed off after repeated failures. Each is remembered
// (with its due time, or for ten cycles) and skipped without reads; when a
// lane's host window is full and holds such entries, the scan reads further
// pages of the head past them (ZRANGE BYSCORE, at most "lookahead" entries,
// resuming at a per-lane cursor) until it has a batch of entries to act on.
//
// # Purging one execution
//
// One batched read per stage, for every execution of the partition at once:
// ZSCORE of its index entry, HMGET of its core (lifecycle_phase,
// completed_at, total_attempt_count, current_waitpoint_id), GET policy,
// SMEMBERS deps:all_edges and waitpoints, ZRANGE signals and attempts, and
// the filter's reads. An execution is purged only if that same read says it
// is terminal and past its own retention (counted from completed_at); a
// non-terminal execution is never touched. The delete list (see keysOf) is
// every key of the execution; the keys are removed with UNLINK in commands
// of at most 100 keys (UNLINK frees large values off the main thread, so no
// command blocks the server for long), many commands pipelined per Exec.
// The sets that list other keys, the core and the policy go last, in one
// command, and only after every other key is gone: a purge cut short by a
// crash or an error leaves the execution findable and is redone from the
// start next time. Then the index entries: ZREM from the lane's terminal
// index and SREM from all_executions. An entry whose core is already gone
// (a purge cut short after the core) gets just those two, ZREM and SREM.
//
// # Throughput
//
// FlowFabric purges at most 20 executions per lane per partition per
// minute (P4). Here a scan reports More while it is making progress and a
// window was full (or a look-ahead or the walk has entries left), so the
// host rescans the partition at once; the batch is per lane.
//
// # Results
//
// Processed counts executions purged plus index entries of vanished
// executions removed. Skipped counts entries examined or remembered and
// left in place (not yet due, filtered, not terminal, backed off). Errors
// count failed reads and deletes by class and code, invalid members by
// code. The backlog (BacklogPlugin) is the number of terminal entries older
// than now - default_retention: what is due by the default, plus what
// longer overrides keep.
package retentiontrimmer

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Name is the scanner's name.
const Name = "retention_trimmer"

// Version is the scanner's version.
const Version = "1.0.0"

// Defaults and limits.
const (
	DefaultInterval     = 60 * time.Second
	DefaultBatch        = 50
	DefaultRetention    = 24 * time.Hour
	DefaultMinRetention = time.Hour
	// Floor is the host's candidate cutoff (Info cannot depend on
	// options), and so the smallest min_retention accepted.
	Floor = time.Minute
	// DefaultLookahead bounds the entries read per lane per scan by the
	// head look-ahead, and separately by the walk.
	DefaultLookahead = 500
	// DeleteChunk is the most keys one UNLINK carries.
	DeleteChunk = 100
)

// Option names.
const (
	OptionDefaultRetention = "default_retention"
	OptionMinRetention     = "min_retention"
	OptionLookahead        = "lookahead"
)

const (
	sourceName  = "terminal"
	stuckCycles = 10
	memoLimit   = 200_000
	execChunk   = 4000
	pageSize    = 200
)

// Scanner is the retention_trimmer scanner. Its methods are safe for
// concurrent use by different partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker

	memo  *scanutil.Memory[memo]    // (partition, execution id, score) -> what is known of an entry left in place
	walks scanutil.Cursors[laneKey] // where each lane's walk between the cutoffs resumes
	heads scanutil.Cursors[laneKey] // where each lane's look-ahead past the host's window resumes

	mu    sync.Mutex
	cfg   config
	lanes map[string]bool // lanes seen in requests, for SampleBacklog
}

type config struct {
	filter    scannerapi.Filter
	ret       retention
	lookahead int
}

type laneKey struct {
	part uint16
	lane string
}

// memo is what the scanner read of an entry it left in place (its index
// score is the memory's key with the member).
type memo struct {
	lane    string
	dueAt   int64  // look again at this server time (ms), when recheck is 0
	recheck uint64 // look again at this cycle (filtered, not terminal, failing)
}

// New returns a scanner with default options.
func New() *Scanner {
	return &Scanner{
		failures: scannerapi.NewFailureTracker(),
		cfg:      config{ret: retention{def: DefaultRetention, min: DefaultMinRetention}, lookahead: DefaultLookahead},
		memo:     scanutil.NewMemory[memo](memoLimit),
		lanes:    map[string]bool{},
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
			Name:        sourceName,
			Kind:        scannerapi.SourceZSetDue,
			Key:         "ff:idx:{p}:lane:{lane}:terminal",
			ScoreOffset: -Floor,
			Backlog:     scannerapi.BacklogPlugin,
		}},
		// HGET: filter. HMGET, GET, SMEMBERS, ZRANGE, ZSCORE: what an
		// execution is and which keys it has; ZRANGE also pages the index.
		// ZCOUNT, TIME, SMEMBERS of ff:idx:lanes: the backlog. UNLINK,
		// ZREM, SREM: the purge.
		Commands: []string{"HGET", "HMGET", "GET", "SMEMBERS", "ZRANGE", "ZSCORE", "ZCOUNT", "TIME", "UNLINK", "ZREM", "SREM"},
		Options: append(scannerapi.FilterOptions(),
			scannerapi.OptionSpec{Name: OptionDefaultRetention, Type: scannerapi.OptionDuration, Default: DefaultRetention.String(),
				Description: "retention of executions whose policy sets no stream_policy.retention_ttl_ms"},
			scannerapi.OptionSpec{Name: OptionMinRetention, Type: scannerapi.OptionDuration, Default: DefaultMinRetention.String(),
				Description: "nothing is purged younger than this, whatever its policy says (at least " + Floor.String() + ")"},
			scannerapi.OptionSpec{Name: OptionLookahead, Type: scannerapi.OptionInt, Default: strconv.Itoa(DefaultLookahead),
				Description: "index entries read per lane per scan past a window of entries left in place, and by the walk that finds shorter overrides (0: off)"},
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
	if cfg.ret.min, err = o.Duration(OptionMinRetention, Floor); err != nil {
		return fmt.Errorf("%w (the floor: the host's candidate cutoff)", err)
	}
	if cfg.ret.def, err = o.Duration(OptionDefaultRetention, cfg.ret.min); err != nil {
		return fmt.Errorf("%w (%s)", err, OptionMinRetention)
	}
	if cfg.lookahead, err = o.Int(OptionLookahead, 0, 1_000_000); err != nil {
		return err
	}
	s.mu.Lock()
	s.cfg = cfg
	s.mu.Unlock()
	// Due times and stuck verdicts were computed under the old options.
	s.dropDerived()
	scannerapi.Logger(ctx).Info("configured", "filter", cfg.filter.String(), "default_retention", cfg.ret.def,
		"min_retention", cfg.ret.min, "lookahead", cfg.lookahead)
	return nil
}

// dropDerived forgets everything the scanner derived from the store.
func (s *Scanner) dropDerived() {
	s.memo.Reset()
	s.walks.Reset()
	s.heads.Reset()
}

// SampleBacklog implements scannerapi.BacklogSampler: per partition, the terminal
// entries older than now - default_retention over every lane (the lanes
// the host passed in requests and those in ff:idx:lanes). Two Execs for
// all partitions: TIME and the lanes, then the counts.
func (s *Scanner) SampleBacklog(ctx context.Context, host scannerapi.Host, partitions []keys.Partition) ([]int64, error) {
	if len(partitions) == 0 {
		return nil, nil
	}
	r, err := host.Exec(ctx, []scannerapi.Command{{"TIME"}, {"SMEMBERS", keys.LanesIndex}})
	if err != nil {
		return nil, err
	}
	if len(r) != 2 {
		return nil, fmt.Errorf("host answered %d replies to 2 commands", len(r))
	}
	now, err := serverTime(r[0])
	if err != nil {
		return nil, err
	}
	stored, ok := replyStrings(r[1])
	if !ok {
		return nil, fmt.Errorf("read %s: %v", keys.LanesIndex, r[1].AsError())
	}
	s.mu.Lock()
	def := s.cfg.ret.def
	set := map[string]bool{}
	for l := range s.lanes {
		set[l] = true
	}
	s.mu.Unlock()
	for _, l := range stored {
		set[l] = true
	}
	lanes := make([]string, 0, len(set))
	for l := range set {
		if keys.ValidateLane(l) == nil {
			lanes = append(lanes, l)
		}
	}
	sort.Strings(lanes)
	out := make([]int64, len(partitions))
	if len(lanes) == 0 {
		return out, nil
	}
	cut := strconv.FormatInt(now-def.Milliseconds(), 10)
	var cmds []scannerapi.Command
	for _, p := range partitions {
		pk := keys.FlowPart(p)
		for _, l := range lanes {
			cmds = append(cmds, scannerapi.Command{"ZCOUNT", pk.LaneTerminal(l), "-inf", cut})
		}
	}
	replies, err := scannerapi.ExecChunked(ctx, host, cmds, execChunk)
	if err != nil {
		return nil, err
	}
	for i, rep := range replies {
		if rep.Failed() || rep.Kind != scannerapi.KindInt {
			return nil, fmt.Errorf("backlog count: %v", rep.AsError())
		}
		out[i/len(lanes)] += rep.Int
	}
	return out, nil
}

func serverTime(r scannerapi.Reply) (int64, error) {
	parts, ok := replyStrings(r)
	if !ok || len(parts) != 2 {
		return 0, fmt.Errorf("unexpected TIME reply")
	}
	secs, err1 := strconv.ParseInt(parts[0], 10, 64)
	micros, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected TIME reply %q", parts)
	}
	return secs*1000 + micros/1000, nil
}

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

	seen  map[string]bool
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
		seen:   map[string]bool{},
	}
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
	if sc.seen[m] {
		return false
	}
	sc.seen[m] = true
	id, kind := keys.ClassifyExecutionID(m)
	key := sc.pk.LaneTerminal(lane)
	switch kind {
	case keys.IDInvalid:
		sc.res.AddError(scannerapi.ErrInvalid, "invalid_member", 1)
		if sc.req.DryRun {
			sc.res.Note("would remove invalid member %q of %s", m, key)
			return false
		}
		sc.log.Warn("removing an index member that is not an execution id", "index", key, "member", m)
		sc.queue.Add(func(rs []scannerapi.Reply) {
			if rs[0].Failed() {
				class, code := scanutil.ClassifyReply(rs[0])
				sc.res.AddError(class, "remove_invalid_"+code, 1)
				return
			}
			sc.purgedFromDue++
		}, scannerapi.Command{"ZREM", key, m})
		return false
	case keys.IDNonCanonical:
		sc.res.AddError(scannerapi.ErrInvalid, "non_canonical_member", 1)
		sc.res.Note("left non-canonical member %q of %s in place", m, key)
		return false
	}
	if sc.skip(m, score) {
		return false
	}
	sc.examine(&item{member: m, id: id, lane: lane, score: score, head: true})
	return true
}

// skip reports entries left alone for now: backed off, or remembered and
// not yet due.
func (sc *scan) skip(m string, score float64) bool {
	if sc.s.failures.ShouldSkip(m, sc.req.Cycle) {
		sc.res.Skipped++
		return true
	}
	if e, ok := sc.s.memo.Recall(sc.req.Partition.Index, m, score, sc.req.Cycle); ok && !memoDue(e, sc.req.NowMs, sc.req.Cycle) {
		sc.res.Skipped++
		return true
	}
	return false
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
			if sc.seen[e.Member] {
				continue
			}
			id, kind := keys.ClassifyExecutionID(e.Member)
			if kind != keys.IDCanonical {
				continue // counted when it reaches the head
			}
			if _, ok := sc.s.memo.Recall(sc.req.Partition.Index, e.Member, e.Score, sc.req.Cycle); ok {
				continue // known; queued by queueRemembered when due
			}
			sc.seen[e.Member] = true
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
		if sc.seen[c.member] {
			continue
		}
		sc.seen[c.member] = true
		if sc.s.failures.ShouldSkip(c.member, sc.req.Cycle) {
			sc.res.Skipped++
			continue
		}
		sc.examine(&item{member: c.member, id: c.id, lane: c.lane, score: c.score})
	}
}

// examine queues the batched read that decides an entry.
func (sc *scan) examine(it *item) {
	ek := keys.Exec(it.id)
	cmds := []scannerapi.Command{
		{"ZSCORE", sc.pk.LaneTerminal(it.lane), it.member},
		append(scannerapi.Command{"HMGET", ek.Core()}, coreFields...),
		{"GET", ek.Policy()},
		{"SMEMBERS", ek.DepsAllEdges()},
		{"SMEMBERS", ek.Waitpoints()},
		{"ZRANGE", ek.Signals(), "0", "-1"},
		{"ZRANGE", ek.Attempts(), "0", "-1"},
	}
	cmds = append(cmds, sc.cfg.filter.ReadCommands(it.id)...)
	sc.queue.Add(func(rs []scannerapi.Reply) { sc.judge(it, rs) }, cmds...)
}

// judge reads an examined entry and acts on the verdict.
func (sc *scan) judge(it *item, rs []scannerapi.Reply) {
	for _, r := range rs[:7] {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			sc.failed(it, class, "read_"+code)
			return
		}
	}
	e := examined{kept: sc.cfg.filter.Decide(rs[7:])}
	switch rs[0].Kind {
	case scannerapi.KindNil:
	case scannerapi.KindFloat:
		e.inIndex, e.score = true, rs[0].Float
	default:
		s, _ := rs[0].Text()
		f, err := strconv.ParseFloat(s, 64)
		e.inIndex, e.score = err == nil, f
	}
	if e.inIndex {
		it.score = e.score // re-scored since it was read (a replay that ended again)
	}
	core, ok := replyStrings(rs[1])
	if !ok || len(core) != len(coreFields) {
		sc.failed(it, scannerapi.ErrServer, "read_malformed_reply")
		return
	}
	for i := range rs[1].Array {
		if !rs[1].Array[i].IsNil() {
			e.coreExists = true
		}
	}
	e.phase, e.completed, e.attempts, e.waitpoint = core[1], core[2], core[3], core[4]
	e.hasPolicy = !rs[2].IsNil()
	e.policy, _ = rs[2].Text()
	var ok1, ok2, ok3, ok4 bool
	e.edges, ok1 = replyStrings(rs[3])
	e.waitpoints, ok2 = replyStrings(rs[4])
	e.signals, ok3 = replyStrings(rs[5])
	e.attemptIDs, ok4 = replyStrings(rs[6])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		sc.failed(it, scannerapi.ErrServer, "read_malformed_reply")
		return
	}
	v := decide(e, sc.req.NowMs, sc.cfg.ret)
	switch v.kind {
	case vLeft:
		sc.s.memo.Forget(sc.req.Partition.Index, it.member)
		sc.s.failures.RecordSuccess(it.member)
	case vKept:
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(it.member)
		sc.remember(it, memo{dueAt: v.dueAt})
	case vFiltered:
		sc.res.Skipped++
		sc.remember(it, memo{recheck: sc.req.Cycle + stuckCycles})
	case vNotTerminal:
		sc.res.Skipped++
		sc.res.Note("left %s in place: in %s but %s, not terminal", it.member, sc.pk.LaneTerminal(it.lane), e.phase)
		sc.remember(it, memo{recheck: sc.req.Cycle + stuckCycles})
	case vClean:
		if sc.req.DryRun {
			sc.res.Processed++
			sc.res.Note("would remove the index entries of %s (its core is gone)", it.member)
			return
		}
		sc.finalize(it)
	case vPurge:
		pk, err := keysOf(it.id, e)
		if err != nil {
			sc.failed(it, scannerapi.ErrInvalid, "implausible_attempt_count")
			return
		}
		if pk.nonCanonical > 0 {
			sc.res.AddError(scannerapi.ErrInvalid, "non_canonical_child_id", int64(pk.nonCanonical))
		}
		it.purge = pk
		if sc.req.DryRun {
			sc.res.Processed++
			sc.res.Note("would purge %s (%d keys)", it.member, len(pk.leaves)+len(pk.last))
			return
		}
		sc.deleteLeaves(it)
	}
}

// deleteLeaves removes every key of a purged execution but the listing
// sets, the core and the policy, in UNLINKs of at most DeleteChunk keys.
func (sc *scan) deleteLeaves(it *item) {
	parts := chunks(it.purge.leaves, DeleteChunk)
	cmds := make([]scannerapi.Command, len(parts))
	for i, p := range parts {
		cmds[i] = append(scannerapi.Command{"UNLINK"}, p...)
	}
	sc.queue.Add(func(rs []scannerapi.Reply) {
		for _, r := range rs {
			if r.Failed() {
				class, code := scanutil.ClassifyReply(r)
				sc.failed(it, class, "delete_"+code)
				return
			}
		}
		sc.finalize(it)
	}, cmds...)
}

// finalize deletes what is left of an execution in one command (the
// listing sets, the core and the policy; nothing for an entry whose core
// is gone), then removes its index entries.
func (sc *scan) finalize(it *item) {
	var cmds []scannerapi.Command
	if len(it.purge.last) > 0 {
		cmds = append(cmds, append(scannerapi.Command{"UNLINK"}, it.purge.last...))
	}
	cmds = append(cmds,
		scannerapi.Command{"ZREM", sc.pk.LaneTerminal(it.lane), it.member},
		scannerapi.Command{"SREM", sc.pk.AllExecutions(), it.member})
	sc.queue.Add(func(rs []scannerapi.Reply) {
		for _, r := range rs {
			if r.Failed() {
				class, code := scanutil.ClassifyReply(r)
				sc.failed(it, class, "delete_"+code)
				return
			}
		}
		sc.res.Processed++
		sc.progress = true
		if it.head || it.score <= float64(sc.cutDef) {
			sc.purgedFromDue++
		}
		sc.s.memo.Forget(sc.req.Partition.Index, it.member)
		sc.s.failures.RecordSuccess(it.member)
	}, cmds...)
}

// failed counts a failure of an entry and feeds the tracker.
func (sc *scan) failed(it *item, class scannerapi.ErrorClass, code string) {
	sc.res.AddError(class, code, 1)
	if sc.s.failures.RecordFailure(it.member, sc.req.Cycle) {
		sc.log.Error("execution keeps failing; skipping it for a while",
			"execution_id", it.member, "class", class, "code", code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
	}
}

func (sc *scan) remember(it *item, m memo) {
	if sc.req.DryRun {
		return
	}
	m.lane = it.lane
	// ttl 0: memoDue decides when the entry is looked at again (its due
	// time, or its recheck cycle).
	if stored, first := sc.s.memo.Remember(sc.req.Partition.Index, it.member, it.score, m, sc.req.Cycle, 0); !stored && first {
		sc.log.Warn("retention memory is full; entries left in place are re-read, and shorter overrides wait for the default, until it drains", "limit", memoLimit)
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

func (sc *scan) note(format string, args ...any) {
	if len(sc.res.Notes) < 100 {
		sc.res.Notes = append(sc.res.Notes, fmt.Sprintf(format, args...))
	}
}

// remembered is a due memo entry handed to a scan.
type remembered struct {
	member string
	id     keys.ExecutionID
	lane   string
	score  float64
}

func memoDue(m memo, nowMs int64, cycle uint64) bool {
	if m.recheck != 0 {
		return m.recheck <= cycle || m.recheck > cycle+stuckCycles
	}
	return m.dueAt <= nowMs
}

// dueMemos returns up to limit remembered entries of a partition that are
// due, oldest first, and how many are due in all.
func (s *Scanner) dueMemos(part uint16, nowMs int64, cycle uint64, limit int) ([]remembered, int) {
	entries := s.memo.Entries(part, cycle, func(e scanutil.Entry[memo]) bool { return memoDue(e.Value, nowMs, cycle) })
	out := make([]remembered, 0, len(entries))
	for _, e := range entries {
		id, err := keys.ParseExecutionID(e.Member)
		if err != nil {
			continue
		}
		out = append(out, remembered{member: e.Member, id: id, lane: e.Value.lane, score: e.Score})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].score != out[j].score {
			return out[i].score < out[j].score
		}
		return out[i].member < out[j].member
	})
	total := len(out)
	if total > limit {
		out = out[:limit]
	}
	return out, total
}
