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
//     An entry the function reports left in place (already expired or
//     revoked) keeps its exact score until someone acts on it (reclaim and
//     renewal re-score it, cancel and completion remove it), so the pair
//     (execution id, score) identifies a stuck entry precisely. We keep
//     those pairs in memory (scanutil.Memory) and skip them without an
//     FCALL. Only what the server answered is remembered: a lease we just
//     marked is not, because a failover to a replica that missed the mark
//     would leave it leased with the same score and skipped forever; the
//     next cycle's FCALL reads the mark back ("already_expired") and that
//     is remembered. Entries are re-verified every stuckTTL cycles, and the
//     whole memory (and the cursors) is dropped when a callback fails. When the
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
// one callback per look-ahead page (the whole look-ahead of 500 entries by
// default, 1000 at most per page), each read pipelined with the previous
// page's FCALLs; a filter adds
// one stage of reads to the same pipeline. A lost memory (plugin restart)
// costs one FCALL per stuck entry, once; so does re-verifying it every
// stuckTTL cycles.
//
// # Index members that are not execution ids
//
// A member that cannot be an execution id in any spelling is removed with
// ZREM (counted as class "invalid", code "invalid_member"): nothing else
// would ever clean it, and a member string can never become valid. So is
// an execution id of another partition (code "foreign_member"): no
// function can act on it from this index, whose slot is not its own. A member
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
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
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
	// maxLookahead bounds the lookahead option.
	maxLookahead = 1_000_000
	// maxPage bounds one look-ahead read (a reply of about 60 KiB).
	maxPage = 1000
	// stuckLimit bounds the memory of stuck entries.
	stuckLimit = 200_000
	// stuckTTL is how many cycles a stuck entry is trusted before the
	// function is asked again.
	stuckTTL = 50
)

// Scanner is the lease_expiry scanner. Its methods are safe for concurrent
// use by different partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker
	stuck    *scanutil.Memory[struct{}] // (partition, execution id, score) left in place, as the function answered
	cursors  scanutil.Cursors[uint16]   // partition -> where the next deep read resumes
	// unsure are the leases whose FCALL stopped at a key a slot migration
	// had moved: the mark, written before that key, may have been made.
	// The next answer tells: already_expired then counts as processed
	// (the mark was this scanner's), any other answer forgets it.
	unsure unsureSet

	mu        sync.Mutex
	filter    scannerapi.Filter
	lookahead int
}

// New returns a scanner with default options.
func New() *Scanner {
	return &Scanner{
		failures:  scannerapi.NewFailureTracker(),
		stuck:     scanutil.NewMemory[struct{}](stuckLimit),
		lookahead: DefaultLookahead,
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
		Commands: []string{"HGET", "HMGET", "ZRANGE", "ZREM"},
		// ZREM: invalid members of its own index.
		KeyScopes:      []scannerapi.KeyScope{{Command: "ZREM", Patterns: []string{"ff:idx:{fp:*}:lease_expiry"}}},
		Functions:      []string{Function},
		FunctionScopes: []scannerapi.FunctionScope{{Function: Function, Patterns: functionKeys()}},
		Options: append(scannerapi.FilterOptions(), scannerapi.OptionSpec{
			Name: OptionLookahead, Type: scannerapi.OptionInt, Default: strconv.Itoa(DefaultLookahead),
			Description: "index entries read past the host's window per partition scan when the window is full (at least 1: without it, a window full of entries left in place hides every newer lease for good)",
		}),
	}
}

// Configure implements scannerapi.Scanner.
func (s *Scanner) Configure(ctx context.Context, options map[string]string) error {
	o, err := scanutil.ParseOptions(s.Info().Options, options)
	if err != nil {
		return err
	}
	f, err := scannerapi.ParseFilter(o.Map())
	if err != nil {
		return err
	}
	look, err := o.Int(OptionLookahead, 1, maxLookahead)
	if err != nil {
		return err
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
		s: s, req: req, filter: filter,
		index: keys.FlowPart(req.Partition).LeaseExpiry(),
		res:   &scannerapi.ScanResult{},
		log:   scannerapi.Logger(ctx),
	}
	// Members that are not execution ids of this partition are removed; a
	// non-canonical spelling is left.
	sc.in = s.intake().Begin(ctx, req, sc.res)

	var windowHigh float64
	window := 0
	for _, c := range req.Candidates {
		if c.Source != "lease_expiry" {
			continue
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
		sc.budget = look
		// One page for the whole budget where it is not huge: each page
		// is a callback round trip, which costs a plugin more than the
		// few hundred entries it reads (pages of 200 made a 390-lease
		// partition cost three callbacks instead of two).
		sc.pageSize = min(look, maxPage)
		sc.low = windowHigh
		top := scanutil.From(float64(req.NowMs))
		sc.next = &top
		if c, ok := s.cursors.Get(req.Partition.Index); ok && c.Score >= sc.low && c.Score <= float64(req.NowMs) {
			// Half the budget for the newest entries, half to go on
			// where the previous scan stopped.
			sc.resume = &c
			sc.topPage = max(1, min(sc.pageSize, look/2))
		}
	}
	waves, err := scanutil.Waves(ctx, host, 0, sc.buildWave)
	if err != nil {
		// What the failed wave's commands did is unknown, and a transport
		// failure may be a failover: forget everything derived from the
		// store.
		s.stuck.Reset()
		s.cursors.Reset()
		if waves == 0 {
			return nil, fmt.Errorf("exec: %w", err)
		}
		// Earlier waves did their work; count what this one could not do
		// and let the host come back.
		sc.res.AddError(scannerapi.ErrTransport, "exec", int64(sc.inFlight))
		sc.res.More = true
		return sc.res, nil
	}
	if window >= batch && look == 0 && sc.res.Processed > 0 {
		sc.res.More = true // FlowFabric's behaviour: come back for the rest
	}
	sc.report()
	return sc.res, nil
}

// intake is the scanner's rule for the members it reads: the scan and
// Explain both judge a member by it.
func (s *Scanner) intake() scanutil.Intake[keys.ExecutionID] {
	return scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, Remove: []keys.IDForm{keys.IDInvalid, keys.IDForeign},
		RemoveWith: "ZREM", Failures: s.failures}
}

// report tells the host which due entries are settled: marked leases wait
// in the index for a reclaim, and without this the backlog gauge would
// count them and the lag would grow with the oldest of them for as long as
// no worker reclaims, though nothing is left for this scanner to do.
// Settled is the partition's remembered stuck entries (those the function
// answered are left in place), and the lag is the oldest due entry this
// scan found still to do. Both are as good as the memory: a stuck entry a
// reclaim re-scored is counted until it is seen again or stuckTTL cycles
// pass, and after a reset the stuck entries count as backlog until the
// next scan reads their marks back.
func (sc *scan) report() {
	sc.res.Settled = int64(sc.s.stuck.Count(sc.req.Partition.Index, sc.req.Cycle))
	sc.res.HasLag = true
	if sc.hasPending {
		sc.res.Lag = max(0, time.Duration((float64(sc.req.NowMs)-sc.oldestPending)*float64(time.Millisecond)))
	}
}

// pending notes a due entry still to be handled after this scan (or
// handled only now), for the lag.
func (sc *scan) pending(score float64) {
	if !sc.hasPending || score < sc.oldestPending {
		sc.oldestPending, sc.hasPending = score, true
	}
}

// item is one execution the scan will act on.
type item struct {
	member string
	id     keys.ExecutionID
	score  float64
}

// scan is the state of one ScanPartition call: a series of waves, each
// one Exec carrying the actions for items that are ready, the filter reads
// for items that need them and the next look-ahead page read.
type scan struct {
	s      *Scanner
	req    *scannerapi.ScanRequest
	filter scannerapi.Filter
	index  string
	in     *scanutil.Intake[keys.ExecutionID]
	res    *scannerapi.ScanResult
	log    hclog.Logger

	toFilter []item // need filter reads
	toAct    []item // ready for the FCALL
	inFlight int    // items in the wave being sent

	// Look-ahead state.
	next     *scanutil.ZPos // the page to read in the next wave, nil when done
	resume   *scanutil.ZPos // the cursor of the previous scan, used after the first page
	topPage  int            // size of the first page when resuming (0: pageSize)
	low      float64        // lowest score a page may return (the window's top)
	budget   int            // entries left to read this scan
	pageSize int
	acted    bool // the look-ahead found work (an FCALL for a page entry)
	inPage   bool // admit is called for a page entry

	// The oldest due entry found still to do (or done only now).
	oldestPending float64
	hasPending    bool
}

// admit classifies a member read from the index (host window or page).
func (sc *scan) admit(member string, score float64) {
	id, v := sc.in.Admit(scannerapi.Candidate{Key: sc.index, Member: member, Score: score})
	if v == scanutil.BackedOff {
		sc.pending(score) // backed off, still to do
	}
	if v != scanutil.Take {
		return
	}
	eid := id.String()
	if _, stuck := sc.s.stuck.Recall(sc.req.Partition.Index, eid, score, sc.req.Cycle); stuck {
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

// buildWave puts the scan's queued work into the next wave.
func (sc *scan) buildWave(b *scanutil.Batch) {
	sc.in.QueueRemovals(b)
	act, filter := sc.toAct, sc.toFilter
	sc.toAct, sc.toFilter = nil, nil
	sc.inFlight = len(act) + len(filter)
	for _, it := range act {
		it := it
		k := keys.Exec(it.id)
		if sc.req.DryRun {
			b.Add(func(r []scannerapi.Reply) { sc.record(it, predict(r[0], sc.req.NowMs)) },
				append(scannerapi.Command{"HMGET", k.Core()}, dryRunFields...))
		} else {
			b.Add(func(r []scannerapi.Reply) { sc.record(it, classifyReply(r[0])) },
				scannerapi.FCall(Function, []string{k.Core(), k.LeaseCurrent(), sc.index, k.LeaseHistory()}, k.ID()))
		}
	}
	for _, it := range filter {
		it := it
		b.Add(func(r []scannerapi.Reply) {
			if sc.filter.Decide(r) {
				sc.toAct = append(sc.toAct, it)
			} else {
				// Not this scanner's to do (another deployment's
				// namespace): neither backlog of ours nor lag.
				sc.res.Skipped++
			}
		}, sc.filter.ReadCommands(it.id)...)
	}
	if sc.next != nil && sc.budget > 0 {
		n := min(sc.pageSize, sc.budget)
		if sc.topPage > 0 {
			n, sc.topPage = min(n, sc.topPage), 0
		}
		from := *sc.next
		sc.next = nil
		sc.budget -= n
		b.Add(func(r []scannerapi.Reply) { sc.absorbPage(from, n, r[0]) },
			append(scannerapi.Command{"ZRANGE", sc.index}, from.Range(sc.low, true, n)...))
	}
}

// record accounts for one action's outcome.
func (sc *scan) record(it item, o outcome) {
	eid := it.id.String()
	unsure := !sc.req.DryRun && sc.s.unsure.take(eid, sc.req.Cycle)
	switch o.kind {
	case outMarked:
		sc.pending(it.score) // it was due this long when marked
		sc.res.Processed++
		sc.s.failures.RecordSuccess(eid)
		if sc.req.DryRun {
			sc.res.Note("would mark %s expired", eid)
		}
		// Not remembered: the mark is only known once it is read back.
	case outStuck:
		// The server says the entry stays as it is: worth remembering.
		if unsure && o.code == detailAlreadyExpired {
			// The call that stopped at a migrated key had marked it.
			sc.res.Processed++
		} else {
			sc.res.Skipped++
		}
		sc.s.failures.RecordSuccess(eid)
		if stored, first := sc.s.stuck.Remember(sc.req.Partition.Index, eid, it.score, struct{}{}, sc.req.Cycle, stuckTTL); !stored && first {
			sc.log.Warn("stuck-entry memory is full; stuck entries are re-checked with an FCALL until it drains", "limit", stuckLimit)
		}
		if sc.req.DryRun {
			sc.res.Note("%s: %s", eid, o.code)
		}
	case outCleaned, outNotDue:
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(eid)
		if sc.req.DryRun {
			sc.res.Note("%s: %s", eid, o.code)
		}
	case outLuaError, outFailed:
		sc.pending(it.score)
		sc.res.AddError(o.class, o.code, 1)
		if (unsure || o.code == scanutil.CodeNonLocalKey) && !sc.req.DryRun {
			sc.s.unsure.add(eid, sc.req.Cycle)
		}
		if sc.s.failures.RecordFailureClass(eid, sc.req.Cycle, o.class) {
			sc.log.Error("persistent FCALL failure; skipping the execution for a while",
				"execution_id", eid, "class", o.class, "code", o.code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
		}
	}
}

// absorbPage admits a look-ahead page and decides where the next one
// starts.
func (sc *scan) absorbPage(from scanutil.ZPos, n int, r scannerapi.Reply) {
	page, err := scannerapi.ParseScoredMembers(r)
	if err != nil {
		sc.res.AddError(scannerapi.ErrServer, "lookahead_read", 1)
		sc.log.Warn("look-ahead read failed", "index", sc.index, "error", err)
		return
	}
	scores := make([]float64, 0, len(page))
	sc.inPage = true
	for _, e := range page {
		scores = append(scores, e.Score)
		sc.admit(e.Member, e.Score)
	}
	sc.inPage = false
	part := sc.req.Partition.Index
	if len(page) < n {
		// Reached the window: the whole due range has been seen.
		sc.s.cursors.Clear(part)
		return
	}
	pos := from.Next(scores)
	if r := sc.resume; r != nil {
		// The first page came from the top (newest due leases first);
		// continue where the previous scan stopped if that is deeper.
		sc.resume = nil
		if r.Score < pos.Score || r.Score == pos.Score && r.Skip > pos.Skip {
			pos = *r
		}
	}
	if sc.budget > 0 {
		sc.next = &pos
		return
	}
	// Out of budget with entries left: resume here next time, and ask the
	// host to come back soon if this scan was still finding work.
	sc.s.cursors.Set(part, pos)
	if sc.acted {
		sc.res.More = true
	}
}

// Bounds of the unsure set: at most unsureLimit ids, each for at most
// unsureTTL cycles. The next answer for a lease normally comes the next
// cycle (every cycle that stops at the migrated key again renews it); an
// id that is never answered again (its lease completed or was cancelled
// meanwhile, its entry gone from the index) ages out instead of staying.
// Past either bound a mark made by a call that stopped at a migrated key
// goes uncounted in processed; nothing else depends on the set.
const (
	unsureLimit = 100_000
	unsureTTL   = stuckTTL
)

// unsureSet is a bounded set of execution ids, each with the cycle it was
// added in. Safe for concurrent use.
type unsureSet struct {
	mu  sync.Mutex
	ids map[string]uint64
}

// add records eid in cycle now. When the set is full, the ids older than
// unsureTTL go first; if none has, eid is not recorded.
func (u *unsureSet) add(eid string, now uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ids == nil {
		u.ids = map[string]uint64{}
	}
	if _, ok := u.ids[eid]; !ok && len(u.ids) >= unsureLimit {
		for id, at := range u.ids {
			if !unsureFresh(at, now) {
				delete(u.ids, id)
			}
		}
		if len(u.ids) >= unsureLimit {
			return
		}
	}
	u.ids[eid] = now
}

// take reports whether eid was added within unsureTTL cycles of now, and
// removes it.
func (u *unsureSet) take(eid string, now uint64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.ids[eid]
	delete(u.ids, eid)
	return ok && unsureFresh(at, now)
}

// unsureFresh reports whether an id added in cycle at still counts in
// cycle now (a cycle number that went backwards, a host restart, does not).
func unsureFresh(at, now uint64) bool { return now >= at && now-at <= unsureTTL }

// functionKeys are the key patterns of the scanner's calls of Function
// (see scan): the execution's core and lease keys and the partition's
// index, for any execution.
func functionKeys() []string {
	k, pk := keys.Exec(scanutil.AnyExecution()), keys.FlowPart(keys.Partition{Family: keys.FamilyFlow})
	return scanutil.ScopePatterns(nil, k.Core(), k.LeaseCurrent(), pk.LeaseExpiry(), k.LeaseHistory())
}
