package pgreconcilers_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/internal/pgtest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/pgreconcilers/cmd/pgreconcilers"

// TestMain removes the plugin builds scannertest made and stops the
// template's server.
func TestMain(m *testing.M) {
	code := m.Run()
	scannertest.Cleanup()
	ffscanSchema.Close()
	os.Exit(code)
}

// Executions of the scenario; the kit's host has 16 flow partitions, so
// their partition keys are below 16.
const (
	retried   = "6a1e7c52-0d4b-4f7e-9a51-000000000001" // partition 3, max_retries 1, attempt 0 lapsed
	ended     = "6a1e7c52-0d4b-4f7e-9a51-000000000002" // partition 7, no policy: ends on the first lapse
	renewed   = "6a1e7c52-0d4b-4f7e-9a51-000000000003" // partition 7, lease still valid
	notActive = "6a1e7c52-0d4b-4f7e-9a51-000000000004" // partition 3, runnable
	flow      = "7b2f8d63-1e5c-4a8f-8b62-000000000009"
)

// plant puts the scenario's rows in place (the kit runs the scanner twice,
// linked and as a plugin, from this same state).
func plant(t testing.TB, pool *pgxpool.Pool) {
	ctx := context.Background()
	_, err := pool.Exec(ctx, "DELETE FROM ff_exec_core; DELETE FROM ff_attempt; DELETE FROM ff_lease_event; DELETE FROM ff_completion_event")
	require.NoError(t, err)
	for _, r := range []struct {
		pk         int
		eid, phase string
		policy     any
		flow       any
		leaseInMs  int64
	}{
		{3, retried, "active", `{"retry_policy": {"max_retries": 1}}`, nil, -2000},
		{7, ended, "active", nil, flow, -1000},
		{7, renewed, "active", nil, nil, 60000},
		{3, notActive, "runnable", nil, nil, -1000},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, flow_id, lane_id, lifecycle_phase,
			ownership_state, eligibility_state, public_state, attempt_state, created_at_ms, policy, raw_fields)
			VALUES ($1, $2, $3, 'default', $4, 'leased', 'not_applicable', 'running', 'running_attempt', 1, $5::jsonb, '{"namespace": "e2e"}')`,
			r.pk, r.eid, r.flow, r.phase, r.policy)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
			lease_epoch, lease_expires_at_ms) VALUES ($1, $2, 0, 'w', 'w-1', 1, ffscan.now_ms() + $3)`, r.pk, r.eid, r.leaseInMs)
		require.NoError(t, err)
	}
}

func states(t testing.TB, pool *pgxpool.Pool) map[string]string {
	rows, err := pool.Query(context.Background(), `SELECT e.execution_id::text, e.lifecycle_phase || '/' || e.attempt_state || '/' || e.attempt_index
		|| '/' || coalesce(a.outcome, '-') || '/' || a.lease_epoch FROM ff_exec_core e
		JOIN ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id AND a.attempt_index = 0`)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var id, s string
		require.NoError(t, rows.Scan(&id, &s))
		out[id] = s
	}
	require.NoError(t, rows.Err())
	return out
}

// run drives pg_attempt_timeout through a real host, linked and as its
// plugin, on the database at dsn.
func run(t *testing.T, dsn string) { runFiltered(t, dsn, scannerapi.Filter{}) }

// runFiltered is run on a host with filter f, which keeps the scenario's
// executions (namespace e2e).
func runFiltered(t *testing.T, dsn string, f scannerapi.Filter) {
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 2})
	require.NoError(t, err)
	defer pool.Close()

	linked, plugin := hosttest.Run(t, scannertest.Case{
		New:            func() scannerapi.Scanner { return pgreconcilers.NewAttemptTimeout() },
		Binary:         scannertest.PluginBinary(t, pluginPkg),
		PostgresDSN:    dsn,
		PostgresFilter: f,
		Setup:          func(t testing.TB, _ valkey.Client) { plant(t, pool) },
		Check: func(t testing.TB, r scannertest.Report, _ valkey.Client) {
			assert.Equal(t, 2, r.Scanned, "partitions 3 and 7 have lapsed leases")
			assert.Equal(t, 14, r.Empty, "the others cost no call")
			assert.Equal(t, int64(2), r.Processed)
			assert.Empty(t, r.Errors)
			assert.Equal(t, map[string]int{"PGCALL expire_lapsed_lease": 2}, r.Commands)
			assert.Equal(t, map[string]string{
				retried:   "runnable/pending_retry_attempt/1/interrupted/2",
				ended:     "terminal/attempt_terminal/0/interrupted/2",
				renewed:   "active/running_attempt/0/-/1",
				notActive: "runnable/running_attempt/0/-/1",
			}, states(t, pool))
			var outcome, gotFlow string
			require.NoError(t, pool.QueryRow(context.Background(),
				"SELECT outcome, flow_id::text FROM ff_completion_event WHERE partition_key = 7 AND execution_id = $1", ended).Scan(&outcome, &gotFlow))
			assert.Equal(t, []string{"expired", flow}, []string{outcome, gotFlow})
			var events int
			require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM ff_lease_event WHERE event_type = 'expired' AND namespace = 'e2e'").Scan(&events))
			assert.Equal(t, 2, events)
		},
	})
	t.Log(linked)
	t.Log(plugin)
}

func TestAttemptTimeoutOnFlowFabricsSchema(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	dsn, err := srv.CreateDatabase(context.Background(), "flowfabric")
	require.NoError(t, err)
	postgrestest.MigrateLikeFlowFabric(t, dsn)
	run(t, dsn)
}

func TestAttemptTimeoutOnFfscansSchema(t *testing.T) {
	t.Parallel()
	run(t, ownSchema(t))
}

// ffscanSchema is a database with ffscan's equivalent of FlowFabric's
// schema, created once for the package (its 256 partitions of thirteen
// tables take tens of seconds) and copied for each test.
var ffscanSchema = pgtest.NewTemplate("ffscan", func(ctx context.Context, dsn string) error {
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = postgres.CreateSchema(ctx, pool)
	return err
})

// ownSchema returns the DSN of a fresh database with ffscan's schema.
func ownSchema(t *testing.T) string {
	t.Helper()
	return ffscanSchema.Database(t)
}

// The host's filter through the host: a host for namespace e2e does what
// an unfiltered one does, a host for another namespace reads nothing and
// changes nothing.
func TestAttemptTimeoutFiltered(t *testing.T) {
	t.Parallel()
	dsn := ownSchema(t)
	runFiltered(t, dsn, scannerapi.Filter{Namespace: "e2e"})
	pool, err := postgres.Connect(context.Background(), postgres.Options{DSN: dsn, PoolSize: 2})
	require.NoError(t, err)
	defer pool.Close()

	hosttest.Run(t, scannertest.Case{
		New:            func() scannerapi.Scanner { return pgreconcilers.NewAttemptTimeout() },
		Binary:         scannertest.PluginBinary(t, pluginPkg),
		PostgresDSN:    dsn,
		PostgresFilter: scannerapi.Filter{Namespace: "other"},
		Setup:          func(t testing.TB, _ valkey.Client) { plant(t, pool) },
		Check: func(t testing.TB, r scannertest.Report, _ valkey.Client) {
			assert.Equal(t, 0, r.Scanned, "no partition has another tenant's lapse")
			assert.Zero(t, r.Processed)
			assert.Empty(t, r.Commands)
			assert.Equal(t, map[string]string{
				retried:   "active/running_attempt/0/-/1",
				ended:     "active/running_attempt/0/-/1",
				renewed:   "active/running_attempt/0/-/1",
				notActive: "runnable/running_attempt/0/-/1",
			}, states(t, pool))
		},
	})
}

// A Postgres scanner on a host without a database is refused when it is
// started, not at its first cycle; so is a scanner naming functions the
// host's library does not have.
func TestRefusedWithoutADatabase(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	ctx := context.Background()
	booted, err := hosttest.Runner{}.Boot(ctx, scannertest.Boot{Scanner: pgreconcilers.AttemptTimeoutName, Addr: srv.Addr,
		Partitions: keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}})
	require.NoError(t, err)
	defer booted.Close()
	_, err = booted.Open(ctx, scannertest.Open{Linked: pgreconcilers.NewAttemptTimeout()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "works on a FlowFabric Postgres database and this host has none: set postgres.dsn")

	info := pgreconcilers.NewAttemptTimeout().Info()
	info.Sources[0].Key = "no_such_candidates"
	err = scheduler.CheckInfo(info)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"no_such_candidates" is not a candidate function of this host's Postgres library (it has: `)
	assert.Contains(t, err.Error(), "lapsed_leases")
	info = pgreconcilers.NewAttemptTimeout().Info()
	info.Functions = []string{"pg:truncate_everything"}
	err = scheduler.CheckInfo(info)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"truncate_everything" is not an action function of this host's Postgres library`)
}

// Each reconciler through a real host, linked and as the plugin, on one
// database with ffscan's schema: Setup plants the scenario afresh for
// each run, Check reads what the run left.
func TestEveryReconcilerThroughTheHost(t *testing.T) {
	t.Parallel()
	dsn := ownSchema(t)
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 2})
	require.NoError(t, err)
	defer pool.Close()
	_, err = postgres.InstallLibrary(ctx, pool)
	require.NoError(t, err)

	sql := func(t testing.TB, q string, args ...any) {
		_, err := pool.Exec(context.Background(), q, args...)
		require.NoError(t, err)
	}
	reset := func(t testing.TB) {
		// DELETE, not TRUNCATE: truncating a partitioned table truncates
		// its 256 partitions' files, seconds for these thirteen tables.
		for _, table := range []string{"ff_exec_core", "ff_attempt", "ff_lease_event", "ff_completion_event", "ff_suspension_current",
			"ff_waitpoint_pending", "ff_budget_policy", "ff_budget_usage", "ff_edge", "ff_edge_group", "ff_pending_cancel_groups",
			"ff_worker_registry", "ff_worker_registry_event"} {
			sql(t, "DELETE FROM "+table)
		}
	}
	const (
		eid     = "6a1e7c52-0d4b-4f7e-9a51-0000000000e1"
		down    = "6a1e7c52-0d4b-4f7e-9a51-0000000000e2"
		sibling = "6a1e7c52-0d4b-4f7e-9a51-0000000000e3"
	)
	exec := func(t testing.TB, pk int, phase, eligibility string, deadlineInMs any) {
		sql(t, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
			public_state, attempt_state, created_at_ms, deadline_at_ms) VALUES ($1, $2, 'default', $3, 'unowned', $4, 'running',
			'running_attempt', 1, ffscan.now_ms() + $5::bigint)`, pk, eid, phase, eligibility, deadlineInMs)
	}
	one := func(t testing.TB, q string) string {
		var s string
		require.NoError(t, pool.QueryRow(context.Background(), q).Scan(&s))
		return s
	}
	for _, c := range []struct {
		name  string
		new   func() *pgreconcilers.Reconciler
		plant func(t testing.TB)
		check func(t testing.TB)
	}{
		{pgreconcilers.LeaseExpiryName, pgreconcilers.NewLeaseExpiry, func(t testing.TB) {
			exec(t, 5, "terminal", "not_applicable", nil)
			sql(t, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_epoch, lease_expires_at_ms)
				VALUES (5, $1, 0, 1, ffscan.now_ms() - 10)`, eid)
		}, func(t testing.TB) {
			assert.Equal(t, "lease_expired_reclaimable/2", one(t, "SELECT outcome || '/' || lease_epoch FROM ff_attempt"))
		}},
		{pgreconcilers.ExecutionDeadlineName, pgreconcilers.NewExecutionDeadline, func(t testing.TB) {
			exec(t, 5, "active", "not_applicable", -10)
		}, func(t testing.TB) {
			assert.Equal(t, "terminal/expired", one(t, "SELECT x.lifecycle_phase || '/' || e.outcome FROM ff_exec_core x JOIN ff_completion_event e USING (partition_key, execution_id)"))
		}},
		{pgreconcilers.DelayedPromoterName, pgreconcilers.NewDelayedPromoter, func(t testing.TB) {
			exec(t, 5, "runnable", "not_eligible_until_time", -10)
		}, func(t testing.TB) {
			assert.Equal(t, "eligible_now", one(t, "SELECT eligibility_state FROM ff_exec_core"))
		}},
		{pgreconcilers.PendingWPExpiryName, pgreconcilers.NewPendingWPExpiry, func(t testing.TB) {
			sql(t, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms, expires_at_ms)
				VALUES (5, gen_random_uuid(), $1, 'k', 't', 1, ffscan.now_ms() - 10)`, eid)
		}, func(t testing.TB) {
			assert.Equal(t, "0", one(t, "SELECT count(*)::text FROM ff_waitpoint_pending"))
		}},
		{pgreconcilers.SuspensionTimeoutName, pgreconcilers.NewSuspensionTimeout, func(t testing.TB) {
			exec(t, 5, "suspended", "not_applicable", nil)
			sql(t, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, timeout_at_ms, condition,
				timeout_behavior) VALUES (5, $1, gen_random_uuid(), 1, ffscan.now_ms() - 10, '{}', 'expire')`, eid)
		}, func(t testing.TB) {
			assert.Equal(t, "terminal/suspension_timeout_expire", one(t, "SELECT lifecycle_phase || '/' || cancellation_reason FROM ff_exec_core"))
		}},
		{pgreconcilers.DependencyName, pgreconcilers.NewDependency, func(t testing.TB) {
			postgrestest.DAG(t, pool, 5, flow, nil, [][2]string{{eid, down}})
			ev := postgrestest.Complete(t, pool, 5, eid, "success")
			// Missed by every listener: the reconciler's threshold is 15 s.
			sql(t, "UPDATE ff_completion_event SET committed_at_ms = ffscan.now_ms() - 16000 WHERE event_id = $1", ev)
		}, func(t testing.TB) {
			assert.Equal(t, "eligible_now", one(t, "SELECT eligibility_state FROM ff_exec_core WHERE execution_id = '"+down+"'"))
			assert.Equal(t, "0", one(t, "SELECT count(*)::text FROM ff_completion_event WHERE dispatched_at_ms IS NULL"))
		}},
		{pgreconcilers.EdgeCancelDispatcherName, pgreconcilers.NewEdgeCancelDispatcher, func(t testing.TB) {
			postgrestest.DAG(t, pool, 5, flow, map[string]string{down: `{"kind": "any_of"}`}, [][2]string{{eid, down}, {sibling, down}})
			sql(t, `UPDATE ff_edge_group SET cancel_siblings_pending_flag = true, cancel_siblings_pending_members = ARRAY[$1]`, sibling)
			sql(t, `INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms) VALUES (5, $1, $2, 1)`, flow, down)
		}, func(t testing.TB) {
			assert.Equal(t, "terminal/cancelled", one(t, "SELECT lifecycle_phase || '/' || public_state FROM ff_exec_core WHERE execution_id = '"+sibling+"'"))
			assert.Equal(t, "0", one(t, "SELECT count(*)::text FROM ff_pending_cancel_groups"))
		}},
		{pgreconcilers.EdgeCancelReconcilerName, pgreconcilers.NewEdgeCancelReconciler, func(t testing.TB) {
			postgrestest.DAG(t, pool, 5, flow, map[string]string{down: `{"kind": "any_of"}`}, [][2]string{{eid, down}, {sibling, down}})
			postgrestest.Complete(t, pool, 5, sibling, "success")
			sql(t, `UPDATE ff_edge_group SET cancel_siblings_pending_flag = true, cancel_siblings_pending_members = ARRAY[$1]`, sibling)
			sql(t, `INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms) VALUES (5, $1, $2, 1)`, flow, down)
		}, func(t testing.TB) {
			assert.Equal(t, "false/0", one(t, "SELECT cancel_siblings_pending_flag::text || '/' || (SELECT count(*) FROM ff_pending_cancel_groups) FROM ff_edge_group"))
		}},
		{pgreconcilers.WorkerRegistrySweepName, pgreconcilers.NewWorkerRegistrySweep, func(t testing.TB) {
			// Registry partition 19 is swept with flow partition 3 of 16.
			sql(t, `INSERT INTO ff_worker_registry (partition_key, namespace, worker_instance_id, worker_id, lanes, capabilities_csv,
				last_heartbeat_ms, liveness_ttl_ms, registered_at_ms) VALUES (19, 'ns', 'w-1', 'w', '{}', '', ffscan.now_ms() - 60000, 30000, 1)`)
		}, func(t testing.TB) {
			assert.Equal(t, "0/1", one(t, "SELECT (SELECT count(*) FROM ff_worker_registry) || '/' || (SELECT count(*) FROM ff_worker_registry_event)"))
		}},
		{pgreconcilers.BudgetResetName, pgreconcilers.NewBudgetReset, func(t testing.TB) {
			// Budget partition 2 of the kit's 4.
			sql(t, `INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms, next_reset_at_ms)
				VALUES (2, 'b1', '{"reset_interval_ms": 1000}', 1, 1, ffscan.now_ms() - 10)`)
			sql(t, `INSERT INTO ff_budget_usage (partition_key, budget_id, dimensions_key, current_value, updated_at_ms) VALUES (2, 'b1', 'd', 5, 1)`)
		}, func(t testing.TB) {
			assert.Equal(t, "0", one(t, "SELECT current_value::text FROM ff_budget_usage"))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			linked, plugin := hosttest.Run(t, scannertest.Case{
				New:         func() scannerapi.Scanner { return c.new() },
				Binary:      scannertest.PluginBinary(t, pluginPkg),
				PostgresDSN: dsn,
				Setup: func(t testing.TB, _ valkey.Client) {
					reset(t)
					c.plant(t)
				},
				Check: func(t testing.TB, r scannertest.Report, _ valkey.Client) {
					assert.Equal(t, 1, r.Scanned, r.String())
					assert.Equal(t, int64(1), r.Processed, r.String())
					assert.Empty(t, r.Errors)
					assert.Empty(t, r.Refused)
					c.check(t)
				},
			})
			t.Log(linked.Mode, linked.Processed, plugin.Mode, plugin.Processed)
		})
	}
}
