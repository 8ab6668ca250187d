package observers_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/observers"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/observers/cmd/observers"

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

func TestMain(m *testing.M) {
	code := m.Run()
	scannertest.Cleanup()
	os.Exit(code)
}

func flowID(t testing.TB, s string) keys.FlowID {
	f, err := keys.ParseFlowID(s)
	require.NoError(t, err)
	return f
}

// A flow with a running member is summarised as running and stays in
// flow_index; a flow whose members all ended (one since purged) is
// completed and retired; a flow_index entry whose flow is gone is removed,
// and so is one that is not a flow id (counted as invalid).
func TestFlowProjector(t *testing.T) {
	t.Parallel()
	// Fixed ids: both runs place the flows alike.
	running, finished, gone := flowID(t, "f0000000-0000-4000-8000-000000000001"),
		flowID(t, "f0000000-0000-4000-8000-000000000002"), flowID(t, "f0000000-0000-4000-8000-000000000003")
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New: func() scannerapi.Scanner { return observers.NewFlowProjector() },
		Setup: func(t testing.TB, vk valkey.Client) {
			w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts})
			ctx, lib, c := w.Ctx, w.Lib, w.Client
			member := func(fid keys.FlowID) keys.ExecutionID {
				r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: "default", Kind: "step"})
				require.NoError(t, err)
				return r.ID
			}
			for _, fid := range []keys.FlowID{running, finished, gone} {
				_, err := c.CreateFlow(ctx, client.CreateFlowRequest{ID: fid})
				require.NoError(t, err)
			}
			member(running)
			require.NoError(t, flowtest.Succeed(ctx, lib, member(running), nil))
			purged := member(finished)
			require.NoError(t, flowtest.Succeed(ctx, lib, purged, nil))
			require.NoError(t, flowtest.Flunk(ctx, lib, member(finished), "boom"))
			// Retention purged one finished member's core.
			require.NoError(t, vk.Do(ctx, vk.B().Del().Key(keys.Exec(purged).Core()).Build()).Error())
			require.NoError(t, vk.Do(ctx, vk.B().Del().Key(keys.Flow(parts, gone).Core()).Build()).Error())
			require.NoError(t, vk.Do(ctx, vk.B().Sadd().Key(keys.FlowPart(parts.FlowPartition(gone)).FlowIndex()).Member("garbage").Build()).Error())
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			ctx := context.Background()
			assert.Equal(t, int64(3), r.Processed, "%v", r)
			assert.Equal(t, map[string]int64{"invalid/invalid_member": 1}, r.Errors)
			summary := func(fid keys.FlowID) map[string]string {
				m, err := vk.Do(ctx, vk.B().Hgetall().Key(keys.Flow(parts, fid).Summary()).Build()).AsStrMap()
				require.NoError(t, err)
				return m
			}
			s := summary(running)
			assert.Equal(t, "open", s["public_flow_state"], "one waiting, one completed")
			assert.Equal(t, "1", s["members_completed"])
			assert.Equal(t, "1", s["members_waiting"])
			s = summary(finished)
			assert.Equal(t, "failed", s["public_flow_state"], "a failed member, a purged one")
			assert.Equal(t, "2", s["sampled_members"])
			inIndex := func(fid keys.FlowID) bool {
				n, err := vk.Do(ctx, vk.B().Sismember().Key(keys.FlowPart(parts.FlowPartition(fid)).FlowIndex()).Member(fid.String()).Build()).AsInt64()
				require.NoError(t, err)
				return n == 1
			}
			assert.True(t, inIndex(running))
			assert.False(t, inIndex(finished), "retired")
			assert.False(t, inIndex(gone), "removed")
			n, err := vk.Do(ctx, vk.B().Sismember().Key(keys.FlowPart(parts.FlowPartition(gone)).FlowIndex()).Member("garbage").Build()).AsInt64()
			require.NoError(t, err)
			assert.Zero(t, n, "the member that is not a flow id is removed")
		},
	})
	scannertest.Same(t, linked, plugin)
}

// An execution missing from the index its state names is found; the
// consistent ones are not; nothing is written.
func TestIndexReconciler(t *testing.T) {
	t.Parallel()
	var lost keys.ExecutionID
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New: func() scannerapi.Scanner { return observers.NewIndexReconciler() },
		Setup: func(t testing.TB, vk valkey.Client) {
			w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts})
			ctx, c := w.Ctx, w.Client
			for i := 0; i < 3; i++ {
				r, err := c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Kind: "k"})
				require.NoError(t, err)
				lost = r.ID
			}
			require.NoError(t, vk.Do(ctx, vk.B().Zrem().Key(keys.FlowPart(lost.Partition()).LaneEligible("default")).Member(lost.String()).Build()).Error())
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(1), r.Processed, "%v", r)
			assert.Equal(t, int64(2), r.Skipped)
			assert.Empty(t, r.Errors)
			assert.Equal(t, map[string]int{"HMGET": 6, "ZSCORE": 3}, r.Commands)
		},
	})
	scannertest.Same(t, linked, plugin)
}
