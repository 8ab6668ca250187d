package host

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
)

// Action budgets hold for the Postgres reconcilers as they do for the
// Valkey scanners: a Postgres-only host runs pg_lease_expiry (a budget of
// 3 an hour, a batch of 2, one call at a time) beside pg_delayed_promoter
// (no budget: its cycles are the test's clock). Ten lapsed leases planted
// at once: pg_lease_expiry releases them up to its budget and pauses
// itself, having released exactly what its pause says it acted on (at
// most one batch past the budget); paused, it releases nothing more while
// the other reconciler goes on cycling; resumed (each resume allows
// another budget's worth), it releases the rest, each lease once, with
// one lease event each.
func TestPostgresReconcilerPausesAtItsActionBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Now()
	const (
		leases = pgreconcilers.LeaseExpiryName
		delays = pgreconcilers.DelayedPromoterName
		budget = 3
		batch  = 2
		n      = 10
	)
	lsc := pgScanner()
	lsc.Batch = batch
	lsc.ActionBudget = &config.ActionBudget{Window: time.Hour, Max: budget}
	h, _, db := pgReconcilerHost(t, lsc, pgScanner(), func(c *config.Config) {
		c.Watch.Plugins = false
		c.Scheduler.Concurrency = 1
	})
	status := func(name string) httpapi.ScannerStatus { return statusOf(h, name) }
	t.Logf("%v: both running, every flow partition owned", time.Since(t0))
	assert.Equal(t, "3 per 1h0m0s", status(leases).ActionBudget)
	assert.Equal(t, "off", status(delays).ActionBudget, "no budget for the delayed promoter")
	require.Nil(t, status(leases).Paused)

	// The planting, in one transaction: ten lapsed leases on terminal
	// executions, five in each of two partitions (more than a batch in
	// each, so that calls come back for the rest).
	const raw = `'{"namespace": "ns-budget", "tags": {"cairn.instance_id": "i-budget"}}'`
	var uuids []string
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // nothing once committed
	for i := range n {
		pk := []int{3, 9}[i%2]
		u := fmt.Sprintf("b0000000-0000-4000-8000-%012d", i+1)
		uuids = append(uuids, u)
		for _, s := range []string{
			fmt.Sprintf(`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
				eligibility_state, public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields)
				VALUES (%d, '%s', 'default', 'terminal', 'unowned', 'not_applicable', 'completed', 'pending', 1, NULL, %s)`, pk, u, raw),
			fmt.Sprintf(`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch,
				lease_expires_at_ms, started_at_ms) VALUES (%d, '%s', 0, 'w', 'w-1', 3, ffscan.now_ms() - 1000, 1)`, pk, u),
		} {
			_, err := tx.Exec(ctx, s)
			require.NoError(t, err, s)
		}
	}
	require.NoError(t, tx.Commit(ctx))
	t.Logf("%v: planted %d lapsed leases", time.Since(t0), n)

	// released counts the planted attempts released and fenced
	// (release_stale_lease); waiting, those whose lapsed lease is still
	// there.
	count := func(where string) int {
		var c int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM ff_attempt WHERE execution_id = ANY($1::uuid[]) AND `+where, uuids).Scan(&c))
		return c
	}
	released := func() int {
		return count(`outcome = 'lease_expired_reclaimable' AND lease_expires_at_ms IS NULL AND lease_epoch = 4 AND worker_instance_id IS NULL`)
	}
	waiting := func() int { return count(`lease_expires_at_ms IS NOT NULL AND lease_epoch = 3`) }

	waitFor(t, h, time.Minute, "pg_lease_expiry never paused at its budget", func() bool { return status(leases).Paused != nil })
	p := *status(leases).Paused
	t.Logf("%v: paused: %+v", time.Since(t0), p)
	assert.Greater(t, p.Acted, int64(budget))
	assert.LessOrEqual(t, p.Acted, int64(budget+batch), "at most one call's batch past the budget (one call at a time)")
	assert.Contains(t, p.Reason, fmt.Sprintf("over its budget of %d", budget))
	assert.Equal(t, int64(budget), p.Max)
	assert.Equal(t, int(p.Acted), released(), "released what it acted on before pausing")
	assert.Equal(t, n-int(p.Acted), waiting(), "the rest waits in the database")

	// Paused: three more full cycles of the other reconciler, and
	// nothing more released.
	c0 := status(delays).Cycle
	waitFor(t, h, time.Minute, "pg_delayed_promoter cycling on", func() bool { return status(delays).Cycle >= c0+3 })
	st := status(leases)
	require.NotNil(t, st.Paused, "still paused")
	assert.Equal(t, p.Acted, st.Paused.Acted)
	assert.Equal(t, int(p.Acted), released(), "nothing released while paused")
	assert.Equal(t, n-int(p.Acted), waiting())
	assert.Equal(t, p.Acted, st.Processed, "nothing acted on while paused")

	// Resume until done: each resume starts the window afresh, so it
	// pauses again after another budget's worth.
	resumes := 0
	for released() < n {
		if status(leases).Paused != nil {
			res, err := h.ResumeScanner(ctx, leases, "test")
			require.NoError(t, err)
			require.True(t, res.Resumed)
			resumes++
			require.LessOrEqual(t, resumes, n, "no progress after resuming")
		}
		waitFor(t, h, time.Minute, "no progress after the resume", func() bool {
			return released() == n || status(leases).Paused != nil
		})
	}
	t.Logf("%v: all released after %d resumes", time.Since(t0), resumes)
	waitFor(t, h, time.Minute, "the last release counted", func() bool { return status(leases).Processed >= n })
	// Two more full cycles of the other reconciler: nothing more done.
	c1 := status(delays).Cycle
	waitFor(t, h, time.Minute, "pg_delayed_promoter cycling on", func() bool { return status(delays).Cycle >= c1+3 })
	assert.Equal(t, n, released(), "every planted lease released and fenced once")
	assert.Zero(t, waiting())
	assert.Equal(t, int64(n), status(leases).Processed, "each lease acted on once")
	assert.True(t, strings.HasPrefix(status(leases).State, "running"), status(leases).State)

	// One "expired" lease event per planted attempt, no other.
	rows, err := db.Query(ctx, `SELECT execution_id::text, event_type, count(*) FROM ff_lease_event GROUP BY 1, 2`)
	require.NoError(t, err)
	events := map[string]int{}
	for rows.Next() {
		var id, typ string
		var c int
		require.NoError(t, rows.Scan(&id, &typ, &c))
		events[id+" "+typ] = c
	}
	require.NoError(t, rows.Err())
	want := map[string]int{}
	for _, u := range uuids {
		want[u+" expired"] = 1
	}
	assert.Equal(t, want, events, "one lease event per released lease")
}
