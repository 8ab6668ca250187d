package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
)

// Past its absolute budget within the window a runner pauses itself,
// with the figures; acting spread over more than a window does not; a
// resume starts the window afresh.
func TestActionBudgetPausesPastItsMax(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Unix(1000, 0))
	r := New(Config{Name: "s", Clock: clk, ActionBudget: ActionBudget{Window: time.Minute, Max: 10}})
	for range 5 {
		r.noteActions(2, 2)
		clk.Advance(time.Second)
	}
	assert.Nil(t, r.Paused(), "10 in a minute is the budget, not past it")
	clk.Advance(time.Minute)
	r.noteActions(9, 9)
	assert.Nil(t, r.Paused(), "the earlier items left the window")
	r.noteActions(3, 3)
	p := r.Paused()
	require.NotNil(t, p)
	assert.Equal(t, int64(12), p.Acted)
	assert.Contains(t, p.Reason, "acted on 12 items in 1m0s, over its budget of 10")
	assert.True(t, p.Until.IsZero(), "no cool-down: an operator resumes it")
	assert.True(t, r.pausedNow())
	clk.Advance(time.Hour)
	assert.NotNil(t, r.Paused(), "still paused an hour later")
	assert.Equal(t, uint64(1), r.Pauses())

	assert.True(t, r.Resume("test"))
	assert.False(t, r.Resume("test"), "not paused any more")
	assert.Nil(t, r.Paused())
	r.noteActions(10, 10)
	assert.Nil(t, r.Paused(), "the window started afresh at the resume")
}

// The fraction applies once enough items were examined; a cool-down
// resumes on its own; a runner waiting out a pause wakes at the resume.
func TestActionBudgetFractionAndCoolDown(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Unix(1000, 0))
	r := New(Config{Name: "s", Clock: clk, ActionBudget: ActionBudget{Window: time.Minute, MaxFraction: 0.5, MinExamined: 100, CoolDown: 5 * time.Minute}})
	r.noteActions(60, 60)
	assert.Nil(t, r.Paused(), "too few examined for the fraction")
	r.noteActions(0, 30)
	assert.Nil(t, r.Paused())
	r.noteActions(10, 10) // 70 of 100
	p := r.Paused()
	require.NotNil(t, p)
	assert.Contains(t, p.Reason, "acted on 70 of the 100 items it examined in 1m0s, over its budget of 50%")
	assert.Equal(t, clk.Now().Add(5*time.Minute), p.Until)
	clk.Advance(5 * time.Minute)
	assert.Nil(t, r.Paused(), "the cool-down passed")

	r.noteActions(200, 200)
	require.NotNil(t, r.Paused())
	done := make(chan bool)
	go func() { done <- r.waitWhilePaused(context.Background()) }()
	r.Resume("test")
	assert.True(t, <-done)

	off := New(Config{Name: "s", Clock: clk})
	off.noteActions(1<<40, 1<<40)
	assert.Nil(t, off.Paused(), "no budget")
}
