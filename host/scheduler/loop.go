package scheduler

// The sweep's loop: a cycle every interval, the wait between cycles.

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func (r *Runner) run(ctx context.Context) {
	if ev := r.cfg.Events; ev != nil {
		stop := ev.Watch(r.onEvent)
		r.watching.Store(true)
		defer func() {
			r.watching.Store(false)
			stop()
		}()
	}
	jittered := r.cfg.NoJitter
	for ctx.Err() == nil {
		if !r.waitWhilePaused(ctx) {
			return
		}
		_, info, err := r.target.Current()
		if err != nil {
			r.log.Debug("scanner unavailable, waiting", "error", err)
			r.sleep(ctx, unavailablePoll)
			continue
		}
		if !jittered {
			// Once, when the scanner first becomes available: plugins of
			// one host come up at about the same moment.
			jittered = true
			if !r.sleep(ctx, rand.N(r.interval(info))) {
				return
			}
		}
		start := r.clk.Now()
		sum, err := r.Cycle(ctx, CycleOptions{})
		if err != nil && ctx.Err() == nil {
			r.log.Warn("scan cycle failed", "error", err)
		} else if sum.Processed > 0 || sum.ErrorTotal() > 0 {
			r.log.Info("scan cycle complete", "cycle", sum.Cycle, "scanned", sum.Scanned, "processed", sum.Processed, "errors", sum.ErrorTotal(), "elapsed", sum.Duration)
		} else {
			r.log.Trace("scan cycle complete", "cycle", sum.Cycle, "elapsed", sum.Duration)
		}
		if !r.sleepUntilNext(ctx, start) {
			return
		}
	}
}

// sleepUntilNext waits until the next cycle is due, one interval after
// start (re-planned when Retune changes the interval meanwhile), and
// meanwhile wakes the partitions whose due time comes first (wake.go).
func (r *Runner) sleepUntilNext(ctx context.Context, start time.Time) bool {
	for {
		iv := r.interval(r.currentInfo())
		now := r.clk.Now()
		next := start.Add(iv)
		if !now.Before(next) {
			return ctx.Err() == nil
		}
		at, waking := r.nextWake(next)
		t := r.clk.NewTimer(at.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
			if !waking {
				return true
			}
			r.wake(ctx)
		case <-r.retune:
			t.Stop()
		}
	}
}

// currentInfo is the scanner's Info for planning, or the zero Info when it
// is unavailable (the interval then falls back to the configured one).
func (r *Runner) currentInfo() scannerapi.Info {
	_, info, err := r.target.Current()
	if err != nil {
		return scannerapi.Info{}
	}
	return info
}

// unavailablePoll is how often the sweep looks again while the scanner is not
// running (starting, restarting): a mutex check, so it can be short and
// the first cycle follows the plugin's start closely.
const unavailablePoll = 200 * time.Millisecond

func (r *Runner) sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, r.clk, d)
}

func (r *Runner) since(t time.Time) time.Duration { return clock.Since(r.clk, t) }
