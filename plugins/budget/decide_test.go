package budget

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

func TestClassifyMember(t *testing.T) {
	t.Parallel()
	id := keys.NewBudgetID()
	for _, tc := range []struct {
		m    string
		want keys.IDForm
	}{
		{id.String(), keys.IDCanonical},
		{"garbage", keys.IDInvalid},
		{"", keys.IDInvalid},
		{"{b:1}:" + id.String(), keys.IDInvalid},
		{"6F1C2D3E-4A5B-4C6D-8E7F-001122334455", keys.IDNonCanonical},
		{"6f1c2d3e4a5b4c6d8e7f001122334455", keys.IDNonCanonical},
	} {
		got, kind := keys.ClassifyBudgetID(tc.m)
		assert.Equal(t, tc.want, kind, tc.m)
		if kind == keys.IDCanonical {
			assert.Equal(t, tc.m, got.String())
		}
	}
}

// The kit's reply builders, by the short names the tables use.
var (
	str = scannertest.Str
	num = scannertest.Int
	arr = scannertest.Array
)

func TestClassifyReset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    scannerapi.Reply
		want resetOutcome
	}{
		{"rescheduled", arr(num(1), str("OK"), str("1700000015000")), resetOutcome{kind: resetDone, nextReset: 1700000015000}},
		{"unscheduled", arr(num(1), str("OK"), num(0)), resetOutcome{kind: resetDone}},
		{"lua error", arr(num(0), str("invalid_input"), str("now_ms")), resetOutcome{kind: resetLuaError, class: scannerapi.ErrLua, code: "invalid_input"}},
		{"wrongtype", scannertest.Failed(scannerapi.ErrServer, "WRONGTYPE Operation against a key holding the wrong kind of value script: ..."),
			resetOutcome{kind: resetFailed, class: scannerapi.ErrServer, code: "wrongtype"}},
		{"transport", scannertest.Failed(scannerapi.ErrTransport, "i/o timeout"),
			resetOutcome{kind: resetFailed, class: scannerapi.ErrTransport, code: ResetFunction}},
		{"refused", scannertest.Failed(scannerapi.ErrRefused, "not declared"),
			resetOutcome{kind: resetFailed, class: scannerapi.ErrRefused, code: ResetFunction}},
		{"malformed", str("OK"), resetOutcome{kind: resetFailed, class: scannerapi.ErrServer, code: "malformed_reply"}},
		{"no next", arr(num(1), str("OK")), resetOutcome{kind: resetFailed, class: scannerapi.ErrServer, code: "malformed_reply"}},
		{"other status", arr(num(1), str("DUPLICATE"), str("5")), resetOutcome{kind: resetFailed, class: scannerapi.ErrServer, code: "malformed_reply"}},
	} {
		assert.Equal(t, tc.want, classifyReset(tc.r), tc.name)
	}
}

func TestHashOf(t *testing.T) {
	t.Parallel()
	h, err := hashOf(arr(str("a"), str("1"), str("b"), num(2)))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1", "b": "2"}, h)
	h, err = hashOf(arr())
	require.NoError(t, err)
	assert.Empty(t, h)
	_, err = hashOf(arr(str("a")))
	assert.ErrorIs(t, err, scannerapi.ErrMalformedReply)
	_, err = hashOf(scannerapi.Reply{Kind: scannerapi.KindError, Err: "WRONGTYPE x"})
	assert.Equal(t, "wrongtype", failureCode(err, "read_usage"))
	assert.Equal(t, scannerapi.ErrServer, failureClass(err))
}

func TestDecideBudget(t *testing.T) {
	t.Parallel()
	def := map[string]string{"budget_id": "x", "reset_interval_ms": "0"}
	limits := map[string]string{"hard:tokens": "100", "soft:tokens": "50", "hard:calls": "0"}
	for _, tc := range []struct {
		name               string
		def, usage, limits map[string]string
		want               action
	}{
		{"orphan", map[string]string{}, nil, limits, actPrune},
		{"resetting", map[string]string{"budget_id": "x", "reset_interval_ms": "60000"}, map[string]string{"tokens": "500"}, limits, actResetting},
		{"resetting garbage interval", map[string]string{"budget_id": "x", "reset_interval_ms": "abc"}, nil, limits, actResetting},
		{"interval missing counts as lifetime", map[string]string{"budget_id": "x"}, map[string]string{"tokens": "101"}, limits, actMark},
		{"no limits", def, map[string]string{"tokens": "500"}, map[string]string{}, actNoLimits},
		{"over hard", def, map[string]string{"tokens": "101"}, limits, actMark},
		{"at hard is not over (>)", def, map[string]string{"tokens": "100"}, limits, actNone},
		{"over soft only", def, map[string]string{"tokens": "60"}, limits, actNone},
		{"zero hard limit means none", def, map[string]string{"calls": "5"}, limits, actNone},
		{"already marked", def, map[string]string{"tokens": "101", BreachedAtField: "1"}, limits, actNone},
		{"marked, back under", def, map[string]string{"tokens": "10", BreachedAtField: "1"}, limits, actClear},
		{"marked, no usage", def, map[string]string{BreachedAtField: "1"}, limits, actClear},
		{"unparsable limit is infinite", def, map[string]string{"tokens": "101"}, map[string]string{"hard:tokens": "lots"}, actNone},
		{"unparsable usage is zero", def, map[string]string{"tokens": "many", BreachedAtField: "1"}, limits, actClear},
		{"fractional limit", def, map[string]string{"tokens": "11"}, map[string]string{"hard:tokens": "10.5"}, actMark},
		{"negative limit is none", def, map[string]string{"tokens": "11"}, map[string]string{"hard:tokens": "-1"}, actNone},
	} {
		assert.Equal(t, tc.want, decideBudget(tc.def, tc.usage, tc.limits), tc.name)
	}
}

func TestNumber(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]float64{"0": 0, "42": 42, "-3": -3, " 7 ": 7, "2.5": 2.5} {
		got, ok := number(s)
		assert.True(t, ok, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "x", "NaN", "Inf", "-inf"} {
		_, ok := number(s)
		assert.False(t, ok, s)
	}
}
