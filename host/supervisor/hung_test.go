package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
)

// A plugin that answers health checks but lets its calls run into their
// deadline is restarted after HungCalls such calls in a row; a call that
// returns in time resets the count.
func TestHungCallsRestartThePlugin(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{started: make(chan int, 10)}
	rec := &countRec{}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	ch := &service.Changes{}
	s := New(Config{Changes: ch, Name: "t", BackoffMin: time.Second, CrashLoopCount: 100, HealthInterval: time.Hour, HungCalls: 3, Clock: clk, Launcher: l, Recorder: rec})
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop(context.Background())
	require.Equal(t, 1, <-l.started)
	waitState(t, ch, s, StateRunning)

	call := func(timedOut bool) {
		lease, err := s.Acquire()
		require.NoError(t, err)
		lease.Outcome(timedOut)
		lease.Release()
	}
	// Two timeouts, an answer, two timeouts: never three in a row.
	call(true)
	call(true)
	call(false)
	call(true)
	call(true)
	assert.Equal(t, StateRunning, s.Status().State)
	assert.Zero(t, s.Status().Restarts)
	l.mu.Lock()
	first := l.insts[0]
	l.mu.Unlock()
	select {
	case <-first.Exited():
		t.Fatal("restarted although calls were answered in between")
	default:
	}

	// The third in a row: the instance is killed and relaunched after
	// the backoff, visibly.
	call(true)
	<-first.Exited()
	assert.Equal(t, time.Second, waitTimer(t, clk))
	st := s.Status()
	assert.Equal(t, StateRestarting, st.State)
	assert.Equal(t, 1, st.Restarts)
	assert.Contains(t, st.LastError, "3 calls in a row ran into their deadline")
	clk.Advance(time.Second)
	require.Equal(t, 2, <-l.started)
	waitState(t, ch, s, StateRunning)
}

// A crash loop is retried after a minute by default, not parked for long.
func TestBrokenCooldownDefaultsToAMinute(t *testing.T) {
	t.Parallel()
	c := Config{}
	c = c.withDefaults()
	assert.Equal(t, time.Minute, c.BrokenCooldown)
	assert.Equal(t, c.BackoffMax, c.BrokenCooldown, "no longer than the backoff's cap")
	assert.Equal(t, 3, c.HungCalls)
}
