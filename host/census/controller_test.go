package census

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/sdk/testserver"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestEligible(t *testing.T) {
	t.Parallel()
	busy := Load{KeysPerSecond: 1000, Interval: time.Second}
	assert.True(t, Eligible(ModeAuto, busy, 64, 64))
	assert.False(t, Eligible(ModeAuto, busy, 63, 64), "auto: too few lanes")
	assert.True(t, Eligible(ModeOn, busy, 1, 64), "on: whatever the lanes")
	assert.False(t, Eligible(ModeOff, busy, 1000, 64))
	assert.False(t, Eligible(ModeOn, Load{}, 1000, 64), "no lane-scoped load")
}

func TestDecide(t *testing.T) {
	t.Parallel()
	// 256 partitions x 1000 lanes x 1 source every 2 s, single node.
	manyLanes := Load{KeysPerSecond: 256 * 1000 / 2, Interval: 2 * time.Second}
	small := Keyspace{Keys: 50_000, Largest: 50_000, Primaries: 1, At: t0}
	for name, c := range map[string]struct {
		in   Input
		want Decision
	}{
		"many lanes over a small keyspace": {
			in: Input{Mode: ModeAuto, Load: manyLanes, Keyspace: small},
			// 50,000 keys + 20 x 51 commands per second (period 1 s)
			// against 128,000 + 20 x 500: cheaper by more than twice.
			want: Decision{Want: true, Period: time.Second, Pages: 7},
		},
		"one lane over millions of keys": {
			in:   Input{Mode: ModeAuto, Load: Load{KeysPerSecond: 256 / 2, Interval: 2 * time.Second}, Keyspace: Keyspace{Keys: 5_000_000, Largest: 5_000_000, Primaries: 1, At: t0}},
			want: Decision{Want: false, Period: time.Second, Pages: 626},
		},
		"not cheaper by twice": {
			// The census: 100,000 + 20 x 101 = 102,020 per second; read
			// directly: 128,000 + 10,000.
			in:   Input{Mode: ModeAuto, Load: manyLanes, Keyspace: Keyspace{Keys: 100_000, Largest: 100_000, Primaries: 1, At: t0}},
			want: Decision{Want: false, Period: time.Second, Pages: 13},
		},
		"a cluster reads a key per command": {
			in:   Input{Mode: ModeAuto, Load: manyLanes, Keyspace: Keyspace{Keys: 100_000, Largest: 40_000, Primaries: 3, At: t0}, Cluster: true},
			want: Decision{Want: true, Period: time.Second, Pages: 6},
		},
		"the keyspace is unknown": {
			in:   Input{Mode: ModeAuto, Load: manyLanes},
			want: Decision{Want: false, Period: time.Second, Pages: 1},
		},
		"on wants it whatever the cost": {
			in:   Input{Mode: ModeOn, Load: Load{KeysPerSecond: 1, Interval: 10 * time.Millisecond}},
			want: Decision{Want: true, Period: minPeriod, Pages: 1},
		},
	} {
		assert.Equal(t, c.want, Decide(c.in), name)
	}
}

// The load is remembered through a gap shorter than the grace; passes
// are paced a period each, a pass that ends early waiting out its period.
func TestMemory(t *testing.T) {
	t.Parallel()
	var m memory
	busy := Load{KeysPerSecond: 10, Interval: time.Second}
	assert.Equal(t, busy, m.load(t0, busy, 30*time.Second))
	assert.Equal(t, busy, m.load(t0.Add(29*time.Second), Load{}, 30*time.Second), "a gap within the grace")
	assert.Equal(t, Load{}, m.load(t0.Add(30*time.Second), Load{}, 30*time.Second), "past the grace")

	assert.Equal(t, 125*time.Millisecond, m.stepWait(t0, time.Second))
	assert.Equal(t, 125*time.Millisecond, m.stepWait(t0.Add(300*time.Millisecond), time.Second))
	assert.Equal(t, 600*time.Millisecond, m.passEnded(t0.Add(400*time.Millisecond), time.Second), "the rest of the period")
	m.stepWait(t0.Add(2*time.Second), time.Second)
	assert.Equal(t, minWait, m.passEnded(t0.Add(5*time.Second), time.Second), "a pass that overran")
}

// loadSource is a settable Load for the controller.
type loadSource struct {
	mu sync.Mutex
	l  Load
}

func (s *loadSource) set(l Load) {
	s.mu.Lock()
	s.l = l
	s.mu.Unlock()
}

func (s *loadSource) get() Load {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l
}

// The controller turns the census on for many lanes over a small
// keyspace, keeps it through a gap in the scanners' load shorter than the
// grace, and turns it off past the grace and when the mode says off; all
// on a manual clock, each step observed as it ends.
func TestControllerKeepsTheCensusWhileItPays(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	client := srv.Client(t)
	ctx := context.Background()
	for i := range 20 {
		key := "ff:idx:{fp:" + strconv.Itoa(i) + "}:lane:l" + strconv.Itoa(i) + ":eligible"
		require.NoError(t, client.Do(ctx, client.B().Zadd().Key(key).ScoreMember().ScoreMember(1, "e").Build()).Error())
	}
	var epoch atomic.Uint64
	c := New(client, epoch.Load)
	clk := clock.NewManual(t0)
	load := &loadSource{}
	load.set(Load{KeysPerSecond: 256 * 1000 / 2, Interval: 2 * time.Second})
	ctl := NewController(c, client, ControllerConfig{Load: load.get, Lanes: func() int { return 1000 }, Clock: clk})
	ctl.TestSignals.Stepped.Init()
	require.NoError(t, ctl.Start(ctx))
	t.Cleanup(func() { assert.NoError(t, ctl.Stop(context.Background())) })
	next := func() Step {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		st, err := ctl.TestSignals.Stepped.Wait(wctx)
		require.NoError(t, err)
		return st
	}
	advance := func(d time.Duration) {
		t.Helper()
		_, err := clk.WaitForTimer(ctx)
		require.NoError(t, err)
		clk.Advance(d)
	}

	st := next()
	assert.True(t, st.Decision.Want)
	assert.Equal(t, time.Second, st.Decision.Period)
	assert.Equal(t, time.Second, st.Wait, "the small keyspace's pass ended in one step: the rest of its period")
	assert.Equal(t, "on", c.State())
	ks, ok := c.Keys("{fp:3}")
	require.True(t, ok)
	assert.Equal(t, []string{"ff:idx:{fp:3}:lane:l3:eligible"}, ks)

	// The scanners report no load for a while (a plugin restarting).
	load.set(Load{})
	advance(st.Wait)
	st = next()
	assert.True(t, st.Decision.Want, "kept through the gap")
	assert.Equal(t, "on", c.State())
	advance(DefaultGrace)
	st = next()
	assert.False(t, st.Decision.Want, "past the grace")
	assert.Equal(t, DefaultIdle, st.Wait)
	assert.Equal(t, "off", c.State())

	load.set(Load{KeysPerSecond: 256 * 1000 / 2, Interval: 2 * time.Second})
	advance(st.Wait)
	st = next()
	assert.True(t, st.Decision.Want, "the load is back")
	assert.Equal(t, "on", c.State())
	ctl.SetMode(ModeOff)
	advance(st.Wait)
	st = next()
	assert.False(t, st.Decision.Want)
	assert.Equal(t, "off", c.State())
}
