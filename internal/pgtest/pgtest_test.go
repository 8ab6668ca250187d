package pgtest

import (
	"context"
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
