package lanes_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/lanes"
	"github.com/ffscan/ffscan/sdk/testserver"
)

func TestLaneOfKey(t *testing.T) {
	for key, want := range map[string]string{
		"ff:idx:{fp:7}:lane:default:eligible":               "default",
		"ff:idx:{fp:7}:lane:gpu lane:blocked:route":         "gpu lane",
		"ff:idx:{fp:7}:lane:a:b:delayed":                    "a:b",
		"ff:idx:{fp:255}:lane:daglane:blocked:dependencies": "daglane",
	} {
		got, ok := lanes.LaneOfKey(key)
		assert.True(t, ok, key)
		assert.Equal(t, want, got, key)
	}
	for _, key := range []string{
		"ff:idx:{fp:7}:lease_expiry",
		"ff:idx:{fp:7}:lane:x:unknown_set",
		"ff:idx:{fp:7}:lane::eligible", // an empty lane fails the lane rule
		"ff:exec:{fp:7}:lane:x:eligible",
		"ff:idx:lanes",
	} {
		_, ok := lanes.LaneOfKey(key)
		assert.False(t, ok, key)
	}
}

// A step reads a bounded number of pages and the next one goes on where
// it stopped; a pass finds every lane with an index key, whatever else is
// in the keyspace.
func TestStepFindsLanesInPages(t *testing.T) {
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	cmds := c.B()
	for i := 0; i < 5000; i++ {
		require.NoError(t, c.Do(ctx, cmds.Set().Key(fmt.Sprintf("ff:exec:{fp:%d}:noise:%d", i%16, i)).Value("x").Build()).Error())
	}
	want := []string{"daglane", "default", "gpu lane"}
	for i, l := range want {
		key := fmt.Sprintf("ff:idx:{fp:%d}:lane:%s:eligible", i, l)
		require.NoError(t, c.Do(ctx, cmds.Zadd().Key(key).ScoreMember().ScoreMember(1, "e").Build()).Error())
	}
	d := lanes.New(c)
	seen := map[string]bool{}
	steps := 0
	for {
		found, complete, err := d.Step(ctx, 1)
		require.NoError(t, err)
		for _, l := range found {
			seen[l] = true
		}
		steps++
		if complete {
			break
		}
		require.Less(t, steps, 100, "a pass over 5000 keys ends")
	}
	assert.Greater(t, steps, 1, "paced: one page per step")
	var got []string
	for l := range seen {
		got = append(got, l)
	}
	assert.ElementsMatch(t, want, got)

	found, complete, err := d.Step(ctx, 0)
	require.NoError(t, err)
	assert.True(t, complete)
	assert.Equal(t, want, found, "an unpaced step is a whole pass")
}
