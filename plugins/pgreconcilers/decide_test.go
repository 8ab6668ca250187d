package pgreconcilers

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
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
	one := scannertest.Int(1)
	zero := scannertest.Int(0)
	done := []string{"retried", "terminal"}
	for _, tc := range []struct {
		name  string
		reply scannerapi.Reply
		want  outcome
	}{
		{"done", scannertest.Array(one, scannertest.Str("retried")), outcome{kind: outDone, code: "retried"}},
		{"the other done status", scannertest.Array(one, scannertest.Str("terminal")), outcome{kind: outDone, code: "terminal"}},
		{"left after the re-check", scannertest.Array(one, scannertest.Str("not_due")), outcome{kind: outLeft, code: "not_due"}},
		{"refused", scannertest.Array(zero, scannertest.Str("invalid_input")), outcome{kind: outRefused, class: scannerapi.ErrLua, code: "invalid_input"}},
		{"failed", scannertest.Failed(scannerapi.ErrTransport, "i/o timeout"),
			outcome{kind: outFailed, class: scannerapi.ErrTransport, code: "error"}},
	} {
		assert.Equal(t, tc.want, classifyAction(tc.reply, done), tc.name)
	}
}
