package scheduler

// This file is the action budget: how many items a scanner may act on
// per window, absolute and as a fraction of the items it examined. Past
// it the runner pauses itself: it calls no partition until an operator
// resumes it (or a cool-down passed, if one is set). Nothing is lost
// while it is paused: a partition it does not call keeps its items in
// the store (its cursors are not moved), and they are done after the
// resume.

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// ActionBudget bounds the items a scanner acts on (ScanResult.Processed)
// per Window. Zero Max and MaxFraction: no budget.
type ActionBudget struct {
	Window time.Duration
	// Max is the most items acted on per window (0: no absolute bound).
	Max int64
	// MaxFraction is the most items acted on per item examined in the
	// window (0: no bound), once at least MinExamined were examined.
	MaxFraction float64
	MinExamined int64
	// CoolDown resumes a paused scanner on its own after this long (0:
	// only an operator resumes it).
	CoolDown time.Duration
}

// Off says there is no budget.
func (b ActionBudget) Off() bool { return b.Max <= 0 && b.MaxFraction <= 0 }

// Pause says why a scanner paused itself, with the figures.
type Pause struct {
	At     time.Time
	Reason string
	// Acted and Examined are the window's items when it paused.
	Acted, Examined int64
	Budget          ActionBudget
	// Until is when the cool-down resumes it (zero: an operator must).
	Until time.Time
}

// budgetEvent is one call's items.
type budgetEvent struct {
	at              time.Time
	acted, examined int64
}

// budget is a runner's action budget and pause.
type budget struct {
	mu      sync.Mutex
	cfg     ActionBudget
	events  []budgetEvent
	paused  *Pause
	resumed chan struct{} // closed by resume
	pauses  uint64
}

// SetActionBudget makes b the runner's budget from now on (a reload).
func (r *Runner) SetActionBudget(b ActionBudget) {
	r.budget.mu.Lock()
	defer r.budget.mu.Unlock()
	r.budget.cfg = b
}

// ActionBudget is the runner's budget.
func (r *Runner) ActionBudget() ActionBudget {
	r.budget.mu.Lock()
	defer r.budget.mu.Unlock()
	return r.budget.cfg
}

// Paused says why the runner is paused (nil: it is not). A pause whose
// cool-down passed ends here.
func (r *Runner) Paused() *Pause {
	b := &r.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused == nil {
		return nil
	}
	if !b.paused.Until.IsZero() && !r.clk.Now().Before(b.paused.Until) {
		r.resumeLocked("cool-down of " + b.cfg.CoolDown.String() + " passed")
		return nil
	}
	p := *b.paused
	return &p
}

// Resume ends a pause (false: the runner was not paused). The window
// starts afresh, so the work left in the store is done from here on.
func (r *Runner) Resume(who string) bool {
	r.budget.mu.Lock()
	defer r.budget.mu.Unlock()
	if r.budget.paused == nil {
		return false
	}
	r.resumeLocked(who)
	return true
}

func (r *Runner) resumeLocked(who string) {
	b := &r.budget
	r.log.Info("scanner resumed after its action-budget pause", "by", who, "acted", b.paused.Acted, "examined", b.paused.Examined)
	b.paused, b.events = nil, nil
	if b.resumed != nil {
		close(b.resumed)
		b.resumed = nil
	}
	r.cfg.Changes.Notify()
}

// Pauses counts the pauses since the runner started.
func (r *Runner) Pauses() uint64 {
	r.budget.mu.Lock()
	defer r.budget.mu.Unlock()
	return r.budget.pauses
}

// pausedNow says whether calls must wait (a sweep under way stops
// calling partitions).
func (r *Runner) pausedNow() bool { return r.Paused() != nil }

// noteActions adds one call's items to the window and pauses the runner
// when they pass the budget.
func (r *Runner) noteActions(acted, examined int64) {
	b := &r.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg.Off() || b.paused != nil {
		return
	}
	now := r.clk.Now()
	b.events = append(b.events, budgetEvent{at: now, acted: acted, examined: examined})
	cut := now.Add(-b.cfg.Window)
	i := 0
	for i < len(b.events) && !b.events[i].at.After(cut) {
		i++
	}
	b.events = b.events[i:]
	var a, e int64
	for _, ev := range b.events {
		a += ev.acted
		e += ev.examined
	}
	why := ""
	switch {
	case b.cfg.Max > 0 && a > b.cfg.Max:
		why = fmt.Sprintf("acted on %d items in %s, over its budget of %d", a, b.cfg.Window, b.cfg.Max)
	case b.cfg.MaxFraction > 0 && e >= max(b.cfg.MinExamined, 1) && float64(a) > b.cfg.MaxFraction*float64(e):
		why = fmt.Sprintf("acted on %d of the %d items it examined in %s, over its budget of %.0f%%", a, e, b.cfg.Window, 100*b.cfg.MaxFraction)
	default:
		return
	}
	p := &Pause{At: now, Reason: "action budget: " + why, Acted: a, Examined: e, Budget: b.cfg}
	if b.cfg.CoolDown > 0 {
		p.Until = now.Add(b.cfg.CoolDown)
	}
	b.paused = p
	b.pauses++
	b.resumed = make(chan struct{})
	r.log.Error("scanner paused itself at its action budget; resume it once the cause is understood (ffscan scanners resume NAME)", "reason", why,
		"acted", a, "examined", e, "cool_down_until", p.Until)
	r.cfg.Changes.Notify()
}

// waitWhilePaused blocks while the runner is paused: until a resume, the
// cool-down's end or ctx's. False when ctx ended.
func (r *Runner) waitWhilePaused(ctx context.Context) bool {
	for {
		p := r.Paused()
		if p == nil {
			return ctx.Err() == nil
		}
		r.budget.mu.Lock()
		resumed := r.budget.resumed
		r.budget.mu.Unlock()
		var until <-chan time.Time
		if !p.Until.IsZero() {
			t := r.clk.NewTimer(p.Until.Sub(r.clk.Now()))
			defer t.Stop()
			until = t.C()
		}
		select {
		case <-ctx.Done():
			return false
		case <-resumed:
		case <-until:
		}
	}
}
