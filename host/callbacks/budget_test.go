package callbacks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
// first replies, then refusals; the commands past the budget are not
// sent, and every refusal is counted.
func TestBudgetReplyBytes(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	ctx := context.Background()
	big := strings.Repeat("x", 100_000)
	require.NoError(t, client.Do(ctx, client.B().Set().Key("ff:test:{fp:1}:big").Value(big).Build()).Error())
	svc.SetBudget(Budget{MaxReplyBytes: 1_000_000})
	var cmds []scannerapi.Command
	for range 2 * replyCheckEvery {
		cmds = append(cmds, scannerapi.Command{"GET", "ff:test:{fp:1}:big"})
	}
	cmds = append(cmds, scannerapi.Command{"HSET", "ff:test:{fp:1}:after", "a", "1"})
	replies, err := svc.Exec(ctx, "t", cmds)
	require.NoError(t, err)
	for i := 0; i < 9; i++ {
		assert.Len(t, replies[i].Str, 100_000, "reply %d within budget", i)
	}
	for i := 10; i < replyCheckEvery; i++ {
		assert.Equal(t, scannerapi.ErrRefused, replies[i].ErrClass, "reply %d", i)
		assert.Contains(t, replies[i].Err, "its reply was dropped")
	}
	for i := replyCheckEvery; i < len(replies); i++ {
		assert.Contains(t, replies[i].Err, "not sent", "reply %d", i)
	}
	n, err := client.Do(ctx, client.B().Exists().Key("ff:test:{fp:1}:after").Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n, "the write past the budget was not sent")
	refusedReplies := 0
	for _, r := range replies {
		if r.ErrClass == scannerapi.ErrRefused {
			refusedReplies++
		}
	}
	assert.Equal(t, refusedReplies, rec.refused[ReasonBudgetReply], "every refusal counted")
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
