package testenv

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/ffscan/ffscan/keys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerStartsAndCleansUp(t *testing.T) {
	s, err := Start()
	require.NoError(t, err)
	c := s.Client(t)
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, c.B().Set().Key("ff:k").Value("v").Build()).Error())
	v, err := c.Do(ctx, c.B().Get().Key("ff:k").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
	s.Flush(t)
	n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n)

	pid := s.cmd.Process.Pid
	s.Stop()
	_, statErr := os.Stat(s.Dir)
	assert.True(t, os.IsNotExist(statErr), "server directory removed")
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "server process gone")
	s.Stop() // idempotent
}

func TestClusterRoutesAcrossMasters(t *testing.T) {
	cl := NewCluster(t, 3)
	c := cl.Client(t)
	ctx := context.Background()
	// Keys of 64 partitions spread over all three masters.
	for i := 0; i < 64; i++ {
		key := keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: uint16(i)}).LeaseExpiry()
		require.NoError(t, c.Do(ctx, c.B().Zadd().Key(key).ScoreMember().ScoreMember(1, "x").Build()).Error())
	}
	total := int64(0)
	for _, n := range cl.Nodes {
		nc := n.Client(t)
		k, err := nc.Do(ctx, nc.B().Dbsize().Build()).AsInt64()
		require.NoError(t, err)
		assert.Positive(t, k, "every master holds some partitions")
		total += k
	}
	assert.Equal(t, int64(64), total)
}
