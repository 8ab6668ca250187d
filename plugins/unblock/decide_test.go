package unblock

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// hash is an HGETALL reply of field, value pairs.
func hash(kv ...string) scannerapi.Reply {
	r := scannertest.Array()
	for _, s := range kv {
		r.Array = append(r.Array, scannertest.Str(s))
	}
	return r
}

func TestCoreOf(t *testing.T) {
	t.Parallel()
	core := coreOf(scannertest.Array(scannertest.Str("{fp:1}:x"), scannertest.Str("waiting_for_budget"), scannertest.Str("ns"), scannertest.Str("b1,b2"), scannertest.Nil()))
	assert.Equal(t, map[string]string{"execution_id": "{fp:1}:x", "blocking_reason": "waiting_for_budget", "namespace": "ns",
		"budget_ids": "b1,b2", "quota_policy_id": ""}, core, "a field past the reply is absent, a nil one empty")
}

func TestJudgeCore(t *testing.T) {
	t.Parallel()
	core := func(id, reason, ns string) map[string]string {
		return map[string]string{"execution_id": id, "blocking_reason": reason, "namespace": ns}
	}
	for _, tc := range []struct {
		name    string
		core    map[string]string
		src     string
		outside bool
		want    coreStep
	}{
		{"budget: check", core("e", "waiting_for_budget", "ns"), "budget", false, coreCheck},
		{"quota: check", core("e", "waiting_for_quota", "ns"), "quota", false, coreCheck},
		{"route: check", core("e", "waiting_for_capable_worker", "ns"), "route", false, coreCheck},
		{"no core", core("", "", ""), "budget", false, coreGone},
		{"no core, outside the filter too", core("", "", ""), "budget", true, coreGone},
		{"outside the filter", core("e", "waiting_for_budget", "ns"), "budget", true, coreFiltered},
		{"paused by a flow cancel", core("e", "paused_by_flow_cancel", "ns"), "budget", false, coreOtherReason},
		{"the reason of another set", core("e", "waiting_for_quota", "ns"), "budget", false, coreOtherReason},
		{"no namespace", core("e", "waiting_for_capable_worker", ""), "route", false, coreNoNamespace},
	} {
		assert.Equal(t, tc.want, judgeCore(tc.core, tc.src, tc.outside), tc.name)
	}
}

func TestBudgetIDs(t *testing.T) {
	t.Parallel()
	const b1, b2 = "b0000000-0000-4000-8000-000000000001", "b0000000-0000-4000-8000-000000000002"
	id := func(s string) keys.BudgetID {
		b, err := keys.ParseBudgetID(s)
		assert.NoError(t, err)
		return b
	}
	for _, tc := range []struct {
		raw     string
		ids     []keys.BudgetID
		invalid int
	}{
		{"", nil, 0},
		{" , ,", nil, 0},
		{b1, []keys.BudgetID{id(b1)}, 0},
		{b1 + ", " + b2, []keys.BudgetID{id(b1), id(b2)}, 0},
		{"garbage," + b2 + ",B0000000-0000-4000-8000-000000000001", []keys.BudgetID{id(b2)}, 2},
	} {
		ids, invalid := budgetIDs(tc.raw)
		assert.Equal(t, tc.ids, ids, "%q", tc.raw)
		assert.Equal(t, tc.invalid, invalid, "%q", tc.raw)
	}
}

func TestBreached(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		limits, usage scannerapi.Reply
		want          bool
	}{
		{"under", hash("hard:tokens", "100"), hash("tokens", "99"), false},
		{"at the limit", hash("hard:tokens", "100"), hash("tokens", "100"), true},
		{"over", hash("hard:tokens", "100"), hash("tokens", "150"), true},
		{"one of two dimensions", hash("hard:tokens", "100", "hard:calls", "5"), hash("tokens", "1", "calls", "5"), true},
		{"a soft limit only", hash("soft:tokens", "100"), hash("tokens", "150"), false},
		{"a zero hard limit is none", hash("hard:tokens", "0"), hash("tokens", "150"), false},
		{"an unreadable limit is none", hash("hard:tokens", "x"), hash("tokens", "150"), false},
		{"no usage", hash("hard:tokens", "100"), hash(), false},
		{"no limits", hash(), hash("tokens", "150"), false},
	} {
		assert.Equal(t, tc.want, breached(tc.limits, tc.usage), tc.name)
	}
}

func TestQuotaIDOf(t *testing.T) {
	t.Parallel()
	const q = "d0000000-0000-4000-8000-000000000001"
	want, err := keys.ParseQuotaID(q)
	assert.NoError(t, err)
	for _, tc := range []struct {
		raw         string
		id          keys.QuotaID
		ok, invalid bool
	}{
		{"", keys.QuotaID{}, false, false},
		{q, want, true, false},
		{"garbage", keys.QuotaID{}, false, true},
	} {
		id, ok, invalid := quotaIDOf(tc.raw)
		assert.Equal(t, tc.id, id, "%q", tc.raw)
		assert.Equal(t, tc.ok, ok, "%q", tc.raw)
		assert.Equal(t, tc.invalid, invalid, "%q", tc.raw)
	}
}

func TestQuotaLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		reply   scannerapi.Reply
		want    quotaCheck
		limited bool
	}{
		{"rate", scannertest.Array(scannertest.Str("5"), scannertest.Str("10"), scannertest.Nil()), quotaCheck{rate: 5, windowSec: 10}, true},
		{"concurrency, the default window", scannertest.Array(scannertest.Nil(), scannertest.Nil(), scannertest.Str("2")), quotaCheck{windowSec: 60, concurrent: 2}, true},
		{"both", scannertest.Array(scannertest.Str("5"), scannertest.Str("1"), scannertest.Str("2")), quotaCheck{rate: 5, windowSec: 1, concurrent: 2}, true},
		{"neither", scannertest.Array(scannertest.Str("0"), scannertest.Str("10"), scannertest.Str("0")), quotaCheck{windowSec: 10}, false},
		{"no definition", scannertest.Array(scannertest.Nil(), scannertest.Nil(), scannertest.Nil()), quotaCheck{windowSec: 60}, false},
		{"a short reply", scannertest.Array(scannertest.Str("5")), quotaCheck{rate: 5, windowSec: 60}, true},
		{"decimals are truncated", scannertest.Array(scannertest.Str("5.9"), scannertest.Str("1.5"), scannertest.Nil()), quotaCheck{rate: 5, windowSec: 1}, true},
	} {
		q, limited := quotaLimits(tc.reply)
		assert.Equal(t, tc.want, q, tc.name)
		assert.Equal(t, tc.limited, limited, tc.name)
	}
}

func TestQuotaFull(t *testing.T) {
	t.Parallel()
	rate := quotaCheck{rate: 3, windowSec: 1}
	conc := quotaCheck{windowSec: 60, concurrent: 2}
	both := quotaCheck{rate: 3, windowSec: 1, concurrent: 2}
	for _, tc := range []struct {
		name        string
		q           quotaCheck
		inWindow    int64
		concurrency scannerapi.Reply
		reason      string
		used, limit int64
	}{
		{"room in the window", rate, 2, scannertest.Nil(), "", 0, 0},
		{"window full", rate, 3, scannertest.Nil(), "quota_window_full", 3, 3},
		{"room for one more", conc, 9, scannertest.Str("1"), "", 0, 0},
		{"every slot in use", conc, 0, scannertest.Str("2"), "quota_concurrency_full", 2, 2},
		{"no counter yet", conc, 0, scannertest.Nil(), "", 0, 0},
		{"the window first", both, 3, scannertest.Str("2"), "quota_window_full", 3, 3},
		{"then concurrency", both, 0, scannertest.Str("5"), "quota_concurrency_full", 5, 2},
	} {
		reason, used, limit := quotaFull(tc.q, tc.inWindow, tc.concurrency)
		assert.Equal(t, tc.reason, reason, tc.name)
		assert.Equal(t, tc.used, used, tc.name)
		assert.Equal(t, tc.limit, limit, tc.name)
	}
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	union := map[string]bool{}
	addCaps(union, "gpu,,cuda")
	addCaps(union, "")
	addCaps(union, "arm")
	assert.Equal(t, map[string]bool{"gpu": true, "cuda": true, "arm": true}, union)
	for _, tc := range []struct {
		required string
		have     map[string]bool
		missing  string
	}{
		{"", union, ""},
		{"gpu", union, ""},
		{"gpu,cuda,", union, ""},
		{"gpu,tpu,fpga", union, "tpu"},
		{"gpu", map[string]bool{}, "gpu"},
	} {
		tok, missing := missingCapability(tc.required, tc.have)
		assert.Equal(t, tc.missing, tok, "%q", tc.required)
		assert.Equal(t, tc.missing != "", missing, "%q", tc.required)
	}
}

func TestClassifyReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		reply scannerapi.Reply
		want  outcome
	}{
		{"unblocked", scannertest.Array(scannertest.Int(1), scannertest.Str("OK")), outcome{kind: outUnblocked}},
		{"not eligible any more", scannertest.Array(scannertest.Int(0), scannertest.Str("execution_not_eligible")), outcome{kind: outMovedOn, code: "execution_not_eligible"}},
		{"gone", scannertest.Array(scannertest.Int(0), scannertest.Str("execution_not_found")), outcome{kind: outMovedOn, code: "execution_not_found"}},
		{"another code", scannertest.Array(scannertest.Int(0), scannertest.Str("invalid_blocking_reason")), outcome{kind: outLuaError, class: scannerapi.ErrLua, code: "invalid_blocking_reason"}},
		{"wrongtype", scannertest.Failed(scannerapi.ErrServer, "WRONGTYPE Operation against a key"),
			outcome{kind: outFailed, class: scannerapi.ErrServer, code: "WRONGTYPE"}},
		{"transport", scannertest.Failed(scannerapi.ErrTransport, "i/o timeout"),
			outcome{kind: outFailed, class: scannerapi.ErrTransport, code: "error"}},
	} {
		assert.Equal(t, tc.want, classifyReply(tc.reply), tc.name)
	}
}
