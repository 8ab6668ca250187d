package client_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
)

// A task reports progress on its execution; bad input is refused at the
// edge, a revoked lease by the library, a finished task by the client,
// and none of those writes anything.
func TestUpdateProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Kind: "render"})
	w := e.worker(t, client.WorkerOptions{InstanceID: "p1"})
	task := claim(t, w)
	core := keys.Exec(id).Core()
	field := func(f string) string {
		v, err := e.do(t, "HGET", core, f).ToString()
		if err != nil {
			return ""
		}
		return v
	}

	require.NoError(t, task.UpdateProgress(ctx, 40, "halfway there"))
	assert.Equal(t, "40", field("progress_pct"))
	assert.Equal(t, "halfway there", field("progress_message"))
	assert.NotEmpty(t, field("progress_updated_at"))

	// An empty message keeps the stored one.
	require.NoError(t, task.UpdateProgress(ctx, 70, ""))
	assert.Equal(t, "70", field("progress_pct"))
	assert.Equal(t, "halfway there", field("progress_message"))

	var ve *client.ValidationError
	require.ErrorAs(t, task.UpdateProgress(ctx, 101, ""), &ve)
	require.ErrorAs(t, task.UpdateProgress(ctx, -1, ""), &ve)
	assert.Equal(t, "70", field("progress_pct"), "refused at the edge: nothing written")

	// An operator revokes the lease: the library refuses the update.
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	require.NoError(t, e.do(t, "FCALL", "ff_revoke_lease", "5", core, ek.LeaseCurrent(), ek.LeaseHistory(),
		pk.LeaseExpiry(), pk.WorkerLeases("p1"), id.String(), "", "operator").Error())
	err := task.UpdateProgress(ctx, 90, "nearly")
	require.ErrorIs(t, err, client.ErrLeaseRevoked)
	assert.Equal(t, "70", field("progress_pct"))

	// A finished task answers ErrTaskFinished without a call.
	id2 := e.create(t, client.CreateRequest{Kind: "render"})
	task2 := claim(t, e.worker(t, client.WorkerOptions{InstanceID: "p2"}))
	require.Equal(t, id2, task2.ID())
	_, err = task2.Complete(ctx, nil)
	require.NoError(t, err)
	require.ErrorIs(t, task2.UpdateProgress(ctx, 10, ""), client.ErrTaskFinished)
}

// Flow tags: written to the flow's tags hash; bad keys refused at the edge
// with nothing written; a missing flow is ErrFlowNotFound.
func TestSetFlowTags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	fid := e.createFlow(t)
	fk := keys.Flow(e.c.Partitions(), fid)
	require.NoError(t, e.c.SetFlowTags(ctx, fid, map[string]string{"billing.owner": "team-a", "app.tier": "gold"}))
	got, err := e.do(t, "HGETALL", fk.Tags()).AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"billing.owner": "team-a", "app.tier": "gold"}, got)
	migrated, err := e.do(t, "HGET", fk.Core(), "tags_migrated").ToString()
	require.NoError(t, err)
	assert.Equal(t, "1", migrated)

	var ve *client.ValidationError
	require.ErrorAs(t, e.c.SetFlowTags(ctx, fid, map[string]string{"owner": "x"}), &ve)
	require.ErrorAs(t, e.c.SetFlowTags(ctx, fid, nil), &ve)
	got, err = e.do(t, "HGETALL", fk.Tags()).AsStrMap()
	require.NoError(t, err)
	assert.Len(t, got, 2, "refused at the edge: nothing written")

	missing, err := keys.ParseFlowID("f0000000-0000-4000-8000-0000000000ff")
	require.NoError(t, err)
	require.ErrorIs(t, e.c.SetFlowTags(ctx, missing, map[string]string{"app.x": "1"}), client.ErrFlowNotFound)
}

// Delay parks the execution with its attempt; once promoted it is
// claimed again as the same attempt, resumed.
func TestDelayThenResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Kind: "poll"})
	w := e.worker(t, client.WorkerOptions{InstanceID: "d1"})
	task := claim(t, w)
	attempt := task.AttemptID()

	var ve *client.ValidationError
	require.ErrorAs(t, task.Delay(ctx, time.Now().Add(-time.Second)), &ve)

	until := time.Now().Add(time.Hour)
	require.NoError(t, task.Delay(ctx, until))
	require.ErrorIs(t, task.Delay(ctx, until), client.ErrTaskFinished)
	s := e.state(t, id)
	assert.Equal(t, client.PhaseRunnable, s.LifecyclePhase)
	assert.Equal(t, "delayed", s.PublicState)
	pk := keys.FlowPart(id.Partition())
	score, ok := e.zscore(t, pk.LaneDelayed("default"), id.String())
	require.True(t, ok)
	assert.Equal(t, float64(until.UnixMilli()), score)
	assert.Equal(t, 0, w.InFlight(), "the permit returned")

	// Promote as the delayed promoter would at that time, then claim.
	require.NoError(t, e.do(t, "FCALL", "ff_promote_delayed", "3", keys.Exec(id).Core(), pk.LaneDelayed("default"),
		pk.LaneEligible("default"), id.String(), strconv.FormatInt(until.UnixMilli()+1, 10)).Error())
	again := claim(t, w)
	assert.Equal(t, id, again.ID())
	assert.Equal(t, "resumed", again.AttemptType())
	assert.Equal(t, attempt, again.AttemptID(), "the same attempt continues")
	assert.Equal(t, uint64(2), again.LeaseEpoch())

	// Waiting for children parks it in the dependency set.
	require.NoError(t, again.WaitForChildren(ctx))
	s = e.state(t, id)
	assert.Equal(t, "waiting_children", s.PublicState)
	_, ok = e.zscore(t, pk.LaneBlockedDependencies("default"), id.String())
	assert.True(t, ok)
	require.ErrorIs(t, again.WaitForChildren(ctx), client.ErrTaskFinished)
}

// A completed execution is replayed: eligible again with a replay attempt
// claimed next; a running one cannot be replayed.
func TestReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Kind: "report"})
	w := e.worker(t, client.WorkerOptions{InstanceID: "r1"})
	task := claim(t, w)
	_, err := e.c.Replay(ctx, id)
	require.ErrorIs(t, err, client.ErrExecutionNotTerminal, "a running execution is not replayed")
	_, err = task.Complete(ctx, []byte("v1"))
	require.NoError(t, err)

	res, err := e.c.Replay(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, 0, res.Unsatisfied)
	s := e.state(t, id)
	assert.Equal(t, client.PhaseRunnable, s.LifecyclePhase)
	again := claim(t, w)
	assert.Equal(t, id, again.ID())
	assert.Equal(t, "replay", again.AttemptType())
	assert.Equal(t, uint32(1), again.AttemptIndex())
}

// An operator takes a delayed-then-promoted execution with one
// ff_issue_grant_and_claim: the interrupted attempt continues under the
// operator's lease (no grant left behind).
func TestOperatorGrantAndClaimResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Kind: "poll"})
	task := claim(t, e.worker(t, client.WorkerOptions{InstanceID: "g1"}))
	attempt := task.AttemptID()
	until := time.Now().Add(time.Hour)
	require.NoError(t, task.Delay(ctx, until))
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	require.NoError(t, e.do(t, "FCALL", "ff_promote_delayed", "3", ek.Core(), pk.LaneDelayed("default"),
		pk.LaneEligible("default"), id.String(), strconv.FormatInt(until.UnixMilli()+1, 10)).Error())

	res := e.do(t, "FCALL", "ff_issue_grant_and_claim", "11", ek.Core(), ek.ClaimGrant(), pk.LaneEligible("default"),
		pk.LeaseExpiry(), pk.WorkerLeases("operator"), ek.Attempts(), ek.LeaseCurrent(), ek.LeaseHistory(),
		pk.LaneActive("default"), pk.AttemptTimeout(), pk.ExecutionDeadline(),
		id.String(), "operator", "operator", "default", "", "lease-op", "30000", "attempt-new", "{}", "", "")
	arr, err := res.ToArray()
	require.NoError(t, err)
	require.Len(t, arr, 5)
	flag, err := arr[0].AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(1), flag)
	var words []string
	for _, m := range arr[1:] {
		w, err := m.ToString()
		require.NoError(t, err)
		words = append(words, w)
	}
	assert.Equal(t, []string{"OK", "lease-op", "2", "0"}, words)
	s := e.state(t, id)
	assert.Equal(t, client.PhaseActive, s.LifecyclePhase)
	assert.Equal(t, "operator", s.WorkerInstanceID)
	cur, err := e.do(t, "HGET", ek.Core(), "current_attempt_id").ToString()
	require.NoError(t, err)
	assert.Equal(t, attempt, cur, "the same attempt continues")
	n, err := e.do(t, "EXISTS", ek.ClaimGrant()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n, "no grant left behind")
}
