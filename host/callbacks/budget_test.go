package callbacks

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// The command rate is a token bucket: a burst passes, the next batch is
// refused as a whole (nothing sent), and tokens come back with time.
func TestBudgetRate(t *testing.T) {
	var sp spend
	b := Budget{CommandsPerSecond: 100, Burst: 10}
	t0 := time.Unix(1000, 0)
	reason, release := sp.admit(b, 10, t0)
	require.Empty(t, reason)
	release()
	reason, _ = sp.admit(b, 1, t0)
	assert.Equal(t, ReasonBudgetRate, reason)
	reason, release = sp.admit(b, 5, t0.Add(50*time.Millisecond))
	assert.Empty(t, reason, "5 commands came back in 50 ms")
	release()
	reason, _ = sp.admit(b, 1, t0.Add(50*time.Millisecond))
	assert.Equal(t, ReasonBudgetRate, reason)
}

// A slot is held for a batch's run; past MaxInFlight batches are refused.
func TestBudgetInFlight(t *testing.T) {
	var sp spend
	b := Budget{MaxInFlight: 2}
	now := time.Unix(1000, 0)
	_, r1 := sp.admit(b, 1, now)
	_, r2 := sp.admit(b, 1, now)
	reason, _ := sp.admit(b, 1, now)
	assert.Equal(t, ReasonBudgetInFlight, reason)
	r1()
	reason, r3 := sp.admit(b, 1, now)
	assert.Empty(t, reason)
	r2()
	r3()
}

// A plugin that reads a big value again and again in one batch gets the
// replies that fit its reply budget; the reads that would not fit are
// refused without being read, and the batch's other commands still run.
// Every refusal is counted.
func TestBudgetReplyBytes(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	ctx := context.Background()
	big := strings.Repeat("x", 100_000)
	require.NoError(t, client.Do(ctx, client.B().Set().Key("ff:test:{fp:1}:big").Value(big).Build()).Error())
	svc.SetBudget(Budget{MaxReplyBytes: 1_000_000})
	var cmds []scannerapi.Command
	for range 128 {
		cmds = append(cmds, scannerapi.Command{"GET", "ff:test:{fp:1}:big"})
	}
	cmds = append(cmds, scannerapi.Command{"HSET", "ff:test:{fp:1}:after", "a", "1"})
	replies, err := svc.Exec(ctx, "t", cmds)
	require.NoError(t, err)
	for i := range 9 {
		assert.Len(t, replies[i].Str, 100_000, "reply %d within budget", i)
	}
	for i := 9; i < 128; i++ {
		assert.Equal(t, scannerapi.ErrRefused, replies[i].ErrClass, "reply %d", i)
		assert.Contains(t, replies[i].Err, "not read: its reply would take 100016 bytes", "reply %d", i)
	}
	assert.Equal(t, scannerapi.Reply{Kind: scannerapi.KindInt, Int: 1}, replies[128], "the write ran")
	refusedReplies := 0
	for _, r := range replies {
		if r.ErrClass == scannerapi.ErrRefused {
			refusedReplies++
		}
	}
	assert.Equal(t, refusedReplies, rec.refused[ReasonBudgetReply], "every refusal counted")
}

// A value larger than the whole budget is never read, by GET, HGET, HMGET
// or HGETALL; a range read of a large collection is read alone and
// measured, and once the replies pass the budget nothing more is sent.
func TestBudgetRefusesBigValuesUnread(t *testing.T) {
	info := scannerapi.Info{Name: "r", Commands: []string{"GET", "HGET", "HMGET", "HGETALL", "ZRANGE", "SET", "ZCARD"}}
	svc, client, rec := setup(t, info, false)
	ctx := context.Background()
	big := strings.Repeat("x", 300_000)
	for _, c := range []scannerapi.Command{
		{"SET", "ff:t:{fp:1}:s", big},
		{"HSET", "ff:t:{fp:1}:h", "big", big, "small", "1"},
		{"ZADD", "ff:t:{fp:1}:z", "1", big},
	} {
		require.NoError(t, client.Do(ctx, client.B().Arbitrary(c...).Build()).Error())
	}
	for i := range 200 { // a large (skiplist) sorted set
		require.NoError(t, client.Do(ctx, client.B().Zadd().Key("ff:t:{fp:1}:z").ScoreMember().ScoreMember(float64(i+2), strings.Repeat("m", 100)+strconv.Itoa(i)).Build()).Error())
	}
	svc.SetBudget(Budget{MaxReplyBytes: 200_000})
	replies, err := svc.Exec(ctx, "r", []scannerapi.Command{
		{"GET", "ff:t:{fp:1}:s"},
		{"HGET", "ff:t:{fp:1}:h", "big"},
		{"HMGET", "ff:t:{fp:1}:h", "small", "big"},
		{"HGETALL", "ff:t:{fp:1}:h"},
		{"HGET", "ff:t:{fp:1}:h", "small"}, // fits
		{"ZCARD", "ff:t:{fp:1}:z"},
		{"ZRANGE", "ff:t:{fp:1}:z", "0", "0"}, // the big member: read alone, then over budget
		{"SET", "ff:t:{fp:1}:after", "1"},     // not sent
	})
	require.NoError(t, err)
	for i := range 4 {
		assert.Contains(t, replies[i].Err, "refused: budget_reply_bytes: not read", "reply %d", i)
	}
	assert.Equal(t, "1", replies[4].Str)
	assert.Equal(t, int64(201), replies[5].Int)
	assert.Contains(t, replies[6].Err, "its reply was dropped", "measured after it was read")
	assert.Contains(t, replies[7].Err, "not sent")
	n, err := client.Do(ctx, client.B().Exists().Key("ff:t:{fp:1}:after").Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, 6, rec.refused[ReasonBudgetReply])
}

// Refusals count in the budget and are short: a batch of refused
// commands with long keys makes the host hold at most the budget of
// refusal text, however many it sends.
func TestBudgetCountsRefusals(t *testing.T) {
	info := scannerapi.Info{Name: "d", Commands: []string{"DEL"},
		KeyScopes: []scannerapi.KeyScope{{Command: "DEL", Patterns: []string{"ff:mine:*"}}}}
	svc, _, _ := setup(t, info, false)
	svc.SetBudget(Budget{MaxReplyBytes: 64 << 10})
	ctx := context.Background()
	var cmds []scannerapi.Command
	for i := range MaxBatch {
		cmds = append(cmds, scannerapi.Command{"DEL", "ff:theirs:" + strconv.Itoa(i) + strings.Repeat("k", 4000)})
	}
	for _, packed := range []bool{false, true} {
		var total int64
		if packed {
			pol, _ := PolicyFromInfo(info, false)
			w := pluginhost.NewReplyWriter(len(cmds))
			require.NoError(t, svc.Bind("d", pol).Callbacks().(pluginhost.PackedCallbacks).ExecPacked(ctx, "d", cmds, w))
			total = int64(len(w.Bytes()))
		} else {
			replies, err := svc.Exec(ctx, "d", cmds)
			require.NoError(t, err)
			require.Len(t, replies, len(cmds))
			for _, r := range replies {
				assert.Equal(t, scannerapi.ErrRefused, r.ErrClass)
				total += pluginhost.ReplySize(r)
			}
			assert.Contains(t, replies[0].Err, "refused: key_scope")
			assert.Less(t, len(replies[0].Err), 400, "the key is cut: %s", replies[0].Err)
			assert.Equal(t, spentRefusal.Err, replies[len(replies)-1].Err)
		}
		// The texts up to the budget, then the short refusal for the rest.
		assert.Less(t, total, int64(64<<10)+int64(MaxBatch)*pluginhost.ReplySize(*spentRefusal), "packed %v", packed)
	}
}

// Over the rate, a whole batch is refused through Exec and counted.
func TestBudgetRefusesThroughExec(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	ctx := context.Background()
	svc.SetBudget(Budget{CommandsPerSecond: 0.001, Burst: 2})
	replies, err := svc.Exec(ctx, "t", []scannerapi.Command{{"HSET", "ff:test:{fp:1}:r", "a", "1"}, {"HSET", "ff:test:{fp:1}:r", "b", "1"}})
	require.NoError(t, err)
	assert.Empty(t, replies[0].Err)
	replies, err = svc.Exec(ctx, "t", []scannerapi.Command{{"DEL", "ff:test:{fp:1}:r"}})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.ErrRefused, replies[0].ErrClass)
	assert.Contains(t, replies[0].Err, ReasonBudgetRate)
	n, err := client.Do(ctx, client.B().Exists().Key("ff:test:{fp:1}:r").Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the refused DEL was not sent")
	assert.Equal(t, 1, rec.refused[ReasonBudgetRate])
}

// The reply budget is the scanner's, shared by its batches in flight: a
// plugin cannot multiply it by running many batches at once; what a
// batch held is given back when it ends.
func TestReplyBudgetIsSharedByBatchesInFlight(t *testing.T) {
	var sp spend
	a := account{limit: 1000, pool: &sp.replies}
	b := account{limit: 1000, pool: &sp.replies}
	require.True(t, a.reserve(600))
	assert.False(t, b.reserve(600), "the other batch's reservation counts")
	require.True(t, b.reserve(400))
	assert.Equal(t, int64(0), b.left())
	assert.False(t, b.add(1), "past the budget")
	assert.True(t, b.spent)
	a.release()
	assert.Equal(t, int64(599), a.left(), "a's 600 given back; b still holds 401")
	b.release()
	assert.Equal(t, int64(0), sp.replies.Load())
	unbounded := account{pool: &sp.replies}
	assert.True(t, unbounded.reserve(1<<40))
	assert.True(t, unbounded.add(1<<40))
	unbounded.release()
	assert.Equal(t, int64(0), sp.replies.Load())
}
