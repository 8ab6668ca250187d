package lanes_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/lanes"
	"github.com/ffscan/ffscan/keys"
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
	t.Parallel()
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

func TestMergeLanes(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	ctx := context.Background()
	client := srv.Client(t)
	require.NoError(t, client.Do(ctx, client.B().Sadd().Key(keys.LanesIndex).Member("gpu", "default").Build()).Error())
	merged, err := lanes.MergeLanes(ctx, client, []string{"default", "cpu"}, hclog.NewNullLogger())
	require.NoError(t, err)
	assert.Equal(t, []string{"cpu", "default", "gpu"}, merged)
	stored, err := client.Do(ctx, client.B().Smembers().Key(keys.LanesIndex).Build()).AsStrSlice()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"cpu", "default", "gpu"}, stored)
}

// The keeper knows the configured, recorded and discovered lanes from
// Load on, and takes in a lane a producer starts using at its next
// refresh (the test moves its clock there) and a reload's lanes at once.
func TestKeeperFollowsTheKeyspace(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, c.B().Sadd().Key(keys.LanesIndex).Member("recorded").Build()).Error())
	require.NoError(t, c.Do(ctx, c.B().Zadd().Key("ff:idx:{fp:1}:lane:unrecorded:eligible").ScoreMember().ScoreMember(1, "e").Build()).Error())
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	k := lanes.NewKeeper(c, lanes.KeeperConfig{Configured: []string{"default"}, Clock: clk})
	assert.Equal(t, []string{"default"}, k.Lanes(), "the configured lanes before Load")
	require.NoError(t, k.Load(ctx))
	assert.Equal(t, []string{"default", "recorded", "unrecorded"}, k.Lanes())
	stored, err := c.Do(ctx, c.B().Smembers().Key(keys.LanesIndex).Build()).AsStrSlice()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"default", "recorded", "unrecorded"}, stored, "discovered lanes are recorded")

	k.TestSignals.Refreshed.Init()
	require.NoError(t, k.Start(ctx))
	t.Cleanup(func() { assert.NoError(t, k.Stop(context.Background())) })
	wait := func() []string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got, err := k.TestSignals.Refreshed.Wait(wctx)
		require.NoError(t, err)
		return got
	}
	require.NoError(t, c.Do(ctx, c.B().Zadd().Key("ff:idx:{fp:2}:lane:new:delayed").ScoreMember().ScoreMember(1, "e").Build()).Error())
	require.NoError(t, clk.WaitFor(ctx, 1))
	clk.Advance(lanes.DefaultRefresh)
	assert.Equal(t, []string{"default", "new", "recorded", "unrecorded"}, wait())

	k.SetConfigured([]string{"default", "reloaded"})
	assert.Equal(t, []string{"default", "new", "recorded", "reloaded", "unrecorded"}, wait())
	assert.Equal(t, []string{"default", "new", "recorded", "reloaded", "unrecorded"}, k.Lanes())
}

// A lane whose key a new-key event named is known at once, and recorded
// in ff:idx:lanes by the refresh it asks for, without waiting for the
// refresh interval; a known or malformed lane changes nothing.
func TestKeeperSawALaneKnowsItAtOnce(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	k := lanes.NewKeeper(c, lanes.KeeperConfig{Configured: []string{"default"}, Clock: clk})
	require.NoError(t, k.Load(ctx))
	k.TestSignals.Refreshed.Init()
	require.NoError(t, k.Start(ctx))
	t.Cleanup(func() { assert.NoError(t, k.Stop(context.Background())) })
	k.Saw("default")
	k.Saw("")
	assert.Equal(t, []string{"default"}, k.Lanes())
	k.Saw("fresh")
	assert.Equal(t, []string{"default", "fresh"}, k.Lanes(), "known before any refresh")
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got, err := k.TestSignals.Refreshed.Wait(wctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"default", "fresh"}, got, "the refresh keeps it")
	stored, err := c.Do(ctx, c.B().Smembers().Key(keys.LanesIndex).Build()).AsStrSlice()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"default", "fresh"}, stored, "and records it")
}
