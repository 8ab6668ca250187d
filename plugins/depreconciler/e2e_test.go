package depreconciler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/depreconciler"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// missedPush is flows made through sdk/client whose parents ended while
// no completion listener ran, so only the reconciler can move their
// children:
//   - A -> B -> C, A completed: B must become eligible, C keep waiting;
//   - D -> E -> G, D failed: E and G must be skipped.
type missedPush struct {
	parts    keys.PartitionConfig
	abc, deg []keys.ExecutionID
}

func (f *missedPush) setup(t testing.TB, vk valkey.Client) {
	w := scannertest.NewWorld(t, vk, client.Options{Partitions: f.parts})
	ctx, lib, c := w.Ctx, w.Lib, w.Client
	flowIn := func(p uint16) keys.FlowID {
		for {
			fid := keys.NewFlowID()
			if f.parts.FlowPartition(fid).Index == p {
				_, err := c.CreateFlow(ctx, client.CreateFlowRequest{ID: fid})
				require.NoError(t, err)
				return fid
			}
		}
	}
	chain := func(fid keys.FlowID, n int) []keys.ExecutionID {
		ids := make([]keys.ExecutionID, n)
		for i := range ids {
			r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: "default", Payload: []byte("x")})
			require.NoError(t, err)
			ids[i] = r.ID
			if i > 0 {
				_, err := c.AddDependency(ctx, client.DependencyRequest{Flow: fid, Upstream: ids[i-1], Downstream: ids[i]})
				require.NoError(t, err)
			}
		}
		return ids
	}
	f.abc = chain(flowIn(3), 3)
	require.NoError(t, flowtest.Succeed(ctx, lib, f.abc[0], []byte("a")))
	f.deg = chain(flowIn(7), 3)
	require.NoError(t, flowtest.Flunk(ctx, lib, f.deg[0], "boom"))
}

// The scanner linked and as the real plugin binary, through an ffscan host
// (the test kit), on state made through sdk/client: B released, C still
// waiting on B, E and G skipped (G by the cascade), in one cycle.
func TestHostRunsDependencyReconciler(t *testing.T) {
	t.Parallel()
	f := &missedPush{parts: keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}}
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner:     hosttest.Runner{},
		New:        func() scannerapi.Scanner { return depreconciler.New() },
		Binary:     scannertest.PluginBinary(t, pluginPkg),
		Partitions: f.parts,
		Setup:      f.setup,
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			t.Log(r)
			state := func(id keys.ExecutionID) string {
				core, err := flowtest.Core(context.Background(), vk, id)
				require.NoError(t, err)
				return core["public_state"]
			}
			assert.Equal(t, "waiting", state(f.abc[1]), "B released")
			assert.Equal(t, "waiting_children", state(f.abc[2]), "C waits for B")
			assert.Equal(t, "skipped", state(f.deg[1]))
			assert.Equal(t, "skipped", state(f.deg[2]), "G skipped by the cascade")
			assert.Equal(t, int64(3), r.Processed, "B, E, and G by the cascade")
			assert.Empty(t, r.Errors)
			assert.Empty(t, r.Refused)
			assert.Equal(t, 2, r.Scanned, "two partitions hold blocked children; the others cost nothing")
		},
	})
	scannertest.Same(t, linked, plugin)
}

// The scenario FlowFabric's lane blindness (P14) loses: 20 flows A->B on
// lane "daglane", which no configuration names and nothing records in
// ff:idx:lanes, A completed with no completion listener running. The
// host discovers the lane before the cycle and the reconciler releases
// every B.
func TestReleasesChildrenOnAnUnconfiguredLane(t *testing.T) {
	t.Parallel()
	parts := keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}
	var children []keys.ExecutionID
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner:     hosttest.Runner{},
		New:        func() scannerapi.Scanner { return depreconciler.New() },
		Binary:     scannertest.PluginBinary(t, pluginPkg),
		Partitions: parts,
		Lanes:      []string{"default"},
		Setup: func(t testing.TB, vk valkey.Client) {
			w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts})
			ctx, lib, c := w.Ctx, w.Lib, w.Client
			children = nil
			for i := 0; i < 20; i++ {
				// Fixed flow ids: both runs place the flows alike.
				fid, err := keys.ParseFlowID(fmt.Sprintf("f0000000-0000-4000-8000-%012d", i+1))
				require.NoError(t, err)
				_, err = c.CreateFlow(ctx, client.CreateFlowRequest{ID: fid})
				require.NoError(t, err)
				var ids [2]keys.ExecutionID
				for j := range ids {
					r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: "daglane", Kind: "step"})
					require.NoError(t, err)
					ids[j] = r.ID
				}
				_, err = c.AddDependency(ctx, client.DependencyRequest{Flow: fid, Upstream: ids[0], Downstream: ids[1]})
				require.NoError(t, err)
				require.NoError(t, flowtest.Succeed(ctx, lib, ids[0], nil))
				children = append(children, ids[1])
			}
			lanes, err := vk.Do(ctx, vk.B().Smembers().Key(keys.LanesIndex).Build()).AsStrSlice()
			require.NoError(t, err)
			require.NotContains(t, lanes, "daglane")
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(20), r.Processed, "%v", r)
			assert.Empty(t, r.Errors)
			for _, id := range children {
				core, err := flowtest.Core(context.Background(), vk, id)
				require.NoError(t, err)
				assert.Equal(t, "waiting", core["public_state"], "%s released", id)
			}
		},
	})
	scannertest.Same(t, linked, plugin)
}
