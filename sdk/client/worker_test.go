package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWorkerRegistersAndUnregisters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	w, err := e.c.NewWorker(ctx, client.WorkerOptions{WorkerID: "w1", InstanceID: "w1-a",
		Lanes: []string{"b", "a", "b"}, Capabilities: []string{"gpu", "cuda"}, LeaseTTL: 2 * time.Second})
	require.NoError(t, err)
	alive := keys.WorkerAlive("default", "w1-a")
	pttl, err := e.do(t, "PTTL", alive).AsInt64()
	require.NoError(t, err)
	assert.InDelta(t, 4000, pttl, 500, "alive guard lives 2 x lease TTL")
	caps, err := e.do(t, "HGETALL", keys.WorkerCaps("default", "w1-a")).AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, "w1", caps["worker_id"])
	assert.Equal(t, "a,b", caps["lanes_csv"])
	assert.Equal(t, "cuda,gpu", caps["caps_csv"])
	assert.Equal(t, "4000", caps["ttl_ms"])
	assert.NotEmpty(t, caps["registered_at_ms"])
	isMember, err := e.do(t, "SISMEMBER", keys.WorkersIndex("default"), "w1-a").AsBool()
	require.NoError(t, err)
	assert.True(t, isMember)

	require.NoError(t, w.Close(ctx))
	assert.Zero(t, e.dbsize(t), "close removes guard, advertisement and index entry")
	_, err = w.ClaimNext(ctx)
	assert.ErrorIs(t, err, client.ErrWorkerClosed)
}

func TestDuplicateInstanceIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	first := e.worker(t, client.WorkerOptions{InstanceID: "dup"})
	_, err := e.c.NewWorker(ctx, client.WorkerOptions{WorkerID: "w", InstanceID: "dup", Lanes: []string{"default"}})
	var dup *client.DuplicateInstanceError
	require.ErrorAs(t, err, &dup)
	assert.Equal(t, keys.WorkerAlive("default", "dup"), dup.Key)
	caps, err := e.do(t, "HGET", keys.WorkerCaps("default", "dup"), "worker_id").ToString()
	require.NoError(t, err)
	assert.Equal(t, "w", caps, "the live worker's advertisement is untouched")

	require.NoError(t, first.Close(ctx))
	again, err := e.c.NewWorker(ctx, client.WorkerOptions{WorkerID: "w", InstanceID: "dup", Lanes: []string{"default"}})
	require.NoError(t, err, "the id is free once its owner closed")
	require.NoError(t, again.Close(ctx))
}

func TestWorkerAliveGuardIsRefreshed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t, client.WorkerOptions{InstanceID: "fresh", LeaseTTL: 200 * time.Millisecond})
	alive := keys.WorkerAlive("default", "fresh")
	// The guard lives 1 s (the minimum); it must outlive several TTLs.
	start := time.Now()
	eventually(t, "3 s of refreshed guard", func() bool {
		n, err := e.do(t, "EXISTS", alive).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "guard lapsed while the worker runs")
		return time.Since(start) > 3*time.Second
	})
	// A guard lost in a long pause is taken again, not treated as a
	// duplicate.
	e.do(t, "DEL", alive)
	eventually(t, "guard re-taken", func() bool {
		n, err := e.do(t, "EXISTS", alive).AsInt64()
		require.NoError(t, err)
		return n == 1
	})
	task, err := w.ClaimNext(testCtx(t))
	require.NoError(t, err)
	assert.Nil(t, task)
}

func TestWorkerRejectsBadOptionsWithoutWriting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	cases := map[string]client.WorkerOptions{
		"WorkerID":        {Lanes: []string{"l"}},
		"Lanes":           {WorkerID: "w"},
		"Lanes[1]":        {WorkerID: "w", Lanes: []string{"ok", ""}},
		"Capabilities[0]": {WorkerID: "w", Lanes: []string{"l"}, Capabilities: []string{"gpu,cuda"}},
		"Capabilities[1]": {WorkerID: "w", Lanes: []string{"l"}, Capabilities: []string{"a", "b c"}},
		"Capabilities":    {WorkerID: "w", Lanes: []string{"l"}, Capabilities: manyCaps(300)},
		"LeaseTTL":        {WorkerID: "w", Lanes: []string{"l"}, LeaseTTL: time.Millisecond},
	}
	for field, opts := range cases {
		_, err := e.c.NewWorker(ctx, opts)
		var ve *client.ValidationError
		require.ErrorAs(t, err, &ve, field)
		assert.Equal(t, field, ve.Field)
	}
	assert.Zero(t, e.dbsize(t))
}

func TestWorkerRefusesPartitionMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do(t, "HSET", keys.ConfigPartitions, "num_flow_partitions", "64", "num_budget_partitions", "32", "num_quota_partitions", "32")
	_, err := e.c.NewWorker(testCtx(t), client.WorkerOptions{WorkerID: "w", Lanes: []string{"default"}})
	var pm *keys.PartitionMismatchError
	require.ErrorAs(t, err, &pm)
	assert.Contains(t, err.Error(), "num_flow_partitions: configured 256, stored 64")
	n, _ := e.do(t, "EXISTS", keys.WorkersIndex("default")).AsInt64()
	assert.Zero(t, n, "nothing registered")
}

func TestClaimRunCompleteRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Kind: "resize", Payload: []byte("img"), Tags: map[string]string{"app.x": "1"},
		AttemptTimeout: time.Minute})
	w := e.worker(t, client.WorkerOptions{InstanceID: "i1"})
	task := claim(t, w)
	assert.Equal(t, id, task.ID())
	assert.Equal(t, "resize", task.Kind())
	assert.Equal(t, []byte("img"), task.Payload())
	assert.Equal(t, map[string]string{"app.x": "1"}, task.Tags())
	assert.Equal(t, uint32(0), task.AttemptIndex())
	assert.Equal(t, "initial", task.AttemptType())
	assert.Equal(t, uint64(1), task.LeaseEpoch())
	assert.Equal(t, 1, w.InFlight())

	s := e.state(t, id)
	assert.Equal(t, client.PhaseActive, s.LifecyclePhase)
	assert.Equal(t, client.OwnershipLeased, s.OwnershipState)
	assert.Equal(t, "i1", s.WorkerInstanceID)
	assert.Equal(t, task.LeaseID(), s.CurrentLeaseID)
	pk := keys.FlowPart(id.Partition())
	_, armed := e.zscore(t, pk.AttemptTimeout(), id.String())
	assert.True(t, armed, "the policy's attempt timeout is armed at claim")

	out, err := task.Complete(ctx, []byte("done"))
	require.NoError(t, err)
	assert.False(t, out.AlreadyApplied)
	assert.Equal(t, 0, w.InFlight(), "the permit returned")
	assert.ErrorIs(t, context.Cause(task.Context()), client.ErrTaskFinished)
	s = e.state(t, id)
	assert.Equal(t, client.OutcomeSuccess, s.TerminalOutcome)
	res, err := e.c.Result(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, []byte("done"), res)
	_, err = task.Complete(ctx, nil)
	assert.ErrorIs(t, err, client.ErrTaskFinished)
	claimNone(t, e, w)
}

func TestReplayedCompleteIsAlreadyApplied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	e.create(t, client.CreateRequest{})
	w := e.worker(t, client.WorkerOptions{InstanceID: "i1"})
	task := claim(t, w)
	// The first complete committed but its reply was lost.
	require.Equal(t, "OK", e.completeRaw(t, task, "i1")[1])
	out, err := task.Complete(ctx, []byte("again"))
	require.NoError(t, err)
	assert.True(t, out.AlreadyApplied)
	assert.Equal(t, 0, w.InFlight())
	res, _ := e.c.Result(ctx, task.ID())
	assert.Equal(t, []byte("first"), res, "the replay changed nothing")
}

func TestCompleteAfterOperatorCancelIsAnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{})
	w := e.worker(t, client.WorkerOptions{})
	task := claim(t, w)
	r, err := e.c.Cancel(ctx, id, client.CancelOptions{Reason: "operator"})
	require.NoError(t, err)
	assert.Equal(t, client.PhaseActive, r.PreviousPhase)
	_, err = task.Complete(ctx, nil)
	var na *client.ExecutionNotActiveError
	require.ErrorAs(t, err, &na, "someone else's terminal state is not a replay")
	assert.Equal(t, client.OutcomeCancelled, na.TerminalOutcome)
	assert.Equal(t, 0, w.InFlight(), "a definitive refusal ends the task")
}

func TestFailRetriesThenFailsTerminally(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Retry: &client.RetryPolicy{MaxRetries: 1, Backoff: client.FixedBackoff(time.Millisecond)}})
	w := e.worker(t, client.WorkerOptions{})
	task := claim(t, w)
	out, err := task.Fail(ctx, "boom", client.FailOptions{Category: "transient"})
	require.NoError(t, err)
	assert.True(t, out.RetryScheduled)
	assert.WithinDuration(t, time.Now(), out.DelayUntil, time.Minute)
	s := e.state(t, id)
	assert.Equal(t, "delayed", s.PublicState)
	assert.Equal(t, 1, s.RetryCount)

	eventually(t, "retry due", func() bool { return e.promote(t, id, "default")[2] == "promoted" })
	retry := claim(t, w)
	assert.Equal(t, "retry", retry.AttemptType())
	assert.Equal(t, uint32(1), retry.AttemptIndex())
	out, err = retry.Fail(ctx, "boom again", client.FailOptions{})
	require.NoError(t, err)
	assert.False(t, out.RetryScheduled)
	s = e.state(t, id)
	assert.Equal(t, client.OutcomeFailed, s.TerminalOutcome)
	assert.Equal(t, "boom again", s.FailureReason)
}

func TestFailOptionsOverrideThePolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	e.create(t, client.CreateRequest{Retry: &client.RetryPolicy{MaxRetries: 5, Backoff: client.FixedBackoff(time.Second)}})
	e.create(t, client.CreateRequest{})
	w := e.worker(t, client.WorkerOptions{MaxConcurrentTasks: 2})
	a, b := claim(t, w), claim(t, w)
	out, err := a.Fail(ctx, "fatal", client.FailOptions{NoRetry: true})
	require.NoError(t, err)
	assert.False(t, out.RetryScheduled)
	out, err = b.Fail(ctx, "try later", client.FailOptions{Retry: &client.RetryPolicy{MaxRetries: 1, Backoff: client.FixedBackoff(time.Hour)}})
	require.NoError(t, err)
	assert.True(t, out.RetryScheduled)
	_, err = a.Fail(ctx, "x", client.FailOptions{})
	assert.ErrorIs(t, err, client.ErrTaskFinished)
}

func TestWorkerCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{})
	w := e.worker(t, client.WorkerOptions{})
	task := claim(t, w)
	out, err := task.Cancel(ctx, "not worth it")
	require.NoError(t, err)
	assert.False(t, out.AlreadyApplied)
	s := e.state(t, id)
	assert.Equal(t, client.OutcomeCancelled, s.TerminalOutcome)
	assert.Equal(t, "worker", s.CancelledBy)
	assert.Equal(t, 0, w.InFlight())
}

func TestClaimTakesTheBestOfTheChunk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Equal priorities are served oldest first; created_at has ms
	// resolution, so make sure the two really differ.
	low := e.create(t, client.CreateRequest{Lane: "a", Priority: 1})
	eventually(t, "a later millisecond", func() bool { return time.Now().UnixMilli() > e.state(t, low).CreatedAt.UnixMilli()+1 })
	older := e.create(t, client.CreateRequest{Lane: "a", Priority: 1})
	top := e.create(t, client.CreateRequest{Lane: "a", Priority: 50})
	high := e.create(t, client.CreateRequest{Lane: "b", Priority: 100})
	w := e.worker(t, client.WorkerOptions{Lanes: []string{"a"}, MaxConcurrentTasks: 3})
	assert.Equal(t, top, claim(t, w).ID(), "highest priority first")
	assert.Equal(t, low, claim(t, w).ID(), "then the oldest")
	assert.Equal(t, older, claim(t, w).ID())
	wb := e.worker(t, client.WorkerOptions{Lanes: []string{"b"}})
	assert.Equal(t, high, claim(t, wb).ID(), "a worker only sees its lanes")
}

func TestLanesAreClaimedRoundRobin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.create(t, client.CreateRequest{Lane: "lane-a"})
	b := e.create(t, client.CreateRequest{Lane: "lane-b"})
	w := e.worker(t, client.WorkerOptions{Lanes: []string{"lane-a", "lane-b"}, MaxConcurrentTasks: 2})
	got := map[keys.ExecutionID]string{}
	for _, task := range []*client.Task{claim(t, w), claim(t, w)} {
		got[task.ID()] = task.Lane()
	}
	assert.Equal(t, map[keys.ExecutionID]string{a: "lane-a", b: "lane-b"}, got)
}

func TestCapabilityMismatchMovesToBlockedRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{RequiredCapabilities: []string{"gpu", "cuda"}})
	cpu := e.worker(t, client.WorkerOptions{InstanceID: "cpu", Capabilities: []string{"cuda"}})
	claimNone(t, e, cpu)

	s := e.state(t, id)
	assert.Equal(t, "blocked_by_route", s.EligibilityState)
	assert.Equal(t, "waiting_for_capable_worker", s.BlockingReason)
	assert.NotEmpty(t, s.Raw["last_capability_mismatch_at"])
	pk := keys.FlowPart(id.Partition())
	_, blocked := e.zscore(t, pk.LaneBlockedRoute("default"), id.String())
	_, eligible := e.zscore(t, pk.LaneEligible("default"), id.String())
	assert.True(t, blocked)
	assert.False(t, eligible, "no worker keeps picking it")

	// The unblock scanner would release it once a capable worker exists.
	gpu := e.worker(t, client.WorkerOptions{InstanceID: "gpu", Capabilities: []string{"cuda", "gpu"}})
	caps, err := e.do(t, "HGET", keys.WorkerCaps("default", "gpu"), "caps_csv").ToString()
	require.NoError(t, err)
	assert.Equal(t, "cuda,gpu", caps, "what the unblock scanner reads")
	r := e.fcall(t, "ff_unblock_execution", []string{keys.Exec(id).Core(), pk.LaneBlockedRoute("default"), pk.LaneEligible("default")},
		id.String(), itoa(time.Now().UnixMilli()), "waiting_for_capable_worker")
	require.Equal(t, "OK", r[1])
	task := claim(t, gpu)
	assert.Equal(t, id, task.ID())
	_, err = task.Complete(ctx, nil)
	require.NoError(t, err)
}

func TestConcurrencyPermits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	for i := 0; i < 4; i++ {
		e.create(t, client.CreateRequest{})
	}
	w := e.worker(t, client.WorkerOptions{MaxConcurrentTasks: 2})
	a, b := claim(t, w), claim(t, w)
	assert.Equal(t, 2, w.InFlight())
	_, err := w.ClaimNext(ctx)
	assert.ErrorIs(t, err, client.ErrWorkerAtCapacity)

	_, err = a.Complete(ctx, nil)
	require.NoError(t, err)
	c := claim(t, w)
	_, err = w.ClaimNext(ctx)
	assert.ErrorIs(t, err, client.ErrWorkerAtCapacity)

	b.Abandon() // dropping a task returns its permit
	assert.Equal(t, 1, w.InFlight())
	assert.ErrorIs(t, context.Cause(b.Context()), client.ErrTaskAbandoned)
	d := claim(t, w)
	_, err = c.Cancel(ctx, "done with it")
	require.NoError(t, err)
	_, err = d.Fail(ctx, "no", client.FailOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, w.InFlight())
}

func TestClaimFromGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Payload: []byte("p")})
	busy := e.create(t, client.CreateRequest{Lane: "other"})
	w := e.worker(t, client.WorkerOptions{WorkerID: "sched-w", Lanes: []string{"other"}})

	_, err := w.ClaimFromGrant(ctx, id, "default")
	assert.ErrorIs(t, err, client.ErrInvalidClaimGrant, "no grant, no claim")

	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	grant := func() []string {
		return e.fcall(t, "ff_issue_claim_grant", []string{ek.Core(), ek.ClaimGrant(), pk.LaneEligible("default")},
			id.String(), "sched-w", "scheduler", "default", "", "60000", "", "", "")
	}
	require.Equal(t, "OK", grant()[1])

	held := claim(t, w) // the only permit
	require.Equal(t, busy, held.ID())
	_, err = w.ClaimFromGrant(ctx, id, "default")
	assert.ErrorIs(t, err, client.ErrWorkerAtCapacity)
	n, _ := e.do(t, "EXISTS", ek.ClaimGrant()).AsInt64()
	assert.Equal(t, int64(1), n, "the grant is untouched at capacity")
	_, err = held.Complete(ctx, nil)
	require.NoError(t, err)

	task, err := w.ClaimFromGrant(ctx, id, "default")
	require.NoError(t, err)
	assert.Equal(t, []byte("p"), task.Payload())
	_, err = task.Complete(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, client.OutcomeSuccess, e.state(t, id).TerminalOutcome)
}

func TestResumedAttemptUsesClaimResumed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{})
	w := e.worker(t, client.WorkerOptions{LeaseTTL: 5 * time.Second})
	first := claim(t, w)
	first.Abandon()
	// A delayed or resumed attempt is runnable, eligible and
	// attempt_interrupted under a released lease. ff_delay_execution and
	// ff_resume_execution are not in the library yet, so write the state
	// they leave behind.
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	e.do(t, "HSET", ek.Core(), "lifecycle_phase", "runnable", "ownership_state", "unowned",
		"eligibility_state", "eligible_now", "blocking_reason", "waiting_for_worker",
		"attempt_state", "attempt_interrupted", "public_state", "waiting", "current_lease_id", "")
	e.do(t, "DEL", ek.LeaseCurrent())
	e.do(t, "ZREM", pk.LaneActive("default"), id.String())
	e.do(t, "ZREM", pk.LeaseExpiry(), id.String())
	e.do(t, "ZADD", pk.LaneEligible("default"), "0", id.String())

	resumed := claim(t, w)
	assert.Equal(t, "resumed", resumed.AttemptType())
	assert.Equal(t, first.AttemptID(), resumed.AttemptID(), "the same attempt continues")
	assert.Equal(t, uint32(0), resumed.AttemptIndex())
	assert.Equal(t, uint64(2), resumed.LeaseEpoch())
	_, err := resumed.Complete(ctx, nil)
	require.NoError(t, err)
}

func TestLeaseRenewalKeepsALongTaskAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{})
	// The worker renews at 2/3 of the TTL: the lease lapses only if its
	// renewal is late by a third of the TTL, 2 s here, which a loaded
	// two-core box must not make happen (at 1 s TTL the third, 333 ms,
	// was overrun under load).
	const ttl = 6 * time.Second
	w := e.worker(t, client.WorkerOptions{LeaseTTL: ttl})
	task := claim(t, w)
	start := time.Now()
	// Run past three renewals while the lease-expiry scanner keeps looking.
	eventually(t, "three renewals", func() bool {
		r := e.markExpired(t, id)
		require.NotEqual(t, "marked_expired", r[2], "the lease must never lapse while renewed")
		return time.Since(start) > 2*ttl+ttl/3
	})
	require.NoError(t, context.Cause(task.Context()))
	s := e.state(t, id)
	assert.Equal(t, client.OwnershipLeased, s.OwnershipState)
	assert.True(t, s.LeaseExpiresAt.After(start.Add(2*ttl)), "the expiry moved forward")
	_, err := task.Complete(ctx, nil)
	require.NoError(t, err)
}

func TestLeaseLossCancelsTheTaskContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{})
	w := e.worker(t, client.WorkerOptions{LeaseTTL: 600 * time.Millisecond})
	task := claim(t, w)
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	r := e.fcall(t, "ff_revoke_lease", []string{ek.Core(), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LeaseExpiry(), pk.WorkerLeases(w.InstanceID())},
		id.String(), "", "operator")
	require.Equal(t, "OK", r[1])

	select {
	case <-task.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("lease loss not surfaced")
	}
	cause := context.Cause(task.Context())
	assert.ErrorIs(t, cause, client.ErrLeaseLost)
	assert.ErrorIs(t, cause, client.ErrLeaseRevoked)
	var lost *client.LeaseLostError
	require.ErrorAs(t, cause, &lost)
	assert.Equal(t, id, lost.ExecutionID)

	_, err := task.Complete(ctx, nil)
	assert.ErrorIs(t, err, client.ErrLeaseRevoked)
	assert.Equal(t, 0, w.InFlight())
}

func TestDeadWorkersTaskIsReclaimed(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"abandon", "close"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			ctx := testCtx(t)
			id := e.create(t, client.CreateRequest{Payload: []byte("work")})
			dead, err := e.c.NewWorker(ctx, client.WorkerOptions{WorkerID: "w", InstanceID: "dead",
				Lanes: []string{"default"}, LeaseTTL: 500 * time.Millisecond})
			require.NoError(t, err)
			task := claim(t, dead)
			if how == "abandon" {
				task.Abandon() // the process stops renewing and never answers
			} else {
				short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
				require.NoError(t, dead.Close(short)) // shutdown before the task finished
				cancel()
			}
			e.waitMarkedExpired(t, id)
			s := e.state(t, id)
			require.Equal(t, client.OwnershipLeaseExpiredReclaimable, s.OwnershipState)

			alive := e.worker(t, client.WorkerOptions{WorkerID: "w2", InstanceID: "alive"})
			re := claim(t, alive)
			assert.Equal(t, id, re.ID())
			assert.Equal(t, "reclaim", re.AttemptType())
			assert.Equal(t, uint32(1), re.AttemptIndex())
			assert.Equal(t, uint64(2), re.LeaseEpoch())
			assert.Equal(t, []byte("work"), re.Payload())
			_, err = re.Complete(ctx, []byte("ok"))
			require.NoError(t, err)

			s = e.state(t, id)
			assert.Equal(t, client.OutcomeSuccess, s.TerminalOutcome)
			assert.Equal(t, 1, s.ReclaimCount)
			old := e.str(t, "HGET", keys.Exec(id).Attempt(0), "attempt_state")
			assert.Equal(t, "interrupted_reclaimed", old)
			if how == "abandon" {
				_, err = task.Complete(ctx, nil)
				assert.ErrorIs(t, err, client.ErrTaskFinished)
				require.NoError(t, dead.Close(ctx))
			}
		})
	}
}

func TestReclaimCapFailsTheExecution(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{MaxReclaims: 1})
	crash := func(instance string) {
		w, err := e.c.NewWorker(ctx, client.WorkerOptions{WorkerID: "w", InstanceID: instance,
			Lanes: []string{"default"}, LeaseTTL: 300 * time.Millisecond})
		require.NoError(t, err)
		claim(t, w).Abandon()
		require.NoError(t, w.Close(ctx))
		e.waitMarkedExpired(t, id)
	}
	crash("first")  // initial attempt dies
	crash("second") // the one reclaim allowed dies too
	w := e.worker(t, client.WorkerOptions{InstanceID: "third"})
	claimNone(t, e, w)
	s := e.state(t, id)
	assert.Equal(t, client.OutcomeFailed, s.TerminalOutcome)
	assert.Equal(t, "max_reclaims_exceeded", s.FailureReason)
}

func TestTaskErrorsAreTyped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	e.create(t, client.CreateRequest{})
	w := e.worker(t, client.WorkerOptions{})
	task := claim(t, w)
	_, err := task.Fail(ctx, "bad\x00reason", client.FailOptions{})
	assert.ErrorIs(t, err, client.ErrInvalidArgument)
	assert.Equal(t, 1, w.InFlight(), "a refused argument does not end the task")
	_, err = task.Complete(ctx, nil)
	require.NoError(t, err)
	assert.False(t, errors.Is(err, client.ErrLeaseLost))
}

func TestReplayedFailAndCancelAreAlreadyApplied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	retrying := e.create(t, client.CreateRequest{Lane: "r", Retry: &client.RetryPolicy{MaxRetries: 3, Backoff: client.FixedBackoff(time.Hour)}})
	e.create(t, client.CreateRequest{Lane: "t"})
	e.create(t, client.CreateRequest{Lane: "c"})
	w := e.worker(t, client.WorkerOptions{InstanceID: "i", Lanes: []string{"r", "t", "c"}, MaxConcurrentTasks: 3})
	tasks := map[string]*client.Task{}
	for i := 0; i < 3; i++ {
		task := claim(t, w)
		tasks[task.Lane()] = task
	}
	failRaw := func(task *client.Task, retry string) {
		id, i := task.ID(), task.AttemptIndex()
		ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
		r := e.fcall(t, "ff_fail_execution",
			[]string{ek.Core(), ek.Attempt(i), pk.LeaseExpiry(), pk.WorkerLeases("i"), pk.LaneTerminal(task.Lane()),
				pk.LaneDelayed(task.Lane()), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LaneActive(task.Lane()),
				ek.StreamMeta(i), pk.AttemptTimeout(), pk.ExecutionDeadline()},
			id.String(), task.LeaseID(), itoa(int64(task.LeaseEpoch())), task.AttemptID(), "first", "", retry)
		require.Equal(t, "OK", r[1], r)
	}
	// Each first call committed and its reply was lost.
	failRaw(tasks["r"], `{"max_retries":3,"backoff":{"type":"fixed","delay_ms":3600000}}`)
	failRaw(tasks["t"], "")
	// The replay check compares the lease epoch and attempt id, which a
	// cancel by someone else leaves unchanged too: the execution ends as
	// this call asked, so it is reported as already applied (as in
	// FlowFabric).
	_, err := e.c.Cancel(ctx, tasks["c"].ID(), client.CancelOptions{})
	require.NoError(t, err)

	out, err := tasks["r"].Fail(ctx, "again", client.FailOptions{})
	require.NoError(t, err)
	assert.Equal(t, client.Outcome{AlreadyApplied: true, RetryScheduled: true}, out)
	assert.Equal(t, 1, e.state(t, retrying).RetryCount, "the replay scheduled nothing more")
	out, err = tasks["t"].Fail(ctx, "again", client.FailOptions{})
	require.NoError(t, err)
	assert.Equal(t, client.Outcome{AlreadyApplied: true}, out)
	out, err = tasks["c"].Cancel(ctx, "mine")
	require.NoError(t, err)
	assert.True(t, out.AlreadyApplied)
	assert.Equal(t, 0, w.InFlight())
}

func TestStaleTaskIsFencedAfterATakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{})
	a := e.worker(t, client.WorkerOptions{WorkerID: "a", InstanceID: "a"})
	b := e.worker(t, client.WorkerOptions{WorkerID: "b", InstanceID: "b"})
	old := claim(t, a)
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	r := e.fcall(t, "ff_revoke_lease", []string{ek.Core(), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LeaseExpiry(), pk.WorkerLeases("a")},
		id.String(), old.LeaseID(), "operator moved it")
	require.Equal(t, "OK", r[1])

	_, err := b.ReclaimFromGrant(ctx, id)
	assert.ErrorIs(t, err, client.ErrInvalidClaimGrant, "no reclaim grant yet")
	r = e.fcall(t, "ff_issue_reclaim_grant", []string{ek.Core(), ek.ClaimGrant(), pk.LeaseExpiry()},
		id.String(), "b", "scheduler", "default", "", "60000", "", "", "")
	require.Equal(t, "OK", r[1], r)
	taken, err := b.ReclaimFromGrant(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "reclaim", taken.AttemptType())

	_, err = old.Complete(ctx, []byte("late"))
	assert.ErrorIs(t, err, client.ErrStaleLease, "the old lease's fence no longer matches")
	_, err = taken.Complete(ctx, []byte("ok"))
	require.NoError(t, err)
	res, _ := e.c.Result(ctx, id)
	assert.Equal(t, []byte("ok"), res)
}

func TestForeignGrantIsSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.create(t, client.CreateRequest{})
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	r := e.fcall(t, "ff_issue_claim_grant", []string{ek.Core(), ek.ClaimGrant(), pk.LaneEligible("default")},
		id.String(), "someone-else", "x", "default", "", "60000", "", "", "")
	require.Equal(t, "OK", r[1])
	w := e.worker(t, client.WorkerOptions{})
	claimNone(t, e, w) // grant_already_exists: skipped, not an error
	assert.Equal(t, "eligible_now", e.state(t, id).EligibilityState)
}
