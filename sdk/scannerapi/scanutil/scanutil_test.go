package scanutil_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/internal/storeepoch"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
	"github.com/ffscan/ffscan/sdk/testserver"
)

func TestErrorCodeAndClassify(t *testing.T) {
	assert.Equal(t, "WRONGTYPE", scanutil.ErrorCode("WRONGTYPE Operation against a key"))
	assert.Equal(t, "ERR", scanutil.ErrorCode("ERR unknown command"))
	assert.Equal(t, "error", scanutil.ErrorCode("connection reset by peer"))
	assert.Equal(t, "error", scanutil.ErrorCode(""))
	assert.Equal(t, "error", scanutil.ErrorCode("ABCDEFGHIJKLMNOPQRSTUVWXYZ too long"))

	class, code := scanutil.Classify(&scannerapi.ReplyError{Class: scannerapi.ErrTransport, Msg: "i/o timeout"})
	assert.Equal(t, scannerapi.ErrTransport, class)
	assert.Equal(t, "error", code)
	class, code = scanutil.Classify(errors.New("reply is not an array"))
	assert.Equal(t, scannerapi.ErrServer, class)
	assert.Equal(t, "malformed_reply", code)
	class, code = scanutil.ClassifyReply(scannerapi.Reply{Kind: scannerapi.KindError, Err: "NOSCRIPT no such function", ErrClass: scannerapi.ErrServer})
	assert.Equal(t, scannerapi.ErrServer, class)
	assert.Equal(t, "NOSCRIPT", code)
}

func TestIsOutage(t *testing.T) {
	lost := scannerapi.Reply{Kind: scannerapi.KindError, Err: "EOF", ErrClass: scannerapi.ErrTransport}
	wrong := scannerapi.Reply{Kind: scannerapi.KindError, Err: "WRONGTYPE", ErrClass: scannerapi.ErrServer}
	ok := scannerapi.Reply{Kind: scannerapi.KindInt, Int: 1}
	assert.False(t, scanutil.IsOutage(nil))
	assert.True(t, scanutil.IsOutage([]scannerapi.Reply{lost, lost}))
	assert.False(t, scanutil.IsOutage([]scannerapi.Reply{lost, ok}), "one reply arrived: the connection worked")
	assert.False(t, scanutil.IsOutage([]scannerapi.Reply{wrong}))
}

// TestZPosPagesEveryMemberOnce pages real sorted sets full of ties, in
// both directions and at every page size, and checks that the pages
// together return every member exactly once.
func TestZPosPagesEveryMemberOnce(t *testing.T) {
	srv := testserver.New(t)
	c := srv.Client(t)
	host := scannertest.Host(c)
	ctx := context.Background()
	var cmds []scannerapi.Command
	want := map[string]bool{}
	for i := 0; i < 40; i++ {
		m := "m" + strconv.Itoa(i)
		score := strconv.Itoa(i / 7) // runs of 7 equal scores
		if i%11 == 0 {
			score = "2.5"
		}
		cmds = append(cmds, scannerapi.Command{"ZADD", "z", score, m})
		want[m] = true
	}
	_, err := host.Exec(ctx, cmds)
	require.NoError(t, err)

	for _, rev := range []bool{false, true} {
		for size := 1; size <= 9; size++ {
			start, bound := math.Inf(-1), math.Inf(1)
			if rev {
				start, bound = bound, start
			}
			pos := scanutil.From(start)
			seen := map[string]int{}
			for pages := 0; ; pages++ {
				require.Less(t, pages, 100, "paging does not end (rev=%v size=%d)", rev, size)
				args := append([]string{"ZRANGE", "z"}, pos.Range(bound, rev, size)...)
				replies, err := host.Exec(ctx, []scannerapi.Command{args})
				require.NoError(t, err)
				page, err := scannerapi.ParseScoredMembers(replies[0])
				require.NoError(t, err)
				scores := make([]float64, len(page))
				for i, e := range page {
					seen[e.Member]++
					scores[i] = e.Score
				}
				pos = pos.Next(scores)
				if len(page) < size {
					break
				}
			}
			for m := range want {
				assert.Equal(t, 1, seen[m], "member %s (rev=%v size=%d)", m, rev, size)
			}
			assert.Len(t, seen, len(want))
		}
	}
}

func TestFormatScore(t *testing.T) {
	assert.Equal(t, "1700000000123", scanutil.FormatScore(1700000000123))
	assert.Equal(t, "2.5", scanutil.FormatScore(2.5))
	assert.Equal(t, "+inf", scanutil.FormatScore(math.Inf(1)))
	assert.Equal(t, "-inf", scanutil.FormatScore(math.Inf(-1)))
}

func TestCursors(t *testing.T) {
	var c scanutil.Cursors[uint16]
	_, ok := c.Get(3)
	assert.False(t, ok)
	c.Set(3, scanutil.ZPos{Score: 5, Skip: 2})
	p, ok := c.Get(3)
	require.True(t, ok)
	assert.Equal(t, scanutil.ZPos{Score: 5, Skip: 2}, p)
	c.Set(4, scanutil.From(1))
	c.Clear(3)
	_, ok = c.Get(3)
	assert.False(t, ok)
	assert.Equal(t, 1, c.Len())
	c.Reset()
	assert.Equal(t, 0, c.Len())
}

func TestMemoryIsBoundToScoreAndExpires(t *testing.T) {
	m := scanutil.NewMemory[string](3)
	stored, _ := m.Remember(1, "a", 10, "stuck", 100, 5)
	require.True(t, stored)

	v, ok := m.Recall(1, "a", 10, 101)
	require.True(t, ok)
	assert.Equal(t, "stuck", v)
	_, ok = m.Recall(2, "a", 10, 101)
	assert.False(t, ok, "entries are per partition")

	// Re-verified: five cycles after it was remembered, however often it
	// was recalled meanwhile, the entry is gone.
	for cycle := uint64(101); cycle < 105; cycle++ {
		_, ok = m.Recall(1, "a", 10, cycle)
		assert.True(t, ok, "cycle %d", cycle)
	}
	_, ok = m.Recall(1, "a", 10, 105)
	assert.False(t, ok)
	assert.Equal(t, 0, m.Len())

	// Another score is another entry.
	m.Remember(1, "b", 10, "x", 200, 5)
	_, ok = m.Recall(1, "b", 11, 200)
	assert.False(t, ok)
	_, ok = m.Recall(1, "b", 10, 200)
	assert.False(t, ok, "a re-scored entry is forgotten")

	// A cycle that goes backwards (host restart) expires entries.
	m.Remember(1, "c", 1, "x", 300, 0)
	_, ok = m.Recall(1, "c", 1, 299)
	assert.False(t, ok)

	// ttl 0 keeps an entry until it is forgotten or re-scored.
	m.Remember(1, "d", 1, "due", 300, 0)
	_, ok = m.Recall(1, "d", 1, 1_000_000)
	assert.True(t, ok)
	m.Forget(1, "d")
	_, ok = m.Recall(1, "d", 1, 1_000_000)
	assert.False(t, ok)
}

func TestMemoryLimitResetAndEntries(t *testing.T) {
	m := scanutil.NewMemory[int](2)
	s1, _ := m.Remember(1, "a", 1, 1, 10, 0)
	s2, _ := m.Remember(2, "b", 2, 2, 10, 0)
	s3, first := m.Remember(2, "c", 3, 3, 10, 0)
	assert.True(t, s1 && s2)
	assert.False(t, s3, "full")
	assert.True(t, first, "the first refusal is flagged for one log line")
	_, first = m.Remember(2, "c", 3, 3, 10, 0)
	assert.False(t, first)
	stored, _ := m.Remember(2, "b", 5, 5, 10, 0)
	assert.True(t, stored, "an entry already held can be updated when full")

	got := m.Entries(2, 10, nil)
	require.Len(t, got, 1)
	assert.Equal(t, scanutil.Entry[int]{Member: "b", Score: 5, Value: 5}, got[0])
	assert.Empty(t, m.Entries(2, 10, func(e scanutil.Entry[int]) bool { return e.Value > 5 }))

	m.ForgetPartition(2)
	assert.Equal(t, 1, m.Len())
	stored, _ = m.Remember(3, "c", 3, 3, 10, 0)
	assert.True(t, stored, "room again")
	m.Reset()
	assert.Equal(t, 0, m.Len())
	_, ok := m.Recall(1, "a", 1, 10)
	assert.False(t, ok)
}

func TestMemorySweepsExpiredEntriesOfIdlePartitions(t *testing.T) {
	m := scanutil.NewMemory[struct{}](10)
	for i := 0; i < 5; i++ {
		m.Remember(uint16(i), "x", 1, struct{}{}, 1, 3)
	}
	assert.Equal(t, 5, m.Len())
	// A scan of another partition three cycles later sweeps them.
	m.Recall(99, "y", 1, 4)
	assert.Equal(t, 0, m.Len())
}

// TestBatchAndWaves runs a scan shaped like the plugins': each wave's
// handlers queue the next wave's work, on a real server.
func TestBatchAndWaves(t *testing.T) {
	srv := testserver.New(t)
	host := scannertest.Host(srv.Client(t))
	ctx := context.Background()

	queue := []string{"a", "b", "c"}
	var got []string
	waves, err := scanutil.Waves(ctx, host, 0, func(b *scanutil.Batch) {
		work := queue
		queue = nil
		for _, k := range work {
			k := k
			b.Add(func(r []scannerapi.Reply) {
				require.Len(t, r, 2)
				n, _ := r[1].Text()
				got = append(got, k+"="+n)
				if len(k) < 2 {
					queue = append(queue, k+k) // more work for the next wave
				}
			}, scannerapi.Command{"SET", k, strconv.Itoa(len(k))}, scannerapi.Command{"GET", k})
		}
		b.Add(nil) // an empty group adds nothing
	})
	require.NoError(t, err)
	assert.Equal(t, 2, waves)
	assert.Equal(t, []string{"a=1", "b=1", "c=1", "aa=2", "bb=2", "cc=2"}, got)

	// ExecChunked splits a large batch over several callbacks and still
	// hands every group its own replies.
	var big scanutil.Batch
	sum := 0
	for i := 0; i < 25; i++ {
		i := i
		big.Add(func(r []scannerapi.Reply) {
			require.Len(t, r, 1)
			assert.Equal(t, int64(i+1), r[0].Int)
			sum++
		}, scannerapi.Command{"INCRBY", "n" + strconv.Itoa(i), strconv.Itoa(i + 1)})
	}
	calls := 0
	counting := scannerapi.HostFunc(func(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		calls++
		return host.Exec(ctx, cmds)
	})
	require.NoError(t, big.ExecChunked(ctx, counting, 10))
	assert.Equal(t, 25, sum)
	assert.Equal(t, 3, calls)

	// A failed Exec, or one that answers the wrong number of replies,
	// runs no handler: the outcome of every command is unknown.
	failing := scannerapi.HostFunc(func(context.Context, []scannerapi.Command) ([]scannerapi.Reply, error) {
		return nil, errors.New("connection lost")
	})
	short := scannerapi.HostFunc(func(context.Context, []scannerapi.Command) ([]scannerapi.Reply, error) {
		return []scannerapi.Reply{{Kind: scannerapi.KindNil}}, nil
	})
	for _, h := range []scannerapi.Host{failing, short} {
		called := false
		waves, err := scanutil.Waves(ctx, h, 0, func(b *scanutil.Batch) {
			b.Add(func([]scannerapi.Reply) { called = true }, scannerapi.Command{"GET", "k"}, scannerapi.Command{"GET", "j"})
		})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "wave 1")
		assert.Zero(t, waves)
		assert.False(t, called)
	}
}

func TestZPosFresh(t *testing.T) {
	sm := func(pairs ...any) []scannerapi.ScoredMember {
		var out []scannerapi.ScoredMember
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, scannerapi.ScoredMember{Member: pairs[i].(string), Score: float64(pairs[i+1].(int))})
		}
		return out
	}
	p := scanutil.ZPos{Score: 10, Member: "b", Skip: 2}
	fresh, next := p.Fresh(sm("a", 10, "b", 10, "c", 10, "d", 11))
	assert.Equal(t, sm("c", 10, "d", 11), fresh, "a and b at score 10 were seen")
	assert.Equal(t, scanutil.ZPos{Score: 11, Member: "d", Skip: 1}, next)

	fresh, next = p.Fresh(sm("a", 10, "b", 10, "c", 10))
	assert.Equal(t, sm("c", 10), fresh)
	assert.Equal(t, scanutil.ZPos{Score: 10, Member: "c", Skip: 3}, next, "a tie group counts all of it")

	fresh, next = p.Fresh(sm("a", 10))
	assert.Empty(t, fresh)
	assert.Equal(t, p, next, "nothing past the position")

	fresh, next = p.Fresh(nil)
	assert.Empty(t, fresh)
	assert.Equal(t, p, next)

	fresh, _ = scanutil.From(10).Fresh(sm("a", 10, "b", 12))
	assert.Equal(t, sm("a", 10, "b", 12), fresh, "From lies before every member of its score")
}

// TestZPosFreshSurvivesRemovals pages a real sorted set full of ties while
// members already seen are removed between pages (as acknowledgements
// and purges do): every member is still seen exactly once.
func TestZPosFreshSurvivesRemovals(t *testing.T) {
	srv := testserver.New(t)
	host := scannertest.Host(srv.Client(t))
	ctx := context.Background()
	var cmds []scannerapi.Command
	for i := 0; i < 60; i++ {
		cmds = append(cmds, scannerapi.Command{"ZADD", "z", strconv.Itoa(i / 9), "m" + strconv.Itoa(100+i)})
	}
	_, err := host.Exec(ctx, cmds)
	require.NoError(t, err)

	seen := map[string]int{}
	pos := scanutil.From(math.Inf(-1))
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100)
		const n = 4
		replies, err := host.Exec(ctx, []scannerapi.Command{append(scannerapi.Command{"ZRANGE", "z"}, pos.Reread(math.Inf(1), n)...)})
		require.NoError(t, err)
		page, err := scannerapi.ParseScoredMembers(replies[0])
		require.NoError(t, err)
		fresh, next := pos.Fresh(page)
		var rem []scannerapi.Command
		for i, e := range fresh {
			seen[e.Member]++
			if i%2 == 0 {
				rem = append(rem, scannerapi.Command{"ZREM", "z", e.Member})
			}
		}
		if len(rem) > 0 {
			_, err = host.Exec(ctx, rem)
			require.NoError(t, err)
		}
		short := len(page) < n+pos.Skip // the end of the set
		pos = next
		if short {
			break
		}
	}
	assert.Len(t, seen, 60)
	for m, c := range seen {
		assert.Equal(t, 1, c, m)
	}
}

// A change of the host's store epoch empties every memory of the process
// before the scan that carries it runs; the same epoch again, or a first
// one, does not.
func TestMemoryIsDroppedWhenTheStoreEpochChanges(t *testing.T) {
	m := scanutil.NewMemory[int](10)
	storeepoch.Observe(1000)
	stored, _ := m.Remember(1, "a", 5, 1, 1, 0)
	require.True(t, stored)
	storeepoch.Observe(1000)
	_, ok := m.Recall(1, "a", 5, 2)
	assert.True(t, ok, "same epoch: kept")
	storeepoch.Observe(1001)
	_, ok = m.Recall(1, "a", 5, 2)
	assert.False(t, ok, "new epoch: dropped")
	storeepoch.Observe(0)
	m.Remember(1, "b", 5, 1, 2, 0)
	_, ok = m.Recall(1, "b", 5, 3)
	assert.True(t, ok, "epoch 0 (not tracked) changes nothing")
}

// FilterSetting keeps everything until configured, takes a valid filter,
// and leaves the current one in place when the options are invalid.
func TestFilterSetting(t *testing.T) {
	var s scanutil.FilterSetting
	assert.True(t, s.Get().IsNoop())
	specs := scannerapi.FilterOptions()
	require.NoError(t, s.Configure(context.Background(), specs, map[string]string{"namespace": "billing", "instance_tag": "region=eu"}))
	assert.Equal(t, "billing", s.Get().Namespace)
	assert.Equal(t, "region", s.Get().TagKey)
	require.Error(t, s.Configure(context.Background(), specs, map[string]string{"instance_tag": "no-equals-sign"}))
	require.Error(t, s.Configure(context.Background(), specs, map[string]string{"bogus": "x"}))
	assert.Equal(t, "billing", s.Get().Namespace, "refused options change nothing")
}
