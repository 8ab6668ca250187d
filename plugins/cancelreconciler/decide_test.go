package cancelreconciler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func str(s string) scannerapi.Reply { return scannerapi.Reply{Kind: scannerapi.KindString, Str: s} }
func num(n int64) scannerapi.Reply  { return scannerapi.Reply{Kind: scannerapi.KindInt, Int: n} }
func null() scannerapi.Reply        { return scannerapi.Reply{Kind: scannerapi.KindNil} }
func arr(rs ...scannerapi.Reply) scannerapi.Reply {
	return scannerapi.Reply{Kind: scannerapi.KindArray, Array: rs}
}
func fail(class scannerapi.ErrorClass, msg string) scannerapi.Reply {
	return scannerapi.Reply{Kind: scannerapi.KindError, Err: msg, ErrClass: class}
}

const eid = "{fp:5}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f"

func TestClassifyMember(t *testing.T) {
	for m, want := range map[string]keys.IDForm{
		eid: keys.IDCanonical,
		"{fp:005}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f":   keys.IDNonCanonical,
		"{fp:5}:0B0C6A4E-5B1D-4C3E-9F00-3D2B1A0C9E8F":     keys.IDNonCanonical,
		"{fp:5}:0b0c6a4e5b1d4c3e9f003d2b1a0c9e8f":         keys.IDNonCanonical,
		"0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f":            keys.IDInvalid,
		"{fp:99999}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f": keys.IDInvalid,
		"{fp:5}:not-a-uuid":                               keys.IDInvalid,
		"":                                                keys.IDInvalid,
		"garbage":                                         keys.IDInvalid,
	} {
		_, got := keys.ClassifyExecutionID(m)
		assert.Equal(t, want, got, "%q", m)
	}
}

func TestParseCore(t *testing.T) {
	c := parseCore(arr(str(eid), str("lane-a"), str("2"), str(""), str("wi-1"), str("active")))
	assert.Equal(t, memberCore{exists: true, lane: "lane-a", attempt: "2", worker: "wi-1", phase: "active"}, c)

	c = parseCore(arr(null(), null(), null(), null(), null(), null()))
	assert.False(t, c.exists, "every field nil: the core is gone")
	assert.False(t, c.badReply)

	assert.True(t, parseCore(arr(str("x"))).badReply, "wrong length")
	assert.True(t, parseCore(str("x")).badReply, "not an array")
}

func TestCancelKeysUseTheMembersRealState(t *testing.T) {
	id, err := keys.ParseExecutionID(eid)
	require.NoError(t, err)
	wp := keys.NewUUID()
	ks, err := cancelKeys(id, memberCore{exists: true, lane: "lane-a", attempt: "3", waitpt: wp.String(), worker: "wi-9", phase: "suspended"})
	require.NoError(t, err)
	require.Len(t, ks, 21)
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	assert.Equal(t, ek.Core(), ks[0])
	assert.Equal(t, ek.Attempt(3), ks[1])
	assert.Equal(t, ek.StreamMeta(3), ks[2])
	assert.Equal(t, pk.WorkerLeases("wi-9"), ks[6])
	assert.Equal(t, pk.Waitpoint(wp), ks[8])
	assert.Equal(t, pk.WaitpointCondition(wp), ks[9])
	assert.Equal(t, pk.LaneTerminal("lane-a"), ks[11])
	assert.Equal(t, pk.LaneEligible("lane-a"), ks[14])
	assert.Equal(t, pk.LaneBlockedOperator("lane-a"), ks[20])
	for _, k := range ks {
		assert.Equal(t, keys.ClusterSlot(ks[0]), keys.ClusterSlot(k), "one slot: %s", k)
	}

	// Never claimed, no waitpoint, no worker: the placeholders of the
	// vectors (attempt 0, nil-UUID waitpoint, empty worker instance).
	ks, err = cancelKeys(id, memberCore{exists: true, lane: "default", phase: "runnable"})
	require.NoError(t, err)
	assert.Equal(t, ek.Attempt(0), ks[1])
	assert.Equal(t, "ff:wp:{fp:5}:00000000-0000-0000-0000-000000000000", ks[8])
	assert.Equal(t, "ff:idx:{fp:5}:worker::leases", ks[6])
}

func TestCancelKeysRefuseToGuess(t *testing.T) {
	id, err := keys.ParseExecutionID(eid)
	require.NoError(t, err)
	for name, c := range map[string]struct {
		core memberCore
		want error
	}{
		"no lane":           {memberCore{exists: true, phase: "runnable"}, errNoLane},
		"bad lane":          {memberCore{exists: true, lane: "a\nb"}, errBadLane},
		"bad attempt":       {memberCore{exists: true, lane: "l", attempt: "x"}, errBadAttempt},
		"bad waitpoint":     {memberCore{exists: true, lane: "l", waitpt: "wp-1"}, errBadWaitpoint},
		"upper-case wp":     {memberCore{exists: true, lane: "l", waitpt: "0B0C6A4E-5B1D-4C3E-9F00-3D2B1A0C9E8F"}, errBadWaitpoint},
		"malformed reply":   {memberCore{badReply: true}, errBadCoreFields},
		"negative attempts": {memberCore{exists: true, lane: "l", attempt: "-1"}, errBadAttempt},
	} {
		_, err := cancelKeys(id, c.core)
		assert.ErrorIs(t, err, c.want, name)
	}
}

func TestClassifyCancel(t *testing.T) {
	cases := []struct {
		name  string
		reply scannerapi.Reply
		want  outcome
	}{
		{"cancelled", arr(num(1), str("OK"), str("cancelled"), str("runnable")), outcome{kind: outCancelled, code: "OK"}},
		{"already terminal", arr(num(0), str("execution_not_active"), str("success"), str("1"), str("terminal"), str("a")),
			outcome{kind: outAlreadyTerminal, code: "execution_not_active"}},
		{"gone", arr(num(0), str("execution_not_found")), outcome{kind: outNotFound, code: "execution_not_found"}},
		{"other lua code", arr(num(0), str("lease_revoked")), outcome{kind: outLuaError, class: scannerapi.ErrLua, code: "lease_revoked"}},
		{"wrongtype", fail(scannerapi.ErrServer, "WRONGTYPE Operation against a key"), outcome{kind: outFailed, class: scannerapi.ErrServer, code: "WRONGTYPE"}},
		{"transport", fail(scannerapi.ErrTransport, "i/o timeout"), outcome{kind: outFailed, class: scannerapi.ErrTransport, code: "error"}},
		{"refused", fail(scannerapi.ErrRefused, "refused: undeclared_function"), outcome{kind: outFailed, class: scannerapi.ErrRefused, code: "error"}},
		{"malformed", str("OK"), outcome{kind: outFailed, class: scannerapi.ErrServer, code: "malformed_reply"}},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, classifyCancel(c.reply), c.name)
	}
	assert.True(t, outCancelled.done())
	assert.True(t, outAlreadyTerminal.done())
	assert.True(t, outNotFound.done())
	assert.False(t, outLuaError.done())
	assert.False(t, outFailed.done())
}

func TestClassifyAck(t *testing.T) {
	assert.Nil(t, classifyAck(arr(num(1), str("OK"))))
	assert.Equal(t, &outcome{kind: outLuaError, class: scannerapi.ErrLua, code: "x"}, classifyAck(arr(num(0), str("x"))))
	assert.Equal(t, scannerapi.ErrTransport, classifyAck(fail(scannerapi.ErrTransport, "eof")).class)
}

func TestPredict(t *testing.T) {
	assert.Equal(t, outNotFound, predict(memberCore{}).kind)
	assert.Equal(t, outAlreadyTerminal, predict(memberCore{exists: true, phase: "terminal"}).kind)
	assert.Equal(t, outCancelled, predict(memberCore{exists: true, phase: "active"}).kind)
}

func TestFlowReason(t *testing.T) {
	assert.Equal(t, DefaultReason, flowReason(null()), "no reason recorded")
	assert.Equal(t, "", flowReason(str("")), "an empty reason is a reason")
	assert.Equal(t, "budget", flowReason(str("budget")))
}

func TestConfigureValidates(t *testing.T) {
	s := New()
	ctx := t.Context()
	require.NoError(t, s.Configure(ctx, map[string]string{"lookahead": "0", "members_per_flow": "10", "namespace": "a"}))
	assert.Equal(t, 0, s.cfg.lookahead)
	assert.Equal(t, 10, s.cfg.members)
	assert.Error(t, s.Configure(ctx, map[string]string{"members_per_flow": "0"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"lookahead": "-1"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"instance_tag": "=x"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"bogus": "1"}))
	assert.Equal(t, 10, s.cfg.members, "a rejected configuration keeps the old one")
	require.NoError(t, scannerapi.ValidateInfo(s.Info()))
}
