package lua

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A dependency resolved after its child vanished is still recorded (dep,
// counters, group) and answers without a child effect, as FlowFabric does.
func TestResolveDependencyWithVanishedChild(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	ctx := context.Background()
	const fid = "f0000000-0000-4000-8000-00000000000f"
	flow := "ff:flow:{fp:7}:" + fid
	dep := rfExecKey("dep:edge-1")
	group := flow + ":edgegroup:" + rfEID
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(dep).FieldValue().FieldValue("state", "unsatisfied").FieldValue("edge_id", "edge-1").Build()).Error())
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(rfExecKey("deps:meta")).FieldValue().FieldValue("unsatisfied_required_count", "1").Build()).Error())
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(group).FieldValue().FieldValue("policy_variant", "all_of").FieldValue("n", "1").FieldValue("succeeded", "0").FieldValue("group_state", "pending").Build()).Error())

	got := replyOf(t, fcallArgs(c, "ff_resolve_dependency",
		[]string{rfCore, rfExecKey("deps:meta"), rfExecKey("deps:unresolved"), dep,
			rfIdx("lane:default:eligible"), rfIdx("lane:default:terminal"), rfIdx("lane:default:blocked:dependencies"),
			"ff:attempt:{fp:7}:" + rfEID + ":0", "ff:stream:{fp:7}:" + rfEID + ":0:meta", rfExecKey("payload"),
			"ff:exec:{fp:7}:up:result", group, flow + ":in:" + rfEID, "ff:idx:{fp:7}:pending_cancel_groups"},
		"edge-1", "success", "1700000000000", fid, rfEID))
	assert.Equal(t, []string{"1", "OK", "satisfied", ""}, got)

	state, err := c.Do(ctx, c.B().Hget().Key(dep).Field("state").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "satisfied", state)
	gs, err := c.Do(ctx, c.B().Hget().Key(group).Field("group_state").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "satisfied", gs)
	n, err := c.Do(ctx, c.B().Exists().Key(rfCore).Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n, "no core is created for the vanished child")
}
