package postgres_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// backendPID is the server process behind db's connection (db is a
// reader's pool of one).
func backendPID(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var pid int
	require.NoError(t, db.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid))
	return pid
}

// By default each candidate function has a connection of its own, open
// and warmed up (its reads and its next-due companion run once on it, in
// both forms) when OpenReaders returns, named "ffscan reads" in
// pg_stat_activity; its reads, however many at once, run on that one
// connection: after an ANALYZE, PL/pgSQL plans the function again on it
// alone.
func TestReadersPinEachCandidateFunctionToOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := postgrestest.SchemaDB(t, 1)
	r, err := postgres.OpenReaders(ctx, postgres.Options{DSN: admin.Config().ConnString() + "&track_functions=pl"}, 0)
	require.NoError(t, err)
	defer r.Close()

	fns := slices.Sorted(maps.Keys(postgres.CandidateFunctions))
	require.Equal(t, len(fns), r.Connections())
	pids := map[int]string{}
	for _, fn := range fns {
		db := r.For(fn)
		assert.Equal(t, int32(1), db.Stat().TotalConns(), "%s: one connection, open", fn)
		pid := backendPID(t, db)
		if other, dup := pids[pid]; dup {
			t.Errorf("%s reads on %s's connection", fn, other)
		}
		pids[pid] = fn
	}
	var named int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'ffscan reads'").Scan(&named))
	assert.Equal(t, len(fns), named, "pg_stat_activity names the readers")

	// The warm-up ran each function, and its companion, on its
	// connection (both forms: at least twice each).
	for _, fn := range fns {
		_, err := r.For(fn).Exec(ctx, "SELECT pg_stat_force_next_flush()")
		require.NoError(t, err)
	}
	calls := functionCalls(t, admin)
	for _, fn := range fns {
		assert.GreaterOrEqual(t, calls[fn], int64(2), "%s warmed up", fn)
		if next, ok := postgres.NextDueFunctions[fn]; ok {
			assert.GreaterOrEqual(t, calls[next], int64(2), "%s warmed up", next)
		}
	}

	// 8 readers at once, after an ANALYZE: every read on the one
	// connection of its function.
	_, err = admin.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	const fn = "lapsed_leases"
	before := backendPID(t, r.For(fn))
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				_, _, err := postgres.ReadCandidatesNext(ctx, r.For(fn), fn, []uint16{0, 1, 2}, 256, 10, 0, scannerapi.Filter{})
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, before, backendPID(t, r.For(fn)), "still the same connection")
	assert.Equal(t, int32(1), r.For(fn).Stat().TotalConns(), "no other opened")
}

// functionCalls are the calls of each of ffscan's PL/pgSQL functions the
// server counted (track_functions=pl), by name.
func functionCalls(t *testing.T, admin *pgxpool.Pool) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	rows, err := admin.Query(context.Background(), "SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = 'ffscan'")
	require.NoError(t, err)
	for rows.Next() {
		var fn string
		var n int64
		require.NoError(t, rows.Scan(&fn, &n))
		calls[fn] += n
	}
	require.NoError(t, rows.Err())
	return calls
}

// Fewer connections than functions: each function still reads on one
// connection, the functions dealt out in turn; a DSN's application_name
// is kept.
func TestFewerReadersShareTheirConnectionsAmongTheFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := postgrestest.SchemaDB(t, 1)
	r, err := postgres.OpenReaders(ctx, postgres.Options{DSN: admin.Config().ConnString() + "&application_name=mine"}, 3)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, 3, r.Connections())
	perConn := map[*pgxpool.Pool]int{}
	for fn := range postgres.CandidateFunctions {
		db := r.For(fn)
		assert.Same(t, db, r.For(fn), "%s: always the same connection", fn)
		perConn[db]++
	}
	require.Len(t, perConn, 3)
	for _, n := range perConn {
		assert.InDelta(t, len(postgres.CandidateFunctions)/3, n, 1, "dealt out in turn")
	}
	var named int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'mine'").Scan(&named))
	assert.Equal(t, 3, named, "the DSN's application_name kept")
}

// A count out of range is refused before anything is opened.
func TestReadersRefuseACountOutOfRange(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{-1, postgres.MaxReaderConnections + 1} {
		_, err := postgres.OpenReaders(ctx, postgres.Options{DSN: "postgres://127.0.0.1:1/none"}, n)
		require.Error(t, err, "%d", n)
		assert.Contains(t, err.Error(), "read connections: between 1 and")
	}
}

// A reader whose connection broke (the server ended its session) fails the
// read that finds it so, with the error of a connection the server ended
// (which the scheduler takes for a transport error: a new store epoch),
// not masked by a retry on another session; the next read opens another
// connection, warmed up again and named as the first.
func TestAReaderReplacesAConnectionTheServerEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := postgrestest.SchemaDB(t, 1)
	r, err := postgres.OpenReaders(ctx, postgres.Options{DSN: admin.Config().ConnString()}, 1)
	require.NoError(t, err)
	defer r.Close()
	db := r.For("delays_due")
	pid := backendPID(t, db)
	var ended bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 30000)", pid).Scan(&ended))
	require.True(t, ended)

	_, err = postgres.ReadCandidates(ctx, db, "delays_due", []uint16{0}, nil, 256, 10, scannerapi.Filter{})
	require.Error(t, err, "the read finds its session ended")
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		assert.Equal(t, "57P01", pe.Code, "terminated by the administrator: %v", err)
	}
	_, err = postgres.ReadCandidates(ctx, db, "delays_due", []uint16{0}, nil, 256, 10, scannerapi.Filter{})
	require.NoError(t, err)
	assert.NotEqual(t, pid, backendPID(t, db), "a new session")
	var app string
	require.NoError(t, admin.QueryRow(ctx, "SELECT application_name FROM pg_stat_activity WHERE pid = $1", backendPID(t, db)).Scan(&app))
	assert.Equal(t, "ffscan reads", app)
}
