// Package testsignal lets a test wait for an event inside a service
// instead of polling for its effects: the service fires a Signal at the
// event, and a test that initialised the signal receives it. A signal no
// test initialised costs one nil check.
package testsignal

import (
	"context"
	"fmt"
)

// capacity is how many signals may wait for the test at once; more means
// the test does not consume what it asked for, and firing panics rather
// than block the service.
const capacity = 64

// Signal carries events of type T to a test. The zero Signal is off.
type Signal[T any] struct {
	ch chan T
}

// Init turns the signal on. Call it before the service that fires it
// starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, capacity) }

// Signal fires the event (nothing when the signal is off).
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		panic(fmt.Sprintf("testsignal: %d signals of %T wait unread", capacity, v))
	}
}

// Wait returns the next event, or ctx's error.
func (s *Signal[T]) Wait(ctx context.Context) (T, error) {
	if s.ch == nil {
		var zero T
		return zero, fmt.Errorf("testsignal: waiting on a signal that was never initialised")
	}
	select {
	case v := <-s.ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
