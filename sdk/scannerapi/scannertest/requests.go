package scannertest

import (
	"context"
	"strconv"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// ServerNowMs reads the server's clock (TIME) in milliseconds, as the host
// does once per cycle for ScanRequest.NowMs.
func ServerNowMs(t testing.TB, c valkey.Client) int64 {
	t.Helper()
	tm, err := c.Do(context.Background(), c.B().Time().Build()).AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("scannertest: TIME: %v %v", tm, err)
	}
	secs, err1 := strconv.ParseInt(tm[0], 10, 64)
	micros, err2 := strconv.ParseInt(tm[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("scannertest: TIME answered %q", tm)
	}
	return secs*1000 + micros/1000
}

// DueCandidates reads a due-source window the way the host does for
// SourceZSetDue: the members of key scored at most nowMs, lowest first, at
// most batch of them, as candidates of source.
func DueCandidates(t testing.TB, c valkey.Client, source, key string, nowMs int64, batch int) []scannerapi.Candidate {
	t.Helper()
	zs, err := c.Do(context.Background(), c.B().Zrange().Key(key).Min("-inf").Max(strconv.FormatInt(nowMs, 10)).
		Byscore().Limit(0, int64(batch)).Withscores().Build()).AsZScores()
	if err != nil {
		t.Fatalf("scannertest: read the due window of %s: %v", key, err)
	}
	out := make([]scannerapi.Candidate, 0, len(zs))
	for _, z := range zs {
		out = append(out, scannerapi.Candidate{Source: source, Key: key, Member: z.Member, Score: z.Score})
	}
	return out
}
