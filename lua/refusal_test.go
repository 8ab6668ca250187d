package lua

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/sdk/testserver"
)

// Inputs FlowFabric's own callers never send, on which FlowFabric stores
// nonsense or fails half-way: ours refuses them with an error reply and
// writes nothing (docs/compat.md, "Deliberate refusals").

const (
	rfEID   = "{fp:7}:e0000000-0000-4000-8000-00000000000a"
	rfCore  = "ff:exec:{fp:7}:" + rfEID + ":core"
	rfLane  = "default"
	rfBID   = "b0000000-0000-4000-8000-00000000000b"
	rfBudge = "ff:budget:{b:3}:" + rfBID
)

func rfExecKey(suffix string) string { return "ff:exec:{fp:7}:" + rfEID + ":" + suffix }
func rfIdx(name string) string       { return "ff:idx:{fp:7}:" + name }

// keyspace is every key with its DUMP, so any write (value, type, a new or
// deleted key) shows as a difference.
func keyspace(t *testing.T, c valkey.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	names, err := c.Do(ctx, c.B().Keys().Pattern("*").Build()).AsStrSlice()
	require.NoError(t, err)
	out := make(map[string]string, len(names))
	for _, k := range names {
		d, err := c.Do(ctx, c.B().Dump().Key(k).Build()).ToString()
		require.NoError(t, err)
		out[k] = d
	}
	return out
}

func fcallArgs(c valkey.Client, fn string, keys []string, args ...string) valkey.ValkeyResult {
	return c.Do(context.Background(), c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

// replyOf returns a library reply row as strings.
func replyOf(t *testing.T, r valkey.ValkeyResult) []string {
	t.Helper()
	vals, err := r.ToArray()
	require.NoError(t, err)
	out := make([]string, len(vals))
	for i, v := range vals {
		if n, err := v.AsInt64(); err == nil {
			out[i] = map[int64]string{0: "0", 1: "1"}[n]
			continue
		}
		s, err := v.ToString()
		require.NoError(t, err)
		out[i] = s
	}
	return out
}

func refusalServer(t *testing.T) valkey.Client {
	t.Helper()
	srv := testserver.New(t)
	c := srv.Client(t)
	loadRaw(t, c, guardedLibrary())
	return c
}

func createExecution(t *testing.T, c valkey.Client, tagsJSON string) valkey.ValkeyResult {
	t.Helper()
	return fcallArgs(c, "ff_create_execution",
		[]string{rfCore, rfExecKey("payload"), rfExecKey("policy"), rfExecKey("tags"),
			rfIdx("lane:" + rfLane + ":eligible"), "ff:noop:{fp:7}", rfIdx("execution_deadline"), rfIdx("all_executions")},
		rfEID, "ns", rfLane, "task", "0", "tester", "{}", "", "", "", tagsJSON, "", "7")
}

func TestRefusesNullTagValueWritingNothing(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	before := keyspace(t, c)
	got := replyOf(t, createExecution(t, c, `{"app.owner":"alice","app.gone":null}`))
	assert.Equal(t, []string{"0", "invalid_input", "tags_json value of app.gone must be a string"}, got)
	assert.Equal(t, before, keyspace(t, c), "a refused create writes nothing")

	// The same create with scalar tags goes through (numbers as FlowFabric
	// stores them).
	require.Equal(t, "1", replyOf(t, createExecution(t, c, `{"app.owner":"alice","app.tier":2}`))[0])
	tags, err := c.Do(context.Background(), c.B().Hgetall().Key(rfExecKey("tags")).Build()).AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"app.owner": "alice", "app.tier": "2"}, tags)
}

func TestRefusesEmptyBudgetResetIntervalWritingNothing(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	keys := []string{rfBudge, rfBudge + ":limits", rfBudge + ":usage", "ff:idx:{b:3}:budget_resets", "ff:idx:{b:3}:budget_policies"}
	create := func(interval string) []string {
		return replyOf(t, fcallArgs(c, "ff_create_budget", keys,
			rfBID, "lane", "default", "strict", "fail", "warn", interval, "1700000000000", "1", "tokens", "100", "80"))
	}
	before := keyspace(t, c)
	assert.Equal(t, []string{"0", "invalid_input", "reset_interval_ms must be a number, got: "}, create(""))
	assert.Equal(t, before, keyspace(t, c), "a refused create writes nothing")

	assert.Equal(t, []string{"1", "OK", rfBID}, create("0"))
}

func TestRefusesNonObjectAttemptPolicyWritingNothing(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	require.Equal(t, "1", replyOf(t, createExecution(t, c, ""))[0])
	grant := replyOf(t, fcallArgs(c, "ff_issue_claim_grant",
		[]string{rfCore, rfExecKey("claim_grant"), rfIdx("lane:" + rfLane + ":eligible")},
		rfEID, "worker-1", "worker-1-i1", rfLane, "", "60000", "", "", ""))
	require.Equal(t, "1", grant[0], "grant: %v", grant)

	claim := func(policy string) []string {
		att := "ff:attempt:{fp:7}:" + rfEID + ":0"
		return replyOf(t, fcallArgs(c, "ff_claim_execution",
			[]string{rfCore, rfExecKey("claim_grant"), rfIdx("lane:" + rfLane + ":eligible"), rfIdx("lease_expiry"),
				rfIdx("worker:worker-1-i1:leases"), att, att + ":usage", att + ":policy", rfExecKey("attempts"),
				rfExecKey("lease:current"), rfExecKey("lease:history"), rfIdx("lane:" + rfLane + ":active"),
				rfIdx("attempt_timeout"), rfIdx("execution_deadline")},
			rfEID, "worker-1", "worker-1-i1", rfLane, "", "11111111-0000-4000-8000-000000000001", "30000", "20000",
			"aaaaaaaa-0000-4000-8000-000000000001", policy, "", ""))
	}
	for _, policy := range []string{`[1,2]`, `5`, `"text"`, `{not json`} {
		before := keyspace(t, c)
		got := claim(policy)
		require.Len(t, got, 3, policy)
		assert.Equal(t, []string{"0", "invalid_policy_json"}, got[:2], policy)
		assert.Equal(t, before, keyspace(t, c), "a refused claim writes nothing (%s)", policy)
	}
	// The grant survived the refusals: a well-formed claim goes through.
	assert.Equal(t, "1", claim(`{"timeout_ms":45000}`)[0])
}

// A liveness TTL PX cannot take (zero, negative, fractional) fails
// FlowFabric's registration at its first write; ours refuses it with
// nothing written, and a whole positive TTL registers.
func TestRefusesUnusableWorkerTTLWritingNothing(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	keys := []string{"ff:worker:ns:w-1:alive", "ff:worker:ns:w-1:caps", "ff:idx:ns:workers"}
	register := func(ttl string) []string {
		return replyOf(t, fcallArgs(c, "ff_register_worker", keys, "w-1", "w", "default", "", ttl, "1700000000000"))
	}
	before := keyspace(t, c)
	for _, ttl := range []string{"0", "-5", "1.5"} {
		assert.Equal(t, []string{"0", "invalid_input", "ttl_ms must be a positive whole number, got: " + ttl}, register(ttl), ttl)
		assert.Equal(t, before, keyspace(t, c), "a refused registration writes nothing (ttl %s)", ttl)
	}
	assert.Equal(t, []string{"1", "OK", "registered"}, register("30000"))
}

// ff_set_flow_tags moves tags an older layout kept on the flow core into
// the flow's tags hash on its first call, once (tags_migrated=1).
func TestFlowTagsMigrateInlineTagsOnce(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	ctx := context.Background()
	core, tags := "ff:flow:{fp:5}:f0000000-0000-4000-8000-000000000005:core", "ff:flow:{fp:5}:f0000000-0000-4000-8000-000000000005:tags"
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(core).FieldValue().FieldValue("flow_id", "f0000000-0000-4000-8000-000000000005").FieldValue("legacy.owner", "ops").Build()).Error())
	assert.Equal(t, []string{"1", "OK", "1"}, replyOf(t, fcallArgs(c, "ff_set_flow_tags", []string{core, tags}, "app.tier", "gold")))
	got, err := c.Do(ctx, c.B().Hgetall().Key(tags).Build()).AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"legacy.owner": "ops", "app.tier": "gold"}, got)
	inline, err := c.Do(ctx, c.B().Hexists().Key(core).Field("legacy.owner").Build()).AsBool()
	require.NoError(t, err)
	assert.False(t, inline, "moved off the core")

	// Once marked, a tag-like field on the core is no longer scanned.
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(core).FieldValue().FieldValue("late.field", "x").Build()).Error())
	assert.Equal(t, []string{"1", "OK", "1"}, replyOf(t, fcallArgs(c, "ff_set_flow_tags", []string{core, tags}, "app.tier", "silver")))
	still, err := c.Do(ctx, c.B().Hexists().Key(core).Field("late.field").Build()).AsBool()
	require.NoError(t, err)
	assert.True(t, still)
}

// A jitter that is not a number, reached when the rate limit is hit (where
// FlowFabric's admission fails on it), is refused; the window keeps its
// admissions.
func TestRefusesNonNumericJitterAtTheLimit(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	q := "ff:quota:{q:1}:d0000000-0000-4000-8000-000000000001"
	admit := func(eid, now, jitter string) []string {
		return replyOf(t, fcallArgs(c, "ff_check_admission_and_record",
			[]string{q + ":window:default", q + ":concurrency", q, q + ":admitted:" + eid, q + ":admitted_set"},
			now, "60", "1", "0", eid, jitter))
	}
	assert.Equal(t, []string{"ADMITTED"}, admit("{fp:1}:e1", "1700000000000", "soon"), "below the limit the jitter is not used")
	before := keyspace(t, c)
	assert.Equal(t, []string{"0", "invalid_input", "jitter_ms must be a number, got: soon"}, admit("{fp:1}:e2", "1700000001000", "soon"))
	assert.Equal(t, before, keyspace(t, c))
	// (replyOf reads numbers as the 1/0 status flag: read this one raw.)
	raw, err := fcallArgs(c, "ff_check_admission_and_record",
		[]string{q + ":window:default", q + ":concurrency", q, q + ":admitted:{fp:1}:e2", q + ":admitted_set"},
		"1700000001000", "60", "1", "0", "{fp:1}:e2", "0").AsStrSlice()
	require.NoError(t, err)
	assert.Equal(t, []string{"RATE_EXCEEDED", "59000"}, raw)
}

// Edge input FlowFabric's callers cannot send (they send integers and
// typed JSON), on which FlowFabric fails part-way or stores nonsense: each
// is refused with invalid_input and nothing written (docs/compat.md,
// "Deliberate refusals").
func TestRefusesEdgeNumbersWritingNothing(t *testing.T) {
	t.Parallel()
	att := "ff:attempt:{fp:7}:" + rfEID + ":0"
	lane := func(s string) string { return rfIdx("lane:" + rfLane + ":" + s) }
	grantKeys := []string{rfCore, rfExecKey("claim_grant"), lane("eligible")}
	renew := func(c valkey.Client, ttl, grace string) valkey.ValkeyResult {
		return fcallArgs(c, "ff_renew_lease",
			[]string{rfCore, rfExecKey("lease:current"), rfExecKey("lease:history"), rfIdx("lease_expiry")},
			rfEID, "0", spAtt, spLease, "1", ttl, grace)
	}
	revoked := func(t *testing.T, c valkey.Client) {
		claimedExecution(t, c, "00112233445566778899aabbccddeeff")
		require.Equal(t, "1", replyOf(t, fcallArgs(c, "ff_revoke_lease",
			[]string{rfCore, rfExecKey("lease:current"), rfExecKey("lease:history"), rfIdx("lease_expiry"),
				rfIdx("worker:worker-1-i1:leases")}, rfEID, "", "operator"))[0])
		require.Equal(t, "1", replyOf(t, fcallArgs(c, "ff_issue_reclaim_grant",
			[]string{rfCore, rfExecKey("claim_grant"), rfIdx("lease_expiry")},
			rfEID, "worker-2", "worker-2-i1", rfLane, "", "5000", "", "", ""))[0])
	}
	reclaim := func(c valkey.Client, cap string) valkey.ValkeyResult {
		return fcallArgs(c, "ff_reclaim_execution",
			[]string{rfCore, rfExecKey("claim_grant"), att, "ff:stream:{fp:7}:" + rfEID + ":0:meta",
				"ff:attempt:{fp:7}:" + rfEID + ":1", "ff:attempt:{fp:7}:" + rfEID + ":1:usage", rfExecKey("attempts"),
				rfExecKey("lease:current"), rfExecKey("lease:history"), rfIdx("lease_expiry"),
				rfIdx("worker:worker-2-i1:leases"), lane("active"), rfIdx("attempt_timeout"), rfIdx("execution_deadline")},
			rfEID, "worker-2", "worker-2-i1", rfLane, "11111111-0000-4000-8000-000000000002", "30000",
			"aaaaaaaa-0000-4000-8000-000000000002", "{}", cap)
	}
	usage := func(c valkey.Client, delta string) valkey.ValkeyResult {
		return fcallArgs(c, "ff_report_usage_and_check", []string{rfBudge + ":usage", rfBudge + ":limits", rfBudge},
			"1", "tokens", delta, "1700000000000", "")
	}
	frame := func(c valkey.Client, retention, maxPayload string) valkey.ValkeyResult {
		stream := "ff:stream:{fp:7}:" + rfEID + ":0"
		return fcallArgs(c, "ff_append_frame", []string{rfCore, stream, stream + ":meta", stream + ":summary"},
			rfEID, "0", spLease, "1", "log", "", "hello", "utf8", "", "worker", retention, spAtt, maxPayload,
			"durable", "", "", "", "", "")
	}
	for _, tc := range []struct {
		name  string
		setup func(*testing.T, valkey.Client)
		call  func(valkey.Client) valkey.ValkeyResult
		want  string
	}{
		{"fractional new priority", func(t *testing.T, c valkey.Client) { createExecution(t, c, "") },
			func(c valkey.Client) valkey.ValkeyResult {
				return fcallArgs(c, "ff_change_priority", []string{rfCore, lane("eligible")}, rfEID, "1.5")
			}, "new_priority must be a whole number, got: 1.5"},
		{"NaN priority on create", func(*testing.T, valkey.Client) {},
			func(c valkey.Client) valkey.ValkeyResult {
				return fcallArgs(c, "ff_create_execution",
					[]string{rfCore, rfExecKey("payload"), rfExecKey("policy"), rfExecKey("tags"), lane("eligible"),
						"ff:noop:{fp:7}", rfIdx("execution_deadline"), rfIdx("all_executions")},
					rfEID, "ns", rfLane, "task", "nan", "tester", "{}", "", "", "", "", "", "7")
			}, "priority must be a number, got: nan"},
		{"fractional priority ranking at once", func(*testing.T, valkey.Client) {},
			func(c valkey.Client) valkey.ValkeyResult {
				return fcallArgs(c, "ff_create_execution",
					[]string{rfCore, rfExecKey("payload"), rfExecKey("policy"), rfExecKey("tags"), lane("eligible"),
						"ff:noop:{fp:7}", rfIdx("execution_deadline"), rfIdx("all_executions")},
					rfEID, "ns", rfLane, "task", "1.5", "tester", "{}", "", "", "", "", "", "7")
			}, "priority must be a whole number, got: 1.5"},
		{"fractional grant TTL", func(t *testing.T, c valkey.Client) { createExecution(t, c, "") },
			func(c valkey.Client) valkey.ValkeyResult {
				return fcallArgs(c, "ff_issue_claim_grant", grantKeys, rfEID, "w", "w-i1", rfLane, "", "1.5", "", "", "")
			}, "grant_ttl_ms must be a whole number, got: 1.5"},
		{"fractional renewal expiry",
			func(t *testing.T, c valkey.Client) { claimedExecution(t, c, "00112233445566778899aabbccddeeff") },
			func(c valkey.Client) valkey.ValkeyResult { return renew(c, "30000.5", "5000") },
			"lease_ttl_ms + lease_history_grace_ms must be a whole number, got: 30000.5+5000"},
		{"reclaim cap not a number", revoked,
			func(c valkey.Client) valkey.ValkeyResult { return reclaim(c, "many") },
			"default_max_reclaim_count must be a number, got: many"},
		{"fractional usage delta", func(*testing.T, valkey.Client) {},
			func(c valkey.Client) valkey.ValkeyResult { return usage(c, "1.5") },
			"delta must be a whole number, got: 1.5"},
		{"usage delta beyond whole doubles", func(*testing.T, valkey.Client) {},
			func(c valkey.Client) valkey.ValkeyResult { return usage(c, "99999999999999999999") },
			"delta must be a whole number, got: 99999999999999999999"},
		{"negative frame retention",
			func(t *testing.T, c valkey.Client) { claimedExecution(t, c, "00112233445566778899aabbccddeeff") },
			func(c valkey.Client) valkey.ValkeyResult { return frame(c, "-1", "65536") },
			"retention_maxlen must be a whole number >= 0, got: -1"},
		{"frame payload cap not a number",
			func(t *testing.T, c valkey.Client) { claimedExecution(t, c, "00112233445566778899aabbccddeeff") },
			func(c valkey.Client) valkey.ValkeyResult { return frame(c, "0", "lots") },
			"max_payload_bytes must be a number, got: lots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := refusalServer(t)
			tc.setup(t, c)
			before := keyspace(t, c)
			assert.Equal(t, []string{"0", "invalid_input", tc.want}, replyOf(t, tc.call(c)))
			assert.Equal(t, before, keyspace(t, c), "a refusal writes nothing")
		})
	}
}

// A stream range the server cannot read is refused with its error (where
// FlowFabric raises it as a Lua error).
func TestRefusesUnreadableStreamRange(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	stream := "ff:stream:{fp:7}:" + rfEID + ":0"
	got := replyOf(t, fcallArgs(c, "ff_read_attempt_stream", []string{stream, stream + ":meta"}, "soon", "+", "10", ""))
	require.Len(t, got, 3)
	assert.Equal(t, []string{"0", "invalid_input"}, got[:2])
	assert.Contains(t, got[2], "stream range: ")
}

// Replaying a skipped flow member puts it back on its dependencies, whose
// keys the call must carry; without them (where FlowFabric fails before
// writing) ours refuses.
func TestRefusesSkippedMemberReplayWithoutDependencyKeys(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	require.Equal(t, "1", replyOf(t, createExecution(t, c, ""))[0])
	require.NoError(t, c.Do(context.Background(), c.B().Hset().Key(rfCore).FieldValue().
		FieldValue("lifecycle_phase", "terminal").FieldValue("terminal_outcome", "skipped").
		FieldValue("flow_id", "f0000000-0000-4000-8000-000000000001").Build()).Error())
	before := keyspace(t, c)
	got := replyOf(t, fcallArgs(c, "ff_replay_execution",
		[]string{rfCore, rfIdx("lane:" + rfLane + ":terminal"), rfIdx("lane:" + rfLane + ":eligible"),
			rfExecKey("lease:history")}, rfEID, "1700000000000"))
	assert.Equal(t, []string{"0", "invalid_input", "replaying a skipped flow member needs its dependency KEYS"}, got)
	assert.Equal(t, before, keyspace(t, c))
}

// A signal stream cap the server cannot take (negative, fractional) is
// refused before the signal is recorded; FlowFabric fails at its XADD.
func TestRefusesUnusableSignalStreamCapWritingNothing(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	suspendedWithoutTimeout(t, c)
	tok := hgetall(t, c, spWPKey(spWP))["waitpoint_token"]
	sig := "ff:signal:{fp:7}:66666666-0000-4000-8000-000000000001"
	for _, maxlen := range []string{"-1", "1.5"} {
		before := keyspace(t, c)
		got := replyOf(t, fcallArgs(c, "ff_deliver_signal",
			[]string{rfCore, spWPKey(spWP) + ":condition", spWPKey(spWP) + ":signals", rfExecKey("signals"),
				sig, sig + ":payload", "ff:noop:{fp:7}", spWPKey(spWP), rfExecKey("suspension:current"),
				rfIdx("lane:" + rfLane + ":eligible"), rfIdx("lane:" + rfLane + ":suspended"),
				rfIdx("lane:" + rfLane + ":delayed"), rfIdx("suspension_timeout"), spHMAC,
				"ff:part:{fp:7}:signal_delivery"},
			"66666666-0000-4000-8000-000000000001", rfEID, spWP, "go", "callback", "webhook", "s", "", "json",
			"", "", "waitpoint", "", "86400000", "0", maxlen, "10000", tok))
		assert.Equal(t, []string{"0", "invalid_input", "signal_maxlen must be a whole number >= 0"}, got, maxlen)
		assert.Equal(t, before, keyspace(t, c), maxlen)
	}
}
