package host

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
)

// Canaries hold for the Postgres reconcilers as they do for the Valkey
// scanners: a Postgres-only host runs pg_lease_expiry and
// pg_delayed_promoter from the pgreconcilers plugin, swapped through a
// canary; a build of the same code with another digest (symbols
// stripped), started as a canary of each, decides on the planted lapsed
// leases and due delays exactly as the running version does (the same
// PGCALL on the same arguments, item by item), while only the running
// version acts. Promoted, it serves; aborted, the running process serves
// on, every cycle, as before.
func TestCanaryOnPostgresReconcilers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Now()
	const (
		leases = pgreconcilers.LeaseExpiryName
		delays = pgreconcilers.DelayedPromoterName
	)
	sc := pgScanner()
	sc.Swap = config.SwapCanary
	h, cfg, db := pgReconcilerHost(t, sc, sc, func(c *config.Config) {
		c.Watch.Plugins = false // canaries started by hand: both scanners share one file
		c.Supervisor.SwapProbation = 0
	})
	status := func(name string) httpapi.ScannerStatus { return statusOf(h, name) }
	t.Logf("%v: both running, every flow partition owned", time.Since(t0))
	oldSHA := fileSHA(t, variant("pgreconcilers"))
	newSHA := fileSHA(t, variant("pgreconcilers-stripped"))
	require.NotEqual(t, oldSHA, newSHA, "the stripped build has another digest")
	before := map[string]httpapi.ScannerStatus{leases: status(leases), delays: status(delays)}
	for _, n := range []string{leases, delays} {
		require.Equal(t, oldSHA, before[n].SHA256, n)
	}

	// (1) The stripped build installed (no watch), a canary of it
	// started by hand for each scanner.
	install(t, cfg.PluginDir, "pgreconcilers", variant("pgreconcilers-stripped"))
	for _, n := range []string{leases, delays} {
		res, err := h.Canary(ctx, n, httpapi.CanaryStart, "test")
		require.NoError(t, err, n)
		require.Empty(t, res.Error, n)
		require.Equal(t, canary.Comparing, res.Canary.State, n)
		assert.Equal(t, newSHA, res.Canary.To.SHA256, n)
		assert.Equal(t, oldSHA, res.Canary.From.SHA256, n)
	}

	// (2) The planting: lapsed leases on executions that are not active
	// (one whose execution is gone) and due delays. Each scanner's rows
	// are committed just after one of its cycles ended, so that no
	// cycle can read them between the canary's read and the running
	// version's (which would make a difference of the planting, not of
	// the builds).
	type planted struct {
		pk   uint16
		uuid string
	}
	stale := []planted{
		{1, "5a000000-0000-4000-8000-000000000001"}, {1, "5a000000-0000-4000-8000-000000000002"},
		{6, "5a000000-0000-4000-8000-000000000003"}, {9, "5a000000-0000-4000-8000-000000000004"},
		{14, "5a000000-0000-4000-8000-000000000005"}, // its execution is gone
	}
	due := []planted{
		{0, "de000000-0000-4000-8000-000000000001"}, {6, "de000000-0000-4000-8000-000000000002"},
		{11, "de000000-0000-4000-8000-000000000003"}, {15, "de000000-0000-4000-8000-000000000004"},
	}
	const raw = `'{"namespace": "ns-canary", "tags": {"cairn.instance_id": "i-canary"}}'`
	execRow := func(p planted, phase, eligibility, public, deadline string) string {
		return fmt.Sprintf(`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
			eligibility_state, public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields)
			VALUES (%d, '%s', 'default', '%s', 'unowned', '%s', '%s', 'pending', 1, %s, %s)`, p.pk, p.uuid, phase, eligibility, public, deadline, raw)
	}
	var leaseRows, delayRows []string
	for i, p := range stale {
		if i < len(stale)-1 {
			leaseRows = append(leaseRows, execRow(p, "terminal", "not_applicable", "completed", "NULL"))
		}
		leaseRows = append(leaseRows, fmt.Sprintf(`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id,
			worker_instance_id, lease_epoch, lease_expires_at_ms, started_at_ms) VALUES (%d, '%s', 0, 'w', 'w-1', 3, ffscan.now_ms() - 1000, 1)`, p.pk, p.uuid))
	}
	for _, p := range due {
		delayRows = append(delayRows, execRow(p, "runnable", "not_eligible_until_time", "delayed", "ffscan.now_ms() - 500"))
	}
	plantAfterCycle := func(name string, rows []string) {
		t.Helper()
		// Prepared in a transaction, committed once a cycle ended.
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // nothing once committed
		for _, s := range rows {
			_, err := tx.Exec(ctx, s)
			require.NoError(t, err, s)
		}
		c0 := status(name).Canary.Cycles
		waitFor(t, h, time.Minute, name+": no canary cycle ended", func() bool { return status(name).Canary.Cycles > c0 })
		require.NoError(t, tx.Commit(ctx))
	}
	plantAfterCycle(leases, leaseRows)
	plantAfterCycle(delays, delayRows)
	c0 := map[string]uint64{leases: status(leases).Canary.Cycles, delays: status(delays).Canary.Cycles}
	t.Logf("%v: planted %d lapsed leases and %d due delays", time.Since(t0), len(stale), len(due))

	// (3) Acted on by the running versions; three canary cycles since.
	want := map[string]int{leases: len(stale), delays: len(due)}
	waitFor(t, h, 3*time.Minute, "the planted items acted on, each canary compared three cycles since", func() bool {
		for _, n := range []string{leases, delays} {
			st := status(n)
			if st.Processed < int64(want[n]) || st.Canary == nil || st.Canary.Cycles < c0[n]+3 {
				return false
			}
		}
		return true
	})
	t.Logf("%v: acted on, three canary cycles since", time.Since(t0))
	for _, n := range []string{leases, delays} {
		st := status(n)
		cs := st.Canary
		t.Logf("%s canary: %+v", n, *cs)
		assert.Equal(t, canary.Comparing, cs.State, "%s: promote_after 0, only an operator promotes", n)
		assert.GreaterOrEqual(t, cs.Cycles, uint64(3), n)
		assert.GreaterOrEqual(t, cs.Items["same"], uint64(want[n]), "%s: both decided the same on every planted item", n)
		assert.Zero(t, cs.Items[canary.OnlyNew], n)
		assert.Zero(t, cs.Items[canary.OnlyOld], n)
		assert.Zero(t, cs.Items[canary.Differ], n)
		assert.Zero(t, cs.WithDifference, n)
		assert.Empty(t, cs.Latest, n)
		assert.Equal(t, int64(want[n]), st.Processed, "%s: each planted item acted on once, by the running version", n)
		assert.Equal(t, before[n].Pid, st.Pid, "%s: the running process is the one from before the canary", n)
		assert.Equal(t, oldSHA, st.SHA256, n)
	}

	// (4) pg_lease_expiry's canary promoted: the stripped build serves.
	res, err := h.Canary(ctx, leases, httpapi.CanaryPromote, "test")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	assert.Equal(t, canary.Promoted, res.Canary.State)
	waitFor(t, h, time.Minute, "pg_lease_expiry never ran the promoted build", func() bool {
		st := status(leases)
		return st.SHA256 == newSHA && st.State == "running"
	})
	promoted := status(leases)
	assert.Equal(t, canary.Promoted, promoted.Canary.State)
	assert.NotEqual(t, before[leases].Pid, promoted.Pid)

	// pg_delayed_promoter's aborted: the running process serves on.
	res, err = h.Canary(ctx, delays, httpapi.CanaryAbort, "test")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	assert.Equal(t, canary.Aborted, res.Canary.State)
	c1 := map[string]uint64{leases: status(leases).Cycle, delays: status(delays).Cycle}
	waitFor(t, h, time.Minute, "cycles stopped after the promotion and the abort", func() bool {
		return status(leases).Cycle >= c1[leases]+3 && status(delays).Cycle >= c1[delays]+3
	})
	t.Logf("%v: promoted, aborted, three cycles since", time.Since(t0))
	after := status(delays)
	assert.Equal(t, canary.Aborted, after.Canary.State)
	assert.Equal(t, before[delays].Pid, after.Pid, "the running process never changed")
	assert.Equal(t, oldSHA, after.SHA256)
	for _, n := range []string{leases, delays} {
		st := status(n)
		assert.Zero(t, st.FailedPartitions, "%s: no cycle failed", n)
		assert.Zero(t, st.Errors, n)
		assert.Equal(t, int64(want[n]), st.Processed, "%s: nothing acted on twice", n)
	}
	_, rejected := h.units.CanaryRejected(delays, newSHA)
	assert.True(t, rejected, "the aborted digest is not started again for pg_delayed_promoter")
}
