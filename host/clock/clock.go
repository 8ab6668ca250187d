// Package clock is the time source of the host's services. Production
// code uses Real; tests use a Manual clock, which moves only when the test
// says so and tells the test when the code under test is waiting on it,
// so a test of a backoff or a probation neither sleeps nor polls.
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers and tickers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer behind an interface.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// Ticker is a time.Ticker behind an interface.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Since is c.Now().Sub(t).
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Until is t.Sub(c.Now()).
func Until(c Clock, t time.Time) time.Duration { return t.Sub(c.Now()) }

// Sleep waits d on c, or until ctx ends, and reports whether d passed
// (false: ctx ended first). A d of zero or less returns at once.
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// Or returns c, or Real() when c is nil (the zero Config of a service).
func Or(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

// Real returns the system clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                   { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer   { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Manual is a clock for tests: its time changes only through Advance, and
// its timers and tickers fire when Advance passes their deadline. Like the
// real ones, their channels hold one value and a tick that finds it full
// is dropped.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	waiters map[*waiter]struct{}
	changed chan struct{} // closed and replaced whenever the waiters change
}

type waiter struct {
	at     time.Time
	period time.Duration // 0 for a timer
	c      chan time.Time
}

// NewManual returns a manual clock set to start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start, waiters: map[*waiter]struct{}{}, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// NewTimer makes a timer that fires once Advance reaches now+d.
func (m *Manual) NewTimer(d time.Duration) Timer {
	return manualTimer{m, m.add(d, 0)}
}

// NewTicker makes a ticker that fires every d of Advance.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker interval")
	}
	return manualTicker{m, m.add(d, d)}
}

func (m *Manual) add(d, period time.Duration) *waiter {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &waiter{at: m.now.Add(d), period: period, c: make(chan time.Time, 1)}
	if d <= 0 && period == 0 {
		w.c <- m.now
		return w
	}
	m.waiters[w] = struct{}{}
	m.signalLocked()
	return w
}

func (m *Manual) remove(w *waiter) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.waiters[w]; !ok {
		return false
	}
	delete(m.waiters, w)
	m.signalLocked()
	return true
}

func (m *Manual) signalLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Advance moves the clock by d and fires, in deadline order, every timer
// and ticker due by then.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	end := m.now.Add(d)
	for {
		var due []*waiter
		for w := range m.waiters {
			if !w.at.After(end) {
				due = append(due, w)
			}
		}
		if len(due) == 0 {
			break
		}
		sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
		w := due[0]
		m.now = w.at
		select {
		case w.c <- w.at:
		default: // full: dropped, as a real ticker does
		}
		if w.period > 0 {
			w.at = w.at.Add(w.period)
		} else {
			delete(m.waiters, w)
		}
	}
	m.now = end
	m.signalLocked()
}

// Waiting returns the number of armed timers and tickers.
func (m *Manual) Waiting() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiters)
}

// WaitFor blocks until at least n timers and tickers are armed (the code
// under test has reached the point where it waits on the clock) or ctx
// ends. It is the test's signal to Advance.
func (m *Manual) WaitFor(ctx context.Context, n int) error {
	for {
		m.mu.Lock()
		have, changed := len(m.waiters), m.changed
		m.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitForTimer blocks until a timer (not a ticker) is armed, or ctx
// ends, and returns how far ahead of now the earliest one is due: a test
// asserts a backoff or a deadline exactly, then Advances by it.
func (m *Manual) WaitForTimer(ctx context.Context) (time.Duration, error) {
	return m.WaitForTimerWithin(ctx, -1)
}

// WaitForTimerWithin is WaitForTimer for a timer due at most within ahead
// of now (a negative within: any): a test that changed a schedule waits
// until the code under test has re-planned on it.
func (m *Manual) WaitForTimerWithin(ctx context.Context, within time.Duration) (time.Duration, error) {
	for {
		m.mu.Lock()
		var next time.Time
		found := false
		for w := range m.waiters {
			if w.period == 0 && (!found || w.at.Before(next)) {
				next, found = w.at, true
			}
		}
		now, changed := m.now, m.changed
		m.mu.Unlock()
		if found && (within < 0 || next.Sub(now) <= within) {
			return next.Sub(now), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

type manualTimer struct {
	m *Manual
	w *waiter
}

func (t manualTimer) C() <-chan time.Time { return t.w.c }
func (t manualTimer) Stop() bool          { return t.m.remove(t.w) }

type manualTicker struct {
	m *Manual
	w *waiter
}

func (t manualTicker) C() <-chan time.Time { return t.w.c }
func (t manualTicker) Stop()               { t.m.remove(t.w) }
