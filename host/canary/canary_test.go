package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/shadow"
)

func fcall(fn string, keys []string, args ...string) shadow.Decision {
	return shadow.Decision{Command: "FCALL " + fn, Keys: keys, Args: args}
}

// Per item, the comparison tells the same decisions from those only one
// side makes and those that differ; the order of a cycle's decisions
// does not matter; a PGCALL's item is its arguments.
func TestComparisonFindsEachKindOfDifference(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Unix(1000, 0))
	c := New(clk, Version{SHA256: "old"}, Version{SHA256: "new"}, 0, 0)
	a, b, x, y := []string{"ff:exec:{fp:1}:a"}, []string{"ff:exec:{fp:1}:b"}, []string{"ff:exec:{fp:2}:x"}, []string{"ff:exec:{fp:2}:y"}
	c.Running(fcall("ff_purge", a, "1"))
	c.Running(fcall("ff_purge", b, "1"))
	c.Running(fcall("ff_purge", x, "1"))
	c.Running(shadow.Decision{Command: "PGCALL ffscan.expire", Args: []string{"3", "e1"}})
	c.Canary(fcall("ff_purge", b, "1"))
	c.Canary(fcall("ff_purge", a, "1"))
	c.Canary(fcall("ff_purge", x, "2"))
	c.Canary(fcall("ff_purge", y, "1"))
	c.Canary(shadow.Decision{Command: "PGCALL ffscan.expire", Args: []string{"3", "e1"}})
	assert.False(t, c.EndCycle(7))
	s := c.Status(0)
	assert.Equal(t, map[string]uint64{"same": 3, OnlyNew: 1, OnlyOld: 0, Differ: 1}, s.Items)
	assert.Equal(t, uint64(2), s.Differences())
	assert.Equal(t, uint64(1), s.Cycles)
	assert.Equal(t, uint64(1), s.WithDifference)
	require.Len(t, s.Latest, 2)
	byItem := map[string]Diff{}
	for _, d := range s.Latest {
		byItem[d.Item] = d
	}
	assert.Equal(t, Diff{At: clk.Now(), Cycle: 7, Kind: Differ, Item: x[0], Old: []string{"FCALL ff_purge 1"}, New: []string{"FCALL ff_purge 2"}, Seen: 1}, byItem[x[0]])
	assert.Equal(t, Diff{At: clk.Now(), Cycle: 7, Kind: OnlyNew, Item: y[0], New: []string{"FCALL ff_purge 1"}, Seen: 1}, byItem[y[0]])

	// The next cycle starts empty: only what the running version does is
	// only_old.
	c.Running(fcall("ff_purge", a, "1"))
	c.EndCycle(8)
	s = c.Status(1)
	assert.Equal(t, uint64(1), s.Items[OnlyOld])
	assert.Equal(t, OnlyOld, s.Latest[0].Kind)
	assert.Equal(t, uint64(0), s.Clean)
}

// A canary promotes itself after PromoteAfter clean cycles in a row, and
// never once any cycle differed; a cycle where a canary call failed is
// not compared and breaks the streak.
func TestComparisonPromotesOnlyWithoutDifference(t *testing.T) {
	t.Parallel()
	c := New(nil, Version{}, Version{}, 0, 3)
	d := fcall("ff_expire", []string{"k"})
	for i := range 2 {
		c.Running(d)
		c.Canary(d)
		assert.False(t, c.EndCycle(uint64(i)))
	}
	c.CanaryFailed()
	assert.False(t, c.EndCycle(2))
	assert.Equal(t, uint64(1), c.Status(0).Unsure)
	for i := range 2 {
		assert.False(t, c.EndCycle(uint64(3+i)))
	}
	assert.True(t, c.EndCycle(5), "three clean cycles in a row")
	assert.Equal(t, Promoting, c.Status(0).State)
	assert.False(t, c.EndCycle(6), "promotes once")

	bad := New(nil, Version{}, Version{}, 0, 1)
	bad.Canary(d)
	assert.False(t, bad.EndCycle(1))
	for i := range 5 {
		assert.False(t, bad.EndCycle(uint64(2+i)), "a canary that differed once is never promoted on its own")
	}
	assert.Equal(t, Comparing, bad.Status(0).State)
}

// The differences kept are bounded by the ring's size, and one cycle's
// items by MaxItems (past it the cycle is not compared).
func TestComparisonIsBounded(t *testing.T) {
	t.Parallel()
	c := New(nil, Version{}, Version{}, 5, 0)
	for i := range 20 {
		c.Canary(fcall("ff_purge", []string{fmt.Sprint(i)}))
	}
	c.EndCycle(1)
	s := c.Status(0)
	assert.Len(t, s.Latest, 5)
	assert.Equal(t, uint64(20), s.Items[OnlyNew])

	// The same item differing again is one entry, seen again.
	for range 3 {
		c.Canary(fcall("ff_purge", []string{"19"}))
		c.EndCycle(2)
	}
	s = c.Status(0)
	assert.Len(t, s.Latest, 5)
	assert.Equal(t, "19", s.Latest[0].Item)
	assert.GreaterOrEqual(t, s.Latest[0].Seen, uint64(3))

	// A member of a shared index is the item, not the index.
	m := New(nil, Version{}, Version{}, 0, 0)
	m.Running(shadow.Decision{Command: "ZREM", Keys: []string{"idx"}, Args: []string{"a"}})
	m.Canary(shadow.Decision{Command: "ZREM", Keys: []string{"idx"}, Args: []string{"a"}})
	m.Canary(shadow.Decision{Command: "ZREM", Keys: []string{"idx"}, Args: []string{"b"}})
	m.EndCycle(1)
	s = m.Status(0)
	assert.Equal(t, map[string]uint64{"same": 1, OnlyNew: 1, OnlyOld: 0, Differ: 0}, s.Items)
	assert.Equal(t, "idx b", s.Latest[0].Item)

	big := New(nil, Version{}, Version{}, 1, 0)
	for i := range MaxItems + 10 {
		big.Running(fcall("f", []string{fmt.Sprint(i)}))
		big.Canary(fcall("f", []string{fmt.Sprint(i)}))
	}
	big.EndCycle(1)
	s = big.Status(0)
	assert.Equal(t, uint64(1), s.Unsure)
	assert.Equal(t, uint64(MaxItems), s.Items["same"])
}

// A tap feeds a comparison only while one is set.
func TestTapFeedsTheComparisonSet(t *testing.T) {
	t.Parallel()
	var ts Taps
	tap := ts.For("retention")
	assert.Same(t, tap, ts.For("retention"))
	tap.Running(fcall("f", []string{"k"}))
	c := New(nil, Version{}, Version{}, 0, 0)
	tap.Set(c)
	tap.Canary(fcall("f", []string{"k"}))
	tap.Set(nil)
	tap.Running(fcall("f", []string{"k"}))
	c.EndCycle(1)
	assert.Equal(t, uint64(1), c.Status(0).Items[OnlyNew])
}
