package host

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// The third-party example (examples/customscanner, written against the
// public API only) runs under the host as a real plugin process: it is
// configured like any scanner, reports, and after a reload to promote
// mode repairs the stuck execution in place (API v2: no new process).
func TestExampleThirdPartyScannerRunsUnderTheHost(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	vk := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.Scanners = map[string]config.Scanner{"delayed_watchdog": {
		Enabled: true, Plugin: "customscanner", Interval: 200 * time.Millisecond,
		Options: map[string]string{"max_age": "1h"},
	}}
	h, _ := running(t, cfg)

	ctx := context.Background()
	c, err := client.New(ctx, vk, client.Options{RequireStoredPartitions: true})
	require.NoError(t, err)
	res, err := c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Kind: "test", Delay: time.Hour})
	require.NoError(t, err)
	id := res.ID
	// The promoter has been down for two hours.
	past := time.Now().Add(-2 * time.Hour).UnixMilli()
	delayed := keys.FlowPart(id.Partition()).LaneDelayed("default")
	require.NoError(t, vk.Do(ctx, vk.B().Zadd().Key(delayed).ScoreMember().ScoreMember(float64(past), id.String()).Build()).Error())
	require.NoError(t, vk.Do(ctx, vk.B().Hset().Key(keys.Exec(id).Core()).FieldValue().FieldValue("delay_until", strconv.FormatInt(past, 10)).Build()).Error())

	waitFor(t, h, 30*time.Second, "", func() bool { return statusOf(h, "delayed_watchdog").Processed >= 1 })
	st := statusOf(h, "delayed_watchdog")
	assert.Equal(t, "running", st.State)
	assert.Equal(t, "1.0.0", st.Version)
	assert.Equal(t, 2, st.APIVersion)
	assert.Equal(t, "200ms", st.Interval)
	assert.Equal(t, 100, st.Batch)
	require.NotNil(t, st.Backlog)
	assert.Equal(t, int64(1), *st.Backlog)
	eligibility := func() string {
		v, _ := vk.Do(ctx, vk.B().Hget().Key(keys.Exec(id).Core()).Field("eligibility_state").Build()).ToString()
		return v
	}
	assert.Equal(t, "not_eligible_until_time", eligibility(), "report mode only looks")
	var lag float64
	mfs, err := h.Metrics().Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "ffscan_scanner_oldest_due_lag_seconds" {
			lag = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	assert.Greater(t, lag, float64(7000), "the lag gauge shows how long the stuck execution has been due")

	n := *h.Config()
	n.Scanners = map[string]config.Scanner{"delayed_watchdog": {
		Enabled: true, Plugin: "customscanner", Interval: 200 * time.Millisecond,
		Options: map[string]string{"max_age": "1h", "action": "promote"},
	}}
	rr, err := h.Reload(ctx, &n, "test")
	require.NoError(t, err)
	require.Empty(t, rr.Error)
	require.Len(t, rr.Plugins, 1)
	assert.Equal(t, "reconfigured", rr.Plugins[0].Outcome)
	assert.Equal(t, st.Pid, statusOf(h, "delayed_watchdog").Pid)
	waitFor(t, h, 30*time.Second, "promoted by the reconfigured scanner", func() bool { return eligibility() == "eligible_now" })

	// Options the scanner rejects (it wants max_age >= 1m) keep the old ones.
	n2 := n
	n2.Scanners = map[string]config.Scanner{"delayed_watchdog": {
		Enabled: true, Plugin: "customscanner", Interval: 200 * time.Millisecond,
		Options: map[string]string{"max_age": "1s", "action": "promote"},
	}}
	rr, err = h.Reload(ctx, &n2, "test")
	require.NoError(t, err)
	require.Len(t, rr.Plugins, 1)
	assert.Equal(t, "failed", rr.Plugins[0].Outcome)
	assert.Contains(t, rr.Plugins[0].Error, "max_age \"1s\": must be a duration of at least 1m")
	assert.Equal(t, "running", statusOf(h, "delayed_watchdog").State)
}
