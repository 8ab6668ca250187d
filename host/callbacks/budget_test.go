package callbacks

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

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

// One command can repeat what it reads: an MGET of one 1 MB key 600
// times made the host read 600 MB against a 64 MiB budget (it was read
// alone, unmeasured, past 256 keys). Each distinct key or field is
// measured once and counted as often as it is named, SRANDMEMBER's
// negative count multiplies the whole set, and a range without a count
// is bounded by the whole collection: each read past the budget is
// refused unread, saying why, and the ones within it run.
func TestBudgetCountsRepetition(t *testing.T) {
	info := scannerapi.Info{Name: "rep", Commands: []string{"MGET", "HMGET", "SRANDMEMBER", "ZRANGE", "LRANGE", "XRANGE"}}
	svc, client, rec := setup(t, info, false)
	ctx := context.Background()
	val := strings.Repeat("v", 100_000)
	for _, c := range []scannerapi.Command{
		{"SET", "ff:r:{fp:1}:s", val},
		{"HSET", "ff:r:{fp:1}:h", "f", val},
		{"SADD", "ff:r:{fp:1}:set", val},
		{"XADD", "ff:r:{fp:1}:x", "*", "f", "v"},
	} {
		require.NoError(t, client.Do(ctx, client.B().Arbitrary(c...).Build()).Error())
	}
	zadd := client.B().Zadd().Key("ff:r:{fp:1}:z").ScoreMember()
	for i := range 2000 { // a large (skiplist) sorted set: 1.2 MB of members
		zadd = zadd.ScoreMember(float64(i), strings.Repeat("m", 600)+strconv.Itoa(i))
	}
	require.NoError(t, client.Do(ctx, zadd.Build()).Error())
	svc.SetBudget(Budget{MaxReplyBytes: 1_000_000})
	times := func(n int, cmd scannerapi.Command, arg string) scannerapi.Command {
		for range n {
			cmd = append(cmd, arg)
		}
		return cmd
	}
	var distinctKeys scannerapi.Command = scannerapi.Command{"MGET"}
	for i := range maxValueProbes + 1 {
		distinctKeys = append(distinctKeys, "ff:r:{fp:1}:k"+strconv.Itoa(i))
	}
	replies, err := svc.Exec(ctx, "rep", []scannerapi.Command{
		times(600, scannerapi.Command{"MGET"}, "ff:r:{fp:1}:s"),
		times(600, scannerapi.Command{"HMGET", "ff:r:{fp:1}:h"}, "f"),
		{"SRANDMEMBER", "ff:r:{fp:1}:set", "-600"},
		{"ZRANGE", "ff:r:{fp:1}:z", "0", "-1", "WITHSCORES"},
		distinctKeys,
		{"XRANGE", "ff:r:{fp:1}:x", "-", "+"},
		times(5, scannerapi.Command{"MGET"}, "ff:r:{fp:1}:s"),                      // fits
		{"SRANDMEMBER", "ff:r:{fp:1}:set", "-2"},                                   // fits
		{"ZRANGE", "ff:r:{fp:1}:z", "0", "9"},                                      // counted: read alone
		{"XRANGE", "ff:r:{fp:1}:x", "-", "+", "COUNT", "1"},                        // counted
		times(maxValueProbes+1, scannerapi.Command{"HMGET", "ff:r:{fp:1}:h"}, "f"), // one distinct field
	})
	require.NoError(t, err)
	assert.Contains(t, replies[0].Err, "refused: budget_reply_bytes: not read: its reply would take 60009616 bytes (600 keys, 1 distinct, one named 600 times: each time counted)")
	assert.Contains(t, replies[1].Err, "refused: budget_reply_bytes: not read: its reply would take 60009616 bytes (600 fields, 1 distinct, one named 600 times")
	assert.Contains(t, replies[2].Err, "refused: budget_reply_bytes: not read: its reply would take ")
	assert.Contains(t, replies[2].Err, "(a count of -600 repeats members: 600 times the whole collection)")
	assert.Contains(t, replies[3].Err, "refused: budget_reply_bytes: not read: its reply would take ", "2000 members bounded before they are read")
	assert.Equal(t, "refused: reply_unbounded: MGET of 257 distinct keys: the host measures at most 256 before reading them; split it", replies[4].Err)
	assert.Equal(t, "refused: reply_unbounded: XRANGE without COUNT: the host cannot bound a stream's range before reading it; give a COUNT", replies[5].Err)
	require.Len(t, replies[6].Array, 5)
	assert.Equal(t, val, replies[6].Array[4].Str)
	require.Len(t, replies[7].Array, 2)
	assert.Equal(t, val, replies[7].Array[1].Str)
	assert.Equal(t, 10, len(replies[8].Array))
	assert.Equal(t, 1, len(replies[9].Array))
	assert.Contains(t, replies[10].Err, "refused: budget_reply_bytes: not read: its reply would take 25704128 bytes (257 fields, 1 distinct")
	assert.Equal(t, 5, rec.refused[ReasonBudgetReply])
	assert.Equal(t, 2, rec.refused[ReasonUnbounded])
}

// A range without a count on a collection that fits is read, bounded by
// the whole collection first; the bound is never below what the reply
// counts.
func TestBudgetBoundsUncountedRanges(t *testing.T) {
	info := scannerapi.Info{Name: "rng", Commands: []string{"ZRANGE", "LRANGE", "ZRANGEBYSCORE", "SRANDMEMBER"}}
	svc, client, _ := setup(t, info, false)
	ctx := context.Background()
	for i := range 1000 {
		require.NoError(t, client.Do(ctx, client.B().Zadd().Key("ff:q:{fp:1}:z").ScoreMember().ScoreMember(float64(i), strconv.Itoa(i)).Build()).Error())
		require.NoError(t, client.Do(ctx, client.B().Rpush().Key("ff:q:{fp:1}:l").Element(strconv.Itoa(i)).Build()).Error())
	}
	require.NoError(t, client.Do(ctx, client.B().Sadd().Key("ff:q:{fp:1}:s").Member("a", "b", "c").Build()).Error())
	svc.SetBudget(Budget{MaxReplyBytes: 10_000_000})
	cmds := []scannerapi.Command{
		{"ZRANGE", "ff:q:{fp:1}:z", "0", "-1", "WITHSCORES"},
		{"LRANGE", "ff:q:{fp:1}:l", "0", "-1"},
		{"ZRANGEBYSCORE", "ff:q:{fp:1}:z", "-inf", "+inf"},
		{"SRANDMEMBER", "ff:q:{fp:1}:s", "-50"},
		{"ZRANGE", "ff:q:{fp:1}:none", "0", "-1"},
	}
	sh := []rangeShape{{}, {}, {}, {counted: true, repeats: 50}, {}}
	for i, c := range cmds {
		o := op{name: c[0], rest: c[2:], read: readRange}
		assert.Equal(t, sh[i], shapeOf(o), "%v", c)
	}
	replies, err := svc.Exec(ctx, "rng", cmds)
	require.NoError(t, err)
	assert.Equal(t, 1000, len(replies[0].Array), "member and score pairs")
	assert.Equal(t, 1000, len(replies[1].Array))
	assert.Equal(t, 1000, len(replies[2].Array))
	assert.Equal(t, 50, len(replies[3].Array))
	assert.Empty(t, replies[4].Array)
	// Each reply within its bound: the bound is what the batch reserved,
	// which a reply past it would have shown as a budget overrun. Check
	// the bound directly too.
	for i, c := range cmds[:4] {
		o := svc.check(Policy{commands: map[string]bool{c[0]: true}}, c)
		require.Nil(t, o.refused)
		var res []valkey.ValkeyResult
		for _, p := range svc.probes(o) {
			res = append(res, client.Do(ctx, p))
		}
		bound, known := estimate(o, res)
		require.True(t, known, "%v", c)
		assert.GreaterOrEqual(t, bound, pluginhost.ReplySize(replies[i]), "%v: bound %d", c, bound)
	}
}

// Arguments are bounded per command (a refusal; the batch's others run)
// and per batch (the batch fails whole, before anything runs).
func TestArgumentsAreBounded(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	ctx := context.Background()
	wide := scannerapi.Command{"HSET", "ff:test:{fp:1}:w"}
	for i := range MaxCommandArgs / 2 {
		wide = append(wide, "f"+strconv.Itoa(i), "v")
	}
	replies, err := svc.Exec(ctx, "t", []scannerapi.Command{
		wide,
		{"HSET", "ff:test:{fp:1}:w", "big", strings.Repeat("b", MaxCommandBytes)},
		{"HSET", "ff:test:{fp:1}:w", "a", "1"},
	})
	require.NoError(t, err)
	assert.Contains(t, replies[0].Err, "refused: argument_bound: HSET with 4098 arguments of ")
	assert.Contains(t, replies[0].Err, "; a command takes at most 4096 arguments of 16777216 bytes")
	assert.Contains(t, replies[1].Err, "refused: argument_bound: HSET with 4 arguments of 16777239 bytes")
	assert.Equal(t, int64(1), replies[2].Int)
	assert.Equal(t, 2, rec.refused[ReasonArgBound])
	n, err := client.Do(ctx, client.B().Hlen().Key("ff:test:{fp:1}:w").Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "only the small HSET ran")

	var many []scannerapi.Command
	for len(many)*4000 <= MaxBatchArgs {
		many = append(many, make(scannerapi.Command, 4000))
	}
	_, err = svc.Exec(ctx, "t", many)
	assert.ErrorContains(t, err, "callbacks: batch of 1052000 arguments of 0 bytes exceeds the limit of 1048576 arguments of 67108864 bytes")
	var heavy []scannerapi.Command
	value := strings.Repeat("h", 15<<20)
	for range 5 {
		heavy = append(heavy, scannerapi.Command{"HSET", "ff:test:{fp:1}:h", "f", value})
	}
	_, err = svc.Exec(ctx, "t", heavy)
	assert.ErrorContains(t, err, "exceeds the limit of 1048576 arguments of 67108864 bytes")
}
