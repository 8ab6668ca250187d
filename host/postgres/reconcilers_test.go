package postgres_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// call runs action function fn with args through postgres.Call, the path
// the host's PGCALLs take, without a filter.
func call(t *testing.T, pool *pgxpool.Pool, fn string, args ...string) []string {
	t.Helper()
	return callFiltered(t, pool, scannerapi.Filter{}, fn, args...)
}

// callFiltered is call with the host's filter f.
func callFiltered(t *testing.T, pool *pgxpool.Pool, f scannerapi.Filter, fn string, args ...string) []string {
	t.Helper()
	out, err := postgres.Call(context.Background(), pool, fn, args, f)
	require.NoError(t, err)
	s := make([]string, len(out))
	for i, v := range out {
		if v != nil {
			s[i] = *v
		}
	}
	return s
}

// candidates runs candidate function fn for the given partitions, without
// a filter, and returns its members.
func candidates(t *testing.T, pool *pgxpool.Pool, fn string, parts ...uint16) []string {
	t.Helper()
	return candidatesFiltered(t, pool, scannerapi.Filter{}, fn, parts...)
}

// candidatesFiltered is candidates with the host's filter f.
func candidatesFiltered(t *testing.T, pool *pgxpool.Pool, f scannerapi.Filter, fn string, parts ...uint16) []string {
	t.Helper()
	rows, err := postgres.ReadCandidates(context.Background(), pool, fn, parts, nil, 256, 1000, f)
	require.NoError(t, err)
	var out []string
	for _, r := range rows {
		out = append(out, r.Member)
	}
	return out
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// execRowAt plants an execution with the given state columns.
func execRowAt(t *testing.T, pool *pgxpool.Pool, pk int, eid, phase, eligibility string, deadlineInMs *int64, attemptIndex int) {
	t.Helper()
	var deadline any
	if deadlineInMs != nil {
		exec(t, pool, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
			public_state, attempt_state, created_at_ms, deadline_at_ms, attempt_index, raw_fields, flow_id)
			VALUES ($1, $2, 'default', $3, 'leased', $4, 'running', 'running_attempt', 1, ffscan.now_ms() + $5, $6,
			'{"namespace": "n1", "tags": {"cairn.instance_id": "i1"}}', '7b2f8d63-1e5c-4a8f-8b62-000000000009')`,
			pk, eid, phase, eligibility, *deadlineInMs, attemptIndex)
		return
	}
	exec(t, pool, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
		public_state, attempt_state, created_at_ms, deadline_at_ms, attempt_index, raw_fields)
		VALUES ($1, $2, 'default', $3, 'leased', $4, 'running', 'running_attempt', 1, $5, $6, '{}')`, pk, eid, phase, eligibility, deadline, attemptIndex)
}

func ms(v int64) *int64 { return &v }

func one[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&v))
	return v
}

func TestReconcilerFunctions(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)

	t.Run("lease_expiry clears lapsed leases of executions that are not active, and leaves active ones to attempt_timeout", func(t *testing.T) {
		const pk = 11
		done, active, gone := "11111111-0000-4000-8000-000000000001", "11111111-0000-4000-8000-000000000002", "11111111-0000-4000-8000-000000000003"
		execRowAt(t, pool, pk, done, "terminal", "not_applicable", nil, 0)
		execRowAt(t, pool, pk, active, "active", "not_applicable", nil, 0)
		for _, id := range []string{done, active, gone} {
			exec(t, pool, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch,
				lease_expires_at_ms) VALUES ($1, $2, 0, 'w', 'w-1', 3, ffscan.now_ms() - 100)`, pk, id)
		}
		assert.ElementsMatch(t, []string{done + "/0", gone + "/0"}, candidates(t, pool, "stale_leases", pk))
		assert.Equal(t, []string{"1", "released"}, call(t, pool, "release_stale_lease", "11", done, "0"))
		assert.Equal(t, []string{"1", "released"}, call(t, pool, "release_stale_lease", "11", gone, "0"))
		assert.Equal(t, []string{"1", "active"}, call(t, pool, "release_stale_lease", "11", active, "0"))
		assert.Equal(t, []string{"1", "lease_released"}, call(t, pool, "release_stale_lease", "11", done, "0"))
		assert.Equal(t, "lease_expired_reclaimable/4/true", one[string](t, pool, `SELECT outcome || '/' || lease_epoch || '/' || (worker_instance_id IS NULL)
			FROM ff_attempt WHERE execution_id = $1`, done))
		assert.Equal(t, "terminal", one[string](t, pool, "SELECT lifecycle_phase FROM ff_exec_core WHERE execution_id = $1", done))
		assert.Equal(t, 2, one[int](t, pool, "SELECT count(*) FROM ff_lease_event WHERE partition_key = 11"))
		assert.Equal(t, 3, one[int](t, pool, "SELECT lease_epoch FROM ff_attempt WHERE execution_id = $1", active), "untouched")
	})

	t.Run("execution_deadline ends active executions past their deadline", func(t *testing.T) {
		const pk = 12
		late, early, waiting := "12121212-0000-4000-8000-000000000001", "12121212-0000-4000-8000-000000000002", "12121212-0000-4000-8000-000000000003"
		execRowAt(t, pool, pk, late, "active", "not_applicable", ms(-100), 1)
		execRowAt(t, pool, pk, early, "active", "not_applicable", ms(60000), 0)
		execRowAt(t, pool, pk, waiting, "runnable", "eligible_now", ms(-100), 0)
		exec(t, pool, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch,
			lease_expires_at_ms) VALUES (12, $1, 1, 'w', 'w-1', 1, ffscan.now_ms() + 60000)`, late)
		assert.Equal(t, []string{late}, candidates(t, pool, "deadlines_passed", pk))
		assert.Equal(t, []string{"1", "expired"}, call(t, pool, "expire_execution_deadline", "12", late))
		assert.Equal(t, []string{"1", "not_due"}, call(t, pool, "expire_execution_deadline", "12", early))
		assert.Equal(t, []string{"1", "not_active"}, call(t, pool, "expire_execution_deadline", "12", waiting))
		assert.Equal(t, []string{"1", "not_active"}, call(t, pool, "expire_execution_deadline", "12", late))
		assert.Equal(t, "terminal/attempt_terminal/execution_deadline", one[string](t, pool, `SELECT lifecycle_phase || '/' || attempt_state || '/'
			|| (raw_fields ->> 'last_failure_message') FROM ff_exec_core WHERE execution_id = $1`, late))
		assert.Equal(t, "interrupted/2/true", one[string](t, pool, `SELECT outcome || '/' || lease_epoch || '/' || (lease_expires_at_ms IS NULL)
			FROM ff_attempt WHERE execution_id = $1`, late), "the running attempt is interrupted and fenced")
		assert.Equal(t, "expired/7b2f8d63-1e5c-4a8f-8b62-000000000009", one[string](t, pool,
			"SELECT outcome || '/' || flow_id FROM ff_completion_event WHERE execution_id = $1", late))
		assert.Equal(t, "n1/i1", one[string](t, pool, "SELECT namespace || '/' || instance_tag FROM ff_lease_event WHERE execution_id = $1", late))
	})

	t.Run("delayed_promoter makes due delays eligible", func(t *testing.T) {
		const pk = 13
		due, later, other := "13131313-0000-4000-8000-000000000001", "13131313-0000-4000-8000-000000000002", "13131313-0000-4000-8000-000000000003"
		execRowAt(t, pool, pk, due, "runnable", "not_eligible_until_time", ms(-100), 0)
		execRowAt(t, pool, pk, later, "runnable", "not_eligible_until_time", ms(60000), 0)
		execRowAt(t, pool, pk, other, "runnable", "eligible_now", ms(-100), 0)
		assert.Equal(t, []string{due}, candidates(t, pool, "delays_due", pk))
		assert.Equal(t, []string{"1", "promoted"}, call(t, pool, "promote_delayed", "13", due))
		assert.Equal(t, []string{"1", "not_due"}, call(t, pool, "promote_delayed", "13", later))
		assert.Equal(t, []string{"1", "not_delayed"}, call(t, pool, "promote_delayed", "13", other))
		assert.Equal(t, []string{"1", "not_delayed"}, call(t, pool, "promote_delayed", "13", due))
		assert.Equal(t, "eligible_now/true", one[string](t, pool, `SELECT eligibility_state || '/' || (deadline_at_ms IS NULL)
			FROM ff_exec_core WHERE execution_id = $1`, due))
	})

	t.Run("pending_wp_expiry closes pending waitpoints only", func(t *testing.T) {
		const pk = 14
		eid := "14141414-0000-4000-8000-000000000001"
		pending, active := "14141414-0000-4000-8000-0000000000aa", "14141414-0000-4000-8000-0000000000bb"
		execRowAt(t, pool, pk, eid, "suspended", "not_applicable", nil, 0)
		exec(t, pool, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, condition, member_map)
			VALUES (14, $1, gen_random_uuid(), 1, '{}', '{"wk-active": []}')`, eid)
		exec(t, pool, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms,
			expires_at_ms, waitpoint_key, state) VALUES (14, $1, $3, 'k', 't', 1, ffscan.now_ms() - 10, 'wk-pending', 'pending'),
			(14, $2, $3, 'k', 't', 1, ffscan.now_ms() - 10, 'wk-active', 'active')`, pending, active, eid)
		assert.Equal(t, []string{pending}, candidates(t, pool, "waitpoints_expired", pk))
		assert.Equal(t, []string{"1", "not_pending"}, call(t, pool, "expire_pending_waitpoint", "14", active))
		assert.Equal(t, []string{"1", "expired"}, call(t, pool, "expire_pending_waitpoint", "14", pending))
		assert.Equal(t, []string{"1", "waitpoint_not_found"}, call(t, pool, "expire_pending_waitpoint", "14", pending))
		assert.Equal(t, 1, one[int](t, pool, "SELECT count(*) FROM ff_waitpoint_pending WHERE partition_key = 14"), "the active one stays")
		var mm map[string]any
		require.NoError(t, json.Unmarshal(one[[]byte](t, pool, "SELECT member_map::text::bytea FROM ff_suspension_current WHERE execution_id = $1", eid), &mm))
		marker := mm["wk-pending"].(map[string]any)
		assert.Equal(t, "never_committed", marker["status"])
		assert.Equal(t, "pending_wp_expiry", marker["source"])
		assert.Equal(t, []any{}, mm["wk-active"])
	})

	t.Run("suspension_timeout acts on the suspension it read, while the execution is suspended", func(t *testing.T) {
		const pk = 15
		type row struct{ eid, sid, behaviour, phase string }
		rows := map[string]row{
			"fail":    {"15151515-0000-4000-8000-000000000001", "15151515-0000-4000-8000-0000000000f1", "", "suspended"},
			"cancel":  {"15151515-0000-4000-8000-000000000002", "15151515-0000-4000-8000-0000000000f2", "cancel", "suspended"},
			"signal":  {"15151515-0000-4000-8000-000000000003", "15151515-0000-4000-8000-0000000000f3", "auto_resume_with_timeout_signal", "suspended"},
			"resumed": {"15151515-0000-4000-8000-000000000004", "15151515-0000-4000-8000-0000000000f4", "fail", "active"},
			"odd":     {"15151515-0000-4000-8000-000000000005", "15151515-0000-4000-8000-0000000000f5", "auto_resume", "suspended"},
		}
		for _, r := range rows {
			execRowAt(t, pool, pk, r.eid, r.phase, "not_applicable", nil, 0)
			var b any
			if r.behaviour != "" {
				b = r.behaviour
			}
			exec(t, pool, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, timeout_at_ms,
				condition, timeout_behavior) VALUES (15, $1, $2, 1, ffscan.now_ms() - 10, '{}', $3)`, r.eid, r.sid, b)
		}
		assert.Len(t, candidates(t, pool, "suspensions_timed_out", pk), 5)

		f := rows["fail"]
		assert.Equal(t, []string{"1", "suspension_replaced"}, call(t, pool, "expire_suspension", "15", f.eid, rows["cancel"].sid))
		assert.Equal(t, []string{"1", "terminal"}, call(t, pool, "expire_suspension", "15", f.eid, f.sid))
		assert.Equal(t, "terminal/suspension_timeout_fail", one[string](t, pool,
			"SELECT lifecycle_phase || '/' || cancellation_reason FROM ff_exec_core WHERE execution_id = $1", f.eid))
		assert.Equal(t, "expired", one[string](t, pool, "SELECT outcome FROM ff_completion_event WHERE execution_id = $1", f.eid))
		assert.Equal(t, 0, one[int](t, pool, "SELECT count(*) FROM ff_suspension_current WHERE execution_id = $1", f.eid))
		assert.Equal(t, []string{"1", "suspension_not_found"}, call(t, pool, "expire_suspension", "15", f.eid, f.sid))

		c := rows["cancel"]
		assert.Equal(t, []string{"1", "terminal"}, call(t, pool, "expire_suspension", "15", c.eid, c.sid))
		assert.Equal(t, "cancelled/suspension_timeout_cancel", one[string](t, pool, `SELECT e.outcome || '/' || x.cancellation_reason
			FROM ff_completion_event e JOIN ff_exec_core x USING (partition_key, execution_id) WHERE execution_id = $1`, c.eid))

		o := rows["odd"]
		assert.Equal(t, []string{"1", "terminal"}, call(t, pool, "expire_suspension", "15", o.eid, o.sid), "an unknown behaviour fails, as FlowFabric's")
		assert.Equal(t, "suspension_timeout_fail", one[string](t, pool, "SELECT cancellation_reason FROM ff_exec_core WHERE execution_id = $1", o.eid))

		s := rows["signal"]
		assert.Equal(t, []string{"1", "timeout_signal"}, call(t, pool, "expire_suspension", "15", s.eid, s.sid))
		assert.Equal(t, "suspended/true/timeout", one[string](t, pool, `SELECT x.lifecycle_phase || '/' || (s.timeout_at_ms IS NULL) || '/'
			|| (s.member_map -> '__timeout__' -> 0 ->> 'signal_name') FROM ff_suspension_current s JOIN ff_exec_core x USING (partition_key, execution_id)
			WHERE execution_id = $1`, s.eid))

		// PG8: the execution resumed and runs; its old suspension's
		// timeout passing must not end it.
		r := rows["resumed"]
		assert.Equal(t, []string{"1", "stale_suspension"}, call(t, pool, "expire_suspension", "15", r.eid, r.sid))
		assert.Equal(t, "active/true", one[string](t, pool, `SELECT x.lifecycle_phase || '/' || (s.timeout_at_ms IS NULL)
			FROM ff_suspension_current s JOIN ff_exec_core x USING (partition_key, execution_id) WHERE execution_id = $1`, r.eid))
		assert.Equal(t, 0, one[int](t, pool, "SELECT count(*) FROM ff_completion_event WHERE execution_id = $1", r.eid))
		assert.Empty(t, candidates(t, pool, "suspensions_timed_out", pk), "nothing is read again")
	})

	t.Run("budget_reset zeroes usage and schedules the next reset", func(t *testing.T) {
		const pk = 16
		// One clock read for the three rows: the order of their due times
		// is what the candidate read is checked for, and the database
		// clock moves between rows of one statement.
		exec(t, pool, `INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms, breach_count,
			last_breach_at_ms, last_breach_dim, next_reset_at_ms)
			SELECT v.pk, v.id, v.policy::jsonb, 1, 1, v.breaches, v.breach_at, v.breach_dim, n.t + v.due_in
			FROM (SELECT ffscan.now_ms() AS t) n, (VALUES
				(16, 'b-every-minute', '{"reset_interval_ms": 60000}', 4, 5::bigint, 'tokens', -10),
				(16, 'b-once', '{}', 0, NULL, NULL, -20),
				(16, 'b-later', '{"reset_interval_ms": 60000}', 0, NULL, NULL, 60000)) v(pk, id, policy, breaches, breach_at, breach_dim, due_in)`)
		exec(t, pool, `INSERT INTO ff_budget_usage (partition_key, budget_id, dimensions_key, current_value, updated_at_ms) VALUES
			(16, 'b-every-minute', 'tokens', 900, 1), (16, 'b-every-minute', 'calls', 3, 1), (16, 'b-later', 'tokens', 7, 1)`)
		assert.Equal(t, []string{"b-once", "b-every-minute"}, candidates(t, pool, "budgets_due", pk))
		before := one[int64](t, pool, "SELECT ffscan.now_ms()")
		assert.Equal(t, []string{"1", "reset"}, call(t, pool, "reset_budget", "16", "b-every-minute"))
		assert.Equal(t, []string{"1", "reset"}, call(t, pool, "reset_budget", "16", "b-once"))
		assert.Equal(t, []string{"1", "not_due"}, call(t, pool, "reset_budget", "16", "b-later"))
		assert.Equal(t, []string{"1", "budget_not_found"}, call(t, pool, "reset_budget", "16", "b-none"))
		assert.Equal(t, 0, one[int](t, pool, "SELECT sum(current_value) FROM ff_budget_usage WHERE budget_id = 'b-every-minute'"))
		assert.Equal(t, 7, one[int](t, pool, "SELECT current_value FROM ff_budget_usage WHERE budget_id = 'b-later'"))
		next := one[int64](t, pool, "SELECT next_reset_at_ms FROM ff_budget_policy WHERE budget_id = 'b-every-minute'")
		assert.GreaterOrEqual(t, next, before+60000)
		assert.Equal(t, "4/true", one[string](t, pool, `SELECT breach_count || '/' || (last_breach_at_ms IS NULL AND last_breach_dim IS NULL)
			FROM ff_budget_policy WHERE budget_id = 'b-every-minute'`), "breach counters kept, the last breach cleared")
		assert.True(t, one[bool](t, pool, "SELECT next_reset_at_ms IS NULL FROM ff_budget_policy WHERE budget_id = 'b-once'"))
	})

	t.Run("every registered function exists with its arity", func(t *testing.T) {
		for fn, a := range postgres.ActionFunctions {
			n := one[int](t, pool, "SELECT pronargs FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace WHERE s.nspname = 'ffscan' AND proname = $1", fn)
			assert.Equal(t, a.Args+3, n, fn+": the plugin's arguments and the filter's three")
			assert.Equal(t, "text[]", one[string](t, pool, "SELECT prorettype::regtype::text FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace WHERE s.nspname = 'ffscan' AND proname = $1", fn), fn)
		}
		for fn := range postgres.CandidateFunctions {
			rows, err := pool.Query(context.Background(), "SELECT * FROM ffscan."+pgx.Identifier{fn}.Sanitize()+"('{0}', 1, 256)")
			require.NoError(t, err, fn)
			names := []string{}
			for _, f := range rows.FieldDescriptions() {
				names = append(names, f.Name)
			}
			rows.Close()
			assert.Equal(t, []string{"partition_key", "member", "score"}, names, fn)
		}
	})
}

func TestDependencyFunctions(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	const pk = 20
	id := func(n int) string {
		return "20202020-0000-4000-8000-0000000000" + string(rune('0'+n/10)) + string(rune('0'+n%10))
	}
	state := func(eid string) string {
		return one[string](t, pool, "SELECT lifecycle_phase || '/' || eligibility_state || '/' || public_state FROM ff_exec_core WHERE execution_id = $1", eid)
	}

	t.Run("all_of: pending until every upstream succeeded; each event dispatched once", func(t *testing.T) {
		flow := "f0000000-0000-4000-8000-000000000001"
		a, b, down := id(1), id(2), id(3)
		postgrestest.DAG(t, pool, pk, flow, nil, [][2]string{{a, down}, {b, down}})
		ev := postgrestest.Complete(t, pool, pk, a, "success")
		assert.Equal(t, []string{"1", "dispatched", "1"}, call(t, pool, "dispatch_completion", "20", ev))
		assert.Equal(t, "runnable/blocked_by_dependencies/waiting", state(down))
		assert.Equal(t, "1/1", one[string](t, pool, "SELECT success_count || '/' || running_count FROM ff_edge_group WHERE downstream_eid = $1", down))
		assert.Equal(t, []string{"1", "already_dispatched"}, call(t, pool, "dispatch_completion", "20", ev), "never counted twice")
		ev = postgrestest.Complete(t, pool, pk, b, "success")
		assert.Equal(t, []string{"1", "dispatched", "1"}, call(t, pool, "dispatch_completion", "20", ev))
		assert.Equal(t, "runnable/eligible_now/waiting", state(down))
		assert.Equal(t, 0, one[int](t, pool, "SELECT count(*) FROM ff_completion_event WHERE partition_key = 20 AND dispatched_at_ms IS NULL AND flow_id = $1", flow))
	})

	t.Run("all_of: a failed upstream skips the downstream and emits its skipped completion", func(t *testing.T) {
		flow := "f0000000-0000-4000-8000-000000000002"
		a, b, down := id(11), id(12), id(13)
		postgrestest.DAG(t, pool, pk, flow, nil, [][2]string{{a, down}, {b, down}})
		ev := postgrestest.Complete(t, pool, pk, a, "failed")
		assert.Equal(t, []string{"1", "dispatched", "1"}, call(t, pool, "dispatch_completion", "20", ev))
		assert.Equal(t, "terminal/not_applicable/skipped", state(down))
		assert.Equal(t, "skipped/", one[string](t, pool, "SELECT outcome || '/' || coalesce(dispatched_at_ms::text, '') FROM ff_completion_event WHERE execution_id = $1", down))
	})

	t.Run("any_of with cancel_remaining: the first success releases the downstream and lists the live siblings", func(t *testing.T) {
		flow := "f0000000-0000-4000-8000-000000000003"
		a, b, c, down := id(21), id(22), id(23), id(24)
		postgrestest.DAG(t, pool, pk, flow, map[string]string{down: `{"kind": "any_of", "on_satisfied": "cancel_remaining"}`}, [][2]string{{a, down}, {b, down}, {c, down}})
		postgrestest.Complete(t, pool, pk, c, "failed") // ended already: not a sibling to cancel (its event not dispatched yet)
		ev := postgrestest.Complete(t, pool, pk, a, "success")
		assert.Equal(t, []string{"1", "dispatched", "1"}, call(t, pool, "dispatch_completion", "20", ev))
		assert.Equal(t, "runnable/eligible_now/waiting", state(down))
		assert.Equal(t, "true/{"+b+"}", one[string](t, pool, `SELECT cancel_siblings_pending_flag || '/' || cancel_siblings_pending_members::text
			FROM ff_edge_group WHERE downstream_eid = $1`, down))
		assert.Equal(t, []string{flow + "/" + down}, candidates(t, pool, "cancel_groups_pending", pk))

		assert.Equal(t, []string{"1", "no_op"}, call(t, pool, "reconcile_sibling_cancels", "20", flow, down), "the dispatcher owns a live sibling")
		assert.Equal(t, []string{"1", "dispatched", "1"}, call(t, pool, "dispatch_sibling_cancels", "20", flow, down))
		assert.Equal(t, "terminal/not_applicable/cancelled", state(b))
		assert.Equal(t, "sibling_quorum_satisfied/engine", one[string](t, pool, "SELECT cancellation_reason || '/' || cancelled_by FROM ff_exec_core WHERE execution_id = $1", b))
		assert.Equal(t, "false/{}", one[string](t, pool, `SELECT cancel_siblings_pending_flag || '/' || cancel_siblings_pending_members::text
			FROM ff_edge_group WHERE downstream_eid = $1`, down))
		assert.Empty(t, candidates(t, pool, "cancel_groups_pending", pk))
		assert.Equal(t, []string{"1", "sremmed_stale"}, call(t, pool, "reconcile_sibling_cancels", "20", flow, down))
	})

	t.Run("the reconciler drains a group whose siblings all ended", func(t *testing.T) {
		flow := "f0000000-0000-4000-8000-000000000004"
		a, b, down := id(31), id(32), id(33)
		postgrestest.DAG(t, pool, pk, flow, map[string]string{down: `{"kind": "quorum", "k": 1}`}, [][2]string{{a, down}, {b, down}})
		ev := postgrestest.Complete(t, pool, pk, a, "success")
		call(t, pool, "dispatch_completion", "20", ev)
		postgrestest.Complete(t, pool, pk, b, "success") // ended on its own before the dispatcher came
		assert.Equal(t, []string{"1", "completed_drain"}, call(t, pool, "reconcile_sibling_cancels", "20", flow, down))
		assert.Equal(t, "terminal/runnable", one[string](t, pool, "SELECT (SELECT lifecycle_phase FROM ff_exec_core WHERE execution_id = $1) || '/' || (SELECT lifecycle_phase FROM ff_exec_core WHERE execution_id = $2)", b, down))
	})

	t.Run("quorum: impossible once the rest cannot reach k; let_run lists nothing", func(t *testing.T) {
		flow := "f0000000-0000-4000-8000-000000000005"
		a, b, c, down, down2 := id(41), id(42), id(43), id(44), id(45)
		postgrestest.DAG(t, pool, pk, flow, map[string]string{down: `{"kind": "quorum", "k": 2}`, down2: `{"kind": "any_of", "on_satisfied": "let_run"}`},
			[][2]string{{a, down}, {b, down}, {c, down}, {a, down2}, {b, down2}})
		assert.Equal(t, []string{"1", "dispatched", "2"}, call(t, pool, "dispatch_completion", "20", postgrestest.Complete(t, pool, pk, a, "failed")))
		assert.Equal(t, "runnable/blocked_by_dependencies/waiting", state(down), "2 of 3 can still succeed")
		assert.Equal(t, []string{"1", "dispatched", "2"}, call(t, pool, "dispatch_completion", "20", postgrestest.Complete(t, pool, pk, b, "success")))
		assert.Equal(t, "runnable/eligible_now/waiting", state(down2))
		assert.Equal(t, "false", one[string](t, pool, "SELECT cancel_siblings_pending_flag::text FROM ff_edge_group WHERE downstream_eid = $1", down2))
		assert.Equal(t, []string{"1", "dispatched", "1"}, call(t, pool, "dispatch_completion", "20", postgrestest.Complete(t, pool, pk, c, "expired")))
		assert.Equal(t, "terminal/not_applicable/skipped", state(down))
	})

	t.Run("an event without a flow is just marked", func(t *testing.T) {
		ev := one[string](t, pool, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms)
			VALUES (20, gen_random_uuid(), 'success', 1) RETURNING event_id::text`)
		assert.Equal(t, []string{"1", "dispatched", "0"}, call(t, pool, "dispatch_completion", "20", ev))
		assert.Equal(t, []string{"1", "event_not_found"}, call(t, pool, "dispatch_completion", "21", ev), "another partition")
	})

	t.Run("a batch of one partition's events in one transaction, each as dispatch_completion does it", func(t *testing.T) {
		flow := "f0000000-0000-4000-8000-000000000006"
		a, b, c, down := id(51), id(52), id(53), id(54)
		postgrestest.DAG(t, pool, pk, flow, nil, [][2]string{{a, down}, {b, down}, {c, down}})
		evA := postgrestest.Complete(t, pool, pk, a, "success")
		evB := postgrestest.Complete(t, pool, pk, b, "success")
		evC := postgrestest.Complete(t, pool, pk, c, "success")
		parse := func(s string) int64 {
			n, err := strconv.ParseInt(s, 10, 64)
			require.NoError(t, err)
			return n
		}
		assert.Equal(t, []string{"1", "dispatched", "1"}, call(t, pool, "dispatch_completion", "20", evA))
		got, err := postgres.DispatchCompletions(context.Background(), pool, pk, []int64{parse(evB), parse(evA), parse(evC), 1 << 40}, scannerapi.Filter{})
		require.NoError(t, err)
		var replies []string
		for _, d := range got {
			var r []string
			for _, v := range d.Reply {
				r = append(r, *v)
			}
			replies = append(replies, strconv.FormatInt(d.Event, 10)+":"+strings.Join(r, ","))
		}
		assert.Equal(t, []string{evB + ":1,dispatched,1", evA + ":1,already_dispatched", evC + ":1,dispatched,1", "1099511627776:1,event_not_found"},
			replies, "in the order asked, each with dispatch_completion's reply")
		assert.Equal(t, "runnable/eligible_now/waiting", state(down), "counted once per upstream")
		assert.Equal(t, "3/0", one[string](t, pool, "SELECT success_count || '/' || running_count FROM ff_edge_group WHERE downstream_eid = $1", down))
		assert.Equal(t, "1", one[string](t, pool, `SELECT count(DISTINCT xmin::text)::text FROM ff_completion_event
			WHERE partition_key = 20 AND event_id = ANY ($1::bigint[])`, []int64{parse(evB), parse(evC)}), "both written by one transaction")
		empty, err := postgres.DispatchCompletions(context.Background(), pool, pk, nil, scannerapi.Filter{})
		require.NoError(t, err)
		assert.Empty(t, empty)
	})

	t.Run("the safety net reads events left undispatched for 15 s", func(t *testing.T) {
		old := one[string](t, pool, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms, committed_at_ms)
			VALUES (22, gen_random_uuid(), 'success', 1, ffscan.now_ms() - 16000) RETURNING event_id::text`)
		exec(t, pool, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms) VALUES (22, gen_random_uuid(), 'success', 1)`)
		assert.Equal(t, []string{old}, candidates(t, pool, "completions_undispatched", 22))
	})
}

func TestWorkerRegistrySweep(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	// Registry partitions 3, 19 and 35 are swept by flow partition 3 of 16.
	exec(t, pool, `INSERT INTO ff_worker_registry (partition_key, namespace, worker_instance_id, worker_id, lanes, capabilities_csv,
		last_heartbeat_ms, liveness_ttl_ms, registered_at_ms) VALUES
		(3, 'ns', 'dead/one "quoted"', 'w', '{}', '', ffscan.now_ms() - 60000, 30000, 1),
		(19, 'ns', 'dead-two', 'w', '{}', '', ffscan.now_ms() - 60000, 30000, 1),
		(35, 'ns', 'alive', 'w', '{}', '', ffscan.now_ms(), 30000, 1),
		(4, 'ns', 'dead-elsewhere', 'w', '{}', '', ffscan.now_ms() - 60000, 30000, 1)`)
	got := candidates16(t, pool, 3)
	assert.ElementsMatch(t, []string{`3/["ns", "dead/one \"quoted\""]`, `19/["ns", "dead-two"]`}, got)
	for _, m := range got {
		assert.Equal(t, []string{"1", "swept"}, call(t, pool, "sweep_worker", "3", m))
	}
	assert.Equal(t, []string{"1", "worker_not_found"}, call(t, pool, "sweep_worker", "3", got[0]))
	assert.Equal(t, []string{"1", "alive"}, call(t, pool, "sweep_worker", "3", `35/["ns", "alive"]`))
	// Counted on this test's partitions: others share the database.
	assert.Equal(t, 2, one[int](t, pool, "SELECT count(*) FROM ff_worker_registry WHERE partition_key IN (3, 4, 19, 35)"))
	assert.Equal(t, 2, one[int](t, pool, "SELECT count(*) FROM ff_worker_registry_event WHERE event_kind = 'ttl_swept' AND partition_key IN (3, 4, 19, 35)"))
	_, err := postgres.Call(context.Background(), pool, "sweep_worker", []string{"3", "3/not json"}, scannerapi.Filter{})
	require.Error(t, err, "a malformed member is refused, nothing written")
}

// candidates16 reads workers_expired for one flow partition of 16.
func candidates16(t *testing.T, pool *pgxpool.Pool, part uint16) []string {
	t.Helper()
	rows, err := postgres.ReadCandidates(context.Background(), pool, "workers_expired", []uint16{part}, nil, 16, 1000, scannerapi.Filter{})
	require.NoError(t, err)
	var out []string
	for _, r := range rows {
		out = append(out, r.Member)
	}
	return out
}

// TestDispatchRace: the listener and the reconciler (or two hosts) racing
// on one completion: the second waits on the first's row lock and finds
// the event dispatched; the edge group is counted once.
func TestDispatchRace(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	ctx := context.Background()
	const pk = 30
	up, down := "30303030-0000-4000-8000-000000000001", "30303030-0000-4000-8000-000000000002"
	postgrestest.DAG(t, pool, pk, "f3000000-0000-4000-8000-000000000001", nil, [][2]string{{up, down}})
	ev := postgrestest.Complete(t, pool, pk, up, "success")

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx)
	var out []string
	require.NoError(t, first.QueryRow(ctx, "SELECT ffscan.dispatch_completion($1, $2)", pk, ev).Scan(&out))
	assert.Equal(t, []string{"1", "dispatched", "1"}, out)

	assert.Equal(t, []string{"1", "already_dispatched"},
		secondWaits(t, pool, first, "SELECT ffscan.dispatch_completion($1, $2)", pk, ev))
	assert.Equal(t, "1/0", one[string](t, pool, "SELECT success_count || '/' || running_count FROM ff_edge_group WHERE downstream_eid = $1", down),
		"counted once")
}
