package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerStartsAndCleansUp(t *testing.T) {
	s, err := Start()
	if err == ErrNoPostgres {
		t.Skip(err.Error())
	}
	require.NoError(t, err)
	ctx := context.Background()
	dsn, err := s.CreateDatabase(ctx, "ffscan_test")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	var db string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	assert.Equal(t, "ffscan_test", db)
	_, err = conn.Exec(ctx, "CREATE EXTENSION pgcrypto")
	require.NoError(t, err, "pgcrypto, which FlowFabric's migration 17 needs, is installed")
	conn.Close(ctx)

	s.Stop()
	_, err = os.Stat(s.dir)
	assert.True(t, os.IsNotExist(err), "the data directory is gone")
	select {
	case <-s.done:
	default:
		t.Fatal("postgres still runs")
	}
}

// A template is built once and copied for each test that asks: each copy
// holds what the build made, and a copy's changes stay in it.
func TestTemplateBuiltOnceCopiedPerTest(t *testing.T) {
	builds := 0
	tp := NewTemplate("tpl", func(ctx context.Context, dsn string) error {
		builds++
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (1)")
		return err
	})
	defer tp.Close()
	ctx := context.Background()
	count := func(dsn string) int {
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
		return n
	}
	var first string
	t.Run("first", func(t *testing.T) {
		first = tp.Database(t)
		conn, err := pgx.Connect(ctx, first)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "INSERT INTO t VALUES (2)")
		require.NoError(t, err)
		conn.Close(ctx)
		assert.Equal(t, 2, count(first))
	})
	t.Run("second", func(t *testing.T) {
		second := tp.Database(t)
		assert.NotEqual(t, first, second)
		assert.Equal(t, 1, count(second), "a fresh copy of the template")
	})
	if tp.srv == nil {
		return // no PostgreSQL: the subtests were skipped
	}
	assert.Equal(t, 1, builds)
	_, err := pgx.Connect(ctx, first)
	assert.Error(t, err, "the first test's copy was dropped when it ended")
}

// A PgBouncer in transaction mode in front of the server: a client
// reaches every database through it, and the bouncer says it pools by
// transaction.
func TestBouncerInTransactionMode(t *testing.T) {
	s := New(t)
	ctx := context.Background()
	dsn, err := s.CreateDatabase(ctx, "bounced")
	require.NoError(t, err)
	b := NewBouncer(t, s, "transaction")
	conn, err := pgx.Connect(ctx, b.DSN(dsn)+"&default_query_exec_mode=simple_protocol")
	require.NoError(t, err)
	defer conn.Close(ctx)
	var db string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	assert.Equal(t, "bounced", db)
	var mode string
	admin, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", b.Port))
	require.NoError(t, err, "the bouncer's admin console")
	defer admin.Close(ctx)
	rows, err := admin.Query(ctx, "SHOW CONFIG")
	require.NoError(t, err)
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		if fmt.Sprint(vals[0]) == "pool_mode" {
			mode = fmt.Sprint(vals[1])
		}
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, "transaction", mode)
}
