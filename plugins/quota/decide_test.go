package quota

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

func TestDefinitionOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		reply     scannerapi.Reply
		windowSec float64
		capacity  int64
		gone      bool
	}{
		{"window and cap", scannertest.Array(scannertest.Str("q"), scannertest.Str("60"), scannertest.Str("2")), 60, 2, false},
		{"a window only", scannertest.Array(scannertest.Str("q"), scannertest.Str("1.5"), scannertest.Nil()), 1.5, 0, false},
		{"a cap only", scannertest.Array(scannertest.Str("q"), scannertest.Nil(), scannertest.Str("3")), 0, 3, false},
		{"neither", scannertest.Array(scannertest.Str("q"), scannertest.Nil(), scannertest.Nil()), 0, 0, false},
		{"a fractional cap is truncated", scannertest.Array(scannertest.Str("q"), scannertest.Nil(), scannertest.Str("2.9")), 0, 2, false},
		{"unreadable numbers are none", scannertest.Array(scannertest.Str("q"), scannertest.Str("x"), scannertest.Str("y")), 0, 0, false},
		{"gone", scannertest.Array(scannertest.Nil(), scannertest.Nil(), scannertest.Nil()), 0, 0, true},
		{"an empty reply is gone", scannertest.Array(), 0, 0, true},
	} {
		w, c, gone := definitionOf(tc.reply)
		assert.Equal(t, tc.windowSec, w, tc.name)
		assert.Equal(t, tc.capacity, c, tc.name)
		assert.Equal(t, tc.gone, gone, tc.name)
	}
}

func TestTrimUpTo(t *testing.T) {
	t.Parallel()
	assert.Equal(t, int64(40_000), trimUpTo(100_000, 60))
	assert.Equal(t, int64(98_500), trimUpTo(100_000, 1.5))
}

func TestCounterOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reply scannerapi.Reply
		want  int64
	}{
		{scannertest.Str("3"), 3}, {scannertest.Nil(), 0}, {scannertest.Str("x"), 0}, {scannertest.Str("2.0"), 2},
	} {
		assert.Equal(t, tc.want, counterOf(tc.reply), "%v", tc.reply)
	}
}

func TestPhaseRead(t *testing.T) {
	t.Parallel()
	const eid = "{fp:3}:00000000-0000-4000-8000-000000000001"
	id, err := keys.ParseExecutionID(eid)
	assert.NoError(t, err)
	assert.Equal(t, scannerapi.Command{"HGET", keys.Exec(id).Core(), "lifecycle_phase"}, phaseRead(eid))
	assert.Nil(t, phaseRead("garbage"), "not an execution: it holds no slot")
}

func TestRunning(t *testing.T) {
	t.Parallel()
	for phase, want := range map[string]bool{
		"active": true, "runnable": true, "suspended": true,
		"terminal": false, "": false, // ended, or purged
	} {
		assert.Equal(t, want, running(phase), "%q", phase)
	}
}

func TestFixCommands(t *testing.T) {
	t.Parallel()
	qid, err := keys.ParseQuotaID("d0000000-0000-4000-8000-000000000001")
	assert.NoError(t, err)
	qk := keys.Quota(keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}, qid)
	for _, tc := range []struct {
		name          string
		ended         []string
		counter, live int64
		want          []scannerapi.Command
	}{
		{"nothing to fix", nil, 2, 2, nil},
		{"the counter only", nil, 3, 1, []scannerapi.Command{{"SET", qk.Concurrency(), "1"}}},
		{"ended admissions, the counter right", []string{"a", "b"}, 1, 1,
			[]scannerapi.Command{{"SREM", qk.AdmittedSet(), "a"}, {"SREM", qk.AdmittedSet(), "b"}}},
		{"both", []string{"a"}, 2, 0,
			[]scannerapi.Command{{"SREM", qk.AdmittedSet(), "a"}, {"SET", qk.Concurrency(), "0"}}},
	} {
		assert.Equal(t, tc.want, fixCommands(qk, tc.ended, tc.counter, tc.live), tc.name)
	}
}
