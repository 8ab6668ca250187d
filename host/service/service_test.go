package service

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoopRunsUntilStop(t *testing.T) {
	var l Loop
	require.NoError(t, l.Stop(context.Background()), "stop before start")
	select {
	case <-l.Done():
	default:
		t.Fatal("nothing runs before Start: Done is closed")
	}
	running := make(chan struct{})
	require.NoError(t, l.Start(context.Background(), func(ctx context.Context) {
		close(running)
		<-ctx.Done()
	}))
	<-running
	assert.ErrorIs(t, l.Start(context.Background(), func(context.Context) {}), ErrStarted)
	select {
	case <-l.Done():
		t.Fatal("Done closed while the loop runs")
	default:
	}
	require.NoError(t, l.Stop(context.Background()))
	<-l.Done()
	require.NoError(t, l.Stop(context.Background()), "a second stop")
}

func TestLoopEndsWithItsContext(t *testing.T) {
	var l Loop
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, l.Start(ctx, func(ctx context.Context) { <-ctx.Done() }))
	cancel()
	<-l.Done()
	require.NoError(t, l.Stop(context.Background()))
}

func TestStopGivesUpAtItsDeadline(t *testing.T) {
	var l Loop
	release := make(chan struct{})
	require.NoError(t, l.Start(context.Background(), func(context.Context) { <-release }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, l.Stop(ctx), context.Canceled, "the loop ignores its context: Stop returns at its own")
	close(release)
	<-l.Done()
}

type stopper struct{ err error }

func (stopper) Start(context.Context) error  { return nil }
func (s stopper) Stop(context.Context) error { return s.err }

func TestStopAllJoinsErrors(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	err := StopAll(context.Background(), stopper{a}, nil, stopper{}, stopper{b})
	assert.ErrorIs(t, err, a)
	assert.ErrorIs(t, err, b)
	assert.NoError(t, StopAll(context.Background()))
}

func TestDefault(t *testing.T) {
	d, n := -time.Second, 0
	Default(&d, time.Minute)
	Default(&n, 3)
	assert.Equal(t, time.Minute, d, "negative takes the default")
	assert.Equal(t, 3, n, "zero takes the default")
	Default(&n, 5)
	assert.Equal(t, 3, n, "a value set stays")
}

func TestDrained(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	done := Drained(&wg)
	select {
	case <-done:
		t.Fatal("drained with one left")
	default:
	}
	wg.Done()
	<-done
}

func TestChangesWakeWaiters(t *testing.T) {
	var nilChanges *Changes
	nilChanges.Notify() // ignored
	var ch Changes
	var mu sync.Mutex
	n := 0
	done := make(chan error)
	go func() {
		done <- ch.WaitFor(context.Background(), func() bool { mu.Lock(); defer mu.Unlock(); return n == 3 })
	}()
	for range 3 {
		mu.Lock()
		n++
		mu.Unlock()
		ch.Notify()
	}
	require.NoError(t, <-done)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, ch.WaitFor(ctx, func() bool { return false }), context.Canceled)
}
