// Package timers holds the execution timer scanners (scanners.md §7.2-7.6):
// attempt_timeout, execution_deadline, suspension_timeout,
// pending_wp_expiry and delayed_promoter. They share one shape, so they
// share one engine and one binary: the host reads the due head of a timer
// index (a zset scored by due time); for each due member the scanner reads
// what the library call needs (the core's lane, attempt and waitpoint, and
// for the expiry scanners the member's current score), applies the filter,
// and calls the library function, which re-validates inside Valkey.
//
// A scan costs one callback for the reads (filter reads ride along) and
// one for the calls; a waitpoint member costs one more when a filter must
// first learn its execution. An empty partition costs nothing (the host
// skips it).
//
// # What the Go side fixes (docs/compat.md, "Timer scanners")
//
//   - P5: ff_expire_execution does not re-check that a timeout is still due.
//     The read wave re-reads the member's score; an entry that moved past
//     now (a later attempt re-armed its timeout) or vanished is skipped.
//   - P2: a {0, code} reply is a result: counted as a Lua error with its
//     code, never as processed.
//   - P3: an entry the library leaves in place while its score says due
//     (ff_expire_suspension and ff_promote_delayed "not_yet_due",
//     ff_close_waitpoint "already_closed") is remembered with its score and
//     skipped without a call until it changes or is re-checked; a pending
//     waitpoint index entry whose waitpoint no longer exists is removed.
//   - P18: a suspension whose core lost current_waitpoint_id is expired
//     with the suspension's own waitpoint id, so no stray ff:wp:<tag>:
//     hashes are written; with neither it is counted and left alone.
//   - P13: the namespace / instance-tag filter applies to every one of them
//     (pending waitpoints through their execution).
package timers

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Version is the version of every scanner in this package.
const Version = "1.0.0"

// Memory bounds.
const (
	// stuckLimit bounds the remembered stuck entries per scanner.
	stuckLimit = 100_000
	// stuckTTL is how many cycles a stuck entry is trusted before the
	// library is asked again.
	stuckTTL = 30
)

// memberKind is what a timer index holds.
type memberKind int

const (
	execMember      memberKind = iota // execution ids
	waitpointMember                   // waitpoint ids (pending_waitpoint_expiry)
)

// spec is what differs between the timer scanners.
type spec struct {
	name      string
	interval  time.Duration
	batch     int
	source    string // candidate source name
	key       string // its key template
	members   memberKind
	function  string
	alsoCalls []string // other functions the scanner may call
	verb      string   // for dry-run notes: "would <verb> <id>"
	coreReads []string
	// recheckScore re-reads the member's index score before acting (P5).
	recheckScore bool
	// call builds the FCALL for one item, or returns a reason to leave it
	// alone (counted as an invalid item with that code), or neither (the
	// entry is someone else's now: remembered and left).
	call func(sc *scan, it *item) (scannerapi.Command, string)
	// classify reads the function's reply.
	classify func(it *item, r scannerapi.Reply) outcome
}

// Timer is one timer scanner. Its methods are safe for concurrent use by
// different partitions.
type Timer struct {
	sp       spec
	failures *scannerapi.FailureTracker
	stuck    *scanutil.Memory[struct{}] // (partition, member, score) the library left in place

	filter scanutil.FilterSetting
}

func newTimer(sp spec) *Timer {
	return &Timer{sp: sp, failures: scannerapi.NewFailureTracker(), stuck: scanutil.NewMemory[struct{}](stuckLimit)}
}

// Info implements scannerapi.Scanner.
func (s *Timer) Info() scannerapi.Info {
	// HMGET/HGET: core, suspension and waitpoint reads and the filter.
	// ZSCORE: the P5 re-check. ZREM: members that are not ids, and pending
	// entries of vanished waitpoints.
	src := scannerapi.CandidateSource{
		Name: s.sp.source, Kind: scannerapi.SourceZSetDue, Key: s.sp.key, Backlog: scannerapi.BacklogDue,
	}
	functions := append([]string{s.sp.function}, s.sp.alsoCalls...)
	var scopes []scannerapi.FunctionScope
	for _, fn := range functions {
		scopes = append(scopes, functionScope(fn, src.KeyPattern()))
	}
	return scannerapi.Info{
		Name:            s.sp.name,
		Version:         Version,
		APIVersion:      scannerapi.APIVersion,
		Family:          keys.FamilyFlow,
		DefaultInterval: s.sp.interval,
		DefaultBatch:    s.sp.batch,
		Sources:         []scannerapi.CandidateSource{src},
		Commands:        []string{"HGET", "HMGET", "ZSCORE", "ZREM", "GET"},
		KeyScopes:       []scannerapi.KeyScope{{Command: "ZREM", Patterns: []string{src.KeyPattern()}}},
		Functions:       functions,
		FunctionScopes:  scopes,
		Options:         scannerapi.FilterOptions(),
	}
}

// Configure implements scannerapi.Scanner.
func (s *Timer) Configure(ctx context.Context, options map[string]string) error {
	return s.filter.Configure(ctx, s.Info().Options, options)
}

// item is one due member on its way to the library call.
type item struct {
	member string
	score  float64
	index  string // the index key it was read from
	lane   string // the candidate's lane ({lane} sources)
	eid    keys.ExecutionID
	wpid   keys.UUID
	core   map[string]string // coreReads, once read
	extra  map[string]string // scanner-specific reads (suspension fields, the policy)
	retry  string            // attempt_timeout: the retry policy the call retries with ("": none)
}

// key names the item for the failure tracker and logs.
func (it *item) key() string { return it.member }

// scan is the state of one ScanPartition call.
type scan struct {
	s      *Timer
	req    *scannerapi.ScanRequest
	pk     keys.FlowPartKeys
	filter scannerapi.Filter
	res    *scannerapi.ScanResult
	log    hclog.Logger

	toLocate []*item                   // waitpoint items whose execution is not known yet
	toRead   []*item                   // need the core (and filter) reads
	toAct    []*item                   // ready for the call
	in       *scanutil.Intake[timerID] // its removals go into the next wave
	inFlight int
}

// ScanPartition implements scannerapi.Scanner.
func (s *Timer) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	filter := s.filter.Get()
	sc := &scan{s: s, req: req, pk: keys.FlowPart(req.Partition), filter: filter,
		res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx)}
	// Each index entry is its own timer. Members that are not ids (or
	// are ids of another partition) are removed; a non-canonical spelling
	// is left.
	sc.in = s.intake().Begin(ctx, req, sc.res)
	window := 0
	for _, c := range req.Candidates {
		id, v := sc.in.Admit(c)
		if v != scanutil.Duplicate && v != scanutil.OtherSource {
			window++
		}
		if v == scanutil.Take {
			sc.admit(c, id)
		}
	}
	waves, err := scanutil.Waves(ctx, host, 0, sc.buildWave)
	if err != nil {
		// What the failed wave did is unknown and a transport failure may
		// be a failover: forget what was derived from the store.
		s.stuck.Reset()
		if waves == 0 {
			return nil, fmt.Errorf("exec: %w", err)
		}
		sc.res.AddError(scannerapi.ErrTransport, "exec", int64(sc.inFlight))
		sc.res.More = true
		return sc.res, nil
	}
	batch := req.Batch
	if batch <= 0 {
		batch = s.sp.batch
	}
	if window >= batch && sc.res.Processed > 0 && !req.DryRun {
		sc.res.More = true // the due range may hold more than one window
	}
	return sc.res, nil
}

// intake is the scanner's rule for index members, the scan's and
// Explain's.
func (s *Timer) intake() scanutil.Intake[timerID] {
	return scanutil.Intake[timerID]{Parse: s.parse, Sources: []string{s.sp.source}, PerIndex: true,
		Remove: []keys.IDForm{keys.IDInvalid, keys.IDForeign}, RemoveWith: "ZREM", Failures: s.failures}
}

// timerID is a timer's member, parsed: an execution id, or a waitpoint
// id for pending_waitpoint_expiry.
type timerID struct {
	eid  keys.ExecutionID
	wpid keys.UUID
}

// parse classifies a member by the scanner's member kind: an execution id
// of partition p, or a waitpoint id (a uuid, in one spelling only).
func (s *Timer) parse(member string, p keys.Partition) (timerID, keys.IDForm) {
	if s.sp.members == waitpointMember {
		id, err := keys.ParseUUID(member)
		if err != nil {
			return timerID{}, keys.IDInvalid
		}
		return timerID{wpid: id}, keys.IDCanonical
	}
	id, form := keys.ClassifyExecutionIDIn(member, p)
	return timerID{eid: id}, form
}

// admit queues a candidate the intake took.
func (sc *scan) admit(c scannerapi.Candidate, id timerID) {
	it := &item{member: c.Member, score: c.Score, index: c.Key, lane: c.Lane, eid: id.eid, wpid: id.wpid}
	if _, stuck := sc.s.stuck.Recall(sc.req.Partition.Index, c.Key+"\x00"+c.Member, c.Score, sc.req.Cycle); stuck {
		sc.res.Skipped++
		return
	}
	switch {
	case sc.s.sp.members == waitpointMember:
		sc.toLocate = append(sc.toLocate, it)
	case len(sc.readCommands(it)) == 0:
		sc.toAct = append(sc.toAct, it) // nothing to read first
	default:
		sc.toRead = append(sc.toRead, it)
	}
}

// indexOf is the concrete index key an item came from.
func (sc *scan) indexOf(it *item) string { return it.index }

// buildWave puts the queued work into the next wave.
func (sc *scan) buildWave(b *scanutil.Batch) {
	sc.in.QueueRemovals(b)
	locate, read, act := sc.toLocate, sc.toRead, sc.toAct
	sc.toLocate, sc.toRead, sc.toAct = nil, nil, nil
	sc.inFlight = len(locate) + len(read) + len(act)
	for _, it := range locate {
		it := it
		b.Add(func(r []scannerapi.Reply) { sc.located(it, r[0], r[1]) },
			scannerapi.Command{"HMGET", sc.pk.Waitpoint(it.wpid), "execution_id", "state"},
			scannerapi.Command{"ZSCORE", it.index, it.member})
	}
	for _, it := range read {
		it := it
		cmds := sc.readCommands(it)
		nf := len(sc.filter.ReadCommands(it.eid))
		b.Add(func(r []scannerapi.Reply) { sc.read(it, r[:len(r)-nf], r[len(r)-nf:]) }, cmds...)
	}
	for _, it := range act {
		it := it
		cmd, skip := sc.s.sp.call(sc, it)
		if cmd == nil && skip == "" {
			// Not this scanner's to act on now (another path owns it):
			// left in place until its entry changes.
			sc.record(it, outcome{kind: outStuck, code: "left_to_another_path"})
			continue
		}
		if skip != "" {
			sc.res.Note("%s: %s", it.member, skip)
			sc.record(it, outcome{kind: outFailed, class: scannerapi.ErrInvalid, code: skip})
			continue
		}
		if sc.req.DryRun {
			sc.res.Processed++
			sc.res.Note("would %s %s", sc.s.sp.verb, it.member)
			continue
		}
		b.Add(func(r []scannerapi.Reply) { sc.record(it, sc.s.sp.classify(it, r[0])) }, cmd)
	}
}

// readCommands are an item's reads before the call: its core fields,
// scanner extras, the P5 score re-check, then the filter's reads (last, so
// the handler can split them off).
func (sc *scan) readCommands(it *item) []scannerapi.Command {
	return sc.s.readCommands(it, sc.filter)
}

func (s *Timer) readCommands(it *item, filter scannerapi.Filter) []scannerapi.Command {
	ek := keys.Exec(it.eid)
	var cmds []scannerapi.Command
	if len(s.sp.coreReads) > 0 {
		cmds = append(cmds, append(scannerapi.Command{"HMGET", ek.Core()}, s.sp.coreReads...))
	}
	if s.sp.name == SuspensionTimeoutName {
		cmds = append(cmds, append(scannerapi.Command{"HMGET", ek.SuspensionCurrent()}, suspensionReads...))
	}
	if s.sp.name == AttemptTimeoutName {
		cmds = append(cmds, scannerapi.Command{"GET", ek.Policy()})
	}
	if s.sp.recheckScore {
		cmds = append(cmds, scannerapi.Command{"ZSCORE", it.index, it.member})
	}
	return append(cmds, filter.ReadCommands(it.eid)...)
}

// located reads a pending waitpoint's execution and state, and re-reads
// its index score: ff_close_waitpoint does not check that the waitpoint is
// still pending and due, and closing one a suspension just activated would
// cut that suspension off.
func (sc *scan) located(it *item, wp, score scannerapi.Reply) {
	st := judgeLocated(it, wp, score, sc.req.NowMs, sc.filter)
	switch st.step {
	case stepFailed:
		sc.failed(it, st.reply)
	case stepGone:
		sc.res.Skipped++ // activated, closed or re-armed since the host read it
		sc.s.failures.RecordSuccess(it.key())
	case stepRecord:
		if st.o.kind == outFailed {
			sc.res.Note("waitpoint %s names execution %q", it.member, st.detail)
		}
		sc.record(it, st.o)
	case stepAct:
		sc.toAct = append(sc.toAct, it)
	case stepRead:
		sc.toRead = append(sc.toRead, it)
	}
}

// read takes an item's reads and decides whether to act.
func (sc *scan) read(it *item, rs, filterReplies []scannerapi.Reply) {
	st := sc.s.judgeRead(it, rs, filterReplies, sc.req.NowMs, sc.filter)
	switch st.step {
	case stepFailed:
		sc.failed(it, st.reply)
	case stepFiltered:
		sc.res.Skipped++
	case stepGone:
		// Re-armed for later, or already handled (P5).
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(it.key())
	default:
		sc.toAct = append(sc.toAct, it)
	}
}

// failed accounts for a read or call that got no usable reply.
func (sc *scan) failed(it *item, r scannerapi.Reply) {
	class, code := scanutil.ClassifyReply(r)
	sc.res.AddError(class, code, 1)
	if sc.s.failures.RecordFailureClass(it.key(), sc.req.Cycle, class) {
		sc.log.Error("persistent failure; skipping the member for a while", "member", it.member,
			"class", class, "code", code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
	}
}

// record accounts for one call's outcome.
func (sc *scan) record(it *item, o outcome) {
	switch o.kind {
	case outActed:
		sc.res.Processed++
		sc.s.failures.RecordSuccess(it.key())
	case outCleaned:
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(it.key())
	case outStuck:
		// The library leaves the entry as it is: skip it without a call
		// until its score changes or stuckTTL cycles pass.
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(it.key())
		if stored, first := sc.s.stuck.Remember(sc.req.Partition.Index, sc.indexOf(it)+"\x00"+it.member, it.score,
			struct{}{}, sc.req.Cycle, stuckTTL); !stored && first {
			sc.log.Warn("stuck-entry memory is full; stuck entries are re-checked with a call until it drains", "limit", stuckLimit)
		}
	case outRemove:
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(it.key())
		sc.in.QueueRemoval(sc.indexOf(it), it.member)
	case outLuaError, outFailed:
		// A {0, code} reply is a result, not success (P2); like a failed
		// command it feeds the failure tracker, so an entry the library
		// keeps refusing is backed off instead of retried every cycle.
		sc.res.AddError(o.class, o.code, 1)
		if sc.s.failures.RecordFailureClass(it.key(), sc.req.Cycle, o.class) {
			sc.log.Error("persistent "+sc.s.sp.function+" failure; skipping the member for a while",
				"member", it.member, "class", o.class, "code", o.code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
		}
	}
	if o.code != "" && sc.req.DryRun {
		sc.res.Note("%s: %s", it.member, o.code)
	}
}
