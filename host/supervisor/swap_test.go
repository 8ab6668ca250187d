package supervisor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/service"
)

type swapRec struct {
	mu       sync.Mutex
	outcomes []SwapOutcome
}

func (r *swapRec) Restart(string, string) {}
func (r *swapRec) PluginUp(string, bool)  {}
func (r *swapRec) Swap(_ string, o SwapOutcome) {
	r.mu.Lock()
	r.outcomes = append(r.outcomes, o)
	r.mu.Unlock()
}

func (r *swapRec) list() []SwapOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]SwapOutcome(nil), r.outcomes...)
}

func running(t *testing.T, cfg Config, l *fakeLauncher, rec Recorder) *Supervisor {
	t.Helper()
	cfg.Name = "t"
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = time.Hour
	}
	if cfg.SwapCheck == 0 {
		cfg.SwapCheck = 20 * time.Millisecond
	}
	ch := &service.Changes{}
	cfg.Changes = ch
	cfg.Launcher, cfg.Recorder = l, rec
	s := New(cfg)
	s.TestSignals.Draining.Init()
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { s.Stop(context.Background()) })
	waitState(t, ch, s, StateRunning)
	return s
}

func (l *fakeLauncher) inst(i int) *fakeInstance {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.insts[i]
}

func exited(f *fakeInstance) bool {
	select {
	case <-f.Exited():
		return true
	default:
		return false
	}
}

// The switch falls between calls: a lease taken before the swap finishes
// on the old instance, which is stopped only once that lease is released
// and probation is over; leases taken after go to the new instance.
func TestSwapSwitchesBetweenCallsAndDrainsTheOld(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{}
	rec := &swapRec{}
	s := running(t, Config{SwapProbation: 50 * time.Millisecond}, l, rec)

	before, err := s.Acquire()
	require.NoError(t, err)
	l.setSHA("def")
	settled := make(chan SwapResult, 1)
	res, err := s.Swap(context.Background(), false, "test", settled)
	require.NoError(t, err)
	assert.Equal(t, SwapDone, res.Outcome)
	assert.Equal(t, "abc", res.From.SHA256)
	assert.Equal(t, "def", res.To.SHA256)

	after, err := s.Acquire()
	require.NoError(t, err)
	assert.NotEqual(t, before.Generation, after.Generation)
	after.Release()
	st := s.Status()
	assert.Equal(t, 1002, st.Pid)
	assert.Equal(t, "def", st.Meta.SHA256)
	assert.Equal(t, 1, st.Swaps)
	assert.Equal(t, 0, st.Restarts)

	assert.Equal(t, SwapKept, (<-settled).Outcome)
	// Probation is over but the old instance still has a call in flight:
	// it is waited for.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pid, err := s.TestSignals.Draining.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1001, pid)
	assert.False(t, exited(l.inst(0)), "the old instance is stopped only after its call")
	before.Release()
	waitExit(t, l.inst(0))
	assert.True(t, l.inst(0).closed.Load(), "stopped gracefully")
	assert.False(t, exited(l.inst(1)))
	assert.Equal(t, []SwapOutcome{SwapDone, SwapKept}, rec.list())
}

func TestSwapToTheSameFileIsANoOpUnlessForced(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{}
	s := running(t, Config{SwapProbation: 0}, l, nil)
	res, err := s.Swap(context.Background(), false, "test", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapUnchanged, res.Outcome)
	assert.Len(t, l.launches(), 1)

	res, err = s.Swap(context.Background(), true, "test", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapDone, res.Outcome)
	assert.Len(t, l.launches(), 2)
	waitExit(t, l.inst(0)) // without probation the old one stops once drained
}

// A new instance that misses one ping (a process just started, on a busy
// machine, answers late) is swapped in, as a running one is not restarted
// for one miss; one that misses FailedPings pings in a row is not. Before,
// one late answer failed the swap, and with it a reload that changed a
// scanner's mode: the old instance kept serving in the old mode.
func TestSwapToleratesOneLatePing(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{}
	s := running(t, Config{SwapProbation: 0, FailedPings: 2}, l, nil)

	l.mu.Lock()
	l.sha = "slow-start"
	l.behave = func(n int, inst *fakeInstance) { inst.slowPings.Store(1) }
	l.mu.Unlock()
	res, err := s.Swap(context.Background(), false, "test", nil)
	require.NoError(t, err)
	require.Equal(t, SwapDone, res.Outcome, "%v", res.Err)
	assert.Equal(t, l.inst(1).pid, s.Status().Pid)

	l.mu.Lock()
	l.sha = "no-answer"
	l.behave = func(n int, inst *fakeInstance) { inst.slowPings.Store(2) }
	l.mu.Unlock()
	res, err = s.Swap(context.Background(), false, "test", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapFailed, res.Outcome)
	assert.ErrorContains(t, res.Err, "failed its health check (2 pings in a row)")
	assert.ErrorIs(t, res.Err, context.DeadlineExceeded)
	assert.Equal(t, l.inst(1).pid, s.Status().Pid, "the instance swapped in before keeps serving")
	waitExit(t, l.inst(2))
}

// A new binary that fails its launch (handshake) or its health check never
// serves: the old one serves throughout, and the same file is not retried
// until forced.
func TestFailedSwapKeepsTheOld(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{}
	s := running(t, Config{}, l, nil)

	l.mu.Lock()
	l.sha, l.fail = "bad1", errors.New("handshake failed: not a plugin")
	l.mu.Unlock()
	res, err := s.Swap(context.Background(), false, "test", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapFailed, res.Outcome)
	assert.ErrorContains(t, res.Err, "handshake failed")
	assert.ErrorContains(t, res.Err, "keeps serving")
	st := s.Status()
	assert.Equal(t, StateRunning, st.State)
	assert.Equal(t, 1001, st.Pid)
	assert.Equal(t, "abc", st.Meta.SHA256)
	require.NotNil(t, st.LastSwap)
	assert.Equal(t, SwapFailed, st.LastSwap.Outcome)

	// The same bytes are not launched again by a plain request.
	res, err = s.Swap(context.Background(), false, "test", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapFailed, res.Outcome)
	assert.ErrorContains(t, res.Err, "already tried and rejected")
	assert.Len(t, l.launches(), 2)

	// A binary that starts but does not answer its health check.
	l.mu.Lock()
	l.sha, l.fail = "bad2", nil
	l.behave = func(n int, inst *fakeInstance) { inst.pingFail.Store(true) }
	l.mu.Unlock()
	res, err = s.Swap(context.Background(), false, "test", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapFailed, res.Outcome)
	assert.ErrorContains(t, res.Err, "failed its health check")
	assert.True(t, exited(l.inst(1)), "the failed new instance was killed")
	assert.Equal(t, 1001, s.Status().Pid)

	// Forced: tried again (and fails again).
	res, err = s.Swap(context.Background(), true, "test", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapFailed, res.Outcome)
	assert.Len(t, l.launches(), 4)
	assert.False(t, exited(l.inst(0)))
}

// A new instance that crashes right after the switch is rolled back to the
// old one, which never stopped.
func TestCrashAfterSwitchRollsBack(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{}
	rec := &swapRec{}
	s := running(t, Config{SwapProbation: 10 * time.Second}, l, rec)
	var newInst atomic.Pointer[fakeInstance]
	l.mu.Lock()
	l.sha = "crashy"
	l.behave = func(n int, inst *fakeInstance) { newInst.Store(inst) }
	l.mu.Unlock()
	settled := make(chan SwapResult, 1)
	res, err := s.Swap(context.Background(), false, "test", settled)
	require.NoError(t, err)
	require.Equal(t, SwapDone, res.Outcome)
	assert.Equal(t, 1002, s.Status().Pid)

	newInst.Load().crash()
	final := <-settled
	assert.Equal(t, SwapRolledBack, final.Outcome)
	assert.ErrorContains(t, final.Err, "plugin process exited")
	st := s.Status()
	assert.Equal(t, StateRunning, st.State)
	assert.Equal(t, 1001, st.Pid, "the old instance serves again")
	assert.Equal(t, "abc", st.Meta.SHA256)
	assert.Equal(t, 0, st.Restarts, "a rollback is not a restart")
	assert.Contains(t, st.LastError, "rolled back")
	assert.Equal(t, SwapRolledBack, st.LastSwap.Outcome)
	assert.False(t, exited(l.inst(0)))
	lease, err := s.Acquire()
	require.NoError(t, err)
	lease.Release()
	assert.Equal(t, []SwapOutcome{SwapDone, SwapRolledBack}, rec.list())

	// The crashing file is not retried by the file watch.
	res, err = s.Swap(context.Background(), false, "test", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapFailed, res.Outcome)
	assert.Len(t, l.launches(), 2)
}

// A new instance that stops answering pings during probation is rolled
// back too.
func TestUnhealthyAfterSwitchRollsBack(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{}
	s := running(t, Config{SwapProbation: 10 * time.Second, HealthInterval: 20 * time.Millisecond}, l, nil)
	var newInst atomic.Pointer[fakeInstance]
	l.mu.Lock()
	l.sha = "hangs"
	l.behave = func(n int, inst *fakeInstance) { newInst.Store(inst) }
	l.mu.Unlock()
	settled := make(chan SwapResult, 1)
	res, err := s.Swap(context.Background(), false, "test", settled)
	require.NoError(t, err)
	require.Equal(t, SwapDone, res.Outcome)
	newInst.Load().pingFail.Store(true)
	final := <-settled
	assert.Equal(t, SwapRolledBack, final.Outcome)
	assert.ErrorContains(t, final.Err, "health check failed")
	assert.Equal(t, 1001, s.Status().Pid)
	assert.True(t, exited(newInst.Load()))
}

type reconfLauncher struct {
	*fakeLauncher
	applied bool
	err     error
	calls   atomic.Int32
}

func (r *reconfLauncher) Reconfigure(context.Context, Instance) (bool, error) {
	r.calls.Add(1)
	return r.applied, r.err
}

func TestUpdateReconfiguresInPlaceOrSwaps(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{}
	s := running(t, Config{SwapProbation: 0}, l, nil)

	res, err := s.Update(context.Background(), &reconfLauncher{fakeLauncher: l, applied: true}, "options", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapReconfigured, res.Outcome)
	assert.Len(t, l.launches(), 1)

	res, err = s.Update(context.Background(), &reconfLauncher{fakeLauncher: l, err: errors.New("option x: bad")}, "options", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapFailed, res.Outcome)
	assert.ErrorContains(t, res.Err, "option x: bad")
	assert.Len(t, l.launches(), 1)

	// Not applicable in place (e.g. an API version 1 plugin): a swap, even
	// though the file is the same.
	res, err = s.Update(context.Background(), &reconfLauncher{fakeLauncher: l}, "options", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapDone, res.Outcome)
	assert.Len(t, l.launches(), 2)
}

// A reload of a scanner that is not running (broken after a bad binary)
// launches at once instead of waiting out the cool-down.
func TestSwapOfABrokenScannerLaunchesNow(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{fail: errors.New("bad binary")}
	ch := &service.Changes{}
	s := New(Config{Changes: ch, Name: "t", BackoffMin: 10 * time.Millisecond, CrashLoopCount: 2, BrokenCooldown: time.Hour, HealthInterval: time.Hour, Launcher: l})
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop(context.Background())
	waitState(t, ch, s, StateBroken)
	l.mu.Lock()
	l.fail = nil
	l.mu.Unlock()
	res, err := s.Swap(context.Background(), false, "fixed", nil)
	require.NoError(t, err)
	assert.Equal(t, SwapStarted, res.Outcome)
	waitState(t, ch, s, StateRunning)
}

// Stop during probation stops both instances.
func TestStopDuringProbationStopsBoth(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{}
	ch := &service.Changes{}
	s := New(Config{Changes: ch, Name: "t", SwapProbation: time.Hour, HealthInterval: time.Hour, SwapCheck: time.Millisecond, Launcher: l})
	require.NoError(t, s.Start(context.Background()))
	waitState(t, ch, s, StateRunning)
	l.setSHA("def")
	res, err := s.Swap(context.Background(), false, "test", nil)
	require.NoError(t, err)
	require.Equal(t, SwapDone, res.Outcome)
	s.Stop(context.Background())
	assert.True(t, exited(l.inst(0)))
	assert.True(t, exited(l.inst(1)))
	_, err = s.Swap(context.Background(), false, "test", nil)
	assert.ErrorIs(t, err, ErrStopped)
}
