package callbacks

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// A plugin's socket batch is answered straight from the client's replies
// in the packed form: byte for byte what packing Exec's replies gives,
// refusals, errors and the reply budget included, and counted the same.
func TestExecPackedMatchesExec(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	ctx := context.Background()
	big := strings.Repeat("x", 100_000)
	for _, c := range []scannerapi.Command{
		{"SET", "ff:test:{fp:1}:big", big},
		{"SET", "ff:test:{fp:1}:s", "v"},
		{"HSET", "ff:test:{fp:1}:h", "a", "1", "b", ""},
		{"ZADD", "ff:test:{fp:1}:z", "1.5", "m1", "-2", "m2"},
	} {
		require.NoError(t, client.Do(ctx, client.B().Arbitrary(c...).Build()).Error())
	}
	reads := []scannerapi.Command{
		{"HGET", "ff:test:{fp:1}:h", "a"},
		{"HGETALL", "ff:test:{fp:1}:h"},
		{"GET", "ff:test:missing"},
		{"ZRANGE", "ff:test:{fp:1}:z", "0", "-1", "WITHSCORES"},
		{"FCALL", "ff_version", "0"},
		{"HGET", "ff:test:{fp:1}:s", "f"}, // WRONGTYPE
		{"SET", "ff:test:{fp:1}:s", "w"},  // not declared: refused
		{"GET", "other:key"},              // not ff: refused
	}
	var budgeted []scannerapi.Command
	for range 128 {
		budgeted = append(budgeted, scannerapi.Command{"GET", "ff:test:{fp:1}:big"})
	}
	budgeted = append(budgeted, scannerapi.Command{"HGET", "ff:test:{fp:1}:h", "b"})

	pol, _ := PolicyFromInfo(testInfo, false)
	cb, ok := svc.Bind("t", pol).Callbacks().(pluginhost.PackedCallbacks)
	require.True(t, ok, "a plugin's callbacks answer in packed form")
	for _, tc := range []struct {
		name   string
		budget Budget
		cmds   []scannerapi.Command
	}{
		{"reads and refusals", DefaultBudget, reads},
		{"reply budget", Budget{MaxReplyBytes: 1_000_000}, budgeted},
		// Last: the rate leaves the bucket nearly empty. Eight commands
		// never fit a burst of one, so both batches are refused whole.
		{"rate budget", Budget{CommandsPerSecond: 0.001, Burst: 1}, reads},
	} {
		name := tc.name
		svc.SetBudget(tc.budget)
		rec.refused = map[string]int{}
		replies, err := cb.Exec(ctx, "t", tc.cmds)
		require.NoError(t, err, name)
		viaExec := rec.refused
		want := pluginhost.NewReplyWriter(len(replies))
		for i := range replies {
			want.Reply(&replies[i])
		}

		rec.refused = map[string]int{}
		got := pluginhost.NewReplyWriter(len(tc.cmds))
		require.NoError(t, cb.ExecPacked(ctx, "t", tc.cmds, got), name)
		assert.Equal(t, want.Bytes(), got.Bytes(), name)
		assert.Equal(t, len(tc.cmds), got.Replies(), name)
		assert.Equal(t, viaExec, rec.refused, "%s: refusals counted alike", name)
		assert.NotEmpty(t, rec.refused, "%s refuses something", name)
	}

	// Another scanner's batch is refused as a whole, as through Exec.
	err := cb.ExecPacked(ctx, "other", reads, pluginhost.NewReplyWriter(len(reads)))
	assert.ErrorContains(t, err, `runs scanner "t", not "other"`)
}
