package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// commandCalls reads the server's per-command call counts (INFO
// commandstats): what the server ran, not what the host meant to send.
func commandCalls(t *testing.T, e *env) map[string]int64 {
	t.Helper()
	info, err := e.client.Do(context.Background(), e.client.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	out := map[string]int64{}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// diffCalls is what the cycle ran between two readings: the clock and the
// candidate and backlog reads. Connection housekeeping (HELLO of a new
// pipeline connection, PING) and the readings themselves are left out.
func diffCalls(before, after map[string]int64) map[string]int64 {
	cycle := map[string]bool{"time": true, "zrange": true, "zcount": true, "zcard": true, "scard": true, "sscan": true, "exists": true}
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 && cycle[k] {
			out[k] = d
		}
	}
	return out
}

// A source whose keys are all absent costs one EXISTS per cycle over all
// of them; otherwise an empty partition costs one command per source,
// whatever backlog the source reports, and the backlog is the same number
// a separate count would give: the due count of a due-ordered source
// comes from its read unless the read came back full; a size is read
// first and the candidates only where it is not zero.
//
// Read by rank (wake-ups on, the default), a full window costs one command
// more: the first entry past it, which is when the partition has work
// next. Polling only, the reads are by score, as before wake-ups.
func TestOneCommandPerEmptySourceAndExactBacklog(t *testing.T) {
	t.Parallel()
	for _, pollOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("poll_only=%v", pollOnly), func(t *testing.T) {
			t.Parallel()
			testOneCommandPerEmptySource(t, pollOnly)
		})
	}
}

func testOneCommandPerEmptySource(t *testing.T, pollOnly bool) {
	e := newEnv(t)
	key := func(name string, p uint16) string {
		return "ff:idx:" + keys.Partition{Family: keys.FamilyFlow, Index: p}.Tag() + ":" + name
	}
	info := scannerapi.Info{
		Name: "fetch", APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow, DefaultInterval: time.Second, DefaultBatch: 5,
		Sources: []scannerapi.CandidateSource{
			{Name: "due", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:due", Backlog: scannerapi.BacklogDue},
			{Name: "sized", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:sized", Backlog: scannerapi.BacklogSize},
			{Name: "set", Kind: scannerapi.SourceSetScan, Key: "ff:idx:{p}:set", Backlog: scannerapi.BacklogSize},
			{Name: "ring", Kind: scannerapi.SourceZSetRotate, Key: "ff:idx:{p}:ring", Backlog: scannerapi.BacklogSize},
			{Name: "plain", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:plain"},
		},
	}
	// A scanner that handles nothing, so the same state is read twice.
	s := &testScanner{info: info, fn: func(context.Context, scannerapi.Host, *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		return &scannerapi.ScanResult{}, nil
	}}
	r := e.runner(t, s, Config{PollOnly: pollOnly}, nil)

	// All 16 partitions empty: one EXISTS per source over its 16 keys,
	// plus TIME.
	before := commandCalls(t, e)
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"time": 1, "exists": 5}, diffCalls(before, commandCalls(t, e)))
	assert.True(t, sum.BacklogKnown)
	assert.Zero(t, sum.Backlog)

	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	nextMs := time.Now().Add(time.Hour).UnixMilli()
	e.do(t, "ZADD", key("due", 3), "1", "a", "2", "b", "3", "c", future, "later")                        // 3 due: fewer than a batch
	e.do(t, "ZADD", key("due", 4), "1", "a", "2", "b", "3", "c", "4", "d", "5", "e", "6", "f", "7", "g") // 7 due: a full batch
	e.do(t, "ZADD", key("due", 4), strconv.FormatInt(nextMs, 10), "next")                                // and one due later
	e.do(t, "ZADD", key("sized", 5), "1", "a", future, "later")                                          // size 2
	e.do(t, "SADD", key("set", 6), "a", "b", "c", "d")                                                   // size 4
	e.do(t, "ZADD", key("ring", 7), "1", "a", "2", "b", "3", "c")                                        // size 3
	e.do(t, "ZADD", key("plain", 8), "1", "a")                                                           // no backlog
	before = commandCalls(t, e)
	sum, err = r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	pastFull := int64(1) // the first entry past partition 4's full window
	if pollOnly {
		pastFull = 0
	}
	assert.Equal(t, map[string]int64{
		"time": 1, "exists": 5,
		// Every source has an entry somewhere: first round, one per
		// source and partition. Second round: the reads of the three
		// non-empty sized sources, and one count for the full batch of
		// partition 4.
		"zrange": 16*2 + 2 + pastFull, "zcard": 16 * 2, "scard": 16, "sscan": 1, "zcount": 1,
	}, diffCalls(before, commandCalls(t, e)))
	if pollOnly {
		assert.Zero(t, r.wakeups.Len(), "polling only, nothing is scheduled")
	} else {
		// Partition 3's read showed "later" past its due entries;
		// partition 4's second round the entry past its full window;
		// partition 5's sized source its not yet due entry. They are
		// scheduled about an hour ahead; nothing else is.
		assert.Equal(t, 3, r.wakeups.Len())
		for _, p := range []uint16{3, 4, 5} {
			at, ok := r.wakeups.At(p)
			require.True(t, ok, "partition %d scheduled", p)
			ahead := time.Until(at)
			assert.True(t, ahead > 50*time.Minute && ahead <= time.Hour, "partition %d woken in %s", p, ahead)
		}
	}
	assert.True(t, sum.BacklogKnown)
	assert.Equal(t, int64(3+7+2+4+3), sum.Backlog)
	calls := s.callsByPartition()
	assert.Len(t, calls, 6, "every partition with candidates is called")
	assert.Len(t, calls[4][0].Candidates, 5, "a batch")
	assert.Len(t, calls[5][0].Candidates, 1, "only the due member of a sized source")
	assert.Len(t, calls[6][0].Candidates, 4)
	assert.Len(t, calls[7][0].Candidates, 3)
}

// A plugin-measured backlog is not asked for partitions whose source keys
// the empty-source check proved absent: an idle deployment costs its
// plugin no RPC.
func TestPluginBacklogNotAskedForAbsentKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info := scannerapi.Info{
		Name: "sampled", APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow, DefaultInterval: time.Second, DefaultBatch: 5,
		Sources: []scannerapi.CandidateSource{
			{Name: "old", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:old", Backlog: scannerapi.BacklogPlugin},
		},
	}
	s := &testScanner{info: info, fn: func(context.Context, scannerapi.Host, *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		return &scannerapi.ScanResult{}, nil
	}}
	r := e.runner(t, s, Config{}, nil)
	_, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	s.mu.Lock()
	assert.Empty(t, s.sampled, "every key absent: no SampleBacklog")
	s.mu.Unlock()

	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	e.do(t, "ZADD", "ff:idx:"+keys.Partition{Family: keys.FamilyFlow, Index: 3}.Tag()+":old", future, "x")
	_, err = r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Len(t, s.sampled, 1)
	assert.Len(t, s.sampled[0], 16, "a key exists: the check proves nothing, every partition is asked as before")
}
