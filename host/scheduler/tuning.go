package scheduler

// The tuning a reload changes while the runner runs.

import (
	"sync"
	"time"

	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Tuning is the part of Config that can change while the runner runs
// (a configuration reload). Interval, Batch and PollOnly apply from the
// next sweep, Concurrency and CallTimeout from the next call. Zero
// Interval and Batch are the scanner's own defaults (its Info); zero
// Concurrency and CallTimeout DefaultConcurrency and DefaultCallTimeout.
type Tuning struct {
	Interval    time.Duration
	Batch       int
	Concurrency int
	CallTimeout time.Duration
	PollOnly    bool
}

func (t Tuning) withDefaults() Tuning {
	service.Default(&t.Concurrency, DefaultConcurrency)
	service.Default(&t.CallTimeout, DefaultCallTimeout)
	return t
}

// Retune changes the runner's tuning while it runs. A sleeping runner
// wakes to re-plan its next cycle with the new interval.
func (r *Runner) Retune(t Tuning) {
	r.tun.set(t.withDefaults())
	r.replan()
}

// Tuning returns the current tuning.
func (r *Runner) Tuning() Tuning { return r.tun.get() }

// liveTuning is the tuning in force, which Retune changes while the
// sweep and the calls read it.
type liveTuning struct {
	mu sync.Mutex
	t  Tuning
}

func (l *liveTuning) get() Tuning {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t
}

func (l *liveTuning) set(t Tuning) {
	l.mu.Lock()
	l.t = t
	l.mu.Unlock()
}

func (r *Runner) lanes() []string {
	if r.cfg.LanesFunc != nil {
		return r.cfg.LanesFunc()
	}
	return r.cfg.Lanes
}

func (r *Runner) interval(info scannerapi.Info) time.Duration {
	iv := r.Tuning().Interval
	if iv == 0 {
		iv = info.DefaultInterval
	}
	return max(iv, MinInterval)
}

func (r *Runner) batch(info scannerapi.Info) int {
	if b := r.Tuning().Batch; b > 0 {
		return b
	}
	if info.DefaultBatch > 0 {
		return info.DefaultBatch
	}
	return DefaultBatch
}

// replan wakes the sweep's sleep to plan it again (a retune, a wake-up
// due at once).
func (r *Runner) replan() {
	select {
	case r.retune <- struct{}{}:
	default:
	}
}
