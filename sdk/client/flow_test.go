package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreateFlowAddMembersAndRead(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	fid := keys.NewFlowID()
	r, err := e.c.CreateFlow(e.ctx, client.CreateFlowRequest{ID: fid, Namespace: "ns-a", Kind: "pipeline"})
	require.NoError(t, err)
	assert.Equal(t, fid, r.ID)
	assert.False(t, r.Existed)
	again, err := e.c.CreateFlow(e.ctx, client.CreateFlowRequest{ID: fid, Kind: "other"})
	require.NoError(t, err)
	assert.True(t, again.Existed)

	// Two members created in the flow, one created elsewhere (a solo
	// execution minted in the flow's partition) and added afterwards.
	a := e.member(t, fid, "a")
	b := e.member(t, fid, "b")
	lone, err := keys.ExecutionIDIn(e.c.Partitions().FlowPartition(fid), keys.NewUUID())
	require.NoError(t, err)
	_, err = e.c.CreateExecution(e.ctx, client.CreateRequest{ID: lone, Lane: "default"})
	require.NoError(t, err)
	added, err := e.c.AddFlowMember(e.ctx, fid, lone)
	require.NoError(t, err)
	assert.Equal(t, client.AddMemberResult{NodeCount: 3}, added)
	dup, err := e.c.AddFlowMember(e.ctx, fid, a)
	require.NoError(t, err)
	assert.True(t, dup.AlreadyMember)

	s, err := e.c.ReadFlow(e.ctx, fid)
	require.NoError(t, err)
	assert.Equal(t, "ns-a", s.Namespace)
	assert.Equal(t, "pipeline", s.Kind)
	assert.Equal(t, "open", s.State)
	assert.Equal(t, int64(3), s.NodeCount)
	assert.Equal(t, int64(3), s.MemberCount)
	assert.Equal(t, int64(3), s.GraphRevision)
	assert.False(t, s.CreatedAt.IsZero())
	assert.ElementsMatch(t, []string{a.String(), b.String(), lone.String()}, e.members(t, keys.Flow(e.c.Partitions(), fid).Members()))
	assert.Equal(t, fid.String(), e.core(t, lone)["flow_id"])

	_, err = e.c.ReadFlow(e.ctx, keys.NewFlowID())
	assert.ErrorIs(t, err, client.ErrFlowNotFound)
}

func TestAddFlowMemberRefusals(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	fid := e.flow(t)
	part := e.c.Partitions().FlowPartition(fid)
	// Another flow on the same partition, so one of its members could be
	// addressed with this flow's keys.
	other := keys.NewFlowID()
	for e.c.Partitions().FlowPartition(other) != part {
		other = keys.NewFlowID()
	}
	_, err := e.c.CreateFlow(e.ctx, client.CreateFlowRequest{ID: other})
	require.NoError(t, err)
	inOther := e.member(t, other, "x")

	// A solo execution outside the flow's partition. A solo execution's
	// partition follows from its lane alone, so the lane is chosen: one
	// fixed lane shares the flow's partition once in every 256 flows, and
	// creating in it again would never leave that partition.
	lane := "default"
	for i := 0; e.c.Partitions().SoloPartition(lane) == part; i++ {
		lane = fmt.Sprintf("lane-%d", i)
	}
	r, err := e.c.CreateExecution(e.ctx, client.CreateRequest{Lane: lane})
	require.NoError(t, err)
	elsewhere := r.ID
	require.NotEqual(t, part, elsewhere.Partition())
	missing, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(t, err)

	before := e.keyspace(t)
	_, err = e.c.AddFlowMember(e.ctx, fid, elsewhere)
	assert.ErrorIs(t, err, client.ErrInvalidArgument)

	_, err = e.c.AddFlowMember(e.ctx, fid, inOther)
	assert.ErrorIs(t, err, client.ErrAlreadyMemberOfDifferentFlow)
	var df *client.DifferentFlowError
	require.ErrorAs(t, err, &df)
	assert.Equal(t, other.String(), df.FlowID)

	_, err = e.c.AddFlowMember(e.ctx, fid, missing)
	assert.ErrorIs(t, err, client.ErrExecutionNotFound)
	e.sameKeyspace(t, before)
}

func TestAddDependencyBlocksChildAndIsRetrySafe(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	fid := e.flow(t)
	a, b := e.member(t, fid, "a"), e.member(t, fid, "b")
	edgeID := keys.NewUUID()
	req := client.DependencyRequest{Flow: fid, Upstream: a, Downstream: b, ID: edgeID, DataRef: "input"}
	r, err := e.c.AddDependency(e.ctx, req)
	require.NoError(t, err)
	assert.Equal(t, client.DependencyResult{ID: edgeID, GraphRevision: 3, Unresolved: 1}, r)

	pk := keys.FlowPart(b.Partition())
	core := e.core(t, b)
	assert.Equal(t, "blocked_by_dependencies", core["eligibility_state"])
	assert.Equal(t, "waiting_children", core["public_state"])
	_, eligible := e.zscore(t, pk.LaneEligible("default"), b.String())
	assert.False(t, eligible)
	_, blocked := e.zscore(t, pk.LaneBlockedDependencies("default"), b.String())
	assert.True(t, blocked)
	fk := keys.Flow(e.c.Partitions(), fid)
	edge, err := e.vk.Do(e.ctx, e.vk.B().Hgetall().Key(fk.Edge(edgeID)).Build()).AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, "success_only", edge["dependency_kind"])
	assert.Equal(t, "input", edge["data_passing_ref"])
	assert.Equal(t, []string{edgeID.String()}, e.members(t, keys.Exec(b).DepsUnresolved()))

	// The same request again: the edge exists and is applied; nothing changes.
	again, err := e.c.AddDependency(e.ctx, req)
	require.NoError(t, err)
	assert.True(t, again.AlreadyApplied)
	s, err := e.c.ReadFlow(e.ctx, fid)
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.EdgeCount)
	assert.Equal(t, int64(3), s.GraphRevision)

	// Same id with other options is refused.
	req.DataRef = ""
	_, err = e.c.AddDependency(e.ctx, req)
	assert.ErrorIs(t, err, client.ErrDependencyAlreadyExists)
}

// A crash between staging and applying leaves a staged edge; the retry
// with the same id applies it.
func TestAddDependencyResumesAStagedEdge(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	fid := e.flow(t)
	a, b := e.member(t, fid, "a"), e.member(t, fid, "b")
	edgeID := keys.NewUUID()
	fk := keys.Flow(e.c.Partitions(), fid)
	res := e.lib.Do(e.ctx, lua.Call{
		Function: "ff_stage_dependency_edge",
		Keys:     []string{fk.Core(), fk.Members(), fk.Edge(edgeID), fk.Out(a), fk.In(b), fk.Grant(edgeID)},
		Args:     []string{fid.String(), edgeID.String(), a.String(), b.String(), "success_only", "", "2", "1"},
	})
	require.NoError(t, res.Error())
	assert.Equal(t, "eligible_now", e.core(t, b)["eligibility_state"])

	r, err := e.c.AddDependency(e.ctx, client.DependencyRequest{Flow: fid, Upstream: a, Downstream: b, ID: edgeID})
	require.NoError(t, err)
	assert.True(t, r.Resumed)
	assert.Equal(t, int64(1), r.Unresolved)
	assert.Equal(t, "blocked_by_dependencies", e.core(t, b)["eligibility_state"])
}

// A concurrent graph change between the revision read and the stage makes
// the stage stale; the client re-reads the revision and succeeds once. A
// graph that keeps changing fails with the typed error and writes nothing.
func TestAddDependencyRetriesOnceOnStaleRevision(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	ic := &interceptor{Client: e.vk, function: "ff_stage_dependency_edge"}
	c, err := client.New(e.ctx, ic, client.Options{})
	require.NoError(t, err)
	fid := e.flow(t)
	a, b := e.member(t, fid, "a"), e.member(t, fid, "b")

	// The first stage finds a member added behind its back.
	ic.hook = func() {
		ic.hook = nil
		e.member(t, fid, "late")
	}
	r, err := c.AddDependency(e.ctx, client.DependencyRequest{Flow: fid, Upstream: a, Downstream: b})
	require.NoError(t, err)
	assert.Equal(t, 2, ic.calls)
	assert.Equal(t, int64(4), r.GraphRevision) // 3 members, then the edge

	// Every stage finds the graph changed: one retry, then the error.
	cc := e.member(t, fid, "c")
	ic.calls = 0
	ic.hook = func() { e.member(t, fid, "noise") }
	_, err = c.AddDependency(e.ctx, client.DependencyRequest{Flow: fid, Upstream: b, Downstream: cc})
	assert.ErrorIs(t, err, client.ErrStaleGraphRevision)
	assert.Equal(t, 2, ic.calls)
	assert.Empty(t, e.members(t, keys.Flow(e.c.Partitions(), fid).In(cc)))
	assert.Equal(t, "eligible_now", e.core(t, cc)["eligibility_state"])
}

func TestEdgeErrorsAreTypedAndWriteNothing(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	fid, other := e.flow(t), e.flow(t)
	a, b, c := e.member(t, fid, "a"), e.member(t, fid, "b"), e.member(t, fid, "c")
	e.edge(t, fid, a, b)
	e.edge(t, fid, b, c)
	foreign := e.member(t, other, "f")
	part := e.c.Partitions().FlowPartition(fid)
	unknown, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(t, err)
	outsider, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(t, err)
	_, err = e.c.CreateExecution(e.ctx, client.CreateRequest{ID: outsider, Lane: "default"})
	require.NoError(t, err)

	before := e.keyspace(t)
	dep := func(up, down keys.ExecutionID) error {
		_, err := e.c.AddDependency(e.ctx, client.DependencyRequest{Flow: fid, Upstream: up, Downstream: down})
		return err
	}

	err = dep(c, a) // a -> b -> c -> a
	assert.ErrorIs(t, err, client.ErrCycleDetected)
	var se *client.ScriptError
	assert.ErrorAs(t, err, &se)

	assert.ErrorIs(t, dep(b, b), client.ErrSelfReferencingEdge)

	err = dep(foreign, a)
	assert.ErrorIs(t, err, client.ErrAlreadyMemberOfDifferentFlow)
	var ee *client.EdgeEndpointError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "upstream", ee.Side)
	assert.Equal(t, other.String(), ee.OtherFlow)

	err = dep(a, unknown)
	assert.ErrorIs(t, err, client.ErrExecutionNotFound)
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "downstream", ee.Side)

	assert.ErrorIs(t, dep(outsider, a), client.ErrExecutionNotInFlow)
	assert.ErrorIs(t, dep(a, b), client.ErrDependencyAlreadyExists)

	_, err = e.c.AddDependency(e.ctx, client.DependencyRequest{Flow: keys.NewFlowID(), Upstream: a, Downstream: b})
	assert.ErrorIs(t, err, client.ErrFlowNotFound)
	_, err = e.c.AddDependency(e.ctx, client.DependencyRequest{Flow: fid, Upstream: a})
	assert.ErrorIs(t, err, client.ErrInvalidArgument)

	e.sameKeyspace(t, before)

	// A cancelled flow takes no edges.
	_, err = e.c.CancelFlow(e.ctx, fid, client.CancelFlowOptions{Policy: client.CancelFlowOnly})
	require.NoError(t, err)
	assert.ErrorIs(t, dep(a, c), client.ErrFlowAlreadyTerminal)
}

// cancelFixture is a flow with one finished, one running and two waiting
// members (one of them blocked on an edge).
type cancelFixture struct {
	fid                       keys.FlowID
	done, running, wait, held keys.ExecutionID
}

func newCancelFixture(t *testing.T, e *flowEnv) cancelFixture {
	t.Helper()
	f := cancelFixture{fid: e.flow(t)}
	f.done = e.member(t, f.fid, "done")
	f.running = e.member(t, f.fid, "running")
	f.wait = e.member(t, f.fid, "wait")
	f.held = e.member(t, f.fid, "held")
	e.edge(t, f.fid, f.wait, f.held)
	require.NoError(t, flowtest.Succeed(e.ctx, e.lib, f.done, nil))
	_, err := flowtest.Claim(e.ctx, e.lib, f.running)
	require.NoError(t, err)
	return f
}

// cancel_flow with grace 0 leaves the owed cancels queued (backlog entry
// due now, every member in pending_cancels) and cancels nothing itself;
// a manual drain cancels each member with its real keys, counts the
// already finished one as done (P6) and empties both.
func TestCancelFlowGraceZeroThenDrain(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	f := newCancelFixture(t, e)
	fk, pk := keys.Flow(e.c.Partitions(), f.fid), keys.FlowPart(e.c.Partitions().FlowPartition(f.fid))
	zero := time.Duration(0)

	r, err := e.c.CancelFlow(e.ctx, f.fid, client.CancelFlowOptions{Reason: "user cancelled run", Grace: &zero})
	require.NoError(t, err)
	assert.Equal(t, client.CancelAll, r.Policy)
	assert.ElementsMatch(t, []keys.ExecutionID{f.done, f.running, f.wait, f.held}, r.Members)
	assert.Nil(t, r.Drain)

	score, queued := e.zscore(t, pk.CancelBacklog(), f.fid.String())
	require.True(t, queued)
	s, err := e.c.ReadFlow(e.ctx, f.fid)
	require.NoError(t, err)
	assert.Equal(t, "cancelled", s.State)
	assert.Equal(t, "user cancelled run", s.CancelReason)
	assert.Equal(t, client.CancelAll, s.CancellationPolicy)
	assert.Equal(t, int64(4), s.PendingCancels)
	assert.Equal(t, float64(s.CancelledAt.UnixMilli()), score) // now + 0
	assert.Equal(t, "active", e.core(t, f.running)["lifecycle_phase"])

	// A member whose core has vanished (e.g. retention) counts as done.
	gone, err := keys.ExecutionIDIn(e.c.Partitions().FlowPartition(f.fid), keys.NewUUID())
	require.NoError(t, err)
	require.NoError(t, e.vk.Do(e.ctx, e.vk.B().Sadd().Key(fk.PendingCancels()).Member(gone.String()).Build()).Error())

	d, err := e.c.DrainFlowCancels(e.ctx, f.fid)
	require.NoError(t, err)
	assert.Equal(t, client.DrainResult{Cancelled: 3, AlreadyTerminal: 1, NotFound: 1}, d)
	assert.Empty(t, e.members(t, fk.PendingCancels()))
	_, queued = e.zscore(t, pk.CancelBacklog(), f.fid.String())
	assert.False(t, queued)

	for _, id := range []keys.ExecutionID{f.running, f.wait, f.held} {
		core := e.core(t, id)
		assert.Equal(t, "cancelled", core["terminal_outcome"], id.String())
		assert.Equal(t, "flow_cascade", core["cancelled_by"])
		assert.Equal(t, "flow_cancelled", core["cancellation_reason"])
		_, terminal := e.zscore(t, pk.LaneTerminal("default"), id.String())
		assert.True(t, terminal)
	}
	assert.Equal(t, "success", e.core(t, f.done)["terminal_outcome"])
	_, active := e.zscore(t, pk.LaneActive("default"), f.running.String())
	assert.False(t, active)
	_, blocked := e.zscore(t, pk.LaneBlockedDependencies("default"), f.held.String())
	assert.False(t, blocked)

	// Draining again has nothing to do.
	d, err = e.c.DrainFlowCancels(e.ctx, f.fid)
	require.NoError(t, err)
	assert.Equal(t, client.DrainResult{}, d)
}

func TestCancelFlowWaitCancelsEveryMember(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	f := newCancelFixture(t, e)
	r, err := e.c.CancelFlow(e.ctx, f.fid, client.CancelFlowOptions{Reason: "stop", Wait: true})
	require.NoError(t, err)
	require.NotNil(t, r.Drain)
	assert.Equal(t, client.DrainResult{Cancelled: 3, AlreadyTerminal: 1}, *r.Drain)
	for _, id := range []keys.ExecutionID{f.running, f.wait, f.held} {
		assert.Equal(t, "cancelled", e.core(t, id)["terminal_outcome"])
	}
	s, err := e.c.ReadFlow(e.ctx, f.fid)
	require.NoError(t, err)
	assert.Zero(t, s.PendingCancels)
	_, queued := e.zscore(t, keys.FlowPart(e.c.Partitions().FlowPartition(f.fid)).CancelBacklog(), f.fid.String())
	assert.False(t, queued)

	_, err = e.c.CancelFlow(e.ctx, f.fid, client.CancelFlowOptions{})
	assert.ErrorIs(t, err, client.ErrFlowAlreadyTerminal)
	_, err = e.c.CancelFlow(e.ctx, keys.NewFlowID(), client.CancelFlowOptions{})
	assert.ErrorIs(t, err, client.ErrFlowNotFound)
}

// A member whose lease was revoked refuses a flow_cascade cancel; the
// drain cancels it with an operator override instead.
func TestCancelFlowWaitCancelsARevokedMember(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	fid := e.flow(t)
	m := e.member(t, fid, "m")
	_, err := flowtest.Claim(e.ctx, e.lib, m)
	require.NoError(t, err)
	ek, pk := keys.Exec(m), keys.FlowPart(m.Partition())
	res := e.lib.Do(e.ctx, lua.Call{
		Function: "ff_revoke_lease",
		Keys:     []string{ek.Core(), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LeaseExpiry(), pk.WorkerLeases("flowtest-instance")},
		Args:     []string{m.String(), "", "test"},
	})
	require.NoError(t, res.Error())
	require.Equal(t, "lease_revoked", e.core(t, m)["ownership_state"])

	r, err := e.c.CancelFlow(e.ctx, fid, client.CancelFlowOptions{Wait: true})
	require.NoError(t, err)
	assert.Equal(t, 1, r.Drain.Cancelled)
	assert.Equal(t, "cancelled", e.core(t, m)["terminal_outcome"])
	assert.Equal(t, "operator_override", e.core(t, m)["cancelled_by"])
}

func TestCancelFlowOtherPolicies(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)

	// flow_only: the flow is cancelled, members are untouched, nothing queued.
	f := newCancelFixture(t, e)
	r, err := e.c.CancelFlow(e.ctx, f.fid, client.CancelFlowOptions{Policy: client.CancelFlowOnly, Wait: true})
	require.NoError(t, err)
	assert.Equal(t, client.CancelFlowOnly, r.Policy)
	assert.Nil(t, r.Drain)
	assert.Equal(t, "none", e.core(t, f.wait)["terminal_outcome"])
	s, err := e.c.ReadFlow(e.ctx, f.fid)
	require.NoError(t, err)
	assert.Equal(t, "cancelled", s.State)
	assert.Zero(t, s.PendingCancels)

	// cancel_pending with Wait: members not running are cancelled, the
	// running one finishes on its own.
	g := newCancelFixture(t, e)
	r, err = e.c.CancelFlow(e.ctx, g.fid, client.CancelFlowOptions{Policy: client.CancelPending, Wait: true})
	require.NoError(t, err)
	assert.Equal(t, client.DrainResult{Cancelled: 2, Skipped: 2}, *r.Drain)
	assert.Equal(t, "cancelled", e.core(t, g.wait)["terminal_outcome"])
	assert.Equal(t, "cancelled", e.core(t, g.held)["terminal_outcome"])
	assert.Equal(t, "active", e.core(t, g.running)["lifecycle_phase"])
	assert.Equal(t, "success", e.core(t, g.done)["terminal_outcome"])

	// Bad options are refused before anything is sent.
	h := e.flow(t)
	neg := -time.Second
	_, err = e.c.CancelFlow(e.ctx, h, client.CancelFlowOptions{Grace: &neg})
	assert.ErrorIs(t, err, client.ErrInvalidArgument)
	_, err = e.c.CancelFlow(e.ctx, h, client.CancelFlowOptions{Policy: "everything"})
	assert.ErrorIs(t, err, client.ErrInvalidArgument)
	s, err = e.c.ReadFlow(e.ctx, h)
	require.NoError(t, err)
	assert.Equal(t, "open", s.State)
}

func TestDrainLeavesFailuresPending(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	fid := e.flow(t)
	m := e.member(t, fid, "m")
	zero := time.Duration(0)
	_, err := e.c.CancelFlow(e.ctx, fid, client.CancelFlowOptions{Grace: &zero})
	require.NoError(t, err)
	// A core of the wrong type makes the member's read fail.
	require.NoError(t, e.vk.Do(e.ctx, e.vk.B().Del().Key(keys.Exec(m).Core()).Build()).Error())
	require.NoError(t, e.vk.Do(e.ctx, e.vk.B().Set().Key(keys.Exec(m).Core()).Value("x").Build()).Error())
	d, err := e.c.DrainFlowCancels(e.ctx, fid)
	require.Error(t, err)
	assert.Equal(t, 1, d.Failed)
	assert.Equal(t, int64(1), d.Remaining)
	assert.Contains(t, err.Error(), m.String())
	_, queued := e.zscore(t, keys.FlowPart(e.c.Partitions().FlowPartition(fid)).CancelBacklog(), fid.String())
	assert.True(t, queued)
}
