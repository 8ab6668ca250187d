package host

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/bench/seed"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// These tests run the real lease_expiry plugin with new-key events on and
// lose events on purpose: the servers stop publishing them (CONFIG SET
// notify-keyspace-events "") while leases are planted in partitions the
// host knows empty, then the events' feed has a gap (its subscriber's
// connection dropped, the server restarted, a master failed over). The
// safety interval is an hour, so a lease marked within the test's wait was
// found by the read of every partition that follows a gap, not by the
// safety interval: nothing planted while the events were lost is lost.

// eventsSafety is the tests' safety interval: far longer than any wait
// of theirs.
const eventsSafety = time.Hour

// eventsLeaseHost runs a host with the lease_expiry plugin and the
// servers' new-key events on (the host may set them), and returns once
// every flow partition was read empty and is skipped until an event names
// one of its keys.
func eventsLeaseHost(t *testing.T, addr string, cluster bool) *Host {
	t.Helper()
	cfg := testConfig(t, addr, config.Scanner{Plugin: "leaseexpiry", Interval: failoverInterval})
	if cluster {
		cfg.Valkey.Cluster = "auto"
	}
	cfg.Scanners = map[string]config.Scanner{"lease_expiry": cfg.Scanners["hostwork"]}
	cfg.KeyEvents = config.KeyEvents{Mode: "auto", Configure: true, SafetyInterval: eventsSafety}
	h, _ := running(t, cfg)
	waitFor(t, h, 60*time.Second, "every flow partition quiet with the events on", func() bool {
		return eventsOn(h) && leaseQuiet(h) == 16
	})
	return h
}

func eventsOn(h *Host) bool {
	st := h.Status().KeyEvents
	return st != nil && st.On
}

func eventsGen(h *Host) uint64 {
	if st := h.Status().KeyEvents; st != nil {
		return st.Generation
	}
	return 0
}

func leaseQuiet(h *Host) int {
	for _, s := range h.Status().Scanners {
		if s.Name == "lease_expiry" {
			return s.Quiet
		}
	}
	return -1
}

// silence makes the server at c stop publishing new-key events.
func silence(t *testing.T, c valkey.Client) {
	t.Helper()
	require.NoError(t, c.Do(context.Background(), c.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "").Build()).Error())
}

// plantExpiring creates n executions over the 16 flow partitions, leased
// for 200 ms.
func plantExpiring(t *testing.T, c valkey.Client, n int) []keys.ExecutionID {
	t.Helper()
	ctx := context.Background()
	for p := 0; p < 16; p++ {
		require.NoError(t, c.Do(ctx, c.B().Exists().Key(fmt.Sprintf("{fp:%d}", p)).Build()).Error())
	}
	lib := lua.New(c, lua.Options{})
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	s := seed.New(lib, keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4})
	ids := s.IDs(n)
	require.NoError(t, s.Prepare(ctx, ids))
	require.NoError(t, s.Claim(ctx, ids, func(int) time.Duration { return 200 * time.Millisecond }))
	return ids
}

// The feed's subscriber connection is dropped after leases were planted
// without events: the gap makes every partition be read again, and every
// lease is marked.
func TestKeyEventsSubscriberDroppedNothingLost(t *testing.T) {
	srv := testserver.New(t)
	c := srv.Client(t)
	h := eventsLeaseHost(t, srv.Addr, false)
	silence(t, c)
	ids := plantExpiring(t, c, 400)
	gen := eventsGen(h)
	killed, err := c.Do(context.Background(), c.B().ClientKill().TypePubsub().Build()).AsInt64()
	require.NoError(t, err)
	require.Positive(t, killed)
	took := waitAllMarked(t, h, c, ids, 60*time.Second)
	require.Greater(t, eventsGen(h), gen, "the feed had a gap")
	t.Logf("subscriber dropped: all %d leases planted without events marked %s after the drop", len(ids), took.Round(time.Millisecond))
	// The host set the events again when it subscribed anew.
	waitFor(t, h, 60*time.Second, "events on again", func() bool { return eventsOn(h) })
}

// The server restarts (its dataset saved, the setting made with CONFIG
// SET gone) after leases were planted without events: every lease is
// marked.
func TestKeyEventsServerRestartedNothingLost(t *testing.T) {
	srv := testserver.New(t)
	c := srv.Client(t)
	h := eventsLeaseHost(t, srv.Addr, false)
	silence(t, c)
	ids := plantExpiring(t, c, 400)
	gen := eventsGen(h)
	require.NoError(t, c.Do(context.Background(), c.B().Save().Build()).Error())
	require.NoError(t, srv.Restart())
	took := waitAllMarked(t, h, c, ids, 60*time.Second)
	require.Greater(t, eventsGen(h), gen, "the feed had a gap")
	t.Logf("server restarted: all %d leases planted without events marked %s after the restart", len(ids), took.Round(time.Millisecond))
	waitFor(t, h, 60*time.Second, "events on again", func() bool { return eventsOn(h) })
}

// A master that stopped publishing events fails over (killed) after
// leases were planted on it: its replica, promoted, serves them, and
// every lease is marked.
func TestKeyEventsMasterFailedOverNothingLost(t *testing.T) {
	cl := testserver.NewClusterWith(t, testserver.ClusterOptions{Masters: 3, Replicas: 1})
	c := cl.Client(t)
	h := eventsLeaseHost(t, cl.Nodes[0].Addr, true)
	victim, err := cl.MasterOf(context.Background(), "{fp:5}")
	require.NoError(t, err)
	require.NotEqual(t, cl.Nodes[0], victim, "the seed is the subject of another test")
	silence(t, victim.Direct(t))
	ids := plantExpiring(t, c, 800)
	onVictim := onMaster(t, cl, victim, ids)
	require.NotEmpty(t, onVictim)
	syncReplicas(t, cl)
	gen := eventsGen(h)
	victim.Kill()
	t0 := time.Now()
	waitAllMarked(t, h, c, ids, 60*time.Second)
	require.Greater(t, eventsGen(h), gen, "the feed had a gap")
	t.Logf("master failed over: all %d leases marked (%d on the victim, planted without events) %s after the kill", len(ids), len(onVictim), time.Since(t0).Round(time.Millisecond))
}
