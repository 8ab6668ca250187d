package seed_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/bench/seed"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// TestLeasesSnapshotRestore plants expired leases with the library's
// functions, and checks that Restore brings back the snapshot exactly.
func TestLeasesSnapshotRestore(t *testing.T) {
	srv := testserver.New(t, testserver.WithArgs("--enable-debug-command", "local"))
	c := srv.Client(t)
	ctx := context.Background()
	lib := lua.New(c, lua.Options{})
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	parts := keys.PartitionConfig{Flow: 4, Budget: 1, Quota: 1}
	s := seed.New(lib, parts)
	s.Chunk = 7 // several pipelines

	ids, err := s.Leases(ctx, 30, time.Millisecond)
	require.NoError(t, err)
	require.Len(t, ids, 30)
	for i, id := range ids {
		assert.Equal(t, uint16(i%4), id.Partition().Index, "round-robin over the partitions")
	}
	n, err := c.Do(ctx, c.B().Zcard().Key(keys.FlowPart(parts.Partitions(keys.FamilyFlow)[1]).LeaseExpiry()).Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(8), n)
	vals, err := seed.Fields(ctx, c, ids, "ownership_state", "lease_expires_at", "nosuchfield")
	require.NoError(t, err)
	for _, v := range vals {
		assert.Equal(t, "leased", v[0])
		assert.NotEmpty(t, v[1])
		assert.Empty(t, v[2])
	}

	require.NoError(t, seed.Snapshot(ctx, c))
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(keys.Exec(ids[0]).Core()).FieldValue().FieldValue("ownership_state", "changed").Build()).Error())
	require.NoError(t, seed.Restore(ctx, c))
	vals, err = seed.Fields(ctx, c, ids[:1], "ownership_state")
	require.NoError(t, err)
	assert.Equal(t, "leased", vals[0][0])

	// A second Prepare of the same ids is refused by the library.
	assert.Error(t, s.Prepare(ctx, ids[:1]))
}

// TestClaimTimedArmsTheAttemptTimeout claims with an attempt timeout and
// checks that each execution is in its partition's attempt_timeout index,
// due its own timeout after its claim (the lease's expiry is the claim
// instant plus the TTL, by the same server clock).
func TestClaimTimedArmsTheAttemptTimeout(t *testing.T) {
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	lib := lua.New(c, lua.Options{})
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	parts := keys.PartitionConfig{Flow: 4, Budget: 1, Quota: 1}
	s := seed.New(lib, parts)
	ids := s.IDs(6)
	require.NoError(t, s.Prepare(ctx, ids))
	const ttl = 10 * time.Minute
	timeout := func(i int) time.Duration { return time.Duration(i+1) * time.Second }
	require.NoError(t, s.ClaimTimed(ctx, ids, ttl, timeout))

	vals, err := seed.Fields(ctx, c, ids, "lease_expires_at")
	require.NoError(t, err)
	for i, id := range ids {
		due, err := c.Do(ctx, c.B().Zscore().Key(keys.FlowPart(id.Partition()).AttemptTimeout()).Member(id.String()).Build()).AsFloat64()
		require.NoError(t, err, "execution %d is in the attempt_timeout index", i)
		expires, err := strconv.ParseInt(vals[i][0], 10, 64)
		require.NoError(t, err)
		claimed := expires - ttl.Milliseconds()
		assert.Equal(t, claimed+timeout(i).Milliseconds(), int64(due), "execution %d times out its own timeout after the claim", i)
	}

	// Claim without a timeout arms none.
	more := s.IDs(2)
	require.NoError(t, s.Prepare(ctx, more))
	require.NoError(t, s.Claim(ctx, more, func(int) time.Duration { return ttl }))
	for _, id := range more {
		err := c.Do(ctx, c.B().Zscore().Key(keys.FlowPart(id.Partition()).AttemptTimeout()).Member(id.String()).Build()).Error()
		assert.True(t, valkey.IsValkeyNil(err), "no attempt timeout armed: %v", err)
	}
}
