package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// A scanner in shadow mode runs its cycles as usual but acts on nothing:
// the real lease_expiry plugin finds an expired lease, its FCALL is held
// back and recorded (status, metrics, explain say "would act
// (shadow)"), and the lease stays as it was; switched to act by a
// reload, the same plugin marks it.
func TestShadowScannerActsOnNothingAndSaysWhatItWouldDo(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Plugin: "leaseexpiry", Interval: 200 * time.Millisecond, Mode: config.ModeShadow})
	cfg.Scanners = map[string]config.Scanner{"lease_expiry": cfg.Scanners["hostwork"]}
	h, _ := running(t, cfg)

	id := leaseFor(t, c, keys.Partition{Family: keys.FamilyFlow, Index: 3}, 50*time.Millisecond)
	wouldAct := func() (uint64, string) {
		for _, s := range h.Status().Scanners {
			if s.Shadow != nil && len(s.Shadow.Latest) > 0 {
				return s.Shadow.WouldAct, s.Shadow.Latest[0].String()
			}
		}
		return 0, ""
	}
	waitFor(t, h, time.Minute, "the shadow scanner never held back a write", func() bool { n, _ := wouldAct(); return n >= 1 })
	st := h.Status().Scanners[0]
	assert.Equal(t, config.ModeShadow, st.Mode)
	_, latest := wouldAct()
	assert.True(t, strings.HasPrefix(latest, "FCALL ff_mark_lease_expired_if_due "), latest)
	assert.Contains(t, latest, keys.Exec(id).Core())
	// A few cycles later it still has not acted.
	cycle := st.Cycle
	waitFor(t, h, time.Minute, "no more cycles", func() bool { return h.Status().Scanners[0].Cycle >= cycle+3 })
	assert.Equal(t, "leased", ownership(c, id), "a shadow scanner acts on nothing")

	rep, err := h.Explain(context.Background(), id.String())
	require.NoError(t, err)
	require.Len(t, rep.Scanners, 1)
	assert.True(t, rep.Scanners[0].Shadow, "%+v", rep.Scanners[0])
	assert.Contains(t, rep.Scanners[0].Detail, "would act (shadow)")

	// Acting from now on: the same plugin marks the lease.
	next := *cfg
	next.Scanners = map[string]config.Scanner{"lease_expiry": func() config.Scanner {
		sc := cfg.Scanners["lease_expiry"]
		sc.Mode = config.ModeAct
		return sc
	}()}
	res, err := h.Reload(context.Background(), &next, "test")
	require.NoError(t, err)
	t.Logf("reload: %+v", res)
	waitFor(t, h, time.Minute, "the scanner in act mode never marked the lease", func() bool { return ownership(c, id) == "lease_expired_reclaimable" })
	t.Logf("status: %+v", h.Status().Scanners[0])
	assert.Equal(t, config.ModeAct, h.Status().Scanners[0].Mode)
}

// A session of a scanner configured in shadow mode runs in shadow mode
// whether its scanner is a plugin process or linked into the host (the
// test kits' way): a linked pg_delayed_promoter finds a due delay, its
// PGCALL is held back and recorded, and the execution stays delayed.
// Before, a linked session took the scanner's declared policy without
// the shadow and acted.
func TestShadowLinkedSessionActsOnNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := postgrestest.SchemaDB(t, 2)
	const eid = "de000000-0000-4000-8000-0000000000aa"
	_, err := db.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
		eligibility_state, public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields)
		VALUES (3, $1, 'default', 'runnable', 'unowned', 'not_eligible_until_time', 'delayed', 'pending', 1, ffscan.now_ms() - 500, '{}')`, eid)
	require.NoError(t, err)
	cfg := testConfig(t, "", config.Scanner{})
	cfg.Valkey.Addrs = nil
	cfg.Postgres.DSN = db.Config().ConnString()
	cfg.Scanners = map[string]config.Scanner{pgreconcilers.DelayedPromoterName: {Enabled: true, Mode: config.ModeShadow, Options: map[string]string{}}}
	h, err := Boot(ctx, cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	defer h.Close()
	s, err := h.OpenSession(ctx, pgreconcilers.DelayedPromoterName, SessionOptions{Linked: pgreconcilers.NewDelayedPromoter()})
	require.NoError(t, err)
	defer s.Close()

	sum, err := s.Cycle(ctx, -1)
	require.NoError(t, err)
	assert.Equal(t, 1, sum.Scanned, "the due delay was handed to the scanner")
	assert.Equal(t, int64(0), sum.Processed, "a held-back call is not work done")
	var state string
	require.NoError(t, db.QueryRow(ctx, "SELECT eligibility_state || ' ' || (deadline_at_ms IS NOT NULL) FROM ff_exec_core WHERE execution_id = $1", eid).Scan(&state))
	assert.Equal(t, "not_eligible_until_time true", state, "still delayed")
	l, ok := h.shadows.Lookup(pgreconcilers.DelayedPromoterName)
	require.True(t, ok, "the session recorded what it held back in the host's shadow log")
	snap := l.Snapshot(0)
	assert.Equal(t, uint64(1), snap.WouldAct)
	assert.Equal(t, map[string]uint64{"PGCALL promote_delayed": 1}, snap.ByCommand)
}

// An operator switches an acting scanner to shadow and back at run time
// (the console's and `ffscan scanners shadow|act`'s action): in shadow
// its writes are held back, and status says who switched it.
func TestOperatorSwitchesAScannerToShadowAndBack(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Plugin: "leaseexpiry", Interval: 200 * time.Millisecond})
	cfg.Scanners = map[string]config.Scanner{"lease_expiry": cfg.Scanners["hostwork"]}
	h, _ := running(t, cfg)
	ctx := context.Background()
	st := func() httpapi.ScannerStatus { return h.Status().Scanners[0] }
	waitFor(t, h, time.Minute, "lease_expiry never ran", func() bool { return st().Cycle >= 1 })

	res, err := h.SetScannerMode(ctx, "lease_expiry", config.ModeShadow, "test")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	waitFor(t, h, time.Minute, "never in shadow", func() bool { return st().Mode == config.ModeShadow && st().State == "running" })
	assert.Contains(t, st().Override, "in mode shadow by an operator")
	id := leaseFor(t, c, keys.Partition{Family: keys.FamilyFlow, Index: 5}, 50*time.Millisecond)
	waitFor(t, h, time.Minute, "the write was never held back", func() bool { s := st().Shadow; return s != nil && s.WouldAct >= 1 })
	cycle := st().Cycle
	waitFor(t, h, time.Minute, "no more cycles", func() bool { return st().Cycle >= cycle+2 })
	assert.Equal(t, "leased", ownership(c, id), "in shadow it acts on nothing")

	_, err = h.SetScannerMode(ctx, "lease_expiry", "loud", "test")
	assert.ErrorIs(t, err, httpapi.ErrBadRequest)
	_, err = h.SetScannerMode(ctx, "nope", config.ModeAct, "test")
	assert.ErrorIs(t, err, httpapi.ErrNotFound)

	res, err = h.SetScannerMode(ctx, "lease_expiry", config.ModeAct, "test")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	waitFor(t, h, time.Minute, "never marked once acting", func() bool { return ownership(c, id) == "lease_expired_reclaimable" })
	assert.Equal(t, config.ModeAct, st().Mode)
}
