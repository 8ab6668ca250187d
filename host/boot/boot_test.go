package boot

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/testserver"
)

func TestEnsurePartitions(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	ctx := context.Background()
	client, err := Connect(ctx, config.Valkey{Addrs: []string{srv.Addr}, Cluster: "auto"})
	require.NoError(t, err)
	defer client.Close()

	want := keys.PartitionConfig{Flow: 64, Budget: 8, Quota: 4}

	t.Run("absent is created", func(t *testing.T) {
		stored, created, err := EnsurePartitions(ctx, client, want)
		require.NoError(t, err)
		assert.True(t, created)
		assert.Equal(t, want, stored)
		h, err := client.Do(ctx, client.B().Hgetall().Key(keys.ConfigPartitions).Build()).AsStrMap()
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"num_flow_partitions": "64", "num_budget_partitions": "8", "num_quota_partitions": "4"}, h)
	})

	t.Run("same is accepted", func(t *testing.T) {
		stored, created, err := EnsurePartitions(ctx, client, want)
		require.NoError(t, err)
		assert.False(t, created)
		assert.Equal(t, want, stored)
	})

	t.Run("different is refused naming both values", func(t *testing.T) {
		_, _, err := EnsurePartitions(ctx, client, keys.PartitionConfig{Flow: 256, Budget: 8, Quota: 4})
		require.Error(t, err)
		var mm *keys.PartitionMismatchError
		require.True(t, errors.As(err, &mm))
		assert.Contains(t, err.Error(), "num_flow_partitions: configured 256, stored 64")
		// The stored value must not have been overwritten.
		v, err := client.Do(ctx, client.B().Hget().Key(keys.ConfigPartitions).Field("num_flow_partitions").Build()).ToString()
		require.NoError(t, err)
		assert.Equal(t, "64", v)
	})
}

func TestLoadLibrary(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	client := srv.Client(t)
	lib, err := LoadLibrary(context.Background(), client, false, hclog.NewNullLogger())
	require.NoError(t, err)
	v, err := client.Do(context.Background(), client.B().Fcall().Function("ff_version").Numkeys(0).Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "34", v)
	assert.NotNil(t, lib)
}

// The MULTI of HSETNXs and the read-back also works through a cluster
// client (one key, one slot).
func TestEnsurePartitionsOnCluster(t *testing.T) {
	t.Parallel()
	cl := testserver.NewCluster(t, 3)
	client, err := Connect(context.Background(), config.Valkey{Addrs: cl.Addrs(), Cluster: "on"})
	require.NoError(t, err)
	defer client.Close()
	want := keys.DefaultPartitionConfig()
	_, created, err := EnsurePartitions(context.Background(), client, want)
	require.NoError(t, err)
	assert.True(t, created)
	_, _, err = EnsurePartitions(context.Background(), client, keys.PartitionConfig{Flow: 128, Budget: 32, Quota: 32})
	assert.ErrorContains(t, err, "num_flow_partitions: configured 128, stored 256")
	_, err = LoadLibrary(context.Background(), client, false, hclog.NewNullLogger())
	require.NoError(t, err)
}

func TestClusterOnRefusesASingleNode(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	_, err := Connect(context.Background(), config.Valkey{Addrs: []string{srv.Addr}, Cluster: "on"})
	assert.ErrorContains(t, err, "not a cluster")
}

// The host's client does not send a command again on its own: a read
// whose server went away comes back with its transport error at once
// (the host's scheduler and callbacks answer it), instead of being
// retried until the caller's deadline. A retried command is recycled by
// valkey-go while the broken connection's writer may have read it last
// (see Connect).
func TestClientDoesNotRetryOnItsOwn(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	client, err := Connect(context.Background(), config.Valkey{Addrs: []string{srv.Addr}, Cluster: "off"})
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.Do(context.Background(), client.B().Ping().Build()).Error())
	srv.Kill()
	// A minute is far longer than one failed dial; a client that retries
	// read-only commands keeps dialling until close to the deadline (its
	// back-off gives up only when the next attempt would pass it).
	const deadline = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err = client.Do(ctx, client.B().Get().Key("k").Build()).Error()
	took := time.Since(start)
	require.Error(t, err)
	assert.NoError(t, ctx.Err(), "the read waited for the deadline: %v", err)
	assert.Less(t, took, deadline/2, "the read was retried for %s: %v", took, err)
}
