package postgres_test

import (
	"context"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/internal/pgtest"
)

// freshDB returns the DSN of, and a pool on, a new database of srv.
func freshDB(t *testing.T, srv *pgtest.Server, name string) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	dsn, err := srv.CreateDatabase(ctx, name)
	require.NoError(t, err)
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 2})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return dsn, pool
}

func TestRecognizeFlowFabricsLedger(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	ctx := context.Background()

	known := postgres.FlowFabricChecksums()
	dsn, pool := freshDB(t, srv, "migrated")
	postgrestest.RecordFlowFabricLedger(t, dsn)
	s, err := postgres.Recognize(ctx, pool)
	require.NoError(t, err)
	assert.Equal(t, postgres.Schema{Source: "flowfabric", Migration: 22}, s)
	assert.Equal(t, "flowfabric migration 22", s.String())

	refused := func(t *testing.T, pool *pgxpool.Pool, want ...string) {
		t.Helper()
		_, err := postgres.Recognize(ctx, pool)
		var ue *postgres.UnknownSchemaError
		require.ErrorAs(t, err, &ue)
		for _, w := range want {
			assert.Contains(t, err.Error(), w)
		}
	}

	t.Run("empty database", func(t *testing.T) {
		_, pool := freshDB(t, srv, "empty")
		refused(t, pool, "no _sqlx_migrations table", "FlowFabric's schema at migration 22")
	})
	t.Run("older FlowFabric", func(t *testing.T) {
		older := maps.Clone(known)
		delete(older, 21)
		delete(older, 22)
		dsn, pool := freshDB(t, srv, "older")
		postgrestest.RecordLedger(t, dsn, older)
		refused(t, pool, "migrations 21,22 are not applied")
	})
	t.Run("newer FlowFabric", func(t *testing.T) {
		newer := maps.Clone(known)
		newer[23] = known[22]
		dsn, pool := freshDB(t, srv, "newer")
		postgrestest.RecordLedger(t, dsn, newer)
		refused(t, pool, "migration 23 is not one FlowFabric 22 shipped")
	})
	t.Run("edited file", func(t *testing.T) {
		edited := maps.Clone(known)
		edited[5] = known[6]
		dsn, pool := freshDB(t, srv, "edited")
		postgrestest.RecordLedger(t, dsn, edited)
		refused(t, pool, "migration 5 has checksum cc165744de11e412...")
	})
	t.Run("failed migration", func(t *testing.T) {
		dsn, pool := freshDB(t, srv, "dirty")
		postgrestest.RecordLedger(t, dsn, known, 17)
		refused(t, pool, "migration 17 is recorded as failed")
	})
}

func TestConnectErrors(t *testing.T) {
	ctx := context.Background()
	_, err := postgres.Connect(ctx, postgres.Options{DSN: "postgres://user:s3cret@[bad"})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cret", "the password never reaches a message")
	assert.Contains(t, err.Error(), "not a valid connection string")
}
