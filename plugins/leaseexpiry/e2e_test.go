package leaseexpiry_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

var e2eParts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// closeNow closes a worker without waiting for its tasks: what it holds
// is abandoned, its renewals stop, as when its process dies.
func closeNow(t testing.TB, wk *client.Worker) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, wk.Close(ctx))
}

func ownership(t testing.TB, vk valkey.Client, id keys.ExecutionID) string {
	v, err := vk.Do(context.Background(), vk.B().Hget().Key(keys.Exec(id).Core()).Field("ownership_state").Build()).ToString()
	require.NoError(t, err)
	return v
}

func inIndex(t testing.TB, vk valkey.Client, key, member string) bool {
	err := vk.Do(context.Background(), vk.B().Zscore().Key(key).Member(member).Build()).Error()
	if valkey.IsValkeyNil(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// lease_expiry run by the host, linked and as the plugin's subprocess, on
// state made through sdk/client: the leases of a worker that died run out
// and are marked expired (reclaimable); a lease held for an hour is not
// due and stays; a lease entry of a finished execution is dropped by the
// function without acting; a member that is not an execution id is
// counted and removed.
func TestHostRunsLeaseExpiry(t *testing.T) {
	t.Parallel()
	var lapsed []keys.ExecutionID
	var held, done keys.ExecutionID
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: e2eParts,
		New:   func() scannerapi.Scanner { return leaseexpiry.New() },
		Lanes: []string{"default", "held", "fin"},
		Setup: func(t testing.TB, vk valkey.Client) {
			w := scannertest.NewWorld(t, vk, client.Options{Partitions: e2eParts, Namespace: "e2e"})
			create := func(lane string) keys.ExecutionID {
				r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Lane: lane, Kind: "k"})
				require.NoError(t, err)
				return r.ID
			}
			lapsed = []keys.ExecutionID{create("default"), create("default"), create("default")}
			held, done = create("held"), create("fin")

			fin := w.Worker(client.WorkerOptions{WorkerID: "e2e", InstanceID: "fin", Lanes: []string{"fin"}})
			task := w.Claim(fin)
			require.Equal(t, done, task.ID())
			_, err := task.Complete(w.Ctx, nil)
			require.NoError(t, err)
			closeNow(t, fin)
			// The finished execution's lease entry, left behind (as a lost
			// ZREM would leave it), due long ago.
			w.Do("ZADD", keys.FlowPart(done.Partition()).LeaseExpiry(), "1", done.String())

			keeper := w.Worker(client.WorkerOptions{WorkerID: "e2e", InstanceID: "keeper", Lanes: []string{"held"}, LeaseTTL: time.Hour})
			require.Equal(t, held, w.Claim(keeper).ID())
			closeNow(t, keeper)

			crashed := w.Worker(client.WorkerOptions{WorkerID: "e2e", InstanceID: "crashed", Lanes: []string{"default"},
				LeaseTTL: 200 * time.Millisecond, MaxConcurrentTasks: len(lapsed)})
			for range lapsed {
				w.Claim(crashed)
			}
			closeNow(t, crashed)
			claimedAt := w.NowMs()
			w.Do("ZADD", keys.FlowPart(lapsed[0].Partition()).LeaseExpiry(), "1", "garbage")
			w.WaitPast(claimedAt + 200)
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(len(lapsed)), r.Processed, "%v", r)
			assert.Equal(t, int64(1), r.Skipped, "the finished execution's entry")
			assert.Equal(t, map[string]int64{"invalid/invalid_member": 1}, r.Errors)
			assert.Empty(t, r.Refused)
			for _, id := range lapsed {
				assert.Equal(t, "lease_expired_reclaimable", ownership(t, vk, id), "%s", id)
			}
			assert.Equal(t, "leased", ownership(t, vk, held), "not due")
			assert.True(t, inIndex(t, vk, keys.FlowPart(held.Partition()).LeaseExpiry(), held.String()))
			assert.False(t, inIndex(t, vk, keys.FlowPart(done.Partition()).LeaseExpiry(), done.String()), "dropped by the function")
			assert.False(t, inIndex(t, vk, keys.FlowPart(lapsed[0].Partition()).LeaseExpiry(), "garbage"), "removed")
		},
	})
	scannertest.Same(t, linked, plugin)
}
