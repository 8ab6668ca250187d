package valkeyreply

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// Errors a real server gives for the cluster's state, not the item, are
// transport (try again); item errors stay server.
func TestClusterTransientsAreTransport(t *testing.T) {
	ctx := context.Background()

	// A write to a replica (a demoted primary after failover): READONLY.
	primary := testserver.New(t)
	host, port, _ := splitAddr(primary.Addr)
	replica := testserver.New(t, testserver.WithArgs("--replicaof", host, port))
	rc := replica.Client(t)
	r := Of(rc.Do(ctx, rc.B().Set().Key("ff:x").Value("1").Build()))
	require.Equal(t, scannerapi.KindError, r.Kind)
	assert.Contains(t, r.Err, "READONLY")
	assert.Equal(t, scannerapi.ErrTransport, r.ErrClass)

	// A key another node owns, asked of a node directly: MOVED.
	cluster := testserver.NewCluster(t, 3)
	var moved scannerapi.Reply
	for _, addr := range cluster.Addrs() {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
		require.NoError(t, err)
		res := Of(c.Do(ctx, c.B().Get().Key("ff:exec:{fp:1}:x").Build()))
		c.Close()
		if res.Kind == scannerapi.KindError {
			moved = res
			break
		}
	}
	require.Equal(t, scannerapi.KindError, moved.Kind, "one of three nodes does not own the slot")
	assert.Contains(t, moved.Err, "MOVED")
	assert.Equal(t, scannerapi.ErrTransport, moved.ErrClass)

	// An error about the item itself stays server.
	pc := primary.Client(t)
	require.NoError(t, pc.Do(ctx, pc.B().Set().Key("ff:s").Value("v").Build()).Error())
	r = Of(pc.Do(ctx, pc.B().Hget().Key("ff:s").Field("f").Build()))
	assert.Contains(t, r.Err, "WRONGTYPE")
	assert.Equal(t, scannerapi.ErrServer, r.ErrClass)
}

func splitAddr(addr string) (string, string, error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], nil
		}
	}
	return addr, "", nil
}
