package cancelreconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/cancelreconciler"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// cancelledFlow is state made only through sdk/client: a flow cancelled
// with grace 0 over members that are eligible, claimed by a worker
// (active), and already completed.
type cancelledFlow struct {
	parts     keys.PartitionConfig
	fid       keys.FlowID
	eligible  []keys.ExecutionID
	active    keys.ExecutionID
	completed keys.ExecutionID
}

func (f *cancelledFlow) setup(t testing.TB, vk valkey.Client) {
	w := scannertest.NewWorld(t, vk, client.Options{Partitions: f.parts, Namespace: "e2e"})
	ctx, c := w.Ctx, w.Client
	flow, err := c.CreateFlow(ctx, client.CreateFlowRequest{})
	require.NoError(t, err)
	f.fid = flow.ID
	member := func(lane string) keys.ExecutionID {
		r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &f.fid, Lane: lane, Kind: "step"})
		require.NoError(t, err)
		return r.ID
	}
	claim := func(lane string) *client.Task {
		wk := w.Worker(client.WorkerOptions{WorkerID: "e2e-" + lane, InstanceID: "e2e-" + lane + "-1", Lanes: []string{lane}})
		task, err := wk.ClaimNext(ctx)
		require.NoError(t, err)
		require.NotNil(t, task)
		return task
	}
	f.eligible = []keys.ExecutionID{member("default"), member("default"), member("default")}
	f.active = member("running")
	running := claim("running")
	require.Equal(t, f.active, running.ID())
	// The cancel takes its lease: stop renewing it.
	t.Cleanup(running.Abandon)
	f.completed = member("finished")
	finished := claim("finished")
	require.Equal(t, f.completed, finished.ID())
	_, err = finished.Complete(ctx, []byte("ok"))
	require.NoError(t, err)

	zero := time.Duration(0)
	res, err := c.CancelFlow(ctx, f.fid, client.CancelFlowOptions{Reason: "e2e", Grace: &zero})
	require.NoError(t, err)
	require.Len(t, res.Members, 5)
}

// The scanner linked and as the real plugin binary, through an ffscan host
// (the test kit): the reconciler cancels every member still running or
// waiting, acknowledges the completed one, and empties pending_cancels and
// the backlog, in one cycle.
func TestHostCancelsFlowMembersEndToEnd(t *testing.T) {
	t.Parallel()
	f := &cancelledFlow{parts: keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}}
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner:     hosttest.Runner{},
		New:        func() scannerapi.Scanner { return cancelreconciler.New() },
		Binary:     scannertest.PluginBinary(t, pluginPkg),
		Partitions: f.parts,
		Lanes:      []string{"default", "running", "finished"},
		Setup:      f.setup,
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			ctx := context.Background()
			t.Log(r)
			assert.Equal(t, int64(5), r.Processed, "4 cancelled, the completed one acknowledged")
			assert.Empty(t, r.Errors)
			assert.Empty(t, r.Refused)
			assert.Equal(t, 1, r.Scanned, "one partition holds the backlog; the others cost nothing")
			state := func(id keys.ExecutionID) string {
				v, err := vk.Do(ctx, vk.B().Hmget().Key(keys.Exec(id).Core()).Field("lifecycle_phase", "terminal_outcome").Build()).AsStrSlice()
				require.NoError(t, err)
				return v[0] + "/" + v[1]
			}
			for _, id := range append(append([]keys.ExecutionID{}, f.eligible...), f.active) {
				assert.Equal(t, "terminal/cancelled", state(id), "%s", id)
			}
			assert.Equal(t, "terminal/success", state(f.completed), "an already completed member stays as it ended")
			backlog := keys.FlowPart(f.parts.FlowPartition(f.fid)).CancelBacklog()
			n, err := vk.Do(ctx, vk.B().Zcard().Key(backlog).Build()).AsInt64()
			require.NoError(t, err)
			assert.Zero(t, n, "the backlog is drained")
			n, err = vk.Do(ctx, vk.B().Exists().Key(keys.Flow(f.parts, f.fid).PendingCancels()).Build()).AsInt64()
			require.NoError(t, err)
			assert.Zero(t, n, "pending_cancels is empty")
		},
	})
	scannertest.Same(t, linked, plugin)
}
