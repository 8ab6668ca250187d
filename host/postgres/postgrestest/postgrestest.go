// Package postgrestest helps tests build what FlowFabric leaves in a
// Postgres database.
package postgrestest

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/internal/pgtest"
)

// LedgerDDL is the migration ledger as FlowFabric's migrator (sqlx)
// creates it.
const LedgerDDL = `CREATE TABLE _sqlx_migrations (
	version BIGINT PRIMARY KEY,
	description TEXT NOT NULL,
	installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
	success BOOLEAN NOT NULL,
	checksum BYTEA NOT NULL,
	execution_time BIGINT NOT NULL)`

// RecordLedger creates the ledger in the database at dsn and records the
// given migrations (version -> SHA-384 hex), those in failed as failed.
func RecordLedger(t testing.TB, dsn string, rows map[int64]string, failed ...int64) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, LedgerDDL); err != nil {
		t.Fatal(err)
	}
	for _, v := range slices.Sorted(maps.Keys(rows)) {
		sum, err := hex.DecodeString(rows[v])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES ($1, $2, $3, $4, 1000)",
			v, fmt.Sprintf("migration %d", v), !slices.Contains(failed, v), sum); err != nil {
			t.Fatal(err)
		}
	}
}

// RecordFlowFabricLedger records the ledger of a database FlowFabric
// migrated to the migration this ffscan knows. Only the ledger: see
// MigrateLikeFlowFabric for the tables too.
func RecordFlowFabricLedger(t testing.TB, dsn string) {
	t.Helper()
	RecordLedger(t, dsn, postgres.FlowFabricChecksums())
}

// MigrateLikeFlowFabric leaves the database at dsn as FlowFabric's
// migrations leave it, as far as ffscan can tell: its tables (made by
// postgres.CreateSchema, whose own record is then dropped) and its ledger
// at the migration this ffscan knows.
func MigrateLikeFlowFabric(t testing.TB, dsn string) {
	t.Helper()
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := postgres.CreateSchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA "+postgres.OriginSchema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	RecordFlowFabricLedger(t, dsn)
}

// DAG plants a flow on partition pk: the executions named in edges
// (runnable, blocked on dependencies), the edges (upstream, downstream),
// and one edge group per downstream whose running_count is its number of
// edges, as applying the edges leaves it. policy gives a downstream's group
// policy JSON (default all_of).
func DAG(t testing.TB, pool *pgxpool.Pool, pk int, flow string, policy map[string]string, edges [][2]string) {
	t.Helper()
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	running := map[string]int{}
	var downs []string
	for _, e := range edges {
		for _, id := range e {
			if !seen[id] {
				seen[id] = true
				exec(`INSERT INTO ff_exec_core (partition_key, execution_id, flow_id, lane_id, lifecycle_phase, ownership_state,
					eligibility_state, public_state, attempt_state, created_at_ms) VALUES ($1, $2, $3, 'default', 'runnable', 'unowned',
					'blocked_by_dependencies', 'waiting', 'pending', 1)`, pk, id, flow)
			}
		}
		exec(`INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, policy) VALUES
			($1, $2, gen_random_uuid(), $3, $4, '{"edge_state": "applied"}')`, pk, flow, e[0], e[1])
		if running[e[1]] == 0 {
			downs = append(downs, e[1])
		}
		running[e[1]]++
	}
	for _, down := range downs {
		p := policy[down]
		if p == "" {
			p = `{"kind": "all_of"}`
		}
		exec(`INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, policy, running_count) VALUES ($1, $2, $3, $4, $5)`,
			pk, flow, down, p, running[down])
	}
}

// Complete ends an execution with outcome (success, failed, skipped, ...)
// and commits its completion event, returning the event id.
func Complete(t testing.TB, pool *pgxpool.Pool, pk int, eid, outcome string) string {
	t.Helper()
	ctx := context.Background()
	public := map[string]string{"success": "completed", "failed": "failed", "skipped": "skipped"}[outcome]
	if public == "" {
		public = outcome
	}
	if _, err := pool.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = $3
		WHERE partition_key = $1 AND execution_id = $2`, pk, eid, public); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, occurred_at_ms)
		SELECT partition_key, execution_id, flow_id, $3, 1 FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2
		RETURNING event_id::text`, pk, eid, outcome).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// SchemaDB starts a PostgreSQL for the test (skipped as pgtest.New skips
// when there is none) and returns a pool of poolSize connections on a
// database holding ffscan's schema and function library.
func SchemaDB(t testing.TB, poolSize int) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	srv := pgtest.New(t)
	dsn, err := srv.CreateDatabase(ctx, "ffscan")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: poolSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := postgres.CreateSchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.InstallLibrary(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool
}
