package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres/postgrestest"
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

// The command of issue 14's done-when, on a host that serves a database
// FlowFabric's migrations laid out and no Valkey: FlowFabric's reconciler
// name runs ffscan's pg_attempt_timeout, which retries one lapse and ends
// the other with its completion event.
func TestScanOnceOnPostgresAlone(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "plugins")
	require.NoError(t, os.Mkdir(dir, 0o755))
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "pgreconcilers"), "github.com/ffscan/ffscan/plugins/pgreconcilers/cmd/pgreconcilers")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	t.Run("on a database laid out by FlowFabric's migrations", func(t *testing.T) {
		dsn, err := srv.CreateDatabase(ctx, "flowfabric")
		require.NoError(t, err)
		postgrestest.MigrateLikeFlowFabric(t, dsn)
		scanOnceAttemptTimeout(t, dsn, dir)
	})
	t.Run("on ffscan's own schema", func(t *testing.T) {
		dsn, err := srv.CreateDatabase(ctx, "own")
		require.NoError(t, err)
		code, out := ffscan(t, "postgres", "create-schema", "--postgres-dsn", dsn)
		require.Equal(t, 0, code, out)
		scanOnceAttemptTimeout(t, dsn, dir)
	})
}

// scanOnceAttemptTimeout plants two lapsed leases of active executions,
// one with a retry left, and runs the done-when's command with the
// pgreconcilers plugin in dir.
func scanOnceAttemptTimeout(t *testing.T, dsn, dir string) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	const retried, ended = "5c1e7c52-0d4b-4f7e-9a51-000000000001", "5c1e7c52-0d4b-4f7e-9a51-000000000002"
	for _, r := range []struct {
		eid    string
		policy any
	}{{retried, `{"retry_policy": {"max_retries": 2}}`}, {ended, nil}} {
		_, err := pool.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
			eligibility_state, public_state, attempt_state, created_at_ms, policy, raw_fields)
			VALUES (5, $1, 'default', 'active', 'leased', 'not_applicable', 'running', 'running_attempt', 1, $2::jsonb, '{}')`, r.eid, r.policy)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
			lease_epoch, lease_expires_at_ms) VALUES (5, $1, 0, 'w', 'w-1', 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1000)`, r.eid)
		require.NoError(t, err)
	}
	code, outs := ffscan(t, "scan-once", "--scanner", "attempt_timeout", "--postgres-dsn", dsn, "--plugin-dir", dir)
	require.Equal(t, 0, code, outs)
	assert.Contains(t, outs, "scanner pg_attempt_timeout")
	assert.Contains(t, outs, "items:      2 processed")
	var states []string
	rows, err := pool.Query(ctx, "SELECT lifecycle_phase || '/' || attempt_index FROM ff_exec_core ORDER BY execution_id")
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		states = append(states, s)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{"runnable/1", "terminal/0"}, states)
	var outcome string
	require.NoError(t, pool.QueryRow(ctx, "SELECT outcome FROM ff_completion_event WHERE execution_id = $1", ended).Scan(&outcome))
	assert.Equal(t, "expired", outcome)
}
