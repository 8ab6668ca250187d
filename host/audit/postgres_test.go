package audit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/host/shadow"
)

// The trail in Postgres (ffscan.audit_entry, from ffscan's library): what
// the recorder writes, one statement per batch, it reads back newest
// first and filtered; the table is bounded by size at every write and by
// age by the trim, on the recorder's clock. The subtests run in order on
// one database.
func TestPostgresTrail(t *testing.T) {
	t.Parallel()
	pool := postgrestest.SchemaDB(t, 2)
	ctx := context.Background()
	count := func(where string) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+Table+" WHERE "+where).Scan(&n))
		return n
	}

	t.Run("written in one statement per batch, read back newest first and filtered", func(t *testing.T) {
		clk := clock.NewManual(time.Now())
		r := NewPostgres(pool, Config{Host: "h1", Queue: 4, Clock: clk})
		uuid := "0a0b0c0d-0000-4000-8000-00000000000e"
		id := "{fp:2}:" + uuid
		lapsed := shadow.Decision{Command: "PGCALL expire_lapsed_lease", Args: []string{"2", uuid, "0"}}
		// Not started: the queue of 4 fills, the rest is dropped and
		// counted.
		for range 6 {
			r.Record(ScannerEntry(time.Time{}, "s", "0123456789abcdef0123", lapsed, Acted))
		}
		assert.Equal(t, uint64(2), r.Stats().Dropped)
		require.NoError(t, r.Start(ctx))
		require.NoError(t, r.Stop(ctx), "a stop writes what is queued")
		assert.Equal(t, Stats{Store: "postgres", Written: 4, Dropped: 2}, r.Stats())
		var xmins int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(DISTINCT xmin::text) FROM "+Table+" WHERE scanner = 's'").Scan(&xmins))
		assert.Equal(t, 1, xmins, "the four queued entries were one batch, written by one statement")

		others := NewPostgres(pool, Config{Host: "h2", Clock: clk})
		others.Record(Operator(WithActor(ctx, Actor{Channel: ChannelCLI, Who: TokenIdentity("t")}), "enable", "s", strings.Repeat("x", 5000)))
		others.Record(ScannerEntry(time.Time{}, "budgets", "", shadow.Decision{Command: "PGCALL reset_budget", Args: []string{"1", "b-1"}}, AlreadyDone))
		require.NoError(t, others.Start(ctx))
		require.NoError(t, others.Stop(ctx))

		got, err := r.Query(ctx, Filter{Execution: id})
		require.NoError(t, err)
		require.Len(t, got, 4)
		e := got[0]
		assert.Equal(t, id, e.Execution, "the PGCALL's partition and uuid name the execution")
		assert.Equal(t, "PGCALL expire_lapsed_lease", e.Command)
		assert.Equal(t, "0123456789abcdef", e.Digest)
		assert.Equal(t, "h1", e.Host)
		assert.Equal(t, Acted, e.Outcome)
		assert.Empty(t, e.Key)
		assert.WithinDuration(t, time.Now(), e.At, time.Minute, "the database's clock")
		for i := 1; i < len(got); i++ {
			assert.Greater(t, idNumber(t, got[i-1].ID), idNumber(t, got[i].ID), "newest first")
		}

		ops, err := r.Query(ctx, Filter{Kind: KindOperator})
		require.NoError(t, err)
		require.Len(t, ops, 1)
		assert.Equal(t, ChannelCLI, ops[0].Channel)
		assert.Equal(t, TokenIdentity("t"), ops[0].Who)
		assert.Equal(t, "enable", ops[0].Action)
		assert.Less(t, len(ops[0].Detail), 600, "bounded")
		budgets, err := r.Query(ctx, Filter{Scanner: "budgets"})
		require.NoError(t, err)
		require.Len(t, budgets, 1)
		assert.Empty(t, budgets[0].Execution, "a budget's reset names no execution")
		assert.Equal(t, AlreadyDone, budgets[0].Outcome)
		assert.Equal(t, "h2", budgets[0].Host)
		scanned, err := r.Query(ctx, Filter{Kind: KindScanner, Scanner: "s", Execution: id, Limit: 2})
		require.NoError(t, err)
		assert.Len(t, scanned, 2)

		all, err := r.Query(ctx, Filter{Within: time.Hour})
		require.NoError(t, err)
		assert.Len(t, all, 6)
		assert.Equal(t, "budgets", all[0].Scanner, "the last written first")
		later, err := r.Query(ctx, Filter{Since: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		assert.Empty(t, later)
		_, err = r.Query(ctx, Filter{Execution: "nope"})
		assert.Error(t, err)
	})

	t.Run("bounded by size at every write, over the whole table", func(t *testing.T) {
		_, err := pool.Exec(ctx, "TRUNCATE "+Table)
		require.NoError(t, err)
		s := &pgStore{pool: pool, maxEntries: 5}
		write := func(prefix string, n int) {
			t.Helper()
			var batch []Entry
			for i := range n {
				batch = append(batch, Entry{Kind: KindOperator, Action: "reload", Detail: fmt.Sprintf("%s%d", prefix, i)})
			}
			failed, err := s.Write(ctx, batch)
			require.NoError(t, err)
			require.Zero(t, failed)
		}
		details := func() []string {
			t.Helper()
			got, err := s.Query(ctx, Filter{Limit: 100})
			require.NoError(t, err)
			var out []string
			for _, e := range got {
				out = append(out, e.Detail)
			}
			return out
		}
		write("a", 3)
		assert.Equal(t, []string{"a2", "a1", "a0"}, details())
		write("b", 4)
		assert.Equal(t, []string{"b3", "b2", "b1", "b0", "a2"}, details(), "the oldest two made room")
		write("c", 7)
		assert.Equal(t, []string{"c6", "c5", "c4", "c3", "c2"}, details(), "a batch larger than the bound keeps its newest")
	})

	t.Run("trimmed by age on the recorder's clock", func(t *testing.T) {
		_, err := pool.Exec(ctx, "TRUNCATE "+Table)
		require.NoError(t, err)
		// Two rows the database stamped: two hours ago, and now.
		_, err = pool.Exec(ctx, "INSERT INTO "+Table+" (at, kind, detail) VALUES (now() - interval '2 hours', 'operator', 'old'), (now(), 'operator', 'fresh')")
		require.NoError(t, err)
		clk := clock.NewManual(time.Now())
		r := NewPostgres(pool, Config{MaxAge: time.Hour, Clock: clk})
		r.Trimmed.Init()
		require.NoError(t, r.Start(ctx))
		defer func() { require.NoError(t, r.Stop(ctx)) }()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		require.NoError(t, clk.WaitFor(wctx, 1), "the trim's ticker")
		trimmed := func() {
			t.Helper()
			err, werr := r.Trimmed.Wait(wctx)
			require.NoError(t, werr)
			require.NoError(t, err)
		}

		clk.Advance(trimEvery)
		trimmed()
		assert.Zero(t, count("detail = 'old'"), "older than an hour at the trim")
		assert.Equal(t, 1, count("detail = 'fresh'"), "younger than an hour: kept")

		clk.Advance(time.Hour)
		trimmed()
		assert.Zero(t, count("detail = 'fresh'"), "an hour later by the recorder's clock")
	})
}

func idNumber(t *testing.T, id string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err)
	return n
}
