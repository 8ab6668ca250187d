package host

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
)

// pgScanner is a Postgres reconciler of the pgreconcilers plugin, every
// 250 ms, acting.
func pgScanner() config.Scanner {
	return config.Scanner{Enabled: true, Plugin: "pgreconcilers", Interval: 250 * time.Millisecond, Mode: config.ModeAct, Options: map[string]string{}}
}

// pgReconcilerHost runs a Postgres-only host (its own database and
// plugin directory) with pg_lease_expiry and pg_delayed_promoter as
// leases and delays say, tune changing the rest of its configuration,
// and waits until both run and the host owns every flow partition, so
// that every cycle counted afterwards reads every partition.
func pgReconcilerHost(t *testing.T, leases, delays config.Scanner, tune func(*config.Config)) (*Host, *config.Config, *pgxpool.Pool) {
	t.Helper()
	db := postgrestest.SchemaDB(t, 4)
	cfg := testConfig(t, "", config.Scanner{})
	cfg.Valkey.Addrs = nil
	cfg.Postgres.DSN = db.Config().ConnString()
	cfg.PluginDir = ownPluginDir(t)
	copyFile(t, variant("pgreconcilers"), filepath.Join(cfg.PluginDir, "pgreconcilers"))
	cfg.Scanners = map[string]config.Scanner{pgreconcilers.LeaseExpiryName: leases, pgreconcilers.DelayedPromoterName: delays}
	// These tests relaunch the plugin (a mode change, a canary) and are
	// about what it does once running, not how fast it starts: a
	// race-built pgreconcilers on a 2-core machine at a load of 24 took
	// longer than the 10 s default to start, the relaunch was refused and
	// the test waited for a mode that never came. The start bound has
	// tests of its own (supervisor, launch).
	cfg.Supervisor.StartTimeout = time.Minute
	if tune != nil {
		tune(cfg)
	}
	h, _ := running(t, cfg)
	waitFor(t, h, 3*time.Minute, "both reconcilers running, every flow partition owned", func() bool {
		sh := h.Status().Sharing
		if sh == nil || sh.Owned["flow"] != 16 {
			return false
		}
		for _, n := range []string{pgreconcilers.LeaseExpiryName, pgreconcilers.DelayedPromoterName} {
			if st := statusOf(h, n); st.State != "running" || st.Cycle < 1 || st.Mode != cfg.Scanners[n].Mode {
				return false
			}
		}
		return true
	})
	return h, cfg, db
}

// A Postgres host runs its candidate reads on connections of their own,
// one per candidate function (postgres.Readers): the reads of each
// scanner's function run on one connection named "ffscan reads", never on
// the serving pool's.
func TestPostgresHostReadsEachCandidateFunctionOnOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, _, db := pgReconcilerHost(t, pgScanner(), pgScanner(), nil)
	require.NotNil(t, h.Status().Postgres)
	assert.Equal(t, postgres.MaxReaderConnections, h.Status().Postgres.ReadConnections, "the status says how many")
	// Two more cycles of each scanner from here: each has read since.
	want := map[string]uint64{}
	for _, n := range []string{pgreconcilers.LeaseExpiryName, pgreconcilers.DelayedPromoterName} {
		want[n] = statusOf(h, n).Cycle + 2
	}
	waitFor(t, h, time.Minute, "two more cycles of each", func() bool {
		for n, c := range want {
			if statusOf(h, n).Cycle < c {
				return false
			}
		}
		return true
	})
	var readers int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'ffscan reads'").Scan(&readers))
	assert.Equal(t, postgres.MaxReaderConnections, readers, "one connection per candidate function")
	// pg_lease_expiry reads stale_leases, pg_delayed_promoter delays_due.
	for _, fn := range []string{"stale_leases", "delays_due"} {
		// The last statement of each session whose last statement was a
		// read of fn, or the clock read that follows it in the same
		// round trip (the warm-up's count(*) aside).
		rows, err := db.Query(ctx, `SELECT application_name FROM pg_stat_activity WHERE datname = current_database()
			AND (query LIKE '%FROM ffscan.' || $1 || '(%' OR query = 'SELECT ffscan.now_ms() /* after ' || $1 || ' */')
			AND query NOT LIKE 'SELECT count(*)%'`, fn)
		require.NoError(t, err)
		var apps []string
		for rows.Next() {
			var app string
			require.NoError(t, rows.Scan(&app))
			apps = append(apps, app)
		}
		require.NoError(t, rows.Err())
		assert.Equal(t, []string{"ffscan reads"}, apps, "%s: read on one reader connection", fn)
	}
}

// A Postgres host runs its scanners' actions within its action slots, its
// part of postgres.shared_transactions: with every slot taken, a lapsed
// lease's release waits at the slots, nothing written, and goes through
// once they are given back. A second host on the database halves each
// host's part, so that the two run about as many action transactions at
// once as one did.
func TestPostgresHostsDivideTheirActionTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const (
		pk   = 5
		uuid = "a0d17000-0000-4000-8000-0000000005a7"
	)
	h, cfg, db := pgReconcilerHost(t, pgScanner(), pgScanner(), func(c *config.Config) {
		c.Postgres.SharedTransactions = 4
		c.Watch.Plugins = false
	})
	st := h.Status().Postgres
	require.NotNil(t, st)
	assert.Equal(t, 4, st.SharedTransactions)
	assert.Equal(t, 4, st.ActionSlots, "one host runs the whole budget")

	var held []func()
	for range 4 {
		release, err := h.pgSlots.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, release)
	}
	// A lapsed lease on a terminal execution: pg_lease_expiry releases it
	// (release_stale_lease), a PGCALL that needs a slot.
	plantStaleLease(t, db, pk, uuid)
	attempt := func() string {
		var row string
		require.NoError(t, db.QueryRow(ctx, "SELECT a::text FROM ff_attempt a WHERE partition_key = $1 AND execution_id = $2", pk, uuid).Scan(&row))
		return row
	}
	planted := attempt()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, h.pgSlots.WaitForWaiters(wctx, 1), "the release never reached the slots")
	assert.Equal(t, planted, attempt(), "nothing written while every slot is taken")
	for _, release := range held {
		release()
	}
	waitFor(t, h, time.Minute, "the lease released once the slots came back", func() bool { return attempt() != planted })

	// A second host on the same database: the partitions divided, each
	// host's slots are its share of the 4.
	cfg2 := *cfg
	cfg2.PluginDir = ownPluginDir(t)
	copyFile(t, variant("pgreconcilers"), filepath.Join(cfg2.PluginDir, "pgreconcilers"))
	h2, _ := running(t, &cfg2)
	all := cfg.Partitions.Flow + cfg.Partitions.Budget + cfg.Partitions.Quota
	divided := func() bool {
		slots := 0
		for _, x := range []*Host{h, h2} {
			sh, pg := x.Status().Sharing, x.Status().Postgres
			if sh == nil || len(sh.Hosts) != 2 || pg == nil {
				return false
			}
			owned := sh.Owned["flow"] + sh.Owned["budget"] + sh.Owned["quota"]
			if owned == 0 || owned == int(all) || pg.ActionSlots != postgres.SlotsFor(4, owned, int(all)) {
				return false
			}
			slots += pg.ActionSlots
		}
		return slots <= 5
	}
	waitFor(t, h, 2*time.Minute, "the two hosts' slots divided by their shares", divided)
	for _, x := range []*Host{h, h2} {
		assert.Less(t, x.Status().Postgres.ActionSlots, 4, "a host of two runs part of the budget")
	}
}

// plantStaleLease plants a lapsed lease (expired a second ago, epoch 3)
// on a terminal execution of partition pk: pg_lease_expiry releases it
// (release_stale_lease).
func plantStaleLease(t *testing.T, db *pgxpool.Pool, pk int, uuid string) {
	t.Helper()
	for _, s := range []string{
		`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
			eligibility_state, public_state, attempt_state, created_at_ms) VALUES ($1, $2, 'default', 'terminal', 'unowned',
			'not_applicable', 'completed', 'pending', 1)`,
		`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch,
			lease_expires_at_ms, started_at_ms) VALUES ($1, $2, 0, 'w', 'w-1', 3, ffscan.now_ms() - 1000, 1)`,
	} {
		_, err := db.Exec(context.Background(), s, pk, uuid)
		require.NoError(t, err, s)
	}
}
