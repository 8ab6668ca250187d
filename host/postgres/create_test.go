package postgres_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/internal/pgtest"
)

// columns lists a table's columns in physical order.
func columns(t *testing.T, pool *pgxpool.Pool, table string) []string {
	t.Helper()
	var out []string
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped",
		table).Scan(&out))
	return out
}

func TestCreateSchema(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	ctx := context.Background()
	dsn, pool := freshDB(t, srv, "created")

	res, err := postgres.CreateSchema(ctx, pool)
	require.NoError(t, err)
	assert.True(t, res.Created)
	assert.Equal(t, 34, res.Tables, "26 partitioned parents and 8 plain tables (postgres.md §1.3)")
	assert.Equal(t, 26*256, res.Children)
	t.Logf("schema created in %s", res.Took.Round(time.Millisecond))

	s, err := postgres.Recognize(ctx, pool)
	require.NoError(t, err)
	assert.Equal(t, postgres.Schema{Source: "ffscan", Migration: postgres.KnownMigration}, s)
	assert.Equal(t, "created by ffscan, equivalent to flowfabric migration 22", s.String())
	var ledger *string
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass('_sqlx_migrations')::text").Scan(&ledger))
	assert.Nil(t, ledger, "FlowFabric's ledger is never written")

	t.Run("columns in FlowFabric's physical order", func(t *testing.T) {
		assert.Equal(t, []string{"partition_key", "execution_id", "flow_id", "lane_id", "required_capabilities",
			"attempt_index", "lifecycle_phase", "ownership_state", "eligibility_state", "public_state", "attempt_state",
			"blocking_reason", "cancellation_reason", "cancelled_by", "priority", "created_at_ms", "terminal_at_ms",
			"deadline_at_ms", "payload", "result", "policy", "raw_fields", "started_at_ms", "lease_reclaim_count"},
			columns(t, pool, "ff_exec_core"))
		assert.Equal(t, []string{"partition_key", "execution_id", "attempt_index", "worker_id", "worker_instance_id",
			"lease_epoch", "lease_expires_at_ms", "started_at_ms", "terminal_at_ms", "outcome", "usage", "policy", "raw_fields"},
			columns(t, pool, "ff_attempt"))
		assert.Equal(t, []string{"partition_key", "event_id", "execution_id", "flow_id", "outcome", "namespace",
			"instance_tag", "occurred_at_ms", "committed_at_ms", "dispatched_at_ms"},
			columns(t, pool, "ff_completion_event"))
		assert.Equal(t, []string{"event_id", "execution_id", "lease_id", "event_type", "occurred_at_ms",
			"partition_key", "namespace", "instance_tag"}, columns(t, pool, "ff_lease_event"))
	})

	t.Run("partitions named and placed as FlowFabric's", func(t *testing.T) {
		for _, name := range []string{"ff_exec_core_p0", "ff_exec_core_p255", "ff_worker_registry_p000", "ff_worker_registry_event_p255"} {
			var reg *string
			require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1)::text", name).Scan(&reg))
			assert.NotNil(t, reg, name)
		}
		// PostgreSQL's own hash decides the child; these placements are
		// the ones recorded on FlowFabric's database (postgres.md §2.2).
		want := map[int]string{0: "ff_exec_core_p176", 1: "ff_exec_core_p184", 2: "ff_exec_core_p122", 5: "ff_exec_core_p29",
			24: "ff_exec_core_p35", 86: "ff_exec_core_p127", 255: "ff_exec_core_p42"}
		for key, child := range want {
			var got string
			require.NoError(t, pool.QueryRow(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase,
				ownership_state, eligibility_state, public_state, attempt_state, created_at_ms)
				VALUES ($1, gen_random_uuid(), 'default', 'runnable', 'unowned', 'eligible_now', 'waiting', 'pending', 1)
				RETURNING tableoid::regclass::text`, key).Scan(&got))
			assert.Equal(t, child, got, "partition_key %d", key)
		}
	})

	t.Run("partial indexes the reconcilers scan", func(t *testing.T) {
		var def string
		require.NoError(t, pool.QueryRow(ctx, "SELECT indexdef FROM pg_indexes WHERE indexname = 'ff_attempt_lease_expiry_idx'").Scan(&def))
		assert.Contains(t, def, "(partition_key, lease_expires_at_ms) WHERE (lease_expires_at_ms IS NOT NULL)")
		var children int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhparent
			WHERE c.relname = 'ff_attempt_lease_expiry_idx'`).Scan(&children))
		assert.Equal(t, 256, children, "every partition has the index")
	})

	t.Run("completion events: one identity through the parent, a NOTIFY per row", func(t *testing.T) {
		listener, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer listener.Close(ctx)
		_, err = listener.Exec(ctx, "LISTEN ff_completion")
		require.NoError(t, err)
		var ids []int64
		for _, key := range []int{86, 0} {
			var id int64
			require.NoError(t, pool.QueryRow(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms)
				VALUES ($1, gen_random_uuid(), 'success', 1) RETURNING event_id`, key).Scan(&id))
			ids = append(ids, id)
		}
		assert.Less(t, ids[0], ids[1], "one sequence across partitions")
		for _, id := range ids {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := listener.WaitForNotification(wctx)
			cancel()
			require.NoError(t, err)
			assert.Equal(t, "ff_completion", n.Channel)
			assert.Equal(t, strconv.FormatInt(id, 10), n.Payload)
		}
	})

	t.Run("a second run finds it complete", func(t *testing.T) {
		again, err := postgres.CreateSchema(ctx, pool)
		require.NoError(t, err)
		assert.False(t, again.Created)
		assert.Equal(t, res.Tables, again.Tables)
		assert.Equal(t, res.Children, again.Children)
	})

	t.Run("an unfinished creation is refused, then completed", func(t *testing.T) {
		// What a run stopped half way leaves: a table missing, the
		// origin without completed_at.
		_, err := pool.Exec(ctx, "DROP TABLE ff_flow_summary; UPDATE ffscan.schema_origin SET completed_at = NULL")
		require.NoError(t, err)
		_, err = postgres.Recognize(ctx, pool)
		var ue *postgres.UnknownSchemaError
		require.ErrorAs(t, err, &ue)
		assert.Contains(t, err.Error(), "creation did not finish")

		done, err := postgres.CreateSchema(ctx, pool)
		require.NoError(t, err)
		assert.True(t, done.Created)
		assert.Equal(t, 34, done.Tables)
		assert.Equal(t, 26*256, done.Children)
		s, err := postgres.Recognize(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, "ffscan", s.Source)
	})
}

func TestCreateSchemaRefusals(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	ctx := context.Background()

	t.Run("FlowFabric's database", func(t *testing.T) {
		dsn, pool := freshDB(t, srv, "flowfabric")
		postgrestest.RecordFlowFabricLedger(t, dsn)
		_, err := postgres.CreateSchema(ctx, pool)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "FlowFabric's migration ledger")
		var origin *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass('ffscan.schema_origin')::text").Scan(&origin))
		assert.Nil(t, origin, "nothing written")
	})
	t.Run("tables someone else made", func(t *testing.T) {
		_, pool := freshDB(t, srv, "foreign")
		_, err := pool.Exec(ctx, "CREATE TABLE ff_exec_core (x int); CREATE TABLE ff_attempt (x int)")
		require.NoError(t, err)
		_, err = postgres.CreateSchema(ctx, pool)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "already holds ff_attempt, ff_exec_core, which ffscan did not create")
	})
	t.Run("both a ledger and an origin", func(t *testing.T) {
		dsn, pool := freshDB(t, srv, "both")
		postgrestest.RecordFlowFabricLedger(t, dsn)
		_, err := pool.Exec(ctx, `CREATE SCHEMA ffscan; CREATE TABLE ffscan.schema_origin (created_by text NOT NULL,
			flowfabric_equivalent integer NOT NULL, started_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz);
			INSERT INTO ffscan.schema_origin VALUES ('ffscan', 22, now(), now())`)
		require.NoError(t, err)
		_, err = postgres.Recognize(ctx, pool)
		var ue *postgres.UnknownSchemaError
		require.ErrorAs(t, err, &ue)
		assert.Contains(t, err.Error(), "both FlowFabric's migration ledger")
	})
}
