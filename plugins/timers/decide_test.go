package timers

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func str(s string) scannerapi.Reply { return scannerapi.Reply{Kind: scannerapi.KindString, Str: s} }
func num(n int64) scannerapi.Reply  { return scannerapi.Reply{Kind: scannerapi.KindInt, Int: n} }
func arr(rs ...scannerapi.Reply) scannerapi.Reply {
	return scannerapi.Reply{Kind: scannerapi.KindArray, Array: rs}
}

var (
	nilReply  = scannerapi.Reply{Kind: scannerapi.KindNil}
	wrongtype = scannerapi.Reply{Kind: scannerapi.KindError, Err: "WRONGTYPE Operation against a key", ErrClass: scannerapi.ErrServer}
)

const eid = "{fp:3}:00000000-0000-4000-8000-000000000001"

func TestStillDue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		score scannerapi.Reply
		want  bool
	}{
		{"gone", nilReply, false},
		{"due, a string", str("1000"), true},
		{"due now", str("2000"), true},
		{"re-armed", str("2001"), false},
		{"a float", scannerapi.Reply{Kind: scannerapi.KindFloat, Float: 1999.5}, true},
		{"an int", num(3000), false},
		{"unreadable", str("x"), false},
	} {
		assert.Equal(t, tc.want, stillDue(tc.score, 2000), tc.name)
	}
}

func TestFields(t *testing.T) {
	t.Parallel()
	assert.Equal(t, map[string]string{"a": "1", "b": ""}, fields([]string{"a", "b", "c"}, arr(str("1"), nilReply)),
		"nil is empty; past the reply, absent")
}

func TestJudgeLocated(t *testing.T) {
	t.Parallel()
	filter := scannerapi.Filter{Namespace: "ns"}
	for _, tc := range []struct {
		name     string
		wp       scannerapi.Reply
		score    scannerapi.Reply
		filter   scannerapi.Filter
		want     judged
		eidIsSet bool
	}{
		{"pending and due", arr(str(eid), str("pending")), str("1000"), scannerapi.Filter{}, judged{step: stepAct}, true},
		{"pending and due, with a filter: read first", arr(str(eid), str("pending")), str("1000"), filter, judged{step: stepRead}, true},
		{"re-armed since the read (P5)", arr(str(eid), str("pending")), str("9000"), scannerapi.Filter{}, judged{step: stepGone}, false},
		{"entry gone", arr(str(eid), str("pending")), nilReply, scannerapi.Filter{}, judged{step: stepGone}, false},
		{"waitpoint gone: the call removes the entry", arr(nilReply, nilReply), str("1000"), scannerapi.Filter{},
			judged{step: stepAct, detail: "waitpoint_gone"}, false},
		{"activated by a suspension", arr(str(eid), str("active")), str("1000"), scannerapi.Filter{},
			judged{step: stepRecord, o: outcome{kind: outStuck, code: "active"}}, false},
		{"names no execution", arr(str("garbage"), str("pending")), str("1000"), scannerapi.Filter{},
			judged{step: stepRecord, o: outcome{kind: outFailed, class: scannerapi.ErrInvalid, code: "invalid_execution_id"}, detail: "garbage"}, false},
		{"the waitpoint read failed", wrongtype, str("1000"), scannerapi.Filter{}, judged{step: stepFailed, reply: wrongtype}, false},
		{"the score read failed", arr(str(eid), str("pending")), wrongtype, scannerapi.Filter{}, judged{step: stepFailed, reply: wrongtype}, false},
	} {
		it := &item{}
		assert.Equal(t, tc.want, judgeLocated(it, tc.wp, tc.score, 2000, tc.filter), tc.name)
		if tc.eidIsSet {
			assert.Equal(t, eid, it.eid.String(), tc.name)
		} else {
			assert.True(t, it.eid.IsZero(), tc.name)
		}
	}
}

func TestJudgeRead(t *testing.T) {
	t.Parallel()
	attempt := NewAttemptTimeout()
	delayed := NewDelayedPromoter()
	// The readCommands of each, for one item, give the replies' order.
	it := &item{member: eid, index: "idx"}
	id, _ := keys.ParseExecutionID(eid)
	it.eid = id
	n := len(attempt.readCommands(it, scannerapi.Filter{}))
	assert.Positive(t, n)
	core := make([]scannerapi.Reply, 0, n)
	for range attempt.sp.coreReads {
		core = append(core, str("x"))
	}
	reads := []scannerapi.Reply{arr(core...), str(`{"retry_policy":null}`)}
	if attempt.sp.recheckScore {
		reads = append(reads, str("1000"))
	}
	assert.Len(t, reads, n, "one reply per read")
	got := attempt.judgeRead(it, reads, nil, 2000, scannerapi.Filter{})
	assert.Equal(t, judged{step: stepAct}, got)
	assert.Equal(t, map[string]string{"policy": `{"retry_policy":null}`}, it.extra)

	failed := append([]scannerapi.Reply{}, reads...)
	failed[0] = wrongtype
	assert.Equal(t, judged{step: stepFailed, reply: wrongtype}, attempt.judgeRead(&item{}, failed, nil, 2000, scannerapi.Filter{}))
	if attempt.sp.recheckScore {
		moved := append([]scannerapi.Reply{}, reads...)
		moved[len(moved)-1] = str("9000")
		assert.Equal(t, judged{step: stepGone}, attempt.judgeRead(&item{}, moved, nil, 2000, scannerapi.Filter{}))
	}
	// Outside the filter (its replies say another namespace).
	f := scannerapi.Filter{Namespace: "ns"}
	fr := make([]scannerapi.Reply, len(f.ReadCommands(id)))
	for i := range fr {
		fr[i] = str("other")
	}
	assert.Equal(t, judged{step: stepFiltered}, delayed.judgeRead(&item{}, nil, fr, 2000, f))
}

func TestRetriesLeft(t *testing.T) {
	t.Parallel()
	const retry = `{"max_retries":2,"backoff":{"type":"fixed","delay_ms":1}}`
	for _, tc := range []struct {
		name, policy, count string
		retry               string
		left                bool
	}{
		{"no policy", "", "0", "", false},
		{"not JSON", "{", "0", "", false},
		{"no retry policy", `{"timeout_ms":5}`, "0", "", false},
		{"a null retry policy", `{"retry_policy":null}`, "0", "", false},
		{"retries left", `{"retry_policy":` + retry + `}`, "1", retry, true},
		{"never retried", `{"retry_policy":` + retry + `}`, "", retry, true},
		{"none left", `{"retry_policy":` + retry + `}`, "2", retry, false},
		{"an unreadable retry policy", `{"retry_policy":"x"}`, "0", "", false},
	} {
		r, left := retriesLeft(tc.policy, tc.count)
		assert.Equal(t, tc.retry, r, tc.name)
		assert.Equal(t, tc.left, left, tc.name)
	}
}

func TestCoreLane(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		core       map[string]string
		lane, fail string
	}{
		{map[string]string{"execution_id": eid, "lane_id": "l"}, "l", ""},
		{map[string]string{"execution_id": eid}, "", "core_without_lane"},
		{map[string]string{}, "default", ""}, // no core: the function answers first
	} {
		lane, fail := coreLane(&item{core: tc.core})
		assert.Equal(t, tc.lane, lane, "%v", tc.core)
		assert.Equal(t, tc.fail, fail, "%v", tc.core)
	}
}

func TestAttemptIndex(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]uint32{"": 0, "0": 0, "3": 3, "x": 0, "-1": 0} {
		assert.Equal(t, want, attemptIndex(s), "%q", s)
	}
}

func TestStatusClassifier(t *testing.T) {
	t.Parallel()
	classify := statusClassifier(map[string]outKind{"fired": outActed, "stale": outCleaned, "left": outStuck})
	for _, tc := range []struct {
		name  string
		reply scannerapi.Reply
		want  outcome
	}{
		{"acted", arr(num(1), str("OK"), str("fired")), outcome{kind: outActed, code: "fired"}},
		{"cleaned", arr(num(1), str("OK"), str("stale")), outcome{kind: outCleaned, code: "stale"}},
		{"stuck", arr(num(1), str("OK"), str("left")), outcome{kind: outStuck, code: "left"}},
		{"an unknown status", arr(num(1), str("OK"), str("new")), outcome{kind: outFailed, class: scannerapi.ErrServer, code: "unexpected_status"}},
		{"a known status without OK", arr(num(1), str("ALREADY_SATISFIED"), str("fired")), outcome{kind: outFailed, class: scannerapi.ErrServer, code: "unexpected_status"}},
		{"a lua error", arr(num(0), str("execution_not_found")), outcome{kind: outLuaError, class: scannerapi.ErrLua, code: "execution_not_found"}},
		{"malformed", str("what"), outcome{kind: outFailed, class: scannerapi.ErrServer, code: "malformed_reply"}},
		{"wrongtype", wrongtype, outcome{kind: outFailed, class: scannerapi.ErrServer, code: "WRONGTYPE"}},
	} {
		assert.Equal(t, tc.want, classify(nil, tc.reply), tc.name)
	}
}
