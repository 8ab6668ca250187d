package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
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
