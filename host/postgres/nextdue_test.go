package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// nextDueCase plants the entries of one time-scored candidate function:
// plant puts a candidate of tenant raw whose time (the score the due read
// compares) is at, returning its member; odd, when set, puts an entry at
// at that fails one of the function's other conditions (a phase, a state,
// no time at all), which the next-due read must skip as the due read does.
type nextDueCase struct {
	fn string
	// inclusive: the due bound is <= (due at its time), else < (due one
	// millisecond after).
	inclusive bool
	// filtered: the host's namespace filter applies to its rows.
	filtered bool
	plant    func(t *testing.T, pool *pgxpool.Pool, pk, n int, raw string, at int64) string
	odd      func(t *testing.T, pool *pgxpool.Pool, pk, n int, at int64)
}

func nextDueCases() []nextDueCase {
	execAt := func(t *testing.T, pool *pgxpool.Pool, pk int, eid, phase, eligibility, raw string, deadline any) {
		exec(t, pool, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
			public_state, attempt_state, created_at_ms, deadline_at_ms, attempt_index, raw_fields)
			VALUES ($1, $2, 'default', $3, 'leased', $4, 'running', 'running_attempt', 1, $5, 0, $6)`, pk, eid, phase, eligibility, deadline, raw)
	}
	leaseAt := func(t *testing.T, pool *pgxpool.Pool, pk int, eid string, at int64) {
		exec(t, pool, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch,
			lease_expires_at_ms) VALUES ($1, $2, 0, 'w', 'w-1', 1, $3)`, pk, eid, at)
	}
	return []nextDueCase{
		{fn: "lapsed_leases", filtered: true,
			plant: func(t *testing.T, pool *pgxpool.Pool, pk, n int, raw string, at int64) string {
				eid := testUUID(pk, n)
				execAt(t, pool, pk, eid, "active", "not_applicable", raw, nil)
				leaseAt(t, pool, pk, eid, at)
				return eid + "/0"
			},
			odd: func(t *testing.T, pool *pgxpool.Pool, pk, n int, at int64) {
				eid := testUUID(pk, n)
				execAt(t, pool, pk, eid, "terminal", "not_applicable", rawA, nil)
				leaseAt(t, pool, pk, eid, at)
			}},
		{fn: "stale_leases", filtered: true,
			plant: func(t *testing.T, pool *pgxpool.Pool, pk, n int, raw string, at int64) string {
				eid := testUUID(pk, n)
				execAt(t, pool, pk, eid, "terminal", "not_applicable", raw, nil)
				leaseAt(t, pool, pk, eid, at)
				return eid + "/0"
			},
			odd: func(t *testing.T, pool *pgxpool.Pool, pk, n int, at int64) {
				eid := testUUID(pk, n)
				execAt(t, pool, pk, eid, "active", "not_applicable", rawA, nil)
				leaseAt(t, pool, pk, eid, at)
			}},
		{fn: "deadlines_passed", filtered: true,
			plant: func(t *testing.T, pool *pgxpool.Pool, pk, n int, raw string, at int64) string {
				eid := testUUID(pk, n)
				execAt(t, pool, pk, eid, "active", "not_applicable", raw, at)
				return eid
			},
			odd: func(t *testing.T, pool *pgxpool.Pool, pk, n int, at int64) {
				execAt(t, pool, pk, testUUID(pk, n), "runnable", "not_eligible_until_time", rawA, at)
			}},
		{fn: "delays_due", inclusive: true, filtered: true,
			plant: func(t *testing.T, pool *pgxpool.Pool, pk, n int, raw string, at int64) string {
				eid := testUUID(pk, n)
				execAt(t, pool, pk, eid, "runnable", "not_eligible_until_time", raw, at)
				return eid
			},
			odd: func(t *testing.T, pool *pgxpool.Pool, pk, n int, at int64) {
				execAt(t, pool, pk, testUUID(pk, n), "runnable", "eligible_now", rawA, at)
			}},
		{fn: "waitpoints_expired", filtered: true,
			plant: func(t *testing.T, pool *pgxpool.Pool, pk, n int, raw string, at int64) string {
				eid, wp := testUUID(pk, n), testUUID(pk, 1000+n)
				execAt(t, pool, pk, eid, "suspended", "not_applicable", raw, nil)
				exec(t, pool, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms,
					expires_at_ms, waitpoint_key, state) VALUES ($1, $2, $3, 'k', 't', 1, $4, $5, 'pending')`, pk, wp, eid, at, "wk-"+wp)
				return wp
			},
			odd: func(t *testing.T, pool *pgxpool.Pool, pk, n int, at int64) {
				eid, wp := testUUID(pk, n), testUUID(pk, 1000+n)
				execAt(t, pool, pk, eid, "suspended", "not_applicable", rawA, nil)
				exec(t, pool, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms,
					expires_at_ms, waitpoint_key, state) VALUES ($1, $2, $3, 'k', 't', 1, $4, $5, 'active')`, pk, wp, eid, at, "wk-"+wp)
			}},
		{fn: "suspensions_timed_out", filtered: true,
			plant: func(t *testing.T, pool *pgxpool.Pool, pk, n int, raw string, at int64) string {
				eid, sid := testUUID(pk, n), testUUID(pk, 1000+n)
				execAt(t, pool, pk, eid, "suspended", "not_applicable", raw, nil)
				exec(t, pool, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, timeout_at_ms,
					condition, timeout_behavior) VALUES ($1, $2, $3, 1, $4, '{}', 'fail')`, pk, eid, sid, at)
				return eid + "/" + sid
			}},
		{fn: "budgets_due", inclusive: true,
			plant: func(t *testing.T, pool *pgxpool.Pool, pk, n int, _ string, at int64) string {
				id := fmt.Sprintf("b-next-%d-%d", pk, n)
				exec(t, pool, `INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms, next_reset_at_ms)
					VALUES ($1, $2, '{}', 1, 1, $3)`, pk, id, at)
				return id
			},
			odd: func(t *testing.T, pool *pgxpool.Pool, pk, n int, _ int64) {
				exec(t, pool, `INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms, next_reset_at_ms)
					VALUES ($1, $2, '{}', 1, 1, NULL)`, pk, fmt.Sprintf("b-next-%d-%d", pk, n))
			}},
		{fn: "workers_expired", filtered: true,
			plant: func(t *testing.T, pool *pgxpool.Pool, pk, n int, raw string, at int64) string {
				ns := "a"
				if raw == rawB {
					ns = "b"
				}
				inst := fmt.Sprintf("next-%d", n)
				// Expired at heartbeat + TTL.
				exec(t, pool, `INSERT INTO ff_worker_registry (partition_key, namespace, worker_instance_id, worker_id, lanes, capabilities_csv,
					last_heartbeat_ms, liveness_ttl_ms, registered_at_ms) VALUES ($1, $2, $3, 'w', '{}', '', $4, 30000, 1)`, pk, ns, inst, at-30000)
				return fmt.Sprintf(`%d/["%s", "%s"]`, pk, ns, inst)
			}},
	}
}

// TestNextDueFunctions: each time-scored candidate function's companion
// returns, per partition, the earliest entry the function would return
// once due but that is not due at as_of_ms, and when it falls due: the
// exact complement of the function's bound (an entry due exactly at
// as_of_ms under an inclusive bound is due, not next), the function's
// other conditions and the host's filter applied, at most one row per
// partition; the others have none.
func TestNextDueFunctions(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	ctx := context.Background()
	// An instant an hour ahead: every entry planted is in the future for
	// the due reads, whatever the clock does while the test runs.
	asOf := one[int64](t, pool, "SELECT ffscan.now_ms()") + 3_600_000
	dueAt := func(c nextDueCase, at int64) int64 {
		if c.inclusive {
			return at
		}
		return at + 1
	}
	for i, c := range nextDueCases() {
		// Two partitions of the test's own per function (and the worker
		// registry's partitions are the same numbers: count 256).
		p1, p2 := 60+2*i, 61+2*i
		t.Run(c.fn, func(t *testing.T) {
			require.Contains(t, postgres.NextDueFunctions, c.fn)
			// p1: entries one before, at and one after as_of_ms, and odd
			// ones earlier than all of them.
			c.plant(t, pool, p1, 1, rawA, asOf-1) // due at as_of_ms: never next
			at := c.plant(t, pool, p1, 2, rawA, asOf)
			after := c.plant(t, pool, p1, 3, rawA, asOf+1)
			if c.odd != nil {
				c.odd(t, pool, p1, 4, asOf-1)
				c.odd(t, pool, p1, 5, asOf)
				c.odd(t, pool, p1, 6, asOf+1)
			}
			// p2: another tenant's entry, then ours.
			theirs := c.plant(t, pool, p2, 1, rawB, asOf+2)
			ours := c.plant(t, pool, p2, 2, rawA, asOf+5)

			read := func(f scannerapi.Filter) ([]postgres.Candidate, map[uint16]postgres.NextDue) {
				due, next, err := postgres.ReadCandidatesNext(ctx, pool, c.fn, []uint16{uint16(p1), uint16(p2), 59}, 256, 100, asOf, f)
				require.NoError(t, err)
				return due, next
			}
			due, next := read(scannerapi.Filter{})
			assert.Empty(t, due, "nothing is due now: every entry is an hour ahead")
			assert.NotContains(t, next, uint16(59), "a partition with nothing to come has no row")
			if c.inclusive {
				assert.Equal(t, postgres.NextDue{Member: after, AtMs: asOf + 1}, next[uint16(p1)], "the entry at as_of_ms is due then: the next one is after it")
			} else {
				assert.Equal(t, postgres.NextDue{Member: at, AtMs: asOf + 1}, next[uint16(p1)], "the entry at as_of_ms is not due yet: it is next, due one ms later")
			}
			assert.Equal(t, postgres.NextDue{Member: theirs, AtMs: dueAt(c, asOf+2)}, next[uint16(p2)])

			if c.filtered {
				_, next = read(onlyA)
				assert.Equal(t, postgres.NextDue{Member: ours, AtMs: dueAt(c, asOf+5)}, next[uint16(p2)], "the filter leaves the other tenant's out")
			} else {
				_, next = read(onlyA)
				assert.Equal(t, theirs, next[uint16(p2)].Member, "the filter does not apply to this function, as to its due read")
			}

			// One row per partition asked, whatever is planted.
			n := one[int](t, pool, "SELECT count(*) FROM ffscan."+postgres.NextDueFunctions[c.fn]+"($1, 256, $2)", []int16{int16(p1), int16(p2)}, asOf)
			assert.Equal(t, 2, n)

		})
	}

	t.Run("due rows and the next one in one read", func(t *testing.T) {
		const pk = 59
		past, future := testUUID(pk, 1), testUUID(pk, 2)
		execRowAt(t, pool, pk, past, "active", "not_applicable", ms(-100), 0)
		execRowAt(t, pool, pk, future, "active", "not_applicable", ms(600_000), 0)
		// The clock the read judges by, read after the rows were written
		// (their times are relative to the database clock at their own
		// insert; a read before could be more than 100 ms older).
		now := one[int64](t, pool, "SELECT ffscan.now_ms()")
		due, next, err := postgres.ReadCandidatesNext(ctx, pool, "deadlines_passed", []uint16{pk}, 256, 100, now, scannerapi.Filter{})
		require.NoError(t, err)
		require.Len(t, due, 1)
		assert.Equal(t, past, due[0].Member)
		require.Contains(t, next, uint16(pk))
		assert.Equal(t, future, next[pk].Member)
		assert.Equal(t, one[int64](t, pool, "SELECT deadline_at_ms + 1 FROM ff_exec_core WHERE execution_id = $1", future), next[pk].AtMs)
		counts, err := postgres.CountCandidates(ctx, pool, "deadlines_passed", []uint16{pk}, 256, scannerapi.Filter{})
		require.NoError(t, err)
		assert.Equal(t, int64(1), counts[pk], "the count is of the due rows only")
	})

	t.Run("functions that are not time-scored have no next-due companion", func(t *testing.T) {
		for _, fn := range []string{"completions_undispatched", "completions_pending", "cancel_groups_pending"} {
			assert.NotContains(t, postgres.NextDueFunctions, fn)
			_, _, err := postgres.ReadCandidatesNext(ctx, pool, fn, []uint16{1}, 256, 10, 0, scannerapi.Filter{})
			assert.Error(t, err, fn)
			assert.Zero(t, one[int](t, pool, "SELECT count(*) FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace WHERE s.nspname = 'ffscan' AND proname = $1", fn+"_next"))
		}
		for fn, next := range postgres.NextDueFunctions {
			assert.True(t, postgres.CandidateFunctions[fn], fn)
			assert.Equal(t, 1, one[int](t, pool, "SELECT count(*) FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace WHERE s.nspname = 'ffscan' AND proname = $1", next), next)
			// Planned once per connection, never compiled: as the
			// candidate functions are.
			assert.ElementsMatch(t, []string{"jit=off", "plan_cache_mode=force_generic_plan"},
				one[[]string](t, pool, "SELECT proconfig FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace WHERE s.nspname = 'ffscan' AND proname = $1", next), next)
		}
		assert.Len(t, postgres.NextDueFunctions, len(postgres.CandidateFunctions)-3)
	})
}
