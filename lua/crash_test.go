package lua

import (
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
	c := refusalServer(t)
	suspendedWithoutTimeout(t, c)
	before := keyspace(t, c)
	assert.Equal(t, []string{"1", "OK", "not_yet_due"}, replyOf(t, expireSuspension(c)))
	assert.Equal(t, before, keyspace(t, c))
	assert.Equal(t, "suspended", hgetall(t, c, rfCore)["lifecycle_phase"])
}
