package depexec_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/depexec"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// On a real 3-master cluster every call stays on one slot: flows on
// several partitions (so several masters) get edges, cascades through both
// executors, a reconcile, a waited cancel and budget reports.
func TestOnACluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := testserver.NewCluster(t, 3)
	vk := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lib := lua.New(vk, lua.Options{})
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	c, err := client.New(ctx, vk, client.Options{Library: lib})
	require.NoError(t, err)
	svc := callbacks.New(lib, nil)
	pol, _ := callbacks.PolicyFromInfo(scannerapi.Info{Name: "deps", Commands: depresolve.Commands(), Functions: depresolve.Functions()}, false)
	svc.Register("deps", pol)
	e := &env{vk: vk, lib: lib, c: c, ctx: ctx, direct: depexec.LibraryExecutor(lib), plugin: svc.HostFor("deps")}

	slots := map[uint16]bool{}
	for i := 0; i < 6; i++ {
		fid := e.flow(t)
		slots[keys.ClusterSlot(keys.Flow(c.Partitions(), fid).Core())] = true
		ex := e.direct
		if i%2 == 1 {
			ex = e.plugin
		}
		r := depresolve.New(ex, depresolve.Options{})
		a, b, cc, d := e.member(t, fid, "a"), e.member(t, fid, "b"), e.member(t, fid, "c"), e.member(t, fid, "d")
		e.edge(t, fid, a, b, "")
		e.edge(t, fid, a, cc, "")
		e.edge(t, fid, b, d, "")
		e.edge(t, fid, cc, d, "x")
		e.succeed(t, a, "ra")
		assert.Equal(t, depresolve.Result{Resolved: 2, Satisfied: 2}, cascade(t, r, fid, a))
		e.succeed(t, b, "rb")
		e.succeed(t, cc, "rc")
		// b's push is "lost"; the reconciler resolves d's edge from b.
		assert.Equal(t, depresolve.Result{Resolved: 1, Satisfied: 1}, cascade(t, r, fid, cc))
		res, err := r.ReconcileChild(ctx, d)
		require.NoError(t, err)
		assert.Equal(t, depresolve.Result{Resolved: 1, Satisfied: 1}, res)
		assert.Equal(t, "waiting", e.state(t, d))
		assert.Equal(t, "rc", e.payload(t, d))

		// d, claimed and running, is cancelled by a waited cancel; the
		// finished members count as done.
		_, err = flowtest.Claim(ctx, lib, d)
		require.NoError(t, err)
		cr, err := c.CancelFlow(ctx, fid, client.CancelFlowOptions{Wait: true})
		require.NoError(t, err)
		assert.Equal(t, client.DrainResult{Cancelled: 1, AlreadyTerminal: 3}, *cr.Drain)
	}
	assert.Greater(t, len(slots), 1, "flows should spread over several slots")

	b, err := c.CreateBudget(ctx, client.CreateBudgetRequest{Dimensions: []client.BudgetDimension{{Name: "tokens", Hard: 10, Soft: 5}}})
	require.NoError(t, err)
	u, err := c.ReportUsage(ctx, client.UsageReport{Budget: b.ID, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: 6}}, IdempotencyKey: "k"})
	require.NoError(t, err)
	assert.Equal(t, client.UsageSoftBreach, u.Status)
	u, err = c.ReportUsage(ctx, client.UsageReport{Budget: b.ID, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: 6}}, IdempotencyKey: "k"})
	require.NoError(t, err)
	assert.Equal(t, client.UsageAlreadyApplied, u.Status)
	_, err = c.ResetBudget(ctx, b.ID)
	require.NoError(t, err)
}
