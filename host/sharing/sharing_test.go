package sharing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/testserver"
)

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

const ttl = 600 * time.Millisecond

func coordinator(c valkey.Client, id string) *sharing.Coordinator {
	return sharing.New(c, sharing.Config{ID: id, Partitions: parts, TTL: ttl, Tick: ttl / 3})
}

// tickAll ticks every coordinator once (in the given order).
func tickAll(t *testing.T, cs ...*sharing.Coordinator) {
	t.Helper()
	for _, c := range cs {
		require.NoError(t, c.Tick(context.Background()))
	}
}

// owners returns, for every partition, which coordinators own it now.
func owners(cs map[string]*sharing.Coordinator) map[keys.Partition][]string {
	out := map[keys.Partition][]string{}
	for _, f := range []keys.Family{keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota} {
		for _, p := range parts.Partitions(f) {
			out[p] = nil
			for id, c := range cs {
				if c.Owns(p) {
					out[p] = append(out[p], id)
				}
			}
		}
	}
	return out
}

// never two owners, and (when full) every partition owned.
func checkOwners(t *testing.T, cs map[string]*sharing.Coordinator, full bool) {
	t.Helper()
	for p, ids := range owners(cs) {
		require.LessOrEqual(t, len(ids), 1, "partition %s owned by %v", p.Tag(), ids)
		if full {
			require.Len(t, ids, 1, "partition %s unowned", p.Tag())
		}
	}
}

// settle ticks the coordinators round after round (a round: each ticks
// once) until every partition has exactly one owner and a whole round
// changes nothing, checking at every step that no partition ever has two.
func settle(t *testing.T, cs map[string]*sharing.Coordinator, order []string) {
	t.Helper()
	var last map[keys.Partition][]string
	for i := 0; i < 50; i++ {
		for _, id := range order {
			require.NoError(t, cs[id].Tick(context.Background()))
			checkOwners(t, cs, false)
		}
		now := owners(cs)
		full := true
		for _, ids := range now {
			full = full && len(ids) == 1
		}
		if full && last != nil && fmt.Sprint(now) == fmt.Sprint(last) {
			return
		}
		last = now
	}
	t.Fatal("the partitions did not settle")
}

func TestSingleHostOwnsEverything(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := coordinator(srv.Client(t), "solo")
	require.NoError(t, c.Tick(context.Background()))
	st := c.Status()
	assert.Equal(t, map[keys.Family]int{keys.FamilyFlow: 16, keys.FamilyBudget: 4, keys.FamilyQuota: 4}, st.Owned)
	assert.Equal(t, []string{"solo"}, st.Members)
}

// Three hosts divide the partitions with no overlap at any step; one
// joining takes some over without any partition having two owners; one
// leaving hands its partitions over at once; one that dies (stops
// renewing) loses its partitions by its own clock, and they are taken
// once its keys expire.
func TestHostsShareWithoutOverlap(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	client := srv.Client(t)
	cs := map[string]*sharing.Coordinator{}
	order := []string{"a", "b", "c"}
	for _, id := range order {
		cs[id] = coordinator(client, id)
	}
	settle(t, cs, order)
	for id, c := range cs {
		total := 0
		for _, n := range c.Status().Owned {
			total += n
		}
		assert.Greater(t, total, 0, "%s owns some", id)
	}

	// A fourth joins.
	cs["d"] = coordinator(client, "d")
	order = append(order, "d")
	settle(t, cs, order)
	total := 0
	for _, n := range cs["d"].Status().Owned {
		total += n
	}
	assert.Greater(t, total, 0, "the newcomer took some")

	// d leaves cleanly: its partitions are free at once.
	cs["d"].Leave(context.Background())
	delete(cs, "d")
	order = order[:3]
	settle(t, cs, order)

	// c dies: it stops ticking. Its ownership stops by its own clock
	// before its keys expire, so nobody acts twice, and the others take
	// its partitions after the keys' TTL.
	dead := cs["c"]
	delete(cs, "c")
	order = order[:2]
	deadline := time.Now().Add(ttl)
	for time.Now().Before(deadline.Add(ttl)) {
		tickAll(t, cs["a"], cs["b"])
		all := map[string]*sharing.Coordinator{"a": cs["a"], "b": cs["b"], "c": dead}
		checkOwners(t, all, false)
		time.Sleep(ttl / 6)
	}
	for _, f := range []keys.Family{keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota} {
		for _, p := range parts.Partitions(f) {
			assert.False(t, dead.Owns(p), "a host that stopped renewing stops acting")
		}
	}
	settle(t, cs, order)
}

func TestAssignmentMovesOnlyWhatMust(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	client := srv.Client(t)
	cs := map[string]*sharing.Coordinator{}
	var order []string
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("h%d", i)
		cs[id] = coordinator(client, id)
		order = append(order, id)
	}
	settle(t, cs, order)
	before := owners(cs)
	cs["h3"] = coordinator(client, "h3")
	order = append(order, "h3")
	settle(t, cs, order)
	moved := 0
	for p, ids := range owners(cs) {
		if ids[0] != before[p][0] {
			moved++
			assert.Equal(t, "h3", ids[0], "a partition only moves to the newcomer")
		}
	}
	assert.Greater(t, moved, 0)
}
