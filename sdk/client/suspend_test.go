package client_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
)

// A task suspends on a named condition; a signal with a wrong token or a
// non-matching name does not resume it, the matching one does, and the
// same attempt is claimed again as resumed.
func TestSuspendAndSignalResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Kind: "approval"})
	w := e.worker(t, client.WorkerOptions{InstanceID: "s1"})
	task := claim(t, w)
	attempt := task.AttemptID()

	// Without a waitpoint key on the partition nothing can be minted: the
	// refusal leaves the task holding its lease.
	_, err := task.Suspend(ctx, client.SuspendRequest{Signals: []string{"approve"}})
	require.ErrorIs(t, err, client.ErrHMACSecretNotInitialized)
	require.NoError(t, e.c.RotateWaitpointSecret(ctx, "k1", []byte("first secret"), time.Hour))

	var ve *client.ValidationError
	for _, bad := range []client.SuspendRequest{
		{Signals: []string{"has space"}},
		{Signals: []string{""}},
		{Mode: "most"},
		{Signals: []string{"a"}, MinCount: 2},
		{MinCount: 2},
		{Timeout: -time.Second},
		{Timeout: 8 * 24 * time.Hour},
		{OnTimeout: "explode"},
		{Pending: &client.Waitpoint{ID: "not-a-uuid"}},
		{Signals: []string{"__operator_only__"}},
	} {
		_, err := task.Suspend(ctx, bad)
		require.ErrorAs(t, err, &ve, "%+v", bad)
	}

	s, err := task.Suspend(ctx, client.SuspendRequest{Reason: client.ReasonWaitingForApproval,
		Signals: []string{"approve"}, Timeout: time.Hour, OnTimeout: client.TimeoutCancel})
	require.NoError(t, err)
	assert.False(t, s.AlreadySatisfied)
	assert.Regexp(t, `^k1:[0-9a-f]{40}$`, s.Waitpoint.Token)
	assert.Equal(t, "wpk:"+s.Waitpoint.ID, s.Waitpoint.Key)
	_, err = task.Suspend(ctx, client.SuspendRequest{})
	require.ErrorIs(t, err, client.ErrTaskFinished)
	st := e.state(t, id)
	assert.Equal(t, client.PhaseSuspended, st.LifecyclePhase)
	assert.Equal(t, "waiting_for_approval", st.BlockingReason)
	assert.Equal(t, 0, w.InFlight(), "the permit returned")
	pk := keys.FlowPart(id.Partition())
	_, ok := e.zscore(t, pk.SuspensionTimeout(), id.String())
	assert.True(t, ok, "the timeout is indexed for the suspension_timeout scanner")

	wrong := s.Waitpoint
	wrong.Token = "k1:" + "0000000000000000000000000000000000000000"
	_, err = e.c.DeliverSignal(ctx, id, wrong, client.Signal{Name: "approve"})
	require.ErrorIs(t, err, client.ErrInvalidToken)
	_, err = e.c.DeliverSignal(ctx, id, client.Waitpoint{ID: keys.NewUUID().String(), Token: s.Waitpoint.Token},
		client.Signal{Name: "approve"})
	require.ErrorIs(t, err, client.ErrInvalidToken, "an unknown waitpoint looks like a bad token")
	_, err = e.c.DeliverSignal(ctx, id, s.Waitpoint, client.Signal{Name: ""})
	require.ErrorAs(t, err, &ve)

	d, err := e.c.DeliverSignal(ctx, id, s.Waitpoint, client.Signal{Name: "status", SourceIdentity: "ci"})
	require.NoError(t, err)
	assert.Equal(t, client.EffectNoMatch, d.Effect)
	assert.Equal(t, client.PhaseSuspended, e.state(t, id).LifecyclePhase)

	d, err = e.c.DeliverSignal(ctx, id, s.Waitpoint, client.Signal{Name: "approve", Payload: []byte(`{"by":"ann"}`),
		IdempotencyKey: "approval-1"})
	require.NoError(t, err)
	assert.Equal(t, client.EffectResumed, d.Effect)
	assert.Equal(t, `{"by":"ann"}`, e.str(t, "GET", pk.Signal(mustUUID(t, d.SignalID))+":payload"))
	// The execution runs again and its waitpoint is closed: further
	// signals are refused before anything is recorded.
	_, err = e.c.DeliverSignal(ctx, id, s.Waitpoint, client.Signal{Name: "approve", IdempotencyKey: "approval-1"})
	require.ErrorIs(t, err, client.ErrTargetNotSignalable)
	_, ok = e.zscore(t, pk.SuspensionTimeout(), id.String())
	assert.False(t, ok, "a resumed suspension leaves the timeout index")

	again := claim(t, w)
	assert.Equal(t, id, again.ID())
	assert.Equal(t, "resumed", again.AttemptType())
	assert.Equal(t, attempt, again.AttemptID())
	_, err = again.Complete(ctx, []byte("ok"))
	require.NoError(t, err)
	_, err = e.c.DeliverSignal(ctx, id, s.Waitpoint, client.Signal{Name: "approve"})
	require.ErrorIs(t, err, client.ErrTargetNotSignalable)
}

// Signals sent before the task suspends are buffered on a pending
// waitpoint; when they already satisfy the condition, Suspend answers
// AlreadySatisfied and the task keeps its lease. Duplicates by
// idempotency key are recognised.
func TestPendingWaitpointBuffersSignals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	require.NoError(t, e.c.RotateWaitpointSecret(ctx, "k1", []byte("secret"), time.Hour))
	id := e.create(t, client.CreateRequest{Kind: "callback"})
	task := claim(t, e.worker(t, client.WorkerOptions{InstanceID: "p1"}))

	var ve *client.ValidationError
	_, err := task.CreatePendingWaitpoint(ctx, "", 0)
	require.ErrorAs(t, err, &ve)
	wp, err := task.CreatePendingWaitpoint(ctx, "order-42", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "order-42", wp.Key)

	d, err := e.c.DeliverSignal(ctx, id, wp, client.Signal{Name: "paid", IdempotencyKey: "pay-1"})
	require.NoError(t, err)
	assert.Equal(t, client.EffectBuffered, d.Effect)
	dup, err := e.c.DeliverSignal(ctx, id, wp, client.Signal{Name: "paid", IdempotencyKey: "pay-1"})
	require.NoError(t, err)
	assert.True(t, dup.Duplicate)
	assert.Equal(t, d.SignalID, dup.SignalID)

	s, err := task.Suspend(ctx, client.SuspendRequest{Signals: []string{"paid"}, Pending: &wp})
	require.NoError(t, err)
	assert.True(t, s.AlreadySatisfied)
	assert.Equal(t, wp, s.Waitpoint)
	require.NoError(t, task.UpdateProgress(ctx, 50, "still mine"), "the task still holds its lease")

	// A second pending waitpoint the task gives up on: closing it refuses
	// later signals.
	wp2, err := task.CreatePendingWaitpoint(ctx, "", time.Minute)
	require.NoError(t, err)
	require.NoError(t, e.c.CloseWaitpoint(ctx, id, wp2.ID, ""))
	require.NoError(t, e.c.CloseWaitpoint(ctx, id, wp2.ID, ""), "closing again is fine")
	_, err = e.c.DeliverSignal(ctx, id, wp2, client.Signal{Name: "paid"})
	require.ErrorIs(t, err, client.ErrTargetNotSignalable)
	require.ErrorIs(t, e.c.CloseWaitpoint(ctx, id, keys.NewUUID().String(), ""), client.ErrWaitpointNotFound)
	_, err = task.Complete(ctx, nil)
	require.NoError(t, err)
}

// An operator-only suspension ignores signals; an operator resumes it
// (with a delay it waits in the delayed set first).
func TestOperatorResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	require.NoError(t, e.c.RotateWaitpointSecret(ctx, "k1", []byte("secret"), time.Hour))
	id := e.create(t, client.CreateRequest{Kind: "review"})
	task := claim(t, e.worker(t, client.WorkerOptions{InstanceID: "o1"}))
	require.ErrorIs(t, e.c.Resume(ctx, id, 0), client.ErrExecutionNotSuspended, "active, not suspended")

	s, err := task.Suspend(ctx, client.SuspendRequest{Reason: client.ReasonOperatorReview, OperatorOnly: true})
	require.NoError(t, err)
	assert.Equal(t, "paused_by_operator", e.state(t, id).BlockingReason)
	d, err := e.c.DeliverSignal(ctx, id, s.Waitpoint, client.Signal{Name: "approve"})
	require.NoError(t, err)
	assert.Equal(t, client.EffectNoMatch, d.Effect)

	var ve *client.ValidationError
	require.ErrorAs(t, e.c.Resume(ctx, id, -time.Second), &ve)
	require.NoError(t, e.c.Resume(ctx, id, time.Hour))
	st := e.state(t, id)
	assert.Equal(t, client.PhaseRunnable, st.LifecyclePhase)
	assert.Equal(t, "delayed", st.PublicState)
	pk := keys.FlowPart(id.Partition())
	_, ok := e.zscore(t, pk.LaneDelayed("default"), id.String())
	assert.True(t, ok)
	assert.Equal(t, "closed", e.str(t, "HGET", pk.Waitpoint(mustUUID(t, s.Waitpoint.ID)), "state"))
	require.ErrorIs(t, e.c.Resume(ctx, id, 0), client.ErrExecutionNotSuspended)
	require.ErrorIs(t, e.c.Resume(ctx, keys.SoloExecutionID(e.c.Partitions(), "default", keys.NewUUID()), 0),
		client.ErrExecutionNotFound)
}

func mustUUID(t *testing.T, s string) keys.UUID {
	t.Helper()
	u, err := keys.ParseUUID(s)
	require.NoError(t, err)
	return u
}
