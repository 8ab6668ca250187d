package scheduler

// One cycle: what it reads, calls and counts, step by step.

import (
	"context"
	"fmt"
	"time"

	"github.com/ffscan/ffscan/host/keyless"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// CycleOptions narrow a cycle (scan-once).
type CycleOptions struct {
	// Partitions limits the cycle to these indexes; nil means all.
	Partitions []uint16
	// DryRun is passed to the scanner in every request.
	DryRun bool
}

// ErrorKey identifies an error count.
type ErrorKey struct {
	Class scannerapi.ErrorClass
	Code  string
}

// Summary is what one cycle did.
type Summary struct {
	Cycle      uint64
	NowMs      int64
	Partitions int // partitions visited
	Scanned    int // ScanPartition calls that succeeded
	Empty      int // partitions skipped with nothing to do
	// Quiet counts partitions not read: read empty before, and none of
	// their keys created since (new-key events).
	Quiet int
	// Busy counts partitions not read because a call of theirs from an
	// earlier sweep is still in flight; Detached the calls this sweep's
	// dispatch left in flight (dispatch.go).
	Busy, Detached int
	Failed         int // partitions whose call failed
	// Deferred counts partitions left for the next cycle because a hot
	// swap switched to a scanner whose sources or family differ from
	// those the cycle fetched with.
	Deferred int
	// Paused counts partitions not called because the scanner paused
	// itself at its action budget (their items stay in the store).
	Paused       int
	FollowUps    int // prompt rescans of partitions that said More
	Processed    int64
	Skipped      int64
	Errors       map[ErrorKey]int64
	Backlog      int64
	BacklogKnown bool // every partition was sampled
	Lag          time.Duration
	Duration     time.Duration
	Notes        []string // scanners' notes, prefixed with the partition
}

// ErrorTotal sums all error counts.
func (s *Summary) ErrorTotal() int64 {
	var n int64
	for _, v := range s.Errors {
		n += v
	}
	return n
}

func (s *Summary) addErr(class scannerapi.ErrorClass, code string, n int64) {
	if n > 0 {
		s.Errors[ErrorKey{class, code}] += n
	}
}

// partState is one partition's fetch result.
type partState struct {
	p         keys.Partition
	cands     []scannerapi.Candidate
	next      map[string]uint64 // cursors to commit once the partition is done
	backlog   int64
	sampled   bool // every host-side backlog read succeeded
	oldestDue float64
	hasDue    bool
	// wakeMs is when the first entry the read saw that is not due yet
	// falls due (the store's clock, ms), with hasWake (wake.go).
	wakeMs  int64
	hasWake bool
	// srcKeys are the source keys the fetch looked at, emptyKeys those
	// it proved empty; censused: the lane census chose the lane keys
	// (quiet.go).
	srcKeys, emptyKeys int
	censused           bool
	// What the scan reported: due entries it knows are settled (left out
	// of the backlog) and, with hasLag, the partition's lag.
	settled    int64
	lag        time.Duration
	hasLag     bool
	fetchError bool
	// Keys of plugin-backlog sources, and how many of them the fetch
	// proved absent: with all absent the partition's backlog is 0 and
	// the plugin is not asked.
	pluginKeys, pluginAbsent int
}

// Cycle runs one sweep and records it in metrics and status. A failure to
// read the clock fails the cycle; failures of single partitions are counted
// in the summary and do not stop the others. Its steps: plan the sweep
// (which partitions), read the store's clock, read and scan, then the
// backlog, the follow-ups, and the record.
func (r *Runner) Cycle(ctx context.Context, opts CycleOptions) (Summary, error) {
	start := r.clk.Now()
	r.cycle++
	sum := Summary{Cycle: r.cycle, Errors: map[ErrorKey]int64{}}
	sw, parts, qr, err := r.plan(opts, &sum)
	if err != nil {
		r.cycleError()
		return sum, err
	}
	if err := sw.storeNow(ctx); err != nil {
		r.finish(&sum, start, false)
		r.cycleError()
		return sum, err
	}
	res := sw.readAndScan(ctx, parts, false)
	if res.clockErr != nil {
		// A Postgres scanner's clock comes with its candidate read, and
		// no read brought it (each failure is counted as the read's).
		r.finish(&sum, start, false)
		r.cycleError()
		return sum, fmt.Errorf("read the store's clock: %w", res.clockErr)
	}
	nowMs := res.nowMs
	sum.NowMs = nowMs
	sw.learnQuiet(qr, res.states)

	// Backlog and lag are only meaningful when every partition of the
	// family was read: a partial sum would under-report (P8).
	complete := opts.Partitions == nil && res.complete && allSampled(res.states)
	sum.Lag = lagOf(res.states, nowMs)
	more := res.more
	if opts.DryRun {
		// A dry run changes nothing, so a rescan would see the same batch.
		more = nil
	}
	if !sw.backlog(ctx, res.states, res.backlog) {
		complete = false
	}
	sum.BacklogKnown = complete && hasBacklog(sw.info)

	sw.followUps(ctx, more)
	sw.endCanary()

	r.finish(&sum, start, opts.Partitions == nil)
	if sum.BacklogKnown {
		r.rec.Backlog(r.cfg.Name, sum.Backlog)
	}
	if complete && hasDueSource(sw.info) {
		r.rec.Lag(r.cfg.Name, sum.Lag)
	}
	return sum, nil
}

// plan is a cycle's first step: the scanner as it is now, and the
// partitions the cycle reads: those asked for, or those this host owns
// less the quiet ones (new-key events) and those with a call still in
// flight. A canary's comparison starts here (it ends with the cycle).
func (r *Runner) plan(opts CycleOptions, sum *Summary) (*sweep, []keys.Partition, *quietRead, error) {
	scanner, info, err := r.target.Current()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("scanner %s unavailable: %w", r.cfg.Name, err)
	}
	parts, err := r.partitions(info, opts.Partitions)
	if err != nil {
		return nil, nil, nil, err
	}
	if opts.Partitions == nil {
		parts = r.owned(parts)
	}
	sw := &sweep{r: r, scanner: scanner, info: info, lanes: r.lanes(), batch: r.batch(info), dryRun: opts.DryRun, sum: sum,
		hasLaneSource: hasLaneSource(info), rank: r.wakesFor(info)}
	if !opts.DryRun {
		sw.canary = r.canaryNow()
		sw.startCanary()
	}
	var qr *quietRead
	if opts.Partitions == nil && !opts.DryRun && r.watching.Load() {
		parts, qr = sw.skipQuiet(parts)
	}
	parts = r.busy.skip(parts, sum)
	sum.Partitions = len(parts)
	return sw, parts, qr, nil
}

// storeNow reads the store's clock, the cycle's one "now" (for a
// Postgres scanner the candidate read brings it: now); a Valkey scanner on
// a host without Valkey has none. It notes the Valkey nodes first: a
// change of topology starts a new store epoch.
func (sw *sweep) storeNow(ctx context.Context) error {
	r := sw.r
	if !sw.postgres() {
		if r.client == nil {
			return errNoValkey
		}
		r.cfg.Epoch.ObserveNodes(keyless.Nodes(r.client))
	}
	if err := sw.now(ctx); err != nil {
		r.noteErr(sw.sum, classify(err), "time", 1)
		return fmt.Errorf("read the store's clock: %w", err)
	}
	return nil
}

// allSampled reports whether every partition's backlog reads succeeded.
func allSampled(states []*partState) bool {
	for _, st := range states {
		if !st.sampled {
			return false
		}
	}
	return true
}

// lagOf is the longest a due entry still to be handled has waited: the
// oldest candidate, unless the scan said which are settled.
func lagOf(states []*partState, nowMs int64) time.Duration {
	var lag time.Duration
	for _, st := range states {
		switch {
		case st.hasLag:
			lag = max(lag, st.lag)
		case st.hasDue:
			lag = max(lag, time.Duration((float64(nowMs)-st.oldestDue)*float64(time.Millisecond)))
		}
	}
	return lag
}

// followUps refetches and scans again, now rather than an interval
// later, the partitions that said More, in at most MaxFollowUps passes.
func (sw *sweep) followUps(ctx context.Context, more []keys.Partition) {
	r := sw.r
	for pass := 0; pass < r.cfg.MaxFollowUps && len(more) > 0 && ctx.Err() == nil; pass++ {
		if err := sw.now(ctx); err != nil {
			r.noteErr(sw.sum, classify(err), "time", 1)
			break
		}
		sub := sw.readAndScan(ctx, r.owned(more), true)
		sw.sum.FollowUps += len(sub.states)
		more = sub.more
	}
}

// noteErr counts a host-side failure; one that got no reply from the
// store starts a new store epoch.
func (r *Runner) noteErr(sum *Summary, class scannerapi.ErrorClass, code string, n int64) {
	if class == scannerapi.ErrTransport {
		r.cfg.Epoch.Bump()
	}
	sum.addErr(class, code, n)
}

// owned keeps the partitions this host may scan now.
func (r *Runner) owned(parts []keys.Partition) []keys.Partition {
	if r.cfg.Owns == nil {
		return parts
	}
	out := parts[:0:0]
	for _, p := range parts {
		if r.cfg.Owns(p) {
			out = append(out, p)
		}
	}
	return out
}
