package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestActionsRace: two hosts (or two cycles) acting on one row at once.
// The first call holds its transaction open; the second blocks on the row
// lock, and once the first commits it re-checks and does nothing. Every
// action function locks what it re-checks, so none acts twice.
func TestActionsRace(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	ctx := context.Background()

	for _, c := range []struct {
		name          string
		pk            int
		setup         func(pk int) (sql string, args []any)
		first, second []string
	}{
		{"release_stale_lease", 50, func(pk int) (string, []any) {
			eid := testUUID(pk, 1)
			tenantExec(t, pool, pk, eid, "terminal", "not_applicable", rawA, nil)
			lapsedLease(t, pool, pk, eid)
			return "SELECT ffscan.release_stale_lease($1, $2, 0)", []any{pk, eid}
		}, []string{"1", "released"}, []string{"1", "lease_released"}},
		{"expire_execution_deadline", 51, func(pk int) (string, []any) {
			eid := testUUID(pk, 1)
			tenantExec(t, pool, pk, eid, "active", "not_applicable", rawA, ms(-100))
			return "SELECT ffscan.expire_execution_deadline($1, $2)", []any{pk, eid}
		}, []string{"1", "expired"}, []string{"1", "not_active"}},
		{"promote_delayed", 52, func(pk int) (string, []any) {
			eid := testUUID(pk, 1)
			tenantExec(t, pool, pk, eid, "runnable", "not_eligible_until_time", rawA, ms(-100))
			return "SELECT ffscan.promote_delayed($1, $2)", []any{pk, eid}
		}, []string{"1", "promoted"}, []string{"1", "not_delayed"}},
		{"expire_pending_waitpoint", 53, func(pk int) (string, []any) {
			wp := testUUID(pk, 2)
			exec(t, pool, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms,
				expires_at_ms, waitpoint_key, state) VALUES ($1, $2, $3, 'k', 't', 1, ffscan.now_ms() - 10, 'wk', 'pending')`, pk, wp, testUUID(pk, 1))
			return "SELECT ffscan.expire_pending_waitpoint($1, $2)", []any{pk, wp}
		}, []string{"1", "expired"}, []string{"1", "waitpoint_not_found"}},
		{"expire_suspension", 54, func(pk int) (string, []any) {
			eid, sid := testUUID(pk, 1), testUUID(pk, 2)
			tenantExec(t, pool, pk, eid, "suspended", "not_applicable", rawA, nil)
			exec(t, pool, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, timeout_at_ms,
				condition, timeout_behavior) VALUES ($1, $2, $3, 1, ffscan.now_ms() - 10, '{}', 'fail')`, pk, eid, sid)
			return "SELECT ffscan.expire_suspension($1, $2, $3)", []any{pk, eid, sid}
		}, []string{"1", "terminal"}, []string{"1", "suspension_not_found"}},
		{"reset_budget", 55, func(pk int) (string, []any) {
			exec(t, pool, `INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms, next_reset_at_ms)
				VALUES ($1, 'b-race', '{"reset_interval_ms": 60000}', 1, 1, ffscan.now_ms() - 10)`, pk)
			return "SELECT ffscan.reset_budget($1, 'b-race')", []any{pk}
		}, []string{"1", "reset"}, []string{"1", "not_due"}},
		{"sweep_worker", 56, func(pk int) (string, []any) {
			exec(t, pool, `INSERT INTO ff_worker_registry (partition_key, namespace, worker_instance_id, worker_id, lanes, capabilities_csv,
				last_heartbeat_ms, liveness_ttl_ms, registered_at_ms) VALUES ($1, 'ns', 'dead', 'w', '{}', '', ffscan.now_ms() - 60000, 30000, 1)`, pk)
			return "SELECT ffscan.sweep_worker($1, $2)", []any{pk, fmt.Sprintf(`%d/["ns", "dead"]`, pk)}
		}, []string{"1", "swept"}, []string{"1", "worker_not_found"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sql, args := c.setup(c.pk)
			first, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer first.Rollback(ctx)
			var out []string
			require.NoError(t, first.QueryRow(ctx, sql, args...).Scan(&out))
			assert.Equal(t, c.first, out, "the first acts")
			assert.Equal(t, c.second, secondWaits(t, pool, first, sql, args...), "the second waits for the first, then finds it done")
		})
	}
}

// The sibling-cancel dispatchers skip a group another one holds (FOR
// UPDATE SKIP LOCKED, as FlowFabric's): the second answers skipped_locked
// at once instead of waiting, and the sibling is cancelled once.
func TestSiblingCancelRace(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	ctx := context.Background()
	const pk = 57
	flow, down, sib := "f5700000-0000-4000-8000-000000000001", "57000000-0000-4000-8000-000000000001", "57000000-0000-4000-8000-000000000002"
	tenantExec(t, pool, pk, sib, "active", "not_applicable", rawA, nil)
	exec(t, pool, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, policy, running_count, cancel_siblings_pending_flag,
		cancel_siblings_pending_members) VALUES ($1, $2, $3, '{"kind": "any_of"}', 0, true, ARRAY[$4::text])`, pk, flow, down, sib)
	exec(t, pool, "INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms) VALUES ($1, $2, $3, 1)", pk, flow, down)

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx)
	var out []string
	require.NoError(t, first.QueryRow(ctx, "SELECT ffscan.dispatch_sibling_cancels($1, $2, $3)", pk, flow, down).Scan(&out))
	assert.Equal(t, []string{"1", "dispatched", "1"}, out)
	assert.Equal(t, []string{"1", "skipped_locked"}, call(t, pool, "dispatch_sibling_cancels", "57", flow, down))
	assert.Equal(t, []string{"1", "no_op"}, call(t, pool, "reconcile_sibling_cancels", "57", flow, down))
	require.NoError(t, first.Commit(ctx))
	assert.Equal(t, []string{"1", "skipped_for_reconciler"}, call(t, pool, "dispatch_sibling_cancels", "57", flow, down))
	assert.Equal(t, "terminal/cancelled", one[string](t, pool, "SELECT lifecycle_phase || '/' || public_state FROM ff_exec_core WHERE execution_id = $1", sib))
}

// Unknown enum values (a phase or eligibility no FlowFabric writer sets)
// are nobody's due work: no timeout reads them, an action asked about
// them does nothing, and only the lease reclaim, which FlowFabric runs on
// a lapsed lease in any phase, clears the lease.
func TestUnknownEnumValues(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	const pk = 58
	eid := "58000000-0000-4000-8000-000000000001"
	tenantExec(t, pool, pk, eid, "zombie", "sometimes", rawA, ms(-100))
	lapsedLease(t, pool, pk, eid)
	for _, fn := range []string{"lapsed_leases", "deadlines_passed", "delays_due"} {
		assert.Empty(t, candidates(t, pool, fn, pk), fn)
	}
	assert.Equal(t, []string{"1", "not_active"}, call(t, pool, "expire_lapsed_lease", "58", eid, "0"))
	assert.Equal(t, []string{"1", "not_active"}, call(t, pool, "expire_execution_deadline", "58", eid))
	assert.Equal(t, []string{"1", "not_delayed"}, call(t, pool, "promote_delayed", "58", eid))
	assert.Equal(t, []string{eid + "/0"}, candidates(t, pool, "stale_leases", pk))
	assert.Equal(t, []string{"1", "released"}, call(t, pool, "release_stale_lease", "58", eid, "0"))
	assert.Equal(t, "zombie/sometimes", one[string](t, pool, "SELECT lifecycle_phase || '/' || eligibility_state FROM ff_exec_core WHERE execution_id = $1", eid),
		"the execution itself is left as it is")
}
