package host

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// expiredEvents counts the "expired" entries of an execution's lease
// history: one per marking.
func expiredEvents(t *testing.T, c valkey.Client, id keys.ExecutionID) int {
	t.Helper()
	entries, err := c.Do(context.Background(), c.B().Xrange().Key(keys.Exec(id).LeaseHistory()).Start("-").End("+").Build()).AsXRange()
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		if e.FieldValues["event"] == "expired" {
			n++
		}
	}
	return n
}

// A clock step's worth of lapsed leases (every live lease made expired at
// once): lease_expiry acts on them up to its action budget and pauses
// itself; the pause shows in status, the console and explain, and its
// alert fires on a real Prometheus; the leases past the budget wait in
// the store; after a resume every one is handled, none twice.
func TestLeaseExpiryPausesAtItsActionBudget(t *testing.T) {
	t.Parallel()
	prom := prometheusBin(t)
	srv := testserver.New(t)
	c := srv.Client(t)
	const budget, batch, leases = 10, 5, 40
	cfg := testConfig(t, srv.Addr, config.Scanner{Plugin: "leaseexpiry", Interval: 200 * time.Millisecond, Batch: batch,
		ActionBudget: &config.ActionBudget{Window: time.Hour, Max: budget}})
	cfg.Scanners = map[string]config.Scanner{"lease_expiry": cfg.Scanners["hostwork"]}
	cfg.Scheduler.Concurrency = 1
	cfg.HTTP.Listen = proctest.FreeAddr(t)
	cfg.Watch.Plugins = false
	h, _ := running(t, cfg)
	promAddr, poll := startPrometheus(t, prom, cfg.HTTP.Listen)
	st := func() httpapi.ScannerStatus { return h.Status().Scanners[0] }
	waitFor(t, h, time.Minute, "lease_expiry never ran", func() bool { return st().Cycle >= 1 })
	assert.Equal(t, "10 per 1h0m0s", st().ActionBudget)

	// Live leases, an hour long; then the clock step: every one lapsed.
	var ids []keys.ExecutionID
	for i := range leases {
		ids = append(ids, leaseFor(t, c, keys.Partition{Family: keys.FamilyFlow, Index: uint16(i % 16)}, time.Hour))
	}
	tm, err := c.Do(context.Background(), c.B().Time().Build()).AsStrSlice()
	require.NoError(t, err)
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	past := strconv.FormatInt(sec*1000-1000, 10)
	for _, id := range ids {
		require.NoError(t, c.Do(context.Background(), c.B().Hset().Key(keys.Exec(id).Core()).FieldValue().FieldValue("lease_expires_at", past).Build()).Error())
		require.NoError(t, c.Do(context.Background(), c.B().Zadd().Key(keys.FlowPart(id.Partition()).LeaseExpiry()).ScoreMember().ScoreMember(float64(sec*1000-1000), id.String()).Build()).Error())
	}

	waitFor(t, h, time.Minute, "lease_expiry never paused at its budget", func() bool { return st().Paused != nil })
	p := st().Paused
	t.Logf("paused: %+v", *p)
	assert.Greater(t, p.Acted, int64(budget))
	assert.LessOrEqual(t, p.Acted, int64(budget+batch), "at most one call's batch past the budget (one call at a time)")
	assert.Contains(t, p.Reason, fmt.Sprintf("over its budget of %d", budget))
	marked := func() int {
		n := 0
		for _, id := range ids {
			if ownership(c, id) == "lease_expired_reclaimable" {
				n++
			}
		}
		return n
	}
	assert.Equal(t, int(p.Acted), marked(), "what it acted on before pausing")
	assert.Less(t, marked(), leases, "the rest waits in the store")

	// The alert fires; the console shows the pause and its figures;
	// explain says a waiting lease will be acted on once resumed.
	poll("FFScanScannerPausedAtBudget fires", 3*time.Minute, func() (bool, string) {
		res, err := promQuery(promAddr, `ALERTS{alertname="FFScanScannerPausedAtBudget",alertstate="firing",scanner="lease_expiry"}`)
		if err != nil {
			return false, err.Error()
		}
		return len(res) == 1, fmt.Sprintf("%d firing", len(res))
	})
	resp, err := http.Get("http://" + cfg.HTTP.Listen + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), "paused: action budget")
	assert.Contains(t, string(body), fmt.Sprintf("acted on <b>%d</b> of", p.Acted))
	assert.Contains(t, string(body), `data-action="resume"`)
	var waiting keys.ExecutionID
	for _, id := range ids {
		if ownership(c, id) != "lease_expired_reclaimable" {
			waiting = id
			break
		}
	}
	rep, err := h.Explain(context.Background(), waiting.String())
	require.NoError(t, err)
	require.Len(t, rep.Scanners, 1)
	assert.True(t, rep.Scanners[0].Paused, "%+v", rep.Scanners[0])
	assert.Contains(t, rep.Scanners[0].Detail, "would act once resumed (paused: action budget")
	// The alert took scrapes and evaluations: all that time paused, it
	// acted on nothing more.
	assert.Equal(t, int(p.Acted), marked(), "nothing acted on while paused")

	// Resume (the operator's action): every lease is handled, none twice.
	res, err := h.ResumeScanner(context.Background(), "lease_expiry", "test")
	require.NoError(t, err)
	assert.True(t, res.Resumed)
	// The window starts afresh: 30 more is past the budget again, so it
	// pauses again after the next budget's worth; resume until done.
	for marked() < leases {
		waitFor(t, h, time.Minute, "no progress after the resume", func() bool { return marked() == leases || st().Paused != nil })
		if st().Paused != nil {
			_, err := h.ResumeScanner(context.Background(), "lease_expiry", "test")
			require.NoError(t, err)
		}
	}
	for _, id := range ids {
		assert.Equal(t, 1, expiredEvents(t, c, id), "%s marked once", id)
	}
	// The store says every lease is marked once; the scanner's count
	// follows at its cycle's end, after the writes it counts.
	waitFor(t, h, time.Minute, "the scanner never counted its last cycle", func() bool { return st().Processed >= int64(leases) })
	assert.Equal(t, int64(leases), st().Processed, "each lease acted on once")
	assert.True(t, strings.HasPrefix(st().State, "running"))
}
