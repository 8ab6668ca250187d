package clock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_700_000_000, 0)

func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestManualTimersFireAtTheirDeadline(t *testing.T) {
	m := NewManual(t0)
	a := m.NewTimer(2 * time.Second)
	b := m.NewTimer(time.Second)
	m.Advance(999 * time.Millisecond)
	_, ok := fired(b.C())
	assert.False(t, ok, "not yet")
	m.Advance(time.Millisecond)
	v, ok := fired(b.C())
	require.True(t, ok)
	assert.Equal(t, t0.Add(time.Second), v, "a timer fires with its deadline")
	assert.False(t, b.Stop(), "a fired timer is no longer armed")
	assert.True(t, a.Stop())
	m.Advance(time.Hour)
	_, ok = fired(a.C())
	assert.False(t, ok, "a stopped timer never fires")
	assert.Equal(t, t0.Add(time.Hour+time.Second), m.Now())

	z := m.NewTimer(0)
	_, ok = fired(z.C())
	assert.True(t, ok, "a zero timer fires at once")
}

func TestManualTickerDropsTicksLikeARealOne(t *testing.T) {
	m := NewManual(t0)
	tk := m.NewTicker(time.Second)
	m.Advance(3500 * time.Millisecond)
	v, ok := fired(tk.C())
	require.True(t, ok)
	assert.Equal(t, t0.Add(time.Second), v, "the first tick is kept, the later ones dropped while it is unread")
	_, ok = fired(tk.C())
	assert.False(t, ok)
	m.Advance(500 * time.Millisecond)
	v, ok = fired(tk.C())
	require.True(t, ok)
	assert.Equal(t, t0.Add(4*time.Second), v)
	tk.Stop()
	assert.Zero(t, m.Waiting())
}

func TestWaitForTimerIsTheTestsSignal(t *testing.T) {
	m := NewManual(t0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan time.Duration, 1)
	go func() {
		d, err := m.WaitForTimer(ctx)
		assert.NoError(t, err)
		got <- d
	}()
	m.NewTicker(time.Millisecond) // a ticker is not what it waits for
	m.NewTimer(7 * time.Second)
	assert.Equal(t, 7*time.Second, <-got)

	d, err := m.WaitForTimerWithin(ctx, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 7*time.Second, d)
	short, scancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer scancel()
	_, err = m.WaitForTimerWithin(short, time.Second)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "no timer within a second")
	require.NoError(t, m.WaitFor(ctx, 2))
}

func TestRealAndOr(t *testing.T) {
	assert.NotNil(t, Or(nil))
	m := NewManual(t0)
	assert.Same(t, m, Or(m).(*Manual))
	assert.WithinDuration(t, time.Now(), Real().Now(), time.Minute)
	assert.Equal(t, time.Second, Since(m, t0.Add(-time.Second)))
}

func TestSleepWaitsOnTheClock(t *testing.T) {
	m := NewManual(t0)
	done := make(chan bool)
	go func() { done <- Sleep(context.Background(), m, 3*time.Second) }()
	d, err := m.WaitForTimer(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, d)
	m.Advance(d)
	assert.True(t, <-done)
	assert.Equal(t, time.Second, Until(m, t0.Add(4*time.Second)))

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- Sleep(ctx, m, time.Hour) }()
	_, err = m.WaitForTimer(context.Background())
	require.NoError(t, err)
	cancel()
	assert.False(t, <-done, "ended by its context")
	assert.Zero(t, m.Waiting(), "its timer is stopped")
	assert.True(t, Sleep(context.Background(), m, 0))
}
