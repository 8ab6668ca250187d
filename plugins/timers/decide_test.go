package timers

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

var wrongtype = scannertest.Failed(scannerapi.ErrServer, "WRONGTYPE Operation against a key")

const eid = "{fp:3}:00000000-0000-4000-8000-000000000001"

func TestStillDue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		score scannerapi.Reply
		want  bool
	}{
		{"gone", scannertest.Nil(), false},
		{"due, a string", scannertest.Str("1000"), true},
		{"due now", scannertest.Str("2000"), true},
		{"re-armed", scannertest.Str("2001"), false},
		{"a float", scannerapi.Reply{Kind: scannerapi.KindFloat, Float: 1999.5}, true},
		{"an int", scannertest.Int(3000), false},
		{"unreadable", scannertest.Str("x"), false},
	} {
		assert.Equal(t, tc.want, stillDue(tc.score, 2000), tc.name)
	}
}

func TestFields(t *testing.T) {
	t.Parallel()
	assert.Equal(t, map[string]string{"a": "1", "b": ""}, fields([]string{"a", "b", "c"}, scannertest.Array(scannertest.Str("1"), scannertest.Nil())),
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
		{"pending and due", scannertest.Array(scannertest.Str(eid), scannertest.Str("pending")), scannertest.Str("1000"), scannerapi.Filter{}, judged{step: stepAct}, true},
		{"pending and due, with a filter: read first", scannertest.Array(scannertest.Str(eid), scannertest.Str("pending")), scannertest.Str("1000"), filter, judged{step: stepRead}, true},
		{"re-armed since the read (P5)", scannertest.Array(scannertest.Str(eid), scannertest.Str("pending")), scannertest.Str("9000"), scannerapi.Filter{}, judged{step: stepGone}, false},
		{"entry gone", scannertest.Array(scannertest.Str(eid), scannertest.Str("pending")), scannertest.Nil(), scannerapi.Filter{}, judged{step: stepGone}, false},
		{"waitpoint gone: the call removes the entry", scannertest.Array(scannertest.Nil(), scannertest.Nil()), scannertest.Str("1000"), scannerapi.Filter{},
			judged{step: stepAct, detail: "waitpoint_gone"}, false},
		{"activated by a suspension", scannertest.Array(scannertest.Str(eid), scannertest.Str("active")), scannertest.Str("1000"), scannerapi.Filter{},
			judged{step: stepRecord, o: outcome{kind: outStuck, code: "active"}}, false},
		{"names no execution", scannertest.Array(scannertest.Str("garbage"), scannertest.Str("pending")), scannertest.Str("1000"), scannerapi.Filter{},
			judged{step: stepRecord, o: outcome{kind: outFailed, class: scannerapi.ErrInvalid, code: "invalid_execution_id"}, detail: "garbage"}, false},
		{"the waitpoint read failed", wrongtype, scannertest.Str("1000"), scannerapi.Filter{}, judged{step: stepFailed, reply: wrongtype}, false},
		{"the score read failed", scannertest.Array(scannertest.Str(eid), scannertest.Str("pending")), wrongtype, scannerapi.Filter{}, judged{step: stepFailed, reply: wrongtype}, false},
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
		core = append(core, scannertest.Str("x"))
	}
	reads := []scannerapi.Reply{scannertest.Array(core...), scannertest.Str(`{"retry_policy":null}`)}
	if attempt.sp.recheckScore {
		reads = append(reads, scannertest.Str("1000"))
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
		moved[len(moved)-1] = scannertest.Str("9000")
		assert.Equal(t, judged{step: stepGone}, attempt.judgeRead(&item{}, moved, nil, 2000, scannerapi.Filter{}))
	}
	// Outside the filter (its replies say another namespace).
	f := scannerapi.Filter{Namespace: "ns"}
	fr := make([]scannerapi.Reply, len(f.ReadCommands(id)))
	for i := range fr {
		fr[i] = scannertest.Str("other")
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
		{"acted", scannertest.Array(scannertest.Int(1), scannertest.Str("OK"), scannertest.Str("fired")), outcome{kind: outActed, code: "fired"}},
		{"cleaned", scannertest.Array(scannertest.Int(1), scannertest.Str("OK"), scannertest.Str("stale")), outcome{kind: outCleaned, code: "stale"}},
		{"stuck", scannertest.Array(scannertest.Int(1), scannertest.Str("OK"), scannertest.Str("left")), outcome{kind: outStuck, code: "left"}},
		{"an unknown status", scannertest.Array(scannertest.Int(1), scannertest.Str("OK"), scannertest.Str("new")), outcome{kind: outFailed, class: scannerapi.ErrServer, code: "unexpected_status"}},
		{"a known status without OK", scannertest.Array(scannertest.Int(1), scannertest.Str("ALREADY_SATISFIED"), scannertest.Str("fired")), outcome{kind: outFailed, class: scannerapi.ErrServer, code: "unexpected_status"}},
		{"a lua error", scannertest.Array(scannertest.Int(0), scannertest.Str("execution_not_found")), outcome{kind: outLuaError, class: scannerapi.ErrLua, code: "execution_not_found"}},
		{"malformed", scannertest.Str("what"), outcome{kind: outFailed, class: scannerapi.ErrServer, code: "malformed_reply"}},
		{"wrongtype", wrongtype, outcome{kind: outFailed, class: scannerapi.ErrServer, code: "WRONGTYPE"}},
	} {
		assert.Equal(t, tc.want, classify(nil, tc.reply), tc.name)
	}
}
