package client_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreateSoloWritesTheExecution(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	r, err := e.c.CreateExecution(ctx, client.CreateRequest{
		Lane: "workers-a", Kind: "resize", Priority: 5, Payload: []byte("in\x00put"),
		Tags:                 map[string]string{"app.user": "42"},
		Retry:                &client.RetryPolicy{MaxRetries: 2, Backoff: client.FixedBackoff(time.Second)},
		AttemptTimeout:       30 * time.Second,
		RequiredCapabilities: []string{"gpu", "cuda", "gpu"},
	})
	require.NoError(t, err)
	assert.False(t, r.Duplicate)
	assert.Equal(t, "waiting", r.PublicState)
	// Solo ids live in the lane's partition: CRC16("workers-a") % 256 = 193.
	assert.Equal(t, uint16(193), r.ID.Partition().Index)

	s := e.state(t, r.ID)
	assert.Equal(t, client.PhaseRunnable, s.LifecyclePhase)
	assert.Equal(t, "eligible_now", s.EligibilityState)
	assert.Equal(t, "waiting", s.PublicState)
	assert.Equal(t, "pending_first_attempt", s.AttemptState)
	assert.Equal(t, "workers-a", s.Lane)
	assert.Equal(t, "default", s.Namespace)
	assert.Equal(t, "resize", s.Kind)
	assert.Equal(t, 5, s.Priority)
	assert.Equal(t, -1, s.CurrentAttemptIndex)
	assert.Equal(t, []string{"cuda", "gpu"}, s.RequiredCapabilities)
	assert.WithinDuration(t, time.Now(), s.CreatedAt, time.Minute)

	ek := keys.Exec(r.ID)
	assert.Equal(t, "in\x00put", e.str(t, "GET", ek.Payload()))
	assert.Equal(t, "42", e.str(t, "HGET", ek.Tags(), "app.user"))
	var pol map[string]any
	require.NoError(t, json.Unmarshal([]byte(e.str(t, "GET", ek.Policy())), &pol))
	assert.Equal(t, map[string]any{"max_retries": 2.0, "backoff": map[string]any{"type": "fixed", "delay_ms": 1000.0}}, pol["retry_policy"])
	assert.Equal(t, map[string]any{"attempt_timeout_ms": 30000.0}, pol["timeout_policy"])

	score, ok := e.zscore(t, keys.FlowPart(r.ID.Partition()).LaneEligible("workers-a"), r.ID.String())
	require.True(t, ok, "in the lane's eligible set")
	assert.Equal(t, float64(-5*1_000_000_000_000+s.CreatedAt.UnixMilli()), score)
}

func TestCreateDelayedWithDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	deadline := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
	id := e.create(t, client.CreateRequest{DelayUntil: until, Deadline: deadline})
	s := e.state(t, id)
	assert.Equal(t, "delayed", s.PublicState)
	assert.Equal(t, "waiting_for_delay", s.BlockingReason)
	assert.True(t, until.Equal(s.DelayUntil))
	pk := keys.FlowPart(id.Partition())
	score, ok := e.zscore(t, pk.LaneDelayed("default"), id.String())
	require.True(t, ok)
	assert.Equal(t, float64(until.UnixMilli()), score)
	score, ok = e.zscore(t, pk.ExecutionDeadline(), id.String())
	require.True(t, ok)
	assert.Equal(t, float64(deadline.UnixMilli()), score)
	_, ok = e.zscore(t, pk.LaneEligible("default"), id.String())
	assert.False(t, ok)
}

func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	req := client.CreateRequest{Lane: "default", IdempotencyKey: "order-7"}
	first, err := e.c.CreateExecution(ctx, req)
	require.NoError(t, err)
	again, err := e.c.CreateExecution(ctx, req)
	require.NoError(t, err)
	assert.True(t, again.Duplicate)
	assert.Equal(t, first.ID, again.ID, "the idempotency key returns the first execution")
	ttl, err := e.do(t, "PTTL", keys.FlowPart(first.ID.Partition()).Idem("default", "order-7")).AsInt64()
	require.NoError(t, err)
	assert.InDelta(t, client.DefaultIdempotencyTTL.Milliseconds(), ttl, 60_000)

	// A deterministic id is idempotent by itself.
	id := keys.SoloExecutionID(e.c.Partitions(), "default", keys.NewUUID())
	r1, err := e.c.CreateExecution(ctx, client.CreateRequest{ID: id, Lane: "default"})
	require.NoError(t, err)
	r2, err := e.c.CreateExecution(ctx, client.CreateRequest{ID: id, Lane: "default"})
	require.NoError(t, err)
	assert.False(t, r1.Duplicate)
	assert.True(t, r2.Duplicate)
	assert.Equal(t, id, r2.ID)
}

func TestCreateRejectsBadInputWithoutWriting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	// The ID case needs a flow whose partition is not lane "zzz"'s solo
	// partition; a random flow lands there once in 256 tries.
	soloID := keys.SoloExecutionID(e.c.Partitions(), "zzz", keys.NewUUID())
	fid := keys.NewFlowID()
	for e.c.Partitions().FlowPartition(fid) == soloID.Partition() {
		fid = keys.NewFlowID()
	}
	cases := []struct {
		field string
		req   client.CreateRequest
	}{
		{"Lane", client.CreateRequest{}},
		{"Lane", client.CreateRequest{Lane: strings.Repeat("x", 65)}},
		{"Lane", client.CreateRequest{Lane: "tab\there"}},
		{"Priority", client.CreateRequest{Lane: "l", Priority: 9001}},
		{"Priority", client.CreateRequest{Lane: "l", Priority: -1}},
		{"Payload", client.CreateRequest{Lane: "l", Payload: make([]byte, client.DefaultLimits().MaxPayloadBytes+1)}},
		{"Tags", client.CreateRequest{Lane: "l", Tags: manyTags(client.DefaultLimits().MaxTags + 1)}},
		{`Tags["k"]`, client.CreateRequest{Lane: "l", Tags: map[string]string{"k": "bad\xff"}}},
		{"RequiredCapabilities[1]", client.CreateRequest{Lane: "l", RequiredCapabilities: []string{"gpu", "a,b"}}},
		{"RequiredCapabilities[0]", client.CreateRequest{Lane: "l", RequiredCapabilities: []string{""}}},
		{"RequiredCapabilities[0]", client.CreateRequest{Lane: "l", RequiredCapabilities: []string{"gpu "}}},
		{"RequiredCapabilities", client.CreateRequest{Lane: "l", RequiredCapabilities: manyCaps(257)}},
		{"Delay", client.CreateRequest{Lane: "l", Delay: time.Second, DelayUntil: time.Now()}},
		{"Delay", client.CreateRequest{Lane: "l", Delay: -time.Second}},
		{"Deadline", client.CreateRequest{Lane: "l", Deadline: time.Now().Add(-time.Second)}},
		{"Retry.MaxRetries", client.CreateRequest{Lane: "l", Retry: &client.RetryPolicy{MaxRetries: -1, Backoff: client.FixedBackoff(0)}}},
		{"Retry.Backoff.Type", client.CreateRequest{Lane: "l", Retry: &client.RetryPolicy{MaxRetries: 1}}},
		{"Retry.Backoff.Multiplier", client.CreateRequest{Lane: "l", Retry: &client.RetryPolicy{MaxRetries: 1, Backoff: client.ExponentialBackoff(time.Second, time.Minute, 0.5)}}},
		{"IdempotencyKey", client.CreateRequest{Lane: "l", IdempotencyKey: strings.Repeat("k", 257)}},
		{"IdempotencyTTL", client.CreateRequest{Lane: "l", IdempotencyTTL: time.Hour}},
		{"ID", client.CreateRequest{Lane: "l", Flow: &fid, ID: soloID}},
	}
	for _, tc := range cases {
		_, err := e.c.CreateExecution(ctx, tc.req)
		require.Error(t, err, tc.field)
		assert.ErrorIs(t, err, client.ErrInvalidArgument, tc.field)
		var ve *client.ValidationError
		require.ErrorAs(t, err, &ve, tc.field)
		assert.Equal(t, tc.field, ve.Field, err.Error())
	}
	assert.Zero(t, e.dbsize(t), "nothing was written")
}

func manyTags(n int) map[string]string {
	m := map[string]string{}
	for i := 0; i < n; i++ {
		m["t."+strings.Repeat("x", i%50)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	return m
}

func manyCaps(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "cap" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	return out
}

func TestCreateInFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	fid := e.createFlow(t)
	r, err := e.c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Flow: &fid, IdempotencyKey: "member-1"})
	require.NoError(t, err)
	assert.Equal(t, e.c.Partitions().FlowPartition(fid), r.ID.Partition(), "members share the flow's partition")
	assert.Equal(t, fid.String(), e.state(t, r.ID).FlowID)
	fk := keys.Flow(e.c.Partitions(), fid)
	isMember, err := e.do(t, "SISMEMBER", fk.Members(), r.ID.String()).AsBool()
	require.NoError(t, err)
	assert.True(t, isMember)

	// A retry of the same create is a duplicate and stays a member.
	again, err := e.c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Flow: &fid, IdempotencyKey: "member-1"})
	require.NoError(t, err)
	assert.True(t, again.Duplicate)
	assert.Equal(t, r.ID, again.ID)
	assert.Equal(t, "1", e.str(t, "HGET", fk.Core(), "node_count"))
}

func TestCreateInMissingOrFinishedFlowWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	missing := keys.NewFlowID()
	_, err := e.c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Flow: &missing})
	assert.ErrorIs(t, err, client.ErrFlowNotFound)
	assert.Zero(t, e.dbsize(t))

	fid := e.createFlow(t)
	fk := keys.Flow(e.c.Partitions(), fid)
	e.do(t, "HSET", fk.Core(), "public_flow_state", "cancelled")
	before := e.dbsize(t)
	_, err = e.c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Flow: &fid})
	assert.ErrorIs(t, err, client.ErrFlowAlreadyTerminal)
	assert.Equal(t, before, e.dbsize(t))
}

func TestChangePriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Priority: 1})
	require.NoError(t, e.c.ChangePriority(ctx, id, 9000))
	s := e.state(t, id)
	assert.Equal(t, 9000, s.Priority)
	score, _ := e.zscore(t, keys.FlowPart(id.Partition()).LaneEligible("default"), id.String())
	assert.Equal(t, float64(-9000*1_000_000_000_000+s.CreatedAt.UnixMilli()), score)

	assert.ErrorIs(t, e.c.ChangePriority(ctx, id, 9001), client.ErrInvalidArgument)
	assert.Equal(t, 9000, e.state(t, id).Priority, "a refused priority changes nothing")

	delayed := e.create(t, client.CreateRequest{Delay: time.Hour})
	assert.ErrorIs(t, e.c.ChangePriority(ctx, delayed, 3), client.ErrExecutionNotEligible)

	ghost := keys.SoloExecutionID(e.c.Partitions(), "default", keys.NewUUID())
	assert.ErrorIs(t, e.c.ChangePriority(ctx, ghost, 3), client.ErrExecutionNotFound)
}

func TestSetTags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{})
	require.NoError(t, e.c.SetTags(ctx, id, map[string]string{"billing.customer": "c1", "app.step": "2"}))
	require.NoError(t, e.c.SetTags(ctx, id, map[string]string{"app.step": "3"}), "overwriting is fine")
	tags, err := e.do(t, "HGETALL", keys.Exec(id).Tags()).AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"billing.customer": "c1", "app.step": "3"}, tags)

	err = e.c.SetTags(ctx, id, map[string]string{"NoNamespace": "x"})
	var ve *client.ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, `tags["NoNamespace"]`, ve.Field)

	ghost := keys.SoloExecutionID(e.c.Partitions(), "default", keys.NewUUID())
	assert.ErrorIs(t, e.c.SetTags(ctx, ghost, map[string]string{"app.x": "1"}), client.ErrExecutionNotFound)
}

func TestCancelWaitingExecution(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{})
	r, err := e.c.Cancel(ctx, id, client.CancelOptions{Reason: "not needed"})
	require.NoError(t, err)
	assert.Equal(t, client.PhaseRunnable, r.PreviousPhase)
	s := e.state(t, id)
	assert.Equal(t, client.OutcomeCancelled, s.TerminalOutcome)
	assert.Equal(t, "not needed", s.CancellationReason)
	assert.Equal(t, "operator_override", s.CancelledBy)
	pk := keys.FlowPart(id.Partition())
	_, inEligible := e.zscore(t, pk.LaneEligible("default"), id.String())
	_, inTerminal := e.zscore(t, pk.LaneTerminal("default"), id.String())
	assert.False(t, inEligible)
	assert.True(t, inTerminal)

	again, err := e.c.Cancel(ctx, id, client.CancelOptions{})
	require.NoError(t, err, "a repeated cancel is not an error")
	assert.True(t, again.AlreadyCancelled)

	ghost := keys.SoloExecutionID(e.c.Partitions(), "default", keys.NewUUID())
	_, err = e.c.Cancel(ctx, ghost, client.CancelOptions{})
	assert.ErrorIs(t, err, client.ErrExecutionNotFound)
}

func TestGetExecutionNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.c.GetExecution(testCtx(t), keys.SoloExecutionID(e.c.Partitions(), "x", keys.NewUUID()))
	assert.ErrorIs(t, err, client.ErrExecutionNotFound)
}

func TestNewChecksPartitionConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	_, err := client.New(ctx, e.vk, client.Options{RequireStoredPartitions: true})
	require.Error(t, err, "a missing hash is refused when required")

	e.do(t, "HSET", keys.ConfigPartitions, "num_flow_partitions", "128", "num_budget_partitions", "32", "num_quota_partitions", "32")
	c, err := client.New(ctx, e.vk, client.Options{})
	require.NoError(t, err)
	assert.Equal(t, uint16(128), c.Partitions().Flow, "the stored layout is adopted")

	_, err = client.New(ctx, e.vk, client.Options{Partitions: keys.DefaultPartitionConfig()})
	var pm *keys.PartitionMismatchError
	require.ErrorAs(t, err, &pm)
	assert.Contains(t, err.Error(), "configured 256, stored 128")
}
