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

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/service/servicetest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

type nopScanner struct{}

func (nopScanner) Info() scannerapi.Info {
	return scannerapi.Info{Name: "t", Family: keys.FamilyFlow}
}
func (nopScanner) Configure(context.Context, map[string]string) error { return nil }
func (nopScanner) ScanPartition(context.Context, scannerapi.Host, *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	return &scannerapi.ScanResult{}, nil
}

// fakeInstance stands in for a plugin process (the real transport is
// exercised in host's end-to-end tests).
type fakeInstance struct {
	pid      int
	exited   chan struct{}
	once     sync.Once
	pingFail atomic.Bool
	// slowPings is how many of the next pings get no answer in time.
	slowPings atomic.Int32
	closed    atomic.Bool
}

func (f *fakeInstance) Scanner() scannerapi.Scanner { return nopScanner{} }
func (f *fakeInstance) Ping(context.Context) error {
	if f.pingFail.Load() {
		return errors.New("no answer")
	}
	if f.slowPings.Add(-1) >= 0 {
		return context.DeadlineExceeded
	}
	return nil
}
func (f *fakeInstance) Exited() <-chan struct{} { return f.exited }
func (f *fakeInstance) Pid() int                { return f.pid }
func (f *fakeInstance) crash()                  { f.once.Do(func() { close(f.exited) }) }
func (f *fakeInstance) Close(context.Context) error {
	f.closed.Store(true)
	f.crash()
	return nil
}
func (f *fakeInstance) Kill() { f.crash() }

// fakeLauncher records launches; behave decides what each new instance
// does.
type fakeLauncher struct {
	mu      sync.Mutex
	times   []time.Time
	insts   []*fakeInstance
	fail    error
	behave  func(n int, inst *fakeInstance)
	started chan int
	// sha is what the "file on disk" hashes to now (default "abc").
	sha string
}

func (l *fakeLauncher) meta() Meta {
	sha := l.sha
	if sha == "" {
		sha = "abc"
	}
	return Meta{Path: "/p/t", SHA256: sha, Version: "1", APIVersion: 2}
}

func (l *fakeLauncher) Check() (Meta, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.meta(), nil
}

func (l *fakeLauncher) setSHA(sha string) {
	l.mu.Lock()
	l.sha = sha
	l.mu.Unlock()
}

func (l *fakeLauncher) Launch(context.Context) (Instance, Meta, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.times = append(l.times, time.Now())
	n := len(l.times)
	if l.started != nil {
		select {
		case l.started <- n:
		default:
		}
	}
	if l.fail != nil {
		return nil, l.meta(), l.fail
	}
	inst := &fakeInstance{pid: 1000 + n, exited: make(chan struct{})}
	l.insts = append(l.insts, inst)
	if l.behave != nil {
		l.behave(n, inst)
	}
	return inst, l.meta(), nil
}

func (l *fakeLauncher) launches() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.times...)
}

// waitState waits until the supervisor is in state st.
func waitState(t *testing.T, ch *service.Changes, s *Supervisor, st State) {
	t.Helper()
	servicetest.WaitFor(t, ch, 0, func() bool { return s.Status().State == st })
}

// waitExit waits until inst's process is gone.
func waitExit(t *testing.T, inst *fakeInstance) {
	t.Helper()
	select {
	case <-inst.Exited():
	case <-time.After(20 * time.Second):
		t.Fatalf("instance %d did not exit", inst.pid)
	}
}

type countRec struct{ restarts atomic.Int64 }

func (r *countRec) Restart(string, string) { r.restarts.Add(1) }
func (r *countRec) PluginUp(string, bool)  {}

// waitTimer waits for the supervisor to arm a timer on the manual clock
// (the test's signal that it is waiting) and returns its delay.
func waitTimer(t *testing.T, clk *clock.Manual) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := clk.WaitForTimer(ctx)
	require.NoError(t, err, "the supervisor armed no timer")
	return d
}

func TestCrashedPluginRestartsWithBackoff(t *testing.T) {
	t.Parallel()
	// The first four instances are dead on arrival; the fifth stays.
	l := &fakeLauncher{started: make(chan int, 10), behave: func(n int, inst *fakeInstance) {
		if n <= 4 {
			inst.crash()
		}
	}}
	rec := &countRec{}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	ch := &service.Changes{}
	s := New(Config{Changes: ch, Name: "t", BackoffMin: 40 * time.Millisecond, BackoffMax: 10 * time.Second, CrashLoopCount: 100,
		HealthInterval: time.Hour, Clock: clk, Launcher: l, Recorder: rec})
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop(context.Background())

	// Each restart waits for exactly the doubled backoff on the clock,
	// and not a moment less: the next launch only happens once the test
	// advances the clock by the whole delay.
	require.Equal(t, 1, <-l.started)
	for i, want := range []time.Duration{40, 80, 160, 320} {
		d := waitTimer(t, clk)
		assert.Equal(t, want*time.Millisecond, d, "backoff %d", i)
		clk.Advance(d - time.Millisecond)
		assert.Len(t, l.launches(), i+1, "no launch before the backoff has passed")
		clk.Advance(time.Millisecond)
		require.Equal(t, i+2, <-l.started)
	}
	waitState(t, ch, s, StateRunning)
	st := s.Status()
	assert.Equal(t, 4, st.Restarts)
	assert.Equal(t, int64(4), rec.restarts.Load())
	assert.Equal(t, 1005, st.Pid)
	assert.Equal(t, "plugin process exited", st.LastError)
	sc, _, err := s.Current()
	require.NoError(t, err)
	assert.NotNil(t, sc)
}

func TestCrashLoopMarksBroken(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{started: make(chan int, 10), behave: func(_ int, inst *fakeInstance) { inst.crash() }}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	ch := &service.Changes{}
	s := New(Config{Changes: ch, Name: "t", BackoffMin: 10 * time.Millisecond, CrashLoopCount: 3, CrashLoopWindow: time.Minute,
		BrokenCooldown: time.Hour, HealthInterval: time.Hour, Clock: clk, Launcher: l})
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop(context.Background())

	require.Equal(t, 1, <-l.started)
	clk.Advance(waitTimer(t, clk))
	require.Equal(t, 2, <-l.started)
	clk.Advance(waitTimer(t, clk))
	require.Equal(t, 3, <-l.started)
	// The third failure within the window trips the breaker: the next
	// attempt waits out the cool-down.
	assert.Equal(t, time.Hour, waitTimer(t, clk))
	st := s.Status()
	assert.Equal(t, StateBroken, st.State)
	assert.Equal(t, clk.Now().Add(time.Hour), st.NextAttempt)
	_, _, err := s.Current()
	assert.ErrorIs(t, err, ErrUnavailable)
	// It stays broken for the whole cool-down, then tries once more.
	clk.Advance(time.Hour - time.Second)
	assert.Len(t, l.launches(), 3)
	clk.Advance(time.Second)
	require.Equal(t, 4, <-l.started)
}

func TestLaunchFailuresBreakWithTheReason(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{fail: errors.New("plugin /p/t: sha256 mismatch: the file's sha256 is aa but the configured pin is bb")}
	ch := &service.Changes{}
	s := New(Config{Changes: ch, Name: "t", BackoffMin: 10 * time.Millisecond, CrashLoopCount: 3, BrokenCooldown: time.Hour, Launcher: l})
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop(context.Background())
	waitState(t, ch, s, StateBroken)
	assert.Contains(t, s.Status().LastError, "sha256 mismatch")
}

func TestUnhealthyPluginIsReplaced(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{behave: func(n int, inst *fakeInstance) { inst.pingFail.Store(n == 1) }}
	ch := &service.Changes{}
	s := New(Config{Changes: ch, Name: "t", HealthInterval: 20 * time.Millisecond, BackoffMin: 10 * time.Millisecond, Launcher: l})
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop(context.Background())
	servicetest.WaitFor(t, ch, 0, func() bool { return len(l.launches()) >= 2 && s.Status().State == StateRunning })
	assert.Contains(t, s.Status().LastError, "health check failed 2 times")
	l.mu.Lock()
	first := l.insts[0]
	l.mu.Unlock()
	select {
	case <-first.Exited():
	default:
		t.Fatal("the unhealthy instance was not killed")
	}
}

func TestStopClosesThePlugin(t *testing.T) {
	t.Parallel()
	l := &fakeLauncher{}
	ch := &service.Changes{}
	s := New(Config{Changes: ch, Name: "t", HealthInterval: time.Hour, Launcher: l})
	require.NoError(t, s.Start(context.Background()))
	waitState(t, ch, s, StateRunning)
	s.Stop(context.Background())
	l.mu.Lock()
	inst := l.insts[0]
	l.mu.Unlock()
	assert.True(t, inst.closed.Load())
	assert.Equal(t, StateStopped, s.Status().State)
	assert.Equal(t, 0, s.Status().Restarts, "a requested stop is not a crash")
}
