// Package service is the one lifecycle every service of the host has
// (supervisor, scheduler runner, partition sharing, the completion
// listeners, lane discovery, the lane census, the library check, the file
// watch, the HTTP endpoints):
//
//   - Start(ctx) starts the service and returns once it runs, or why it
//     could not. The service works in the background until Stop; when ctx
//     ends it stops taking new work on its own, but Stop must still be
//     called to wait for it.
//   - Stop(ctx) stops the service and returns once it has stopped. Work in
//     flight may finish until ctx ends; then it is cut short and Stop
//     returns ctx's error. Stop is safe before Start and more than once.
//
// Each service has a Config with exported defaults and one withDefaults,
// and takes a clock (host/clock) and a logger in it: a test drives its
// waits with a clock.Manual instead of sleeping.
//
// Loop is the lifecycle of a service whose work is one goroutine; the
// others build theirs on it.
package service

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Service is what the host starts and stops.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("service: already started")

// Loop runs one goroutine from Start to Stop. The zero Loop is ready.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run in a goroutine, with a context derived from ctx that Stop
// cancels. A second Start returns ErrStarted.
func (l *Loop) Start(ctx context.Context, run func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return ErrStarted
	}
	ctx, l.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	l.done = done
	go func() {
		defer close(done)
		run(ctx)
	}()
	return nil
}

// Stop cancels the goroutine's context and waits for it to return until
// ctx ends; then it returns ctx's error (the goroutine ends on its own).
func (l *Loop) Stop(ctx context.Context) error {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	return Wait(ctx, done)
}

// Done is closed once the goroutine returned; before Start it is closed
// already (nothing runs).
func (l *Loop) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		return closed
	}
	return l.done
}

var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Wait waits for done to close until ctx ends; then it returns ctx's
// error.
func Wait(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StopAll stops the services at once and waits for all of them; the
// errors are joined. Nil services are skipped.
func StopAll(ctx context.Context, svcs ...Service) error {
	errs := make([]error, len(svcs))
	var wg sync.WaitGroup
	for i, s := range svcs {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Stop(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StopFunc is a stop as a Service: Start does nothing (what it stops was
// started otherwise), Stop calls it.
type StopFunc func(ctx context.Context) error

// Start does nothing.
func (StopFunc) Start(context.Context) error { return nil }

// Stop calls f.
func (f StopFunc) Stop(ctx context.Context) error { return f(ctx) }

// Drained is closed once wg's count is zero: a WaitGroup to wait on
// within a context (Wait).
func Drained(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// Default sets *v to def when it is zero or less: the rule of every
// service's withDefaults (a zero field takes its default).
func Default[T int | int64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Changes tells waiters that something changed (a service's status): each
// Notify wakes whoever waits on a channel C returned before it. The zero
// value is ready, and a nil *Changes ignores Notify.
type Changes struct {
	mu sync.Mutex
	c  chan struct{}
}

// Notify wakes the waiters.
func (ch *Changes) Notify() {
	if ch == nil {
		return
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.c != nil {
		close(ch.c)
	}
	ch.c = make(chan struct{})
}

// C is closed at the next Notify.
func (ch *Changes) C() <-chan struct{} {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.c == nil {
		ch.c = make(chan struct{})
	}
	return ch.c
}

// WaitFor checks cond at once and after every change until it holds, or
// until ctx ends (then it returns ctx's error).
func (ch *Changes) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		c := ch.C()
		if cond() {
			return nil
		}
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
