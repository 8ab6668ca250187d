// Package leaseexpiry is the lease_expiry scanner (scanners.md §7.1): it
// marks leases whose expiry has passed as expired, so their executions can
// be reclaimed by another worker.
//
// The host reads the due head of ff:idx:{fp:N}:lease_expiry (lowest scores
// first, up to the batch) and calls ScanPartition only for partitions with
// due entries. For each candidate the scanner skips ids in failure backoff
// and, when a namespace or instance tag filter is configured, ids the filter
// does not positively match; it then sends ONE batched Exec of
// ff_mark_lease_expired_if_due FCALLs for everything left. The function
// re-validates inside Valkey with the server's clock, so a stale candidate
// or a duplicate scan cannot do harm.
//
// # Head-of-line blocking (pitfall P3) and how it is avoided
//
// A lease marked expired deliberately stays in the index, with its old
// score, until it is reclaimed or cancelled. Read head first, a backlog of
// such entries (workers died, nobody reclaims yet) fills every window and
// hides leases that expire later: FlowFabric re-FCALLs the same 50 marked
// entries every 1.5 s and never reaches newer ones. Reporting More does not
// help, because a rescan reads the same head.
//
// We considered three fixes and chose the third:
//
//   - Pre-reading each candidate's ownership_state and skipping marked ones
//     saves FCALLs but still never looks past the window, and costs an
//     extra callback per partition.
//   - Re-scoring or removing marked entries would unblock the head, but it
//     is a write outside the library's re-validating functions, it races
//     with reclaim (which re-adds the entry with a new score), and reclaim
//     discovery relies on the entry staying.
//   - Remember what is stuck, and look past the window from the other end.
//     An entry the function left in place (already expired or revoked, not
//     leased, or just marked) keeps its exact score until someone acts on it
//     (reclaim and renewal re-score it, cancel and completion remove it), so
//     the pair (execution id, score) identifies a stuck entry precisely. We
//     keep those pairs in memory and skip them without an FCALL. When the
//     host's window is full, the scanner also reads the due range newest
//     first (ZRANGE ... BYSCORE REV LIMIT), down to the window, in pages
//     pipelined with the FCALLs of the previous page: newly expired leases
//     have the newest scores, so they are found in the first page however
//     many stuck entries sit below them. A per-partition cursor continues a
//     deep read on the next scan (bursts larger than the look-ahead), and
//     More is reported only when the look-ahead ran out of budget while it
//     was still finding real work, so a backlog of stuck entries does not
//     make the host spin.
//
// Cost: with a partial window (the common case) one callback of FCALLs and
// nothing else, and known-stuck entries cost no FCALL. With a full window,
// one callback per look-ahead page (200 entries by default, 500 at most per
// scan), each read pipelined with the previous page's FCALLs; a filter adds
// one stage of reads to the same pipeline. A lost memory (plugin restart)
// costs one FCALL per stuck entry, once.
//
// # Index members that are not execution ids
//
// A member that cannot be an execution id in any spelling is removed with
// ZREM (counted as class "invalid", code "invalid_member"): nothing else
// would ever clean it, and a member string can never become valid. A member
// that is a non-canonical spelling FlowFabric would accept ("{fp:007}:…",
// upper-case uuid) may name real keys, so it is left in place and counted
// (code "non_canonical_member") every time it is seen.
//
// # Results
//
// Processed counts leases marked expired. Skipped counts candidates left
// alone on purpose: backed off, filtered, known stuck, already expired or
// revoked, renewed since the read, or stale entries the function removed.
// Errors: class lua with the function's code for {0, code} replies,
// transport/server/refused for failed commands (both feed the failure
// tracker: three in a row back the id off for ten cycles), invalid for bad
// members.
package leaseexpiry

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
const Name = "lease_expiry"

// Version is the scanner's version.
const Version = "1.0.0"

// Function is the library function the scanner calls.
const Function = "ff_mark_lease_expired_if_due"

// Defaults.
const (
	DefaultInterval  = 1500 * time.Millisecond
	DefaultBatch     = 50
	DefaultLookahead = 500
	// OptionLookahead is the option bounding the entries read past the
	// host's window per partition scan (0 turns the look-ahead off).
	OptionLookahead = "lookahead"
	// stuckLimit bounds the memory of stuck entries.
	stuckLimit = 200_000
	// stuckTTL is how many cycles a stuck entry not seen again is kept.
	stuckTTL = 50
)

// Scanner is the lease_expiry scanner. Its methods are safe for concurrent
// use by different partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker

	mu        sync.Mutex
	filter    scannerapi.Filter
	lookahead int
	stuck     map[string]stuckEntry // execution id -> the entry left in place
	stuckGC   uint64
	cursors   map[uint16]pagePos // partition -> where the next deep read resumes
}

type stuckEntry struct {
	score    float64
	lastSeen uint64
}

// New returns a scanner with default options.
func New() *Scanner {
	return &Scanner{
		failures:  scannerapi.NewFailureTracker(),
		lookahead: DefaultLookahead,
		stuck:     make(map[string]stuckEntry),
		cursors:   make(map[uint16]pagePos),
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
			Name:    "lease_expiry",
			Kind:    scannerapi.SourceZSetDue,
			Key:     "ff:idx:{p}:lease_expiry",
			Backlog: scannerapi.BacklogDue,
		}},
		// HGET: filter reads. HMGET: dry-run reads of the core. ZRANGE:
		// look-ahead pages. ZREM: removal of members that are not
		// execution ids.
		Commands:  []string{"HGET", "HMGET", "ZRANGE", "ZREM"},
		Functions: []string{Function},
		Options: append(scannerapi.FilterOptions(), scannerapi.OptionSpec{
			Name: OptionLookahead, Type: scannerapi.OptionInt, Default: strconv.Itoa(DefaultLookahead),
			Description: "index entries read past the host's window per partition scan when the window is full (0: off)",
		}),
	}
}

// Configure implements scannerapi.Scanner.
func (s *Scanner) Configure(ctx context.Context, options map[string]string) error {
	for k := range options {
		switch k {
		case scannerapi.OptionNamespace, scannerapi.OptionInstanceTag, OptionLookahead:
		default:
			return fmt.Errorf("unknown option %q", k)
		}
	}
	f, err := scannerapi.ParseFilter(options)
	if err != nil {
		return err
	}
	look := DefaultLookahead
	if v, ok := options[OptionLookahead]; ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("option %s: %q is not a non-negative integer", OptionLookahead, v)
		}
		look = n
	}
	s.mu.Lock()
	s.filter, s.lookahead = f, look
	s.mu.Unlock()
	scannerapi.Logger(ctx).Info("configured", "filter", f.String(), "lookahead", look)
	return nil
}

// ScanPartition implements scannerapi.Scanner.
func (s *Scanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	s.mu.Lock()
	filter, look := s.filter, s.lookahead
	s.mu.Unlock()
	sc := &scan{
		s: s, host: host, req: req, filter: filter,
		index: keys.FlowPart(req.Partition).LeaseExpiry(),
		seen:  make(map[string]bool, len(req.Candidates)),
		res:   &scannerapi.ScanResult{},
		log:   scannerapi.Logger(ctx),
	}
	s.gcStuck(req.Cycle)

	var windowLow, windowHigh float64
	window := 0
	for _, c := range req.Candidates {
		if c.Source != "lease_expiry" {
			continue
		}
		if window == 0 || c.Score < windowLow {
			windowLow = c.Score
		}
		if window == 0 || c.Score > windowHigh {
			windowHigh = c.Score
		}
		window++
		sc.admit(c.Member, c.Score)
	}
	batch := req.Batch
	if batch <= 0 {
		batch = DefaultBatch
	}
	if window >= batch && look > 0 {
		// The window may hide due entries behind it: read the due range
		// newest first, down to the window's highest score.
		sc.deep = true
		sc.budget = look
		sc.pageSize = min(look, max(4*batch, 100))
		sc.low = windowHigh
		sc.next = &pagePos{hi: float64(req.NowMs)}
		if c, ok := s.cursor(req.Partition.Index); ok && c.hi >= sc.low && c.hi <= float64(req.NowMs) {
			// Half the budget for the newest entries, half to go on
			// where the previous scan stopped.
			sc.resume = &c
			sc.topPage = max(1, min(sc.pageSize, look/2))
		}
	}
	if err := sc.run(ctx); err != nil {
		return nil, err
	}
	if window >= batch && look == 0 && sc.res.Processed > 0 {
		sc.res.More = true // FlowFabric's behaviour: come back for the rest
	}
	return sc.res, nil
}

// item is one execution the scan will act on.
type item struct {
	member string
	id     keys.ExecutionID
	score  float64
}

// scan is the state of one ScanPartition call: a pipeline of waves, each
// one Exec carrying the actions for items that are ready, the filter reads
// for items that need them and the next look-ahead page read.
type scan struct {
	s      *Scanner
	host   scannerapi.Host
	req    *scannerapi.ScanRequest
	filter scannerapi.Filter
	index  string
	seen   map[string]bool
	res    *scannerapi.ScanResult
	log    hclog.Logger

	toFilter []item   // need filter reads
	toAct    []item   // ready for the FCALL
	toRemove []string // members to ZREM

	// Look-ahead state.
	deep     bool
	next     *pagePos // the page to read in the next wave, nil when done
	resume   *pagePos // the cursor of the previous scan, used after the first page
	topPage  int      // size of the first page when resuming (0: pageSize)
	low      float64  // lowest score a page may return (the window's top)
	budget   int      // entries left to read this scan
	pageSize int
	acted    bool // the look-ahead found work (an FCALL for a page entry)
	inPage   bool // admit is called for a page entry
}

// admit classifies a member read from the index (host window or page).
func (sc *scan) admit(member string, score float64) {
	if sc.seen[member] {
		return
	}
	sc.seen[member] = true
	id, kind := keys.ClassifyExecutionID(member)
	switch kind {
	case keys.IDInvalid:
		sc.res.AddError(scannerapi.ErrInvalid, "invalid_member", 1)
		if sc.req.DryRun {
			sc.note("would remove invalid member %q", member)
		} else {
			sc.toRemove = append(sc.toRemove, member)
			sc.log.Warn("removing an index member that is not an execution id", "index", sc.index, "member", member)
		}
		return
	case keys.IDNonCanonical:
		sc.res.AddError(scannerapi.ErrInvalid, "non_canonical_member", 1)
		sc.note("left non-canonical member %q in place", member)
		return
	}
	eid := id.String()
	if sc.s.failures.ShouldSkip(eid, sc.req.Cycle) {
		sc.res.Skipped++
		return
	}
	if sc.s.isStuck(eid, score, sc.req.Cycle) {
		sc.res.Skipped++
		return
	}
	it := item{member: member, id: id, score: score}
	if sc.inPage {
		sc.acted = true
	}
	if sc.filter.IsNoop() {
		sc.toAct = append(sc.toAct, it)
	} else {
		sc.toFilter = append(sc.toFilter, it)
	}
}

// wave is what one Exec carries, so its replies can be matched back.
type wave struct {
	cmds      []scannerapi.Command
	act       []item
	filter    []item
	filterPer int
	page      *pagePos
	pageN     int
}

func (sc *scan) run(ctx context.Context) error {
	for waves := 0; ; waves++ {
		w := sc.buildWave()
		if len(w.cmds) == 0 {
			return nil
		}
		replies, err := sc.host.Exec(ctx, w.cmds)
		if err == nil && len(replies) != len(w.cmds) {
			err = fmt.Errorf("host answered %d replies to %d commands", len(replies), len(w.cmds))
		}
		if err != nil {
			if waves == 0 {
				return fmt.Errorf("exec: %w", err)
			}
			// Earlier waves did their work; count what this one could not
			// do and let the host come back.
			sc.res.AddError(scannerapi.ErrTransport, "exec", int64(len(w.act)+len(w.filter)))
			sc.res.More = true
			return nil
		}
		sc.absorb(w, replies)
	}
}

func (sc *scan) buildWave() wave {
	var w wave
	for _, m := range sc.toRemove {
		w.cmds = append(w.cmds, scannerapi.Command{"ZREM", sc.index, m})
	}
	sc.toRemove = nil
	w.act, sc.toAct = sc.toAct, nil
	for _, it := range w.act {
		k := keys.Exec(it.id)
		if sc.req.DryRun {
			w.cmds = append(w.cmds, append(scannerapi.Command{"HMGET", k.Core()}, dryRunFields...))
		} else {
			w.cmds = append(w.cmds, scannerapi.FCall(Function,
				[]string{k.Core(), k.LeaseCurrent(), sc.index, k.LeaseHistory()}, k.ID()))
		}
	}
	w.filter, sc.toFilter = sc.toFilter, nil
	for _, it := range w.filter {
		rc := sc.filter.ReadCommands(it.id)
		w.filterPer = len(rc)
		w.cmds = append(w.cmds, rc...)
	}
	if sc.next != nil && sc.budget > 0 {
		n := min(sc.pageSize, sc.budget)
		if sc.topPage > 0 {
			n, sc.topPage = min(n, sc.topPage), 0
		}
		w.page, w.pageN = sc.next, n
		sc.next = nil
		sc.budget -= n
		w.cmds = append(w.cmds, scannerapi.Command{"ZRANGE", sc.index,
			formatScore(w.page.hi), formatScore(sc.low), "BYSCORE", "REV",
			"LIMIT", strconv.Itoa(w.page.off), strconv.Itoa(n), "WITHSCORES"})
	}
	return w
}

func (sc *scan) absorb(w wave, replies []scannerapi.Reply) {
	i := len(w.cmds) - len(w.act) - len(w.filter)*w.filterPer
	if w.page != nil {
		i--
	}
	// ZREM replies (first in the wave) need no handling: a failed one is
	// retried when the member is read again.
	for _, it := range w.act {
		sc.record(it, replies[i])
		i++
	}
	for _, it := range w.filter {
		if sc.filter.Decide(replies[i : i+w.filterPer]) {
			sc.toAct = append(sc.toAct, it)
		} else {
			sc.res.Skipped++
		}
		i += w.filterPer
	}
	if w.page != nil {
		sc.absorbPage(*w.page, w.pageN, replies[i])
	}
}

// record accounts for one action's reply.
func (sc *scan) record(it item, r scannerapi.Reply) {
	var o outcome
	if sc.req.DryRun {
		o = predict(r, sc.req.NowMs)
	} else {
		o = classifyReply(r)
	}
	eid := it.id.String()
	switch o.kind {
	case outMarked:
		sc.res.Processed++
		sc.s.failures.RecordSuccess(eid)
		if sc.req.DryRun {
			sc.note("would mark %s expired", eid)
		} else {
			sc.s.rememberStuck(eid, it.score, sc.req.Cycle)
		}
	case outStuck:
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(eid)
		sc.s.rememberStuck(eid, it.score, sc.req.Cycle)
		if sc.req.DryRun {
			sc.note("%s: %s", eid, o.code)
		}
	case outCleaned, outNotDue:
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(eid)
		if sc.req.DryRun {
			sc.note("%s: %s", eid, o.code)
		}
	case outLuaError, outFailed:
		sc.res.AddError(o.class, o.code, 1)
		if sc.s.failures.RecordFailure(eid, sc.req.Cycle) {
			sc.log.Error("persistent FCALL failure; skipping the execution for a while",
				"execution_id", eid, "class", o.class, "code", o.code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
		}
	}
}

// absorbPage admits a look-ahead page and decides where the next one
// starts.
func (sc *scan) absorbPage(from pagePos, n int, r scannerapi.Reply) {
	page, err := scannerapi.ParseScoredMembers(r)
	if err != nil {
		sc.res.AddError(scannerapi.ErrServer, "lookahead_read", 1)
		sc.log.Warn("look-ahead read failed", "index", sc.index, "error", err)
		return
	}
	entries := len(page)
	scores := make([]float64, 0, entries)
	sc.inPage = true
	for _, e := range page {
		scores = append(scores, e.Score)
		sc.admit(e.Member, e.Score)
	}
	sc.inPage = false
	part := sc.req.Partition.Index
	if entries < n {
		// Reached the window: the whole due range has been seen.
		sc.s.setCursor(part, nil)
		return
	}
	pos := advance(from, scores)
	if r := sc.resume; r != nil {
		// The first page came from the top (newest due leases first);
		// continue where the previous scan stopped if that is deeper.
		sc.resume = nil
		if r.hi < pos.hi || r.hi == pos.hi && r.off > pos.off {
			pos = *r
		}
	}
	if sc.budget > 0 {
		sc.next = &pos
		return
	}
	// Out of budget with entries left: resume here next time, and ask the
	// host to come back soon if this scan was still finding work.
	sc.s.setCursor(part, &pos)
	if sc.acted {
		sc.res.More = true
	}
}

func (sc *scan) note(format string, args ...any) {
	if len(sc.res.Notes) < 100 {
		sc.res.Notes = append(sc.res.Notes, fmt.Sprintf(format, args...))
	}
}

// isStuck reports an entry known to be left in place with this exact
// score, and refreshes it.
func (s *Scanner) isStuck(eid string, score float64, cycle uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.stuck[eid]
	if !ok {
		return false
	}
	if e.score != score {
		delete(s.stuck, eid) // re-scored: a new lease
		return false
	}
	e.lastSeen = cycle
	s.stuck[eid] = e
	return true
}

func (s *Scanner) rememberStuck(eid string, score float64, cycle uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.stuck[eid]; !ok && len(s.stuck) >= stuckLimit {
		return
	}
	s.stuck[eid] = stuckEntry{score: score, lastSeen: cycle}
}

// gcStuck drops stuck entries not seen for stuckTTL cycles, once per cycle.
func (s *Scanner) gcStuck(cycle uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cycle == s.stuckGC {
		return
	}
	s.stuckGC = cycle
	if cycle < stuckTTL {
		return
	}
	for k, e := range s.stuck {
		if e.lastSeen+stuckTTL < cycle || e.lastSeen > cycle {
			delete(s.stuck, k)
		}
	}
}

// cursor returns where partition part's next deep read resumes.
func (s *Scanner) cursor(part uint16) (pagePos, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cursors[part]
	return c, ok
}

// setCursor stores or clears where partition part's next deep read
// resumes.
func (s *Scanner) setCursor(part uint16, pos *pagePos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos == nil {
		delete(s.cursors, part)
	} else {
		s.cursors[part] = *pos
	}
}
