package census

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/testserver"
)

func TestCensusKnowsTheLaneKeysThatExist(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	client := srv.Client(t)
	ctx := context.Background()
	var epoch atomic.Uint64
	epoch.Store(1)
	c := New(client, epoch.Load)
	do := func(args ...string) {
		require.NoError(t, client.Do(ctx, client.B().Arbitrary(args...).Build()).Error())
	}
	do("ZADD", "ff:idx:{fp:3}:lane:gpu:delayed", "1", "a")
	do("ZADD", "ff:idx:{fp:3}:lane:default:eligible", "1", "b")
	do("ZADD", "ff:idx:{fp:9}:lane:a:b:terminal", "1", "c") // a lane with ':'
	do("ZADD", "ff:idx:{fp:3}:lease_expiry", "1", "d")      // not a lane key
	for i := range 3000 {                                   // other keys, for several pages
		do("SET", "ff:exec:{fp:1}:x"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)), "v")
	}

	_, ok := c.Keys("{fp:3}")
	assert.False(t, ok, "off until enabled")
	c.SetEnabled(true)
	_, ok = c.Keys("{fp:3}")
	assert.False(t, ok, "unknown until a pass completed")

	passes := 0
	for passes == 0 {
		done, err := c.Step(ctx, 1)
		require.NoError(t, err)
		if done {
			passes++
		}
	}
	ks, ok := c.Keys("{fp:3}")
	require.True(t, ok)
	assert.ElementsMatch(t, []string{"ff:idx:{fp:3}:lane:gpu:delayed", "ff:idx:{fp:3}:lane:default:eligible"}, ks)
	ks, _ = c.Keys("{fp:9}")
	assert.Equal(t, []string{"ff:idx:{fp:9}:lane:a:b:terminal"}, ks)
	ks, ok = c.Keys("{fp:4}")
	assert.True(t, ok)
	assert.Empty(t, ks, "a partition without lane keys")

	// A key created later is known once a pass has seen it; a deleted one
	// stays listed (reading it finds nothing) until a pass without it.
	do("ZADD", "ff:idx:{fp:4}:lane:new:delayed", "1", "e")
	do("DEL", "ff:idx:{fp:3}:lane:gpu:delayed")
	for {
		done, err := c.Step(ctx, 100)
		require.NoError(t, err)
		if done {
			break
		}
	}
	ks, _ = c.Keys("{fp:4}")
	assert.Equal(t, []string{"ff:idx:{fp:4}:lane:new:delayed"}, ks)
	ks, _ = c.Keys("{fp:3}")
	assert.Equal(t, []string{"ff:idx:{fp:3}:lane:default:eligible"}, ks)

	// A new store epoch (a failover, a failed read) makes it unknown, and
	// a pass during which the epoch changed does not count.
	epoch.Add(1)
	_, ok = c.Keys("{fp:3}")
	assert.False(t, ok)
	done, err := c.Step(ctx, 1) // starts a pass in the new epoch
	require.NoError(t, err)
	assert.False(t, done)
	epoch.Add(1)
	for {
		done, err := c.Step(ctx, 100)
		require.NoError(t, err)
		if done {
			t.Fatal("a pass that straddled an epoch change was kept")
		}
		if c.cursors == nil {
			break // the straddling pass ended and was dropped
		}
	}
	_, ok = c.Keys("{fp:3}")
	assert.False(t, ok)
	for {
		done, err := c.Step(ctx, 100)
		require.NoError(t, err)
		if done {
			break
		}
	}
	_, ok = c.Keys("{fp:3}")
	assert.True(t, ok)

	c.SetEnabled(false)
	_, ok = c.Keys("{fp:3}")
	assert.False(t, ok, "off forgets")
}

// On a cluster every primary's lane keys are found, each once: replicas,
// which hold copies, are not scanned.
func TestCensusOnAClusterWithReplicas(t *testing.T) {
	t.Parallel()
	cl := testserver.NewClusterWith(t, testserver.ClusterOptions{Masters: 2, Replicas: 1})
	client := cl.Client(t)
	ctx := context.Background()
	var epoch atomic.Uint64
	epoch.Store(1)
	c := New(client, epoch.Load)
	c.SetEnabled(true)
	want := map[string][]string{}
	for p := range 30 {
		tag := "{fp:" + strconv.Itoa(p) + "}"
		k := "ff:idx:" + tag + ":lane:l" + strconv.Itoa(p%4) + ":delayed"
		require.NoError(t, client.Do(ctx, client.B().Zadd().Key(k).ScoreMember().ScoreMember(1, "x").Build()).Error())
		want[tag] = []string{k}
	}
	// Replication is asynchronous; the census reads primaries only, so
	// no wait is needed for what it must see.
	for {
		done, err := c.Step(ctx, 10)
		require.NoError(t, err)
		if done {
			break
		}
	}
	for tag, ks := range want {
		got, ok := c.Keys(tag)
		require.True(t, ok)
		assert.Equal(t, ks, got, tag)
	}
}
