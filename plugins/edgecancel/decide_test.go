package edgecancel

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const (
	fid = "f0000000-0000-4000-8000-000000000001"
	eid = "{fp:3}:00000000-0000-4000-8000-000000000001"
)

func TestParseTuple(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		member string
		form   keys.IDForm
	}{
		{fid + "|" + eid, keys.IDCanonical},
		{strings.ToUpper(fid) + "|" + eid, keys.IDNonCanonical},
		{fid + "|{fp:003}:00000000-0000-4000-8000-000000000001", keys.IDNonCanonical},
		{fid, keys.IDInvalid},
		{fid + "|", keys.IDInvalid},
		{"|" + eid, keys.IDInvalid},
		{"garbage|" + eid, keys.IDInvalid},
		{fid + "|garbage", keys.IDInvalid},
		{"", keys.IDInvalid},
	} {
		tu, form := parseTuple(tc.member)
		assert.Equal(t, tc.form, form, "%q", tc.member)
		if form == keys.IDCanonical {
			assert.Equal(t, tc.member, tu.raw)
			assert.Equal(t, fid, tu.flow.String())
			assert.Equal(t, eid, tu.downstream.String())
		} else {
			assert.Equal(t, tuple{}, tu)
		}
	}
}

func TestGroupKeys(t *testing.T) {
	t.Parallel()
	tu, _ := parseTuple(fid + "|" + eid)
	p := keys.Partition{Family: keys.FamilyFlow, Index: 3}
	assert.Equal(t, []string{keys.FlowPart(p).PendingCancelGroups(), keys.FlowIn(p, tu.flow).EdgeGroup(tu.downstream)}, groupKeys(p, tu))
}

func TestGroupOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		reply scannerapi.Reply
		want  group
	}{
		{"every field", scannertest.Array(scannertest.Str("quorum"), scannertest.Str("a|b"), scannertest.Str("true")), group{exists: true, reason: "quorum", members: "a|b", flag: "true"}},
		{"only the flag", scannertest.Array(scannertest.Nil(), scannertest.Nil(), scannertest.Str("true")), group{exists: true, flag: "true"}},
		{"missing", scannertest.Array(scannertest.Nil(), scannertest.Nil(), scannertest.Nil()), group{}},
	} {
		assert.Equal(t, tc.want, groupOf(tc.reply), tc.name)
	}
}

func TestCancelReason(t *testing.T) {
	t.Parallel()
	assert.Equal(t, DefaultReason, cancelReason(group{}))
	assert.Equal(t, "any_of_satisfied", cancelReason(group{reason: "any_of_satisfied"}))
}

func TestSiblingsOf(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxSiblings+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct {
		name string
		g    group
		raws []string
		more bool
	}{
		{"neither flag nor members: straight to the drain", group{exists: true}, nil, false},
		{"flagged, no members", group{flag: "true"}, nil, false},
		{"members", group{flag: "true", members: "a|b"}, []string{"a", "b"}, false},
		{"empty entries skipped", group{flag: "true", members: "|a||b|"}, []string{"a", "b"}, false},
		{"members without the flag", group{members: "a"}, []string{"a"}, false},
		{"exactly the bound", group{flag: "true", members: strings.Join(many[:MaxSiblings], "|")}, many[:MaxSiblings], false},
		{"past the bound: the rest wait", group{flag: "true", members: strings.Join(many, "|")}, many[:MaxSiblings], true},
	} {
		raws, more := siblingsOf(tc.g)
		assert.Equal(t, tc.raws, raws, tc.name)
		assert.Equal(t, tc.more, more, tc.name)
	}
}

func TestPredictReconcile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		g    group
		why  string
		drop bool
	}{
		{"missing group", group{}, "edge group missing", true},
		{"flag cleared", group{exists: true, members: "a"}, "flag cleared", true},
		{"flagged: the library decides", group{exists: true, flag: "true", members: "a"}, "", false},
	} {
		why, drop := predictReconcile(tc.g)
		assert.Equal(t, tc.why, why, tc.name)
		assert.Equal(t, tc.drop, drop, tc.name)
	}
}

func TestClassifyReplies(t *testing.T) {
	t.Parallel()
	wrongtype := scannertest.Failed(scannerapi.ErrServer, "WRONGTYPE Operation against a key")
	for _, tc := range []struct {
		name       string
		reply      scannerapi.Reply
		drain, rec outcome
	}{
		{"drained", scannertest.Array(scannertest.Int(1), scannertest.Str("OK")), outcome{kind: outDone}, outcome{kind: outUnexpected, class: scannerapi.ErrServer, code: "unexpected_status"}},
		{"stale dropped", scannertest.Array(scannertest.Int(1), scannertest.Str("OK"), scannertest.Str("sremmed_stale")), outcome{kind: outDone}, outcome{kind: outDone, code: "sremmed_stale"}},
		{"drain completed", scannertest.Array(scannertest.Int(1), scannertest.Str("OK"), scannertest.Str("completed_drain")), outcome{kind: outDone}, outcome{kind: outDone, code: "completed_drain"}},
		{"no op", scannertest.Array(scannertest.Int(1), scannertest.Str("OK"), scannertest.Str("no_op")), outcome{kind: outDone}, outcome{kind: outNoOp, code: "no_op"}},
		{"lua error", scannertest.Array(scannertest.Int(0), scannertest.Str("invalid_input")),
			outcome{kind: outFailed, class: scannerapi.ErrLua, code: "invalid_input"}, outcome{kind: outFailed, class: scannerapi.ErrLua, code: "invalid_input"}},
		{"wrongtype", wrongtype,
			outcome{kind: outFailed, class: scannerapi.ErrServer, code: "WRONGTYPE"}, outcome{kind: outFailed, class: scannerapi.ErrServer, code: "WRONGTYPE"}},
	} {
		assert.Equal(t, tc.drain, classifyDrain(tc.reply), "drain: %s", tc.name)
		assert.Equal(t, tc.rec, classifyReconcile(tc.reply), "reconcile: %s", tc.name)
	}
}
