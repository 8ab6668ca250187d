package scheduler

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// waitServerPast returns once the server's clock is past ms: what is due
// is judged by that clock, so a test whose entry is to fall due waits for
// it, however loaded the machine, and no longer than it must.
func waitServerPast(t *testing.T, c valkey.Client, ms int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		now := scannertest.ServerNowMs(t, c)
		if now > ms {
			return
		}
		require.True(t, time.Now().Before(deadline), "the server's clock did not pass %d", ms)
		<-time.After(time.Duration(ms-now+1) * time.Millisecond)
	}
}

// wakeRunner starts a runner on a manual clock whose interval sweep is an
// hour away after the first, so that what happens in between is wake-ups.
func wakeRunner(t *testing.T, e *env, s *testScanner, epoch *StoreEpoch) (*Runner, *clock.Manual, *service.Changes) {
	t.Helper()
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	ch := &service.Changes{}
	r := e.runner(t, s, Config{Interval: time.Hour, Clock: clk, Changes: ch, Epoch: epoch}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() {
		cancel()
		require.NoError(t, r.Stop(context.Background()))
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	require.NoError(t, ch.WaitFor(wctx, func() bool { return r.Status().Cycle >= 1 }))
	return r, clk, ch
}

// A partition whose read showed an entry not due yet is read and scanned
// again at that entry's due time, between two interval sweeps, and
// scheduled again from that read.
func TestWakeupScansAPartitionAtItsDueTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := scannertest.ServerNowMs(t, e.client)
	first, second := now+300, now+600
	e.do(t, "ZADD", leaseKey(2), strconv.FormatInt(first, 10), "a")
	e.do(t, "ZADD", leaseKey(7), strconv.FormatInt(second, 10), "b")
	s := &testScanner{info: leaseInfo()}
	r, clk, ch := wakeRunner(t, e, s, NewStoreEpoch())
	require.Empty(t, s.callsByPartition(), "nothing was due at the first sweep")
	st := r.Status()
	require.Equal(t, 2, st.Scheduled)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, want := range []struct {
		p      uint16
		member string
		due    int64
	}{{2, "a", first}, {7, "b", second}} {
		// The sleep ends at the due time, not at the interval.
		d, err := clk.WaitForTimerWithin(ctx, time.Second)
		require.NoError(t, err)
		require.LessOrEqual(t, d, time.Duration(want.due-now)*time.Millisecond)
		waitServerPast(t, e.client, want.due)
		clk.Advance(d)
		require.NoError(t, ch.WaitFor(ctx, func() bool { return r.Status().Wakeups >= uint64(i+1) }))
		calls := s.callsByPartition()[want.p]
		require.Len(t, calls, 1, "partition %d scanned once, woken", want.p)
		require.Len(t, calls[0].Candidates, 1)
		assert.Equal(t, want.member, calls[0].Candidates[0].Member)
		assert.Equal(t, uint64(1), calls[0].Cycle, "a wake-up belongs to the interval's cycle")
		now = want.due
	}
	st = r.Status()
	assert.Equal(t, uint64(1), st.Cycle, "no interval sweep ran")
	assert.Equal(t, int64(2), st.Processed)
	assert.Equal(t, uint64(2), st.Wakeups)
	// The scanner handled nothing (the entries stay): each wake-up's read
	// found its entry due and nothing after it, so nothing is scheduled.
	assert.Zero(t, st.Scheduled)
	assert.Len(t, s.callsByPartition(), 2, "no other partition was read into a call")
}

// A new store epoch (a failover, a transport error) drops the schedule:
// the wake-up learned before it does not happen; the interval sweep reads
// the partition.
func TestWakeupsDroppedOnANewStoreEpoch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := scannertest.ServerNowMs(t, e.client)
	e.do(t, "ZADD", leaseKey(3), strconv.FormatInt(now+200, 10), "a")
	s := &testScanner{info: leaseInfo()}
	epoch := NewStoreEpoch()
	r, clk, ch := wakeRunner(t, e, s, epoch)
	require.Equal(t, 1, r.Status().Scheduled)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := clk.WaitForTimerWithin(ctx, time.Second)
	require.NoError(t, err)
	epoch.Bump()
	waitServerPast(t, e.client, now+200)
	clk.Advance(d)
	// The next sleep is the interval's: no wake-up is left.
	next, err := clk.WaitForTimer(ctx)
	require.NoError(t, err)
	assert.Equal(t, time.Hour-d, next)
	assert.Zero(t, r.Status().Wakeups)
	assert.Empty(t, s.callsByPartition())
	clk.Advance(next)
	require.NoError(t, ch.WaitFor(ctx, func() bool { return r.Status().Cycle >= 2 }))
	assert.Len(t, s.callsByPartition()[3], 1, "the interval sweep read it")
}

// Polling only, nothing is scheduled: the runner sleeps to the interval.
func TestPollOnlySchedulesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := scannertest.ServerNowMs(t, e.client)
	e.do(t, "ZADD", leaseKey(3), strconv.FormatInt(now+200, 10), "a")
	s := &testScanner{info: leaseInfo()}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	ch := &service.Changes{}
	r := e.runner(t, s, Config{Interval: time.Hour, Clock: clk, Changes: ch, PollOnly: true}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, r.Start(ctx))
	defer func() { require.NoError(t, r.Stop(context.Background())) }()
	require.NoError(t, ch.WaitFor(ctx, func() bool { return r.Status().Cycle >= 1 }))
	d, err := clk.WaitForTimer(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, time.Hour-time.Minute)
	assert.Zero(t, r.Status().Scheduled)
}

// Sources that are not time-scored are never scheduled.
func TestWakeupsOnlyForTimeScoredSources(t *testing.T) {
	t.Parallel()
	r := &Runner{}
	info := leaseInfo()
	assert.True(t, r.wakesFor(info))
	info.Sources[0].Kind = scannerapi.SourceZSetRotate
	assert.False(t, r.wakesFor(info))
	info.Sources[0].Kind = scannerapi.SourceSetScan
	assert.False(t, r.wakesFor(info))
}
