package postgres_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
)

// The host's serving pool (Options.Ready): when Connect returns, every
// connection of the pool is open and has run each function of ffscan's
// library the host calls once (so the planning of a first call is paid,
// not by a wake-up or a dispatch), nothing was written, and the pool keeps
// them all open (MinConns its size, no age limit).
func TestReadyPoolConnectionsRanEveryLibraryFunction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := postgrestest.SchemaDB(t, 1)
	const size = 3
	// The pool's sessions count their PL/pgSQL calls (a superuser's
	// setting, given at connect).
	t0 := time.Now()
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: admin.Config().ConnString() + "&track_functions=pl", PoolSize: size, Ready: true})
	require.NoError(t, err)
	defer pool.Close()
	t.Logf("%d connections opened and warmed up in %s", size, time.Since(t0).Round(time.Millisecond))
	assert.Equal(t, int32(size), pool.Stat().TotalConns(), "every connection open when Connect returns")
	assert.Equal(t, int32(size), pool.Config().MinConns, "the pool keeps them all")
	assert.Zero(t, pool.Config().MaxConnLifetime, "none is closed for its age")

	// Each connection hands its counts to the statistics at its next
	// statement's end (forced: not after a second).
	var conns []*pgxpool.Conn
	for range size {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
		require.NoError(t, err)
	}
	assert.Equal(t, int32(size), pool.Stat().TotalConns(), "no connection was opened for these")
	for _, c := range conns {
		c.Release()
	}
	calls := map[string]int64{}
	rows, err := admin.Query(ctx, "SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = 'ffscan'")
	require.NoError(t, err)
	for rows.Next() {
		var fn string
		var n int64
		require.NoError(t, rows.Scan(&fn, &n))
		calls[fn] += n
	}
	require.NoError(t, rows.Err())
	names := map[string]bool{}
	for _, s := range postgres.WarmUpStatements() {
		for _, m := range regexp.MustCompile(`ffscan\.(\w+)\(`).FindAllStringSubmatch(s, -1) {
			names[m[1]] = true
		}
	}
	for _, fn := range append(mapsKeys(postgres.ActionFunctions), mapsKeys(postgres.CandidateFunctions)...) {
		assert.True(t, names[fn], "%s is warmed up", fn)
	}
	for _, fn := range postgres.NextDueFunctions {
		assert.True(t, names[fn], "%s is warmed up", fn)
	}
	for fn := range names {
		if fn == "share_leave" || fn == "now_ms" {
			continue // SQL functions: track_functions=pl counts PL/pgSQL's
		}
		assert.GreaterOrEqual(t, calls[fn], int64(size), "%s ran once on each of the %d connections", fn, size)
	}
	var written int
	require.NoError(t, admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM ffscan.share_member) + (SELECT count(*) FROM ffscan.share_owner)").Scan(&written))
	assert.Zero(t, written, "the warm-up wrote nothing")
}

func mapsKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
