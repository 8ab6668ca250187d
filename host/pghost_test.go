package host

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/host/config"
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
