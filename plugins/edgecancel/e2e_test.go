package edgecancel_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/depexec"
	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/edgecancel"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/edgecancel/cmd/edgecancel"

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// TestMain removes the plugin builds scannertest made.
func TestMain(m *testing.M) {
	code := m.Run()
	scannertest.Cleanup()
	os.Exit(code)
}

// siblingRace is a flow whose downstream D waits on A, B and C under
// policy, made through sdk/client: B is running (claimed), C waits, and A
// completes, which decides D's group and flags B and C for cancellation
// (the push path's resolution, as the completion listener runs it).
type siblingRace struct {
	policy  client.EdgeGroupPolicy
	fid     keys.FlowID
	a, b, c keys.ExecutionID
	d       keys.ExecutionID
	// preCancel cancels B and C before the scan, as if the dispatcher had
	// cancelled them and died before draining.
	preCancel bool
}

func (s *siblingRace) setup(t testing.TB, vk valkey.Client) {
	w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts, Namespace: "e2e"})
	ctx, lib, c := w.Ctx, w.Lib, w.Client
	f, err := c.CreateFlow(ctx, client.CreateFlowRequest{})
	require.NoError(t, err)
	s.fid = f.ID
	member := func(lane string) keys.ExecutionID {
		r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &s.fid, Lane: lane, Kind: "step"})
		require.NoError(t, err)
		return r.ID
	}
	s.a, s.b, s.c, s.d = member("up"), member("running"), member("up"), member("down")
	_, err = c.SetEdgeGroupPolicy(ctx, s.fid, s.d, s.policy)
	require.NoError(t, err)
	for _, up := range []keys.ExecutionID{s.a, s.b, s.c} {
		_, err := c.AddDependency(ctx, client.DependencyRequest{Flow: s.fid, Upstream: up, Downstream: s.d})
		require.NoError(t, err)
	}
	task := w.Claim(w.Worker(client.WorkerOptions{WorkerID: "e2e", InstanceID: "e2e-1", Lanes: []string{"running"}}))
	require.Equal(t, s.b, task.ID())
	t.Cleanup(task.Abandon) // the cancel takes its lease

	require.NoError(t, flowtest.Succeed(ctx, lib, s.a, []byte("first")))
	_, err = depresolve.New(depexec.LibraryExecutor(lib), depresolve.Options{}).
		Cascade(ctx, depresolve.Completion{Execution: s.a, Flow: s.fid})
	require.NoError(t, err)
	require.True(t, s.pending(t, vk), "the group is flagged for the dispatcher")
	if s.preCancel {
		for _, id := range []keys.ExecutionID{s.b, s.c} {
			_, err := c.Cancel(ctx, id, client.CancelOptions{Reason: "done elsewhere"})
			require.NoError(t, err)
		}
	}
}

func (s *siblingRace) pending(t testing.TB, vk valkey.Client) bool {
	n, err := vk.Do(context.Background(), vk.B().Sismember().Key(keys.FlowPart(parts.FlowPartition(s.fid)).PendingCancelGroups()).
		Member(s.fid.String()+"|"+s.d.String()).Build()).AsInt64()
	require.NoError(t, err)
	return n == 1
}

// pendingGroups is the pending-groups set of the race's flow partition.
func pendingGroups(s *siblingRace) string {
	return keys.FlowPart(parts.FlowPartition(s.fid)).PendingCancelGroups()
}

func state(t testing.TB, vk valkey.Client, id keys.ExecutionID) string {
	v, err := vk.Do(context.Background(), vk.B().Hmget().Key(keys.Exec(id).Core()).
		Field("lifecycle_phase", "terminal_outcome").Build()).AsStrSlice()
	require.NoError(t, err)
	return v[0] + "/" + v[1]
}

// The dispatcher cancels the running and the waiting sibling once an
// any_of group is decided (or a quorum of one), then drains the group.
func TestDispatcherCancelsSiblingsAndDrains(t *testing.T) {
	t.Parallel()
	for _, policy := range []client.EdgeGroupPolicy{
		{Variant: "any_of", OnSatisfied: "cancel_remaining"},
		{Variant: "quorum", OnSatisfied: "cancel_remaining", K: 1},
	} {
		t.Run(policy.Variant, func(t *testing.T) {
			s := &siblingRace{policy: policy}
			linked, plugin := scannertest.Run(t, scannertest.Case{
				Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
				New:   func() scannerapi.Scanner { return edgecancel.NewDispatcher() },
				Lanes: []string{"up", "running", "down"},
				Setup: s.setup,
				Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
					assert.Equal(t, int64(3), r.Processed, "two siblings cancelled, one group drained: %v", r)
					assert.Empty(t, r.Errors)
					assert.Empty(t, r.Refused)
					assert.Equal(t, "terminal/success", state(t, vk, s.a))
					assert.Equal(t, "terminal/cancelled", state(t, vk, s.b), "the running sibling")
					assert.Equal(t, "terminal/cancelled", state(t, vk, s.c), "the waiting sibling")
					assert.False(t, s.pending(t, vk), "drained")
					assert.Equal(t, "runnable/none", state(t, vk, s.d), "the downstream runs")
				},
			})
			scannertest.Same(t, linked, plugin)
		})
	}
}

// The reconciler completes a drain whose siblings all ended; a group whose
// siblings still run is left to the dispatcher; a member that can never
// name a group is removed and counted as invalid.
func TestReconciler(t *testing.T) {
	t.Parallel()
	t.Run("completed", func(t *testing.T) {
		s := &siblingRace{policy: client.EdgeGroupPolicy{Variant: "any_of", OnSatisfied: "cancel_remaining"}, preCancel: true}
		linked, plugin := scannertest.Run(t, scannertest.Case{
			Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
			New:   func() scannerapi.Scanner { return edgecancel.NewReconciler() },
			Lanes: []string{"up", "running", "down"},
			Setup: func(t testing.TB, vk valkey.Client) {
				s.setup(t, vk)
				require.NoError(t, vk.Do(context.Background(), vk.B().Sadd().Key(pendingGroups(s)).Member("garbage").Build()).Error())
			},
			Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
				assert.Equal(t, int64(1), r.Processed, "%v", r)
				assert.Equal(t, map[string]int64{"invalid/invalid_member": 1}, r.Errors)
				assert.False(t, s.pending(t, vk))
				n, err := vk.Do(context.Background(), vk.B().Sismember().Key(pendingGroups(s)).Member("garbage").Build()).AsInt64()
				require.NoError(t, err)
				assert.Zero(t, n, "removed")
			},
		})
		scannertest.Same(t, linked, plugin)
	})
	t.Run("running", func(t *testing.T) {
		s := &siblingRace{policy: client.EdgeGroupPolicy{Variant: "any_of", OnSatisfied: "cancel_remaining"}}
		linked, plugin := scannertest.Run(t, scannertest.Case{
			Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
			New:   func() scannerapi.Scanner { return edgecancel.NewReconciler() },
			Lanes: []string{"up", "running", "down"},
			Setup: s.setup,
			Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
				assert.Zero(t, r.Processed, "%v", r)
				assert.Equal(t, int64(1), r.Skipped)
				assert.True(t, s.pending(t, vk), "the dispatcher's")
				assert.Equal(t, "active/none", state(t, vk, s.b))
			},
		})
		scannertest.Same(t, linked, plugin)
	})
}

// A dry run predicts the cancels and the drain and changes nothing.
func TestDispatcherDryRun(t *testing.T) {
	t.Parallel()
	s := &siblingRace{policy: client.EdgeGroupPolicy{Variant: "any_of", OnSatisfied: "cancel_remaining"}}
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts, DryRun: true,
		New:   func() scannerapi.Scanner { return edgecancel.NewDispatcher() },
		Lanes: []string{"up", "running", "down"},
		Setup: s.setup,
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(1), r.Processed, "the drain is predicted: %v", r)
			assert.Empty(t, r.Refused)
			assert.Equal(t, "active/none", state(t, vk, s.b))
			assert.True(t, s.pending(t, vk))
		},
	})
	scannertest.Same(t, linked, plugin)
}
