package pgreconcilers

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

const (
	uuidA = "00000000-0000-4000-8000-00000000000a"
	uuidB = "00000000-0000-4000-8000-00000000000b"
)

func TestArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		parse  func(string) ([]string, error)
		member string
		want   []string // nil: refused
	}{
		{"worker", workerArgs, `7/["ns","w1"]`, []string{`7/["ns","w1"]`}},
		{"worker: no partition", workerArgs, `["ns","w1"]`, nil},
		{"worker: partition out of range", workerArgs, `256/["ns","w1"]`, nil},
		{"worker: negative partition", workerArgs, `-1/["ns","w1"]`, nil},
		{"worker: not a JSON array", workerArgs, `7/{"ns":1}`, nil},
		{"event", eventArgs, "42", []string{"42"}},
		{"event: leading zeros", eventArgs, "042", []string{"42"}},
		{"event: zero", eventArgs, "0", nil},
		{"event: not a number", eventArgs, "x", nil},
		{"attempt", attemptArgs, uuidA + "/3", []string{uuidA, "3"}},
		{"attempt: upper case uuid", attemptArgs, strings.ToUpper(uuidA) + "/0", []string{uuidA, "0"}},
		{"attempt: negative index", attemptArgs, uuidA + "/-1", nil},
		{"attempt: no index", attemptArgs, uuidA, nil},
		{"attempt: not a uuid", attemptArgs, "x/1", nil},
		{"uuid", uuidArgs, uuidA, []string{uuidA}},
		{"uuid: not one", uuidArgs, "x", nil},
		{"two uuids", twoUUIDs, uuidA + "/" + uuidB, []string{uuidA, uuidB}},
		{"two uuids: one", twoUUIDs, uuidA, nil},
		{"two uuids: the second is not", twoUUIDs, uuidA + "/x", nil},
		{"budget", budgetArgs, "any text", []string{"any text"}},
		{"budget: empty", budgetArgs, "", nil},
		{"budget: too long", budgetArgs, strings.Repeat("b", maxBudgetIDLength+1), nil},
	} {
		got, err := tc.parse(tc.member)
		if tc.want == nil {
			assert.Error(t, err, tc.name)
			continue
		}
		if assert.NoError(t, err, tc.name) {
			assert.Equal(t, tc.want, got, tc.name)
		}
	}
}

func TestClassifyAction(t *testing.T) {
	t.Parallel()
	str := func(s string) scannerapi.Reply { return scannerapi.Reply{Kind: scannerapi.KindString, Str: s} }
	arr := func(rs ...scannerapi.Reply) scannerapi.Reply {
		return scannerapi.Reply{Kind: scannerapi.KindArray, Array: rs}
	}
	one := scannerapi.Reply{Kind: scannerapi.KindInt, Int: 1}
	zero := scannerapi.Reply{Kind: scannerapi.KindInt, Int: 0}
	done := []string{"retried", "terminal"}
	for _, tc := range []struct {
		name  string
		reply scannerapi.Reply
		want  outcome
	}{
		{"done", arr(one, str("retried")), outcome{kind: outDone, code: "retried"}},
		{"the other done status", arr(one, str("terminal")), outcome{kind: outDone, code: "terminal"}},
		{"left after the re-check", arr(one, str("not_due")), outcome{kind: outLeft, code: "not_due"}},
		{"refused", arr(zero, str("invalid_input")), outcome{kind: outRefused, class: scannerapi.ErrLua, code: "invalid_input"}},
		{"failed", scannerapi.Reply{Kind: scannerapi.KindError, Err: "i/o timeout", ErrClass: scannerapi.ErrTransport},
			outcome{kind: outFailed, class: scannerapi.ErrTransport, code: "error"}},
	} {
		assert.Equal(t, tc.want, classifyAction(tc.reply, done), tc.name)
	}
}
