package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/internal/pgtest"
)

func TestPostgresCreateSchema(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	dsn, err := srv.CreateDatabase(context.Background(), "cli")
	require.NoError(t, err)

	code, out := ffscan(t, "postgres", "create-schema", "--postgres-dsn", dsn)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "created FlowFabric's schema, equivalent to its migration 22: 34 tables, 6656 partitions")

	code, out = ffscan(t, "postgres", "create-schema", "--postgres-dsn", dsn)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "the schema is already complete (34 tables, 6656 partitions")

	code, out = ffscan(t, "postgres", "create-schema")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "no database: set postgres.dsn or pass --postgres-dsn")

	code, out = ffscan(t, "postgres", "drop")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "ffscan postgres: want create-schema")
}
