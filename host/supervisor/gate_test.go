package supervisor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
)

// gatedLauncher's launches block until the test lets them finish, and
// count how many run at once across every launcher sharing its counter.
type gatedLauncher struct {
	fakeLauncher
	entered chan struct{}
	finish  chan struct{}
	c       *concurrency
}

type concurrency struct {
	mu       sync.Mutex
	now, max int
}

func (l *gatedLauncher) Launch(ctx context.Context) (Instance, Meta, error) {
	l.c.mu.Lock()
	l.c.now++
	l.c.max = max(l.c.max, l.c.now)
	l.c.mu.Unlock()
	defer func() {
		l.c.mu.Lock()
		l.c.now--
		l.c.mu.Unlock()
	}()
	l.entered <- struct{}{}
	select {
	case <-l.finish:
	case <-ctx.Done():
		return nil, l.meta(), ctx.Err()
	}
	return l.fakeLauncher.Launch(ctx)
}

// Supervisors sharing a gate of one launch run their launches one after
// the other: the second starts only once the first returned, and a
// supervisor stopped while it waits for its slot stops at once.
func TestLaunchGateRunsLaunchesOneAtATime(t *testing.T) {
	t.Parallel()
	gate := NewLaunchGate(1)
	require.Equal(t, 1, gate.Size())
	c := &concurrency{}
	newSup := func(name string) (*Supervisor, *gatedLauncher, *service.Changes) {
		l := &gatedLauncher{entered: make(chan struct{}, 1), finish: make(chan struct{}), c: c}
		ch := &service.Changes{}
		s := New(Config{Name: name, Changes: ch, StartTimeout: time.Hour, HealthInterval: time.Hour, Launches: gate,
			Clock: clock.NewManual(time.Unix(1_700_000_000, 0)), Launcher: l, Recorder: &countRec{}})
		return s, l, ch
	}
	a, la, cha := newSup("a")
	b, lb, chb := newSup("b")
	stopped, lc, _ := newSup("c")

	require.NoError(t, a.Start(context.Background()))
	defer a.Stop(context.Background())
	<-la.entered // a holds the only slot
	require.NoError(t, b.Start(context.Background()))
	defer b.Stop(context.Background())
	require.NoError(t, stopped.Start(context.Background()))

	// c waits for a slot; stopping it ends the wait without a launch.
	require.NoError(t, stopped.Stop(context.Background()))
	assert.Empty(t, lc.entered, "a stopped supervisor launched nothing")

	close(la.finish)
	waitState(t, cha, a, StateRunning)
	<-lb.entered // b's launch starts once a's returned
	close(lb.finish)
	waitState(t, chb, b, StateRunning)
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Equal(t, 1, c.max, "launches at once through a gate of one")
}

func TestLaunchGateSizeFollowsTheCPUs(t *testing.T) {
	t.Parallel()
	assert.GreaterOrEqual(t, NewLaunchGate(0).Size(), 2)
	assert.Equal(t, 5, NewLaunchGate(5).Size())
	var nilGate *LaunchGate
	release, err := nilGate.acquire(context.Background())
	require.NoError(t, err)
	release()
}
