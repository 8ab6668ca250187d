package postgres

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSlotsForDividesTheBudgetByTheShare(t *testing.T) {
	for _, c := range []struct{ total, owned, all, want int }{
		{4, 300, 300, 4},  // one host owns everything
		{4, 150, 300, 2},  // two hosts
		{4, 100, 300, 1},  // three hosts: 1.33
		{4, 200, 300, 3},  // one of three took a dead host's share: 2.67
		{4, 0, 300, 1},    // owns nothing yet: still one
		{8, 100, 300, 3},  // 2.67
		{4, 0, 0, 4},      // no share known: the whole budget
		{0, 100, 300, 1},  // a budget under 1 is 1
		{4, 400, 300, 4},  // never more than the budget
		{12, 100, 256, 5}, // 4.69
	} {
		assert.Equal(t, c.want, SlotsFor(c.total, c.owned, c.all), "total %d, %d of %d", c.total, c.owned, c.all)
	}
}

func TestActionSlotsMakeTheCallerPastTheSizeWait(t *testing.T) {
	ctx := context.Background()
	s := NewActionSlots(2, nil)
	require.Equal(t, 2, s.Size())
	r1, err := s.Acquire(ctx)
	require.NoError(t, err)
	r2, err := s.Acquire(ctx)
	require.NoError(t, err)
	got := make(chan func())
	go func() {
		r3, err := s.Acquire(ctx)
		assert.NoError(t, err)
		got <- r3
	}()
	require.NoError(t, s.WaitForWaiters(ctx, 1))
	select {
	case <-got:
		t.Fatal("a third slot was given out of two")
	default:
	}
	used, waiting := s.InUse()
	assert.Equal(t, 2, used)
	assert.Equal(t, 1, waiting)
	r1()
	r1() // a second call gives nothing back twice
	r3 := <-got
	used, waiting = s.InUse()
	assert.Equal(t, 2, used)
	assert.Equal(t, 0, waiting)
	r2()
	r3()
	used, _ = s.InUse()
	assert.Zero(t, used)
}

func TestActionSlotsFollowTheHostsShare(t *testing.T) {
	ctx := context.Background()
	var owned atomic.Int64
	owned.Store(100)
	s := NewActionSlots(4, func() (int, int) { return int(owned.Load()), 300 })
	assert.Equal(t, 1, s.Size())
	assert.Equal(t, 4, s.Total())
	r1, err := s.Acquire(ctx)
	require.NoError(t, err)
	got := make(chan func())
	go func() {
		r, err := s.Acquire(ctx)
		assert.NoError(t, err)
		got <- r
	}()
	require.NoError(t, s.WaitForWaiters(ctx, 1))
	// The host takes a dead host's partitions: two of three shares, 3
	// slots. The next caller finds them: the one waiting gets the first,
	// the caller the second.
	owned.Store(200)
	r2, err := s.Acquire(ctx)
	require.NoError(t, err)
	r3 := <-got
	used, waiting := s.InUse()
	assert.Equal(t, 3, used)
	assert.Zero(t, waiting)
	r1()
	r2()
	r3()
	used, _ = s.InUse()
	assert.Zero(t, used)
}

func TestActionSlotsGoToTheCallersInTheOrderTheyAsked(t *testing.T) {
	ctx := context.Background()
	s := NewActionSlots(1, nil)
	r0, err := s.Acquire(ctx)
	require.NoError(t, err)
	got := make(chan int)
	releases := make([]func(), 3)
	for i := range 3 {
		go func() {
			r, err := s.Acquire(ctx)
			assert.NoError(t, err)
			releases[i] = r
			got <- i
		}()
		require.NoError(t, s.WaitForWaiters(ctx, i+1))
	}
	r0()
	for want := range 3 {
		first := <-got
		assert.Equal(t, want, first, "the slot goes to the caller waiting longest")
		used, waiting := s.InUse()
		assert.Equal(t, 1, used)
		assert.Equal(t, 2-want, waiting)
		releases[first]()
	}
}

func TestActionSlotsGiveUpWhenTheContextEnds(t *testing.T) {
	s := NewActionSlots(1, nil)
	r, err := s.Acquire(context.Background())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := s.Acquire(ctx)
		done <- err
	}()
	require.NoError(t, s.WaitForWaiters(context.Background(), 1))
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	used, waiting := s.InUse()
	assert.Equal(t, 1, used)
	assert.Zero(t, waiting)
	r()
	// Nothing was kept by the caller that gave up.
	r, err = s.Acquire(context.Background())
	require.NoError(t, err)
	r()
}

func TestNoActionSlotsBoundNothing(t *testing.T) {
	var s *ActionSlots
	for range 3 {
		r, err := s.Acquire(context.Background())
		require.NoError(t, err)
		defer r()
	}
	assert.Zero(t, s.Size())
}
