package scheduler

// This file is what happens between two interval sweeps: partitions woken
// at the instant their next entry falls due.
//
// A sweep reads each partition's due head. Read by rank instead of by
// score (ZRANGE key 0 <batch> WITHSCORES: the batch plus one), the same
// command also returns the first entry that is not due yet, whose score is
// when the partition next has work. The runner keeps that instant per
// partition (Wakeups, one entry per partition at most) and, while it waits
// for the next interval, sleeps only until the earliest of them, then reads
// and scans just the partitions due by then (their time-scored sources
// only) and schedules them again from what that read revealed. So an entry
// that was already in the index one sweep before it fell due is handled at
// its due time, give or take wakeSpacing, instead of up to an interval
// later; an idle scanner, whose sources hold nothing, never wakes.
//
// What the schedule cannot know it leaves to the interval sweep, which
// stays as it was: an entry added after its partition's last read with an
// earlier score than the one scheduled, a partition whose read failed, a
// source that is not time-scored (zset_rotate, set_scan), a window full of
// entries that stay due (known stuck leases): the next sweep reads them.
// When the head is a full window of due entries, the first entry past it
// is not in the read; one more command in the sweep's second round (the
// round of the full window's ZCOUNT) reads it.
//
// A Postgres scanner's time-scored sources (the candidate functions with
// a next-due companion, postgres.NextDueFunctions) work the same way: the
// read runs the candidate function and its companion in one query, which
// returns, per partition, when its first entry not due at the cycle's
// database clock falls due (pgfetch.go). A wake-up runs one such query per
// time-scored source for the partitions woken. The other functions
// (completions, cancel groups) keep polling.
//
// The schedule is a hint derived from reads and never outlives them: it is
// dropped whole when the host's store epoch changes (a failover, a
// transport error, a topology change; for Postgres a read that got no
// reply or a connection the server dropped, see pgClass), and a
// partition's entry is replaced by every read of it, or dropped when that
// read failed.

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Pacing of wake-ups.
const (
	// wakeSpacing is the least time between a partition's read and its
	// wake-up: a partition whose entries fall due one after another is
	// visited at most this often (40 plugin calls a second), its entries
	// due meanwhile handled together. It is what an entry may wait past
	// its due time on a quiet host.
	wakeSpacing = 25 * time.Millisecond
	// wakeGap is the least time between two wake-up sweeps of one
	// scanner, so that partitions falling due a moment apart share a
	// clock read and a pipeline.
	wakeGap = 5 * time.Millisecond
)

// wakesFor reports whether the runner schedules wake-ups for a scanner:
// not when told to poll only, and only for time-scored sources.
func (r *Runner) wakesFor(info scannerapi.Info) bool {
	if r.Tuning().PollOnly {
		return false
	}
	for _, s := range info.Sources {
		if timeScored(s) {
			return true
		}
	}
	return false
}

// timeScored reports whether a source's entries fall due at a time a read
// reveals: a due-ordered sorted set, or a Postgres candidate function with
// a next-due companion (postgres.NextDueFunctions).
func timeScored(s scannerapi.CandidateSource) bool {
	switch s.Kind {
	case scannerapi.SourceZSetDue:
		return true
	case scannerapi.SourcePostgres:
		return postgres.NextDueFunctions[s.Key] != ""
	}
	return false
}

// nextWake returns when the sleep before the interval sweep due at next
// should end: at the earliest wake-up (not sooner than wakeGap after the
// last wake sweep began), or at next, and whether that is a wake-up.
func (r *Runner) nextWake(next time.Time) (time.Time, bool) {
	r.checkWakeEpoch()
	if r.Tuning().PollOnly {
		// Retuned to poll only: what was scheduled is not used.
		r.wakeups.Reset()
	}
	at, ok := r.wakeups.Next()
	if !ok {
		return next, false
	}
	if !r.lastWake.IsZero() {
		at = latest(at, r.lastWake.Add(wakeGap))
	}
	if !at.Before(next) {
		return next, false
	}
	return at, true
}

// checkWakeEpoch drops the schedule when the store epoch changed since it
// was learned.
func (r *Runner) checkWakeEpoch() { r.wakeups.Sync(r.cfg.Epoch.Load()) }

// wake runs one wake-up sweep: the partitions due by now (and owned), their
// time-scored sources read and scanned, More followed up as in a cycle.
func (r *Runner) wake(ctx context.Context) {
	start := r.clk.Now()
	r.lastWake = start
	r.checkWakeEpoch()
	parts := r.owned(r.wakeups.Due(start))
	if len(parts) == 0 || ctx.Err() != nil {
		return
	}
	sum, err := r.Wake(ctx, parts)
	if err != nil && ctx.Err() == nil {
		r.log.Debug("wake-up sweep failed; the interval sweep reads these partitions", "partitions", len(parts), "error", err)
		return
	}
	if sum.Processed > 0 || sum.ErrorTotal() > 0 {
		r.log.Debug("wake-up sweep complete", "partitions", len(parts), "processed", sum.Processed, "errors", sum.ErrorTotal(), "elapsed", sum.Duration)
	}
}

// Wake reads and scans the given partitions' time-scored sources now, as
// a wake-up does, and schedules them again. It must not overlap Run's
// sweep or Cycle. The summary counts as a cycle's (processed, errors,
// partitions) except that the backlog and lag are not sampled, and
// carries the current cycle's number: the scan requests do too.
func (r *Runner) Wake(ctx context.Context, parts []keys.Partition) (Summary, error) {
	start := r.clk.Now()
	sum := Summary{Cycle: r.cycle, Errors: map[ErrorKey]int64{}}
	scanner, info, err := r.target.Current()
	if err != nil {
		return sum, err
	}
	switch {
	case info.UsesPostgres() && r.cfg.Postgres == nil:
		return sum, errNoDatabase
	case !info.UsesPostgres() && r.client == nil:
		return sum, errNoValkey
	}
	parts = r.busy.skip(parts, &sum)
	sum.Partitions = len(parts)
	sw := &sweep{r: r, scanner: scanner, info: info, lanes: r.lanes(), batch: r.batch(info), sum: &sum,
		hasLaneSource: hasLaneSource(info), rank: r.wakesFor(info), dueOnly: true, canary: r.canaryNow()}
	sw.startCanary()
	if err := sw.now(ctx); err != nil {
		r.noteErr(&sum, classify(err), "time", 1)
		r.finishWake(&sum, start)
		return sum, err
	}
	res := sw.readAndScan(ctx, parts, false)
	if res.clockErr != nil {
		r.finishWake(&sum, start)
		return sum, fmt.Errorf("read the store's clock: %w", res.clockErr)
	}
	sum.NowMs = res.nowMs
	sw.followUps(ctx, res.more)
	sw.endCanary()
	r.finishWake(&sum, start)
	return sum, nil
}

// schedule records what a read of the partitions revealed about their
// next due entries. Nothing is learned from a read during which the store
// epoch changed (the store it read may be gone).
func (sw *sweep) schedule(states []*partState) {
	r := sw.r
	if !sw.rank {
		return
	}
	r.checkWakeEpoch()
	if r.cfg.Epoch.Load() != sw.epoch {
		return
	}
	for _, st := range states {
		if st.fetchError || !st.hasWake {
			r.wakeups.Drop(st.p.Index)
			continue
		}
		at := sw.nowAt.Add(time.Duration(st.wakeMs-sw.nowMs) * time.Millisecond)
		r.wakeups.Learn(sw.epoch, st.p, latest(at, sw.nowAt.Add(wakeSpacing)))
	}
}

// noteWakeAt keeps the earliest due instant (ms, the store's clock) of a
// partition's entries that are not due yet.
func (st *partState) noteWakeAt(ms int64) {
	if !st.hasWake || ms < st.wakeMs {
		st.wakeMs, st.hasWake = ms, true
	}
}

// noteWake keeps the earliest due instant (ms, the store's clock) of a
// partition's entries that are not due yet; score is an entry's score in
// a source whose entries are due offset after it.
func (st *partState) noteWake(score float64, offset time.Duration) {
	st.noteWakeAt(int64(math.Ceil(score)) - offset.Milliseconds())
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
