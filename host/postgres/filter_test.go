package postgres_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// The raw_fields of two tenants' executions, and of one whose tag is not
// a string.
const (
	rawA       = `{"namespace": "a", "tags": {"cairn.instance_id": "i1"}}`
	rawB       = `{"namespace": "b", "tags": {"cairn.instance_id": "i2"}}`
	rawTagNum  = `{"namespace": "a", "tags": {"cairn.instance_id": 1}}`
	rawNoShape = `["a"]`
)

var (
	onlyA   = scannerapi.Filter{Namespace: "a"}
	onlyI1  = scannerapi.Filter{TagKey: "cairn.instance_id", TagValue: "i1"}
	onlyAI1 = scannerapi.Filter{Namespace: "a", TagKey: "cairn.instance_id", TagValue: "i1"}
	onlyNum = scannerapi.Filter{TagKey: "cairn.instance_id", TagValue: "1"}
)

// testUUID is execution (or flow, waitpoint, ...) uuid n of partition p,
// so that tests sharing the database never collide.
func testUUID(p, n int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", p, n) }

// tenantExec plants an execution with raw_fields raw; deadlineIn, when not
// nil, sets deadline_at_ms that far from now.
func tenantExec(t *testing.T, pool *pgxpool.Pool, pk int, eid, phase, eligibility, raw string, deadlineIn *int64) {
	t.Helper()
	exec(t, pool, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
		public_state, attempt_state, created_at_ms, deadline_at_ms, attempt_index, raw_fields)
		VALUES ($1, $2, 'default', $3, 'leased', $4, 'running', 'running_attempt', 1,
			CASE WHEN $5::bigint IS NULL THEN NULL ELSE ffscan.now_ms() + $5::bigint END, 0, $6)`,
		pk, eid, phase, eligibility, deadlineIn, raw)
}

// lapsedLease plants attempt 0 of eid with a lease that lapsed.
func lapsedLease(t *testing.T, pool *pgxpool.Pool, pk int, eid string) {
	t.Helper()
	exec(t, pool, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch,
		lease_expires_at_ms) VALUES ($1, $2, 0, 'w', 'w-1', 1, ffscan.now_ms() - 100)`, pk, eid)
}

// TestFilter: the host's namespace / instance-tag filter applies to every
// reconciler's candidate read and action in the same way (PG12, PG13): a
// row of another tenant is neither read nor acted on, and an action asked
// about it answers filtered and changes nothing; rows whose execution is
// gone belong to no tenant and are cleaned up under any filter.
func TestFilter(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	phase := func(eid string) string {
		return one[string](t, pool, "SELECT lifecycle_phase || '/' || eligibility_state FROM ff_exec_core WHERE execution_id = $1", eid)
	}

	t.Run("the filter's convention: namespace and tag read from the execution's raw_fields, as JSON strings", func(t *testing.T) {
		const pk = 40
		a, b, num, odd := testUUID(pk, 1), testUUID(pk, 2), testUUID(pk, 3), testUUID(pk, 4)
		for eid, raw := range map[string]string{a: rawA, b: rawB, num: rawTagNum, odd: rawNoShape} {
			tenantExec(t, pool, pk, eid, "active", "not_applicable", raw, ms(-100))
		}
		assert.ElementsMatch(t, []string{a, b, num, odd}, candidates(t, pool, "deadlines_passed", pk), "no filter keeps all")
		assert.ElementsMatch(t, []string{a, num}, candidatesFiltered(t, pool, onlyA, "deadlines_passed", pk))
		assert.ElementsMatch(t, []string{a}, candidatesFiltered(t, pool, onlyI1, "deadlines_passed", pk))
		assert.ElementsMatch(t, []string{a}, candidatesFiltered(t, pool, onlyAI1, "deadlines_passed", pk))
		assert.Empty(t, candidatesFiltered(t, pool, onlyNum, "deadlines_passed", pk), "a tag that is a number is not the string \"1\"")
		assert.Empty(t, candidatesFiltered(t, pool, scannerapi.Filter{Namespace: "c"}, "deadlines_passed", pk))

		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "expire_execution_deadline", "40", b))
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "expire_execution_deadline", "40", odd), "a raw_fields of another shape is nobody's")
		assert.Equal(t, "active/not_applicable", phase(b), "untouched")
		assert.Equal(t, []string{"1", "expired"}, callFiltered(t, pool, onlyA, "expire_execution_deadline", "40", a))
		assert.Equal(t, "terminal/not_applicable", phase(a))
		assert.Equal(t, []string{"1", "expired"}, call(t, pool, "expire_execution_deadline", "40", b), "an unfiltered host acts on it")
	})

	t.Run("attempt_timeout and lease_expiry: other tenants' lapses are left, orphaned leases released by anyone", func(t *testing.T) {
		const pk = 41
		a, b, doneB, gone := testUUID(pk, 1), testUUID(pk, 2), testUUID(pk, 3), testUUID(pk, 4)
		tenantExec(t, pool, pk, a, "active", "not_applicable", rawA, nil)
		tenantExec(t, pool, pk, b, "active", "not_applicable", rawB, nil)
		tenantExec(t, pool, pk, doneB, "terminal", "not_applicable", rawB, nil)
		for _, eid := range []string{a, b, doneB, gone} {
			lapsedLease(t, pool, pk, eid)
		}
		assert.Equal(t, []string{a + "/0"}, candidatesFiltered(t, pool, onlyA, "lapsed_leases", pk))
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "expire_lapsed_lease", "41", b, "0"))
		assert.Equal(t, 1, one[int](t, pool, "SELECT lease_epoch FROM ff_attempt WHERE execution_id = $1", b), "not fenced")
		assert.Equal(t, []string{"1", "terminal"}, callFiltered(t, pool, onlyA, "expire_lapsed_lease", "41", a, "0"))

		assert.Equal(t, []string{gone + "/0"}, candidatesFiltered(t, pool, onlyA, "stale_leases", pk), "the orphan, not b's ended execution")
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "release_stale_lease", "41", doneB, "0"))
		assert.Equal(t, []string{"1", "released"}, callFiltered(t, pool, onlyA, "release_stale_lease", "41", gone, "0"))
		assert.ElementsMatch(t, []string{doneB + "/0"}, candidatesFiltered(t, pool, scannerapi.Filter{Namespace: "b"}, "stale_leases", pk))
	})

	t.Run("delayed_promoter, suspension_timeout and pending_wp_expiry", func(t *testing.T) {
		const pk = 42
		delayedA, delayedB := testUUID(pk, 1), testUUID(pk, 2)
		tenantExec(t, pool, pk, delayedA, "runnable", "not_eligible_until_time", rawA, ms(-10))
		tenantExec(t, pool, pk, delayedB, "runnable", "not_eligible_until_time", rawB, ms(-10))
		assert.Equal(t, []string{delayedA}, candidatesFiltered(t, pool, onlyI1, "delays_due", pk))
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyI1, "promote_delayed", "42", delayedB))
		assert.Equal(t, "runnable/not_eligible_until_time", phase(delayedB))
		assert.Equal(t, []string{"1", "promoted"}, callFiltered(t, pool, onlyI1, "promote_delayed", "42", delayedA))

		suspA, suspB, suspGone := testUUID(pk, 11), testUUID(pk, 12), testUUID(pk, 13)
		sids := map[string]string{suspA: testUUID(pk, 21), suspB: testUUID(pk, 22), suspGone: testUUID(pk, 23)}
		tenantExec(t, pool, pk, suspA, "suspended", "not_applicable", rawA, nil)
		tenantExec(t, pool, pk, suspB, "suspended", "not_applicable", rawB, nil)
		for eid, sid := range sids {
			exec(t, pool, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, timeout_at_ms,
				condition, timeout_behavior) VALUES (42, $1, $2, 1, ffscan.now_ms() - 10, '{}', 'fail')`, eid, sid)
		}
		assert.ElementsMatch(t, []string{suspA + "/" + sids[suspA], suspGone + "/" + sids[suspGone]},
			candidatesFiltered(t, pool, onlyA, "suspensions_timed_out", pk))
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "expire_suspension", "42", suspB, sids[suspB]))
		assert.Equal(t, "suspended/not_applicable", phase(suspB))
		assert.Equal(t, []string{"1", "terminal"}, callFiltered(t, pool, onlyA, "expire_suspension", "42", suspA, sids[suspA]))
		assert.Equal(t, []string{"1", "stale_suspension"}, callFiltered(t, pool, onlyA, "expire_suspension", "42", suspGone, sids[suspGone]))

		wpB, wpGone := testUUID(pk, 31), testUUID(pk, 32)
		exec(t, pool, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms,
			expires_at_ms, waitpoint_key, state) VALUES (42, $1, $2, 'k', 't', 1, ffscan.now_ms() - 10, 'wk-b', 'pending'),
			(42, $3, $4, 'k', 't', 1, ffscan.now_ms() - 10, 'wk-gone', 'pending')`, wpB, suspB, wpGone, testUUID(pk, 99))
		assert.Equal(t, []string{wpGone}, candidatesFiltered(t, pool, onlyA, "waitpoints_expired", pk))
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "expire_pending_waitpoint", "42", wpB))
		assert.Equal(t, 1, one[int](t, pool, "SELECT count(*) FROM ff_waitpoint_pending WHERE waitpoint_id = $1", wpB), "kept")
		assert.Equal(t, []string{"1", "expired"}, callFiltered(t, pool, onlyA, "expire_pending_waitpoint", "42", wpGone))
	})

	t.Run("dependency and the sibling cancels: another tenant's flow is left whole", func(t *testing.T) {
		const pk = 43
		flowA, flowB := testUUID(pk, 100), testUUID(pk, 200)
		upA, downA := testUUID(pk, 1), testUUID(pk, 2)
		upB, sibB, downB := testUUID(pk, 11), testUUID(pk, 12), testUUID(pk, 13)
		postgrestest.DAG(t, pool, pk, flowA, nil, [][2]string{{upA, downA}})
		postgrestest.DAG(t, pool, pk, flowB, map[string]string{downB: `{"kind": "any_of", "on_satisfied": "cancel_remaining"}`},
			[][2]string{{upB, downB}, {sibB, downB}})
		exec(t, pool, "UPDATE ff_exec_core SET raw_fields = $2 WHERE flow_id = $1", flowA, rawA)
		exec(t, pool, "UPDATE ff_exec_core SET raw_fields = $2 WHERE flow_id = $1", flowB, rawB)
		evA := postgrestest.Complete(t, pool, pk, upA, "success")
		evB := postgrestest.Complete(t, pool, pk, upB, "success")
		exec(t, pool, "UPDATE ff_completion_event SET committed_at_ms = ffscan.now_ms() - 20000 WHERE partition_key = 43")

		assert.Equal(t, []string{evA}, candidatesFiltered(t, pool, onlyA, "completions_undispatched", pk))
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "dispatch_completion", "43", evB))
		assert.True(t, one[bool](t, pool, "SELECT dispatched_at_ms IS NULL FROM ff_completion_event WHERE event_id = $1", evB), "left undispatched")
		assert.Equal(t, []string{"1", "dispatched", "1"}, callFiltered(t, pool, onlyA, "dispatch_completion", "43", evA))
		assert.Equal(t, "runnable/eligible_now", phase(downA))

		// b's own host dispatches b's event, which lists b's sibling to
		// cancel; a's host must not cancel it.
		assert.Equal(t, []string{"1", "dispatched", "1"}, callFiltered(t, pool, scannerapi.Filter{Namespace: "b"}, "dispatch_completion", "43", evB))
		assert.Empty(t, candidatesFiltered(t, pool, onlyA, "cancel_groups_pending", pk))
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "dispatch_sibling_cancels", "43", flowB, downB))
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "reconcile_sibling_cancels", "43", flowB, downB))
		assert.Equal(t, "runnable/blocked_by_dependencies", phase(sibB), "b's sibling not cancelled by a's host")
		assert.Equal(t, []string{flowB + "/" + downB}, candidatesFiltered(t, pool, scannerapi.Filter{Namespace: "b"}, "cancel_groups_pending", pk))
		assert.Equal(t, []string{"1", "dispatched", "1"}, callFiltered(t, pool, scannerapi.Filter{Namespace: "b"}, "dispatch_sibling_cancels", "43", flowB, downB))

		// An event whose execution is gone cannot be told whose it is.
		orphan := testUUID(pk, 50)
		var ev string
		exec(t, pool, "INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, occurred_at_ms) VALUES (43, $1, $2, 'success', 1)", orphan, flowA)
		ev = one[string](t, pool, "SELECT event_id::text FROM ff_completion_event WHERE execution_id = $1", orphan)
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "dispatch_completion", "43", ev))
		assert.Equal(t, []string{"1", "dispatched", "0"}, call(t, pool, "dispatch_completion", "43", ev))
	})

	t.Run("worker sweep: the namespace applies, registrations have no tags; budgets belong to no tenant", func(t *testing.T) {
		exec(t, pool, `INSERT INTO ff_worker_registry (partition_key, namespace, worker_instance_id, worker_id, lanes, capabilities_csv,
			last_heartbeat_ms, liveness_ttl_ms, registered_at_ms) VALUES
			(44, 'a', 'dead-a', 'w', '{}', '', ffscan.now_ms() - 60000, 30000, 1),
			(44, 'b', 'dead-b', 'w', '{}', '', ffscan.now_ms() - 60000, 30000, 1)`)
		assert.Equal(t, []string{`44/["a", "dead-a"]`}, candidatesFiltered(t, pool, onlyAI1, "workers_expired", 44))
		assert.Equal(t, []string{"1", "filtered"}, callFiltered(t, pool, onlyA, "sweep_worker", "44", `44/["b", "dead-b"]`))
		assert.Equal(t, []string{"1", "swept"}, callFiltered(t, pool, onlyAI1, "sweep_worker", "44", `44/["a", "dead-a"]`))
		assert.Equal(t, 1, one[int](t, pool, "SELECT count(*) FROM ff_worker_registry WHERE partition_key = 44"))

		exec(t, pool, `INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms, next_reset_at_ms)
			VALUES (24, 'b-filtered-host', '{}', 1, 1, ffscan.now_ms() - 10)`)
		assert.Equal(t, []string{"b-filtered-host"}, candidatesFiltered(t, pool, onlyA, "budgets_due", 24))
		assert.Equal(t, []string{"1", "reset"}, callFiltered(t, pool, onlyA, "reset_budget", "24", "b-filtered-host"))
	})
}
