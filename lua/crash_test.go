package lua

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
)

// State FlowFabric's own callers reach on which FlowFabric's library
// raises a Lua error; ours answers (docs/compat.md, "FlowFabric crashes we
// do not reproduce").

// suspendedWithoutTimeout claims rfEID and suspends it on spWP with no
// timeout, as a worker waiting for a signal does.
func suspendedWithoutTimeout(t *testing.T, c valkey.Client) {
	t.Helper()
	claimedExecution(t, c, "00112233445566778899aabbccddeeff")
	got := replyOf(t, suspend(c, `{"required_signal_names":["go"]}`, nil, "0"))
	require.Equal(t, []string{"1", "OK"}, got[:2], "%v", got)
	require.Equal(t, "", hgetall(t, c, rfExecKey("suspension:current"))["timeout_at"])
}

func expireSuspension(c valkey.Client) valkey.ValkeyResult {
	return fcallArgs(c, "ff_expire_suspension",
		[]string{rfCore, rfExecKey("suspension:current"), spWPKey(spWP), spWPKey(spWP) + ":condition",
			"ff:attempt:{fp:7}:" + rfEID + ":0", "ff:stream:{fp:7}:" + rfEID + ":0:meta",
			rfIdx("suspension_timeout"), rfIdx("lane:" + rfLane + ":suspended"),
			rfIdx("lane:" + rfLane + ":terminal"), rfIdx("lane:" + rfLane + ":eligible"),
			rfIdx("lane:" + rfLane + ":delayed"), rfExecKey("lease:history")},
		rfEID)
}

// A suspension without a timeout never times out: not_yet_due, nothing
// written (FlowFabric fails comparing its empty timeout_at).
func TestExpireSuspensionWithoutTimeoutIsNeverDue(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	suspendedWithoutTimeout(t, c)
	before := keyspace(t, c)
	assert.Equal(t, []string{"1", "OK", "not_yet_due"}, replyOf(t, expireSuspension(c)))
	assert.Equal(t, before, keyspace(t, c))
	assert.Equal(t, "suspended", hgetall(t, c, rfCore)["lifecycle_phase"])
}

func promoteDelayed(c valkey.Client, nowMs int64) valkey.ValkeyResult {
	return fcallArgs(c, "ff_promote_delayed",
		[]string{rfCore, rfIdx("lane:" + rfLane + ":delayed"), rfIdx("lane:" + rfLane + ":eligible")},
		rfEID, strconv.FormatInt(nowMs, 10))
}

// An operator's resume with a delay leaves delay_until empty (as in
// FlowFabric) and schedules the execution in the delayed set: promoting it
// goes by that score (FlowFabric fails comparing the empty delay_until, and
// the execution would stay delayed for good).
func TestPromoteDelayedWithoutDelayUntilUsesTheDelayedScore(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	ctx := context.Background()
	suspendedWithoutTimeout(t, c)
	got := replyOf(t, fcallArgs(c, "ff_resume_execution",
		[]string{rfCore, rfExecKey("suspension:current"), spWPKey(spWP), spWPKey(spWP) + ":signals",
			rfIdx("suspension_timeout"), rfIdx("lane:" + rfLane + ":eligible"),
			rfIdx("lane:" + rfLane + ":delayed"), rfIdx("lane:" + rfLane + ":suspended")},
		rfEID, "operator", "60000"))
	require.Equal(t, []string{"1", "OK", "delayed"}, got)
	core := hgetall(t, c, rfCore)
	require.Equal(t, "not_eligible_until_time", core["eligibility_state"])
	require.Equal(t, "", core["delay_until"])
	due, err := c.Do(ctx, c.B().Zscore().Key(rfIdx("lane:"+rfLane+":delayed")).Member(rfEID).Build()).AsFloat64()
	require.NoError(t, err)

	// Before the scheduled end of the delay: left as it is.
	before := keyspace(t, c)
	assert.Equal(t, []string{"1", "OK", "not_yet_due"}, replyOf(t, promoteDelayed(c, int64(due)-1)))
	assert.Equal(t, before, keyspace(t, c))

	// At it: promoted, at the caller's time.
	assert.Equal(t, []string{"1", "OK", "promoted"}, replyOf(t, promoteDelayed(c, int64(due))))
	core = hgetall(t, c, rfCore)
	assert.Equal(t, "eligible_now", core["eligibility_state"])
	assert.Equal(t, strconv.FormatInt(int64(due), 10), core["last_transition_at"])
	n, err := c.Do(ctx, c.B().Zcard().Key(rfIdx("lane:"+rfLane+":delayed")).Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n)
	_, err = c.Do(ctx, c.B().Zscore().Key(rfIdx("lane:"+rfLane+":eligible")).Member(rfEID).Build()).AsFloat64()
	assert.NoError(t, err, "the execution is in the eligible set")
}

// Delayed without delay_until and in no delayed set either: nothing could
// ever promote it later, so it is promoted now.
func TestPromoteDelayedWithNoDueTimeAtAllPromotes(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	ctx := context.Background()
	require.Equal(t, "1", replyOf(t, createExecution(t, c, ""))[0])
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(rfCore).FieldValue().
		FieldValue("eligibility_state", "not_eligible_until_time").FieldValue("delay_until", "").Build()).Error())
	assert.Equal(t, []string{"1", "OK", "promoted"}, replyOf(t, promoteDelayed(c, 1)))
	assert.Equal(t, "eligible_now", hgetall(t, c, rfCore)["eligibility_state"])
}
