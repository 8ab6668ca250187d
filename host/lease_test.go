package host

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// fcall runs one library function and requires a success reply.
func fcall(t *testing.T, c valkey.Client, fn string, ks []string, args ...string) []string {
	t.Helper()
	cmd := c.B().Fcall().Function(fn).Numkeys(int64(len(ks))).Key(ks...).Arg(args...).Build()
	out, err := c.Do(context.Background(), cmd).ToArray()
	require.NoError(t, err, fn)
	var fields []string
	for _, m := range out {
		s, _ := m.ToString()
		if s == "" {
			n, _ := m.AsInt64()
			s = strconv.FormatInt(n, 10)
		}
		fields = append(fields, s)
	}
	require.Equal(t, "1", fields[0], "%s: %v", fn, fields)
	return fields
}

// leaseFor creates an execution in part and claims it with a lease of ttl,
// through the library's own functions (as a worker would).
func leaseFor(t *testing.T, c valkey.Client, part keys.Partition, ttl time.Duration) keys.ExecutionID {
	t.Helper()
	const lane = "default"
	id, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(t, err)
	k, pk := keys.Exec(id), keys.FlowPart(part)
	fcall(t, c, "ff_create_execution",
		[]string{k.Core(), k.Payload(), k.Policy(), k.Tags(), pk.LaneEligible(lane), pk.Noop(), pk.ExecutionDeadline(), pk.AllExecutions()},
		id.String(), "ns", lane, "test", "0", "test", "", "", "", "", "", "", strconv.Itoa(int(part.Index)))
	fcall(t, c, "ff_issue_claim_grant", []string{k.Core(), k.ClaimGrant(), pk.LaneEligible(lane)},
		id.String(), "worker-1", "wi-1", lane, "", "10000", "", "", "")
	fcall(t, c, "ff_claim_execution",
		[]string{k.Core(), k.ClaimGrant(), pk.LaneEligible(lane), pk.LeaseExpiry(), pk.WorkerLeases("wi-1"),
			k.Attempt(0), k.AttemptUsage(0), k.AttemptPolicy(0), k.Attempts(), k.LeaseCurrent(), k.LeaseHistory(),
			pk.LaneActive(lane), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		id.String(), "worker-1", "wi-1", lane, "", keys.NewUUID().String(), strconv.FormatInt(ttl.Milliseconds(), 10),
		strconv.FormatInt(ttl.Milliseconds()*2/3, 10), keys.NewUUID().String(), "", "", "")
	return id
}

func ownership(c valkey.Client, id keys.ExecutionID) string {
	v, _ := c.Do(context.Background(), c.B().Hget().Key(keys.Exec(id).Core()).Field("ownership_state").Build()).ToString()
	return v
}

// The real lease_expiry plugin, run by the host as a subprocess, marks
// leases created through the library within its interval + 1 s of expiry.
func TestLeaseExpiryPluginMarksExpiredLeases(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	const interval = 1500 * time.Millisecond
	cfg := testConfig(t, srv.Addr, config.Scanner{Plugin: "leaseexpiry", Interval: interval})
	cfg.Scanners = map[string]config.Scanner{"lease_expiry": cfg.Scanners["hostwork"]}
	h, _ := running(t, cfg)
	status := func() (string, uint64) {
		for _, s := range h.Status().Scanners {
			return s.State, s.Cycle
		}
		return "", 0
	}
	// Past the start jitter: the scanner is cycling.
	waitFor(t, h, 30*time.Second, "", func() bool { st, cy := status(); return st == "running" && cy >= 1 })

	const ttl = 300 * time.Millisecond
	var ids []keys.ExecutionID
	for _, p := range []uint16{0, 7, 15} {
		ids = append(ids, leaseFor(t, c, keys.Partition{Family: keys.FamilyFlow, Index: p}, ttl))
	}
	expiry := time.Now().Add(ttl)
	for _, id := range ids {
		require.Equal(t, "leased", ownership(c, id))
	}
	deadline := expiry.Add(interval + time.Second)
	for _, id := range ids {
		waitFor(t, h, time.Until(deadline), fmt.Sprintf("lease of %s not marked within interval + 1 s of expiry", id), func() bool { return ownership(c, id) == "lease_expired_reclaimable" })
	}
	for _, s := range h.Status().Scanners {
		require.Equal(t, "lease_expiry", s.Name)
		require.Zero(t, s.Restarts)
		// plugin_isolation auto: what was enforced, or "none (why)".
		require.NotEmpty(t, s.Isolation)
		t.Logf("lease_expiry isolation: %s", s.Isolation)
	}
}
