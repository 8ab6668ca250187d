package lua

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
)

// Branches of the suspension family no golden vector pins: composite
// conditions, extra waitpoints, long HMAC secrets and the refusals.

const (
	spSusp   = "55555555-0000-4000-8000-000000000001"
	spWP     = "33333333-0000-4000-8000-000000000001"
	spWPX    = "33333333-0000-4000-8000-000000000002"
	spLease  = "11111111-0000-4000-8000-000000000001"
	spAtt    = "aaaaaaaa-0000-4000-8000-000000000001"
	spHMAC   = "ff:sec:{fp:7}:waitpoint_hmac"
	spPolicy = `{"close_waitpoint_on_resume":true,"resume_target":"runnable"}`
)

func spWPKey(id string) string { return "ff:wp:{fp:7}:" + id }

// claimedExecution creates rfEID, claims it (lease spLease, epoch 1,
// attempt 0) and installs HMAC kid k1 with secret on the partition.
func claimedExecution(t *testing.T, c valkey.Client, secret string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(spHMAC).FieldValue().
		FieldValue("current_kid", "k1").FieldValue("secret:k1", secret).Build()).Error())
	require.Equal(t, "1", replyOf(t, createExecution(t, c, ""))[0])
	grant := replyOf(t, fcallArgs(c, "ff_issue_claim_grant",
		[]string{rfCore, rfExecKey("claim_grant"), rfIdx("lane:" + rfLane + ":eligible")},
		rfEID, "worker-1", "worker-1-i1", rfLane, "", "60000", "", "", ""))
	require.Equal(t, "1", grant[0], "grant: %v", grant)
	att := "ff:attempt:{fp:7}:" + rfEID + ":0"
	claim := replyOf(t, fcallArgs(c, "ff_claim_execution",
		[]string{rfCore, rfExecKey("claim_grant"), rfIdx("lane:" + rfLane + ":eligible"), rfIdx("lease_expiry"),
			rfIdx("worker:worker-1-i1:leases"), att, att + ":usage", att + ":policy", rfExecKey("attempts"),
			rfExecKey("lease:current"), rfExecKey("lease:history"), rfIdx("lane:" + rfLane + ":active"),
			rfIdx("attempt_timeout"), rfIdx("execution_deadline")},
		rfEID, "worker-1", "worker-1-i1", rfLane, "", spLease, "30000", "20000", spAtt, "{}", "", ""))
	require.Equal(t, "1", claim[0], "claim: %v", claim)
}

type extraWP struct{ id, key string }

// suspend calls ff_suspend_execution on the primary waitpoint spWP
// ("wpk:<id>") plus extras, with the given condition.
func suspend(c valkey.Client, condition string, extras []extraWP, nExtra string) valkey.ValkeyResult {
	keys := []string{rfCore, "ff:attempt:{fp:7}:" + rfEID + ":0", rfExecKey("lease:current"),
		rfExecKey("lease:history"), rfIdx("lease_expiry"), rfIdx("worker:worker-1-i1:leases"),
		rfExecKey("suspension:current"), spWPKey(spWP), spWPKey(spWP) + ":signals",
		rfIdx("suspension_timeout"), rfIdx("pending_waitpoint_expiry"), rfIdx("lane:" + rfLane + ":active"),
		rfIdx("lane:" + rfLane + ":suspended"), rfExecKey("waitpoints"), spWPKey(spWP) + ":condition",
		rfIdx("attempt_timeout"), spHMAC, "ff:noop:{fp:7}"}
	args := []string{rfEID, "0", spAtt, spLease, "1", spSusp, spWP, "wpk:" + spWP, "waiting_for_signal",
		"worker", "", condition, spPolicy, "", "", "fail", "1000", "", "0", nExtra}
	for _, x := range extras {
		keys = append(keys, spWPKey(x.id), spWPKey(x.id)+":signals", spWPKey(x.id)+":condition")
		args = append(args, x.id, x.key)
	}
	return fcallArgs(c, "ff_suspend_execution", keys, args...)
}

// deliver sends signal sigID named name from source to waitpoint wpid.
func deliver(c valkey.Client, sigID, wpid, name, source, token string) valkey.ValkeyResult {
	sig := "ff:signal:{fp:7}:" + sigID
	return fcallArgs(c, "ff_deliver_signal",
		[]string{rfCore, spWPKey(wpid) + ":condition", spWPKey(wpid) + ":signals", rfExecKey("signals"),
			sig, sig + ":payload", "ff:noop:{fp:7}", spWPKey(wpid), rfExecKey("suspension:current"),
			rfIdx("lane:" + rfLane + ":eligible"), rfIdx("lane:" + rfLane + ":suspended"),
			rfIdx("lane:" + rfLane + ":delayed"), rfIdx("suspension_timeout"), spHMAC,
			"ff:part:{fp:7}:signal_delivery"},
		sigID, rfEID, wpid, name, "callback", "webhook", source, "", "json", "", "", "waitpoint", "",
		"86400000", "0", "1000", "10000", token)
}

func hgetall(t *testing.T, c valkey.Client, key string) map[string]string {
	t.Helper()
	m, err := c.Do(context.Background(), c.B().Hgetall().Key(key).Build()).AsStrMap()
	require.NoError(t, err)
	return m
}

func exists(t *testing.T, c valkey.Client, key string) bool {
	t.Helper()
	n, err := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return n == 1
}

func TestSuspendRefusesMalformedConditionWritingNothing(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	claimedExecution(t, c, "00112233445566778899aabbccddeeff")
	// Where FlowFabric raises a Lua error after writing the waitpoint (not
	// JSON, a JSON value its field lookups cannot index, names or a mode a
	// hash field cannot hold) ours refuses before any write.
	for _, cond := range []string{`{not json`, ``, `5`, `true`, `null`,
		`{"required_signal_names":"approve"}`, `{"required_signal_names":null}`,
		`{"required_signal_names":[true]}`, `{"signal_match_mode":{"a":1}}`} {
		before := keyspace(t, c)
		got := replyOf(t, suspend(c, cond, nil, "0"))
		require.Len(t, got, 3, cond)
		assert.Equal(t, []string{"0", "invalid_input"}, got[:2], cond)
		assert.Equal(t, before, keyspace(t, c), "a refused suspend writes nothing (%q)", cond)
	}
}

// A composite condition of another version than 1 is accepted as
// FlowFabric accepts it: the condition keeps no tree, the operator map is
// still seeded from the tree as given.
func TestSuspendKeepsNoTreeForAnotherCompositeVersion(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	claimedExecution(t, c, "00112233445566778899aabbccddeeff")
	cond := fmt.Sprintf(`{"composite":true,"v":2,"tree":{"kind":"Single","path":"","waitpoint_key":%q}}`, "wpk:"+spWP)
	got := replyOf(t, suspend(c, cond, nil, "0"))
	require.Equal(t, "OK", got[1], "%v", got)
	wc := hgetall(t, c, spWPKey(spWP)+":condition")
	assert.Equal(t, "1", wc["composite"])
	assert.Equal(t, "", wc["tree_json"])
	assert.Equal(t, map[string]string{"wp:wpk:" + spWP + ":": ""},
		hgetall(t, c, rfExecKey("suspension:current:member_map")))
}

func TestSuspendRefusesMalformedExtrasWritingNothing(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	claimedExecution(t, c, "00112233445566778899aabbccddeeff")
	cond := `{"required_signal_names":[],"signal_match_mode":"any","minimum_signal_count":1}`
	before := keyspace(t, c)
	// One extra announced, none bound; a count that is not a number; an
	// empty id.
	for _, tc := range []struct {
		n      string
		extras []extraWP
	}{{"1", nil}, {"x", nil}, {"1", []extraWP{{"", "wpk:x"}}}} {
		got := replyOf(t, suspend(c, cond, tc.extras, tc.n))
		assert.Equal(t, []string{"0", "additional_waitpoint_binding_malformed"}, got, tc.n)
	}
	assert.Equal(t, before, keyspace(t, c))

	// An extra bound in ARGV without its KEYS: FlowFabric raises a Lua
	// error after writing the primary waitpoint; ours refuses first.
	keys := []string{rfCore, "ff:attempt:{fp:7}:" + rfEID + ":0", rfExecKey("lease:current"),
		rfExecKey("lease:history"), rfIdx("lease_expiry"), rfIdx("worker:worker-1-i1:leases"),
		rfExecKey("suspension:current"), spWPKey(spWP), spWPKey(spWP) + ":signals",
		rfIdx("suspension_timeout"), rfIdx("pending_waitpoint_expiry"), rfIdx("lane:" + rfLane + ":active"),
		rfIdx("lane:" + rfLane + ":suspended"), rfExecKey("waitpoints"), spWPKey(spWP) + ":condition",
		rfIdx("attempt_timeout"), spHMAC, "ff:noop:{fp:7}"}
	got := replyOf(t, fcallArgs(c, "ff_suspend_execution", keys, rfEID, "0", spAtt, spLease, "1", spSusp,
		spWP, "wpk:"+spWP, "waiting_for_signal", "worker", "", cond, spPolicy, "", "", "fail", "1000", "",
		"0", "1", spWPX, "wpk:"+spWPX))
	assert.Equal(t, []string{"0", "additional_waitpoint_binding_malformed"}, got[:2])
	assert.Equal(t, before, keyspace(t, c))
}

// A negative extras count binds no extras, as in FlowFabric: the
// suspension goes ahead on its primary waitpoint alone.
func TestSuspendWithNegativeExtrasCountHasNoExtras(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	claimedExecution(t, c, "00112233445566778899aabbccddeeff")
	got := replyOf(t, suspend(c, `{"required_signal_names":["go"]}`, nil, "-1"))
	require.Len(t, got, 7, "%v", got)
	assert.Equal(t, []string{"1", "OK", spSusp, spWP, "wpk:" + spWP}, got[:5])
	assert.Equal(t, "0", got[6])
	assert.Equal(t, "[]", hgetall(t, c, rfExecKey("suspension:current"))["additional_waitpoints_json"])
}

// A timeout that is not a number is refused before any write (FlowFabric
// fails indexing it after writing the suspension).
func TestSuspendRefusesNonNumericTimeoutWritingNothing(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	claimedExecution(t, c, "00112233445566778899aabbccddeeff")
	keys := []string{rfCore, "ff:attempt:{fp:7}:" + rfEID + ":0", rfExecKey("lease:current"),
		rfExecKey("lease:history"), rfIdx("lease_expiry"), rfIdx("worker:worker-1-i1:leases"),
		rfExecKey("suspension:current"), spWPKey(spWP), spWPKey(spWP) + ":signals",
		rfIdx("suspension_timeout"), rfIdx("pending_waitpoint_expiry"), rfIdx("lane:" + rfLane + ":active"),
		rfIdx("lane:" + rfLane + ":suspended"), rfExecKey("waitpoints"), spWPKey(spWP) + ":condition",
		rfIdx("attempt_timeout"), spHMAC, "ff:noop:{fp:7}"}
	before := keyspace(t, c)
	got := replyOf(t, fcallArgs(c, "ff_suspend_execution", keys, rfEID, "0", spAtt, spLease, "1", spSusp,
		spWP, "wpk:"+spWP, "waiting_for_signal", "worker", "soon", `{"required_signal_names":["go"]}`,
		spPolicy, "", "", "fail", "1000", "", "0", "0"))
	assert.Equal(t, []string{"0", "invalid_input", "timeout_at must be a number, got: soon"}, got)
	assert.Equal(t, before, keyspace(t, c))
}

// An AllOf over two waitpoints of one suspension: a signal on either
// waitpoint fills its leaf, the second resumes the execution and every
// waitpoint of the suspension closes.
func TestCompositeAllOfAcrossExtraWaitpoint(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	claimedExecution(t, c, "00112233445566778899aabbccddeeff")
	keyA, keyB := "wpk:"+spWP, "wpk:"+spWPX
	cond := fmt.Sprintf(`{"v":1,"composite":true,"condition_type":"signal_set","signal_match_mode":"composite",`+
		`"tree":{"kind":"AllOf","path":"","members":[`+
		`{"kind":"Single","path":"members[0]","waitpoint_key":%q,"matcher":{"kind":"ByName","name":"legal"}},`+
		`{"kind":"Single","path":"members[1]","waitpoint_key":%q,"matcher":{"kind":"Wildcard"}}]}}`, keyA, keyB)
	got := replyOf(t, suspend(c, cond, []extraWP{{spWPX, keyB}}, "1"))
	require.Len(t, got, 10, "%v", got)
	assert.Equal(t, []string{"1", "OK", spSusp, spWP, keyA}, got[:5])
	assert.Equal(t, []string{"1", spWPX, keyB}, []string{got[6], got[7], got[8]})
	tokA, tokB := got[5], got[9]
	assert.True(t, strings.HasPrefix(tokB, "k1:"), tokB)

	susp := hgetall(t, c, rfExecKey("suspension:current"))
	assert.JSONEq(t, fmt.Sprintf(`[{"waitpoint_id":%q,"waitpoint_key":%q}]`, spWPX, keyB), susp["additional_waitpoints_json"])
	assert.Equal(t, map[string]string{
		"wp:" + keyA + ":members[0]": "members[0]",
		"wp:" + keyB + ":members[1]": "members[1]",
	}, hgetall(t, c, rfExecKey("suspension:current:member_map")))
	assert.Equal(t, "active", hgetall(t, c, spWPKey(spWPX))["state"])
	assert.Equal(t, "1", hgetall(t, c, spWPKey(spWPX)+":condition")["composite"])

	// A signal on A whose name the leaf does not accept is ignored.
	assert.Equal(t, []string{"1", "OK", "66666666-0000-4000-8000-000000000001", "signal_ignored_matcher_failed"},
		replyOf(t, deliver(c, "66666666-0000-4000-8000-000000000001", spWP, "other", "s1", tokA)))
	assert.Equal(t, []string{"1", "OK", "66666666-0000-4000-8000-000000000002", "appended_to_waitpoint"},
		replyOf(t, deliver(c, "66666666-0000-4000-8000-000000000002", spWP, "legal", "s1", tokA)))
	// The same leaf again adds nothing.
	assert.Equal(t, []string{"1", "OK", "66666666-0000-4000-8000-000000000003", "appended_to_waitpoint_duplicate"},
		replyOf(t, deliver(c, "66666666-0000-4000-8000-000000000003", spWP, "legal", "s2", tokA)))
	assert.Equal(t, "suspended", hgetall(t, c, rfCore)["lifecycle_phase"])

	// The extra waitpoint's own token authenticates its signal, which
	// completes the AllOf.
	assert.Equal(t, []string{"1", "OK", "66666666-0000-4000-8000-000000000004", "resume_condition_satisfied"},
		replyOf(t, deliver(c, "66666666-0000-4000-8000-000000000004", spWPX, "anything", "s3", tokB)))
	core := hgetall(t, c, rfCore)
	assert.Equal(t, "runnable", core["lifecycle_phase"])
	assert.Equal(t, "eligible_now", core["eligibility_state"])
	assert.Equal(t, "", core["current_suspension_id"])
	susp = hgetall(t, c, rfExecKey("suspension:current"))
	assert.Equal(t, "resumed", susp["close_reason"])
	assert.Equal(t, "66666666-0000-4000-8000-000000000004", susp["closer_signal_id"])
	assert.ElementsMatch(t, []string{"66666666-0000-4000-8000-000000000002", "66666666-0000-4000-8000-000000000004"},
		decodeStrings(t, susp["all_satisfier_signals"]))
	// The waitpoint the last signal arrived on and the suspension's extras
	// close; FlowFabric leaves the primary open when the closing signal
	// came on an extra, and so do we (docs/compat.md).
	assert.Equal(t, "closed", hgetall(t, c, spWPKey(spWPX))["state"])
	assert.Equal(t, "1", hgetall(t, c, spWPKey(spWPX)+":condition")["closed"])
	assert.Equal(t, "active", hgetall(t, c, spWPKey(spWP))["state"])
	assert.Equal(t, "0", hgetall(t, c, spWPKey(spWP)+":condition")["closed"])
	for _, suffix := range []string{":satisfied_set", ":satisfied_set:signals", ":member_map"} {
		assert.False(t, exists(t, c, rfExecKey("suspension:current"+suffix)), suffix)
	}
	members, err := c.Do(context.Background(), c.B().Smembers().Key(rfExecKey("waitpoints")).Build()).AsStrSlice()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{spWP, spWPX}, members)
}

// A Count node of two distinct sources: a second signal from the same
// source adds nothing, one from another source resumes.
func TestCompositeCountDistinctSources(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	claimedExecution(t, c, "00112233445566778899aabbccddeeff")
	cond := fmt.Sprintf(`{"v":1,"composite":true,"tree":{"kind":"Count","path":"","n":2,`+
		`"count_kind":"DistinctSources","waitpoints":[%q]}}`, "wpk:"+spWP)
	got := replyOf(t, suspend(c, cond, nil, "0"))
	require.Equal(t, "OK", got[1], "%v", got)
	tok := got[5]
	assert.Equal(t, "appended_to_waitpoint", replyOf(t, deliver(c, "66666666-0000-4000-8000-000000000001", spWP, "vote", "alice", tok))[3])
	assert.Equal(t, "appended_to_waitpoint_duplicate", replyOf(t, deliver(c, "66666666-0000-4000-8000-000000000002", spWP, "vote", "alice", tok))[3])
	assert.Equal(t, "suspended", hgetall(t, c, rfCore)["lifecycle_phase"])
	assert.Equal(t, "resume_condition_satisfied", replyOf(t, deliver(c, "66666666-0000-4000-8000-000000000003", spWP, "vote", "bob", tok))[3])
	assert.Equal(t, "runnable", hgetall(t, c, rfCore)["lifecycle_phase"])
}

// Tokens minted with a secret longer than the SHA-1 block (the key is
// hashed first) agree with Go's HMAC-SHA1, and verify.
func TestWaitpointTokenWithLongSecretMatchesHMACSHA1(t *testing.T) {
	t.Parallel()
	c := refusalServer(t)
	secret := strings.Repeat("a1b2c3d4e5", 20) // 100 bytes
	claimedExecution(t, c, secret)
	got := replyOf(t, suspend(c, `{"required_signal_names":["go"]}`, nil, "0"))
	require.Equal(t, "OK", got[1], "%v", got)
	created := hgetall(t, c, spWPKey(spWP))["created_at"]
	key, err := hex.DecodeString(secret)
	require.NoError(t, err)
	mac := hmac.New(sha1.New, key)
	mac.Write([]byte(spWP + "|wpk:" + spWP + "|" + created))
	assert.Equal(t, "k1:"+hex.EncodeToString(mac.Sum(nil)), got[5])
	assert.Equal(t, "resume_condition_satisfied",
		replyOf(t, deliver(c, "66666666-0000-4000-8000-000000000001", spWP, "go", "s", got[5]))[3])
}

func decodeStrings(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	require.NoError(t, json.Unmarshal([]byte(s), &out), s)
	return out
}
