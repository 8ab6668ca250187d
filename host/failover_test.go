package host

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// These tests run the real lease_expiry plugin against a real Valkey
// Cluster with replicas and break the cluster under it: a master killed,
// a master killed after its replica stopped receiving its writes, the seed
// node killed, slots migrated. Each one asserts that every lease is
// marked (none lost) and prints how long recovery took. They run one at a
// time (not in parallel): each starts six servers and times a failover,
// and together they would load the machine the other tests share.

const failoverInterval = 300 * time.Millisecond

// clusterLeaseHost runs a host with the lease_expiry plugin whose only
// configured address is seed.
func clusterLeaseHost(t *testing.T, seedAddr string) *Host {
	t.Helper()
	cfg := testConfig(t, seedAddr, config.Scanner{Plugin: "leaseexpiry", Interval: failoverInterval})
	cfg.Valkey.Cluster = "auto"
	cfg.Scanners = map[string]config.Scanner{"lease_expiry": cfg.Scanners["hostwork"]}
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return leaseStatus(h).Cycle >= 1 })
	return h
}

func leaseStatus(h *Host) (st struct {
	Cycle    uint64
	Errors   int64
	Restarts int
}) {
	for _, s := range h.Status().Scanners {
		if s.Name == "lease_expiry" {
			st.Cycle, st.Errors, st.Restarts = s.Cycle, s.Errors, s.Restarts
		}
	}
	return st
}

// leaseProcessed is what the lease_expiry scanner says it processed.
func leaseProcessed(h *Host) int64 {
	for _, s := range h.Status().Scanners {
		if s.Name == "lease_expiry" {
			return s.Processed
		}
	}
	return 0
}

// plantLeases creates n leased executions spread over the 16 flow
// partitions; lease i lasts ttl(i). It returns once every master's
// replicas acknowledged the writes.
func plantLeases(t *testing.T, cl *testserver.Cluster, c valkey.Client, n int, ttl func(i int) time.Duration) []keys.ExecutionID {
	t.Helper()
	ctx := context.Background()
	// A read of every partition first: after a failover the test's own
	// client learns the new topology from a read it may retry, not from
	// a seeding write it may not.
	for p := 0; p < 16; p++ {
		require.NoError(t, c.Do(ctx, c.B().Exists().Key(fmt.Sprintf("{fp:%d}", p)).Build()).Error())
	}
	lib := lua.New(c, lua.Options{})
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	s := seed.New(lib, keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4})
	ids := s.IDs(n)
	require.NoError(t, s.Prepare(ctx, ids))
	require.NoError(t, s.Claim(ctx, ids, ttl))
	syncReplicas(t, cl)
	return ids
}

// syncReplicas waits until every live master's replicas have its writes.
func syncReplicas(t *testing.T, cl *testserver.Cluster) {
	t.Helper()
	ctx := context.Background()
	for _, n := range cl.Live() {
		reps, err := cl.ReplicasOf(ctx, n)
		require.NoError(t, err)
		if len(reps) == 0 {
			continue
		}
		d := n.Direct(t)
		got, err := d.Do(ctx, d.B().Wait().Numreplicas(int64(len(reps))).Timeout(10000).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(len(reps)), got, "replicas of %s in sync", n.Addr)
	}
}

// unmarked lists the leases not marked expired, as the cluster serves them
// now.
func unmarked(t *testing.T, c valkey.Client, ids []keys.ExecutionID) []keys.ExecutionID {
	t.Helper()
	vals, err := seed.Fields(context.Background(), c, ids, "ownership_state")
	if err != nil {
		return ids // not readable now (failing over): nothing known marked
	}
	var out []keys.ExecutionID
	for i, v := range vals {
		if v[0] != "lease_expired_reclaimable" {
			out = append(out, ids[i])
		}
	}
	return out
}

// waitAllMarked waits until every lease is marked (checked at every end
// of the host's cycles) and returns how long it took.
func waitAllMarked(t *testing.T, h *Host, c valkey.Client, ids []keys.ExecutionID, limit time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var left []keys.ExecutionID
	if err := h.changes.WaitFor(ctx, func() bool { left = unmarked(t, c, ids); return len(left) == 0 }); err != nil {
		t.Fatalf("%d of %d leases still unmarked after %s", len(left), len(ids), limit)
	}
	return time.Since(t0)
}

// onMaster keeps the ids whose partition the node m serves.
func onMaster(t *testing.T, cl *testserver.Cluster, m *testserver.Server, ids []keys.ExecutionID) []keys.ExecutionID {
	t.Helper()
	var out []keys.ExecutionID
	for _, id := range ids {
		owner, err := cl.MasterOf(context.Background(), keys.FlowPart(id.Partition()).Tag())
		require.NoError(t, err)
		if owner == m {
			out = append(out, id)
		}
	}
	return out
}

// A master killed under load fails over to its replica; the leases it
// served are marked by the new master, none is lost.
func TestClusterCrashFailoverMarksEveryLease(t *testing.T) {
	cl := testserver.NewClusterWith(t, testserver.ClusterOptions{Masters: 3, Replicas: 1})
	c := cl.Client(t)
	h := clusterLeaseHost(t, cl.Nodes[0].Addr)
	// Expiring in waves over 3 s, so the kill lands in the middle.
	ids := plantLeases(t, cl, c, 1200, func(i int) time.Duration { return time.Duration(200+(i%30)*100) * time.Millisecond })
	waitFor(t, h, 30*time.Second, "", func() bool { return len(unmarked(t, c, ids)) < 900 })
	victim, err := cl.MasterOf(context.Background(), "{fp:5}")
	require.NoError(t, err)
	require.NotEqual(t, cl.Nodes[0], victim, "the seed is the subject of another test")
	t0 := time.Now()
	victim.Kill()
	waitAllMarked(t, h, c, ids, 60*time.Second)
	t.Logf("crash failover: all %d leases marked %s after the kill", len(ids), time.Since(t0).Round(time.Millisecond))
	require.Zero(t, leaseStatus(h).Restarts)
}

// The replica promoted after a crash had not received the master's last
// writes: leases the scanner marked on the old master are leased again,
// with the same scores. Nothing the scanner remembers may keep it from
// marking them again (the memory flaw of FlowFabric's scanner).
func TestClusterFailoverToAReplicaThatMissedMarks(t *testing.T) {
	cl := testserver.NewClusterWith(t, testserver.ClusterOptions{Masters: 3, Replicas: 1})
	c := cl.Client(t)
	h := clusterLeaseHost(t, cl.Nodes[0].Addr)
	// The leases must still be leased when replication is cut, however
	// long planting takes on a busy machine: a generous TTL.
	ids := plantLeases(t, cl, c, 300, func(int) time.Duration { return 10 * time.Second })
	victim, err := cl.MasterOf(context.Background(), "{fp:5}")
	require.NoError(t, err)
	require.NotEqual(t, cl.Nodes[0], victim)
	lost := onMaster(t, cl, victim, ids)
	require.NotEmpty(t, lost)
	reps, err := cl.ReplicasOf(context.Background(), victim)
	require.NoError(t, err)
	require.Len(t, reps, 1)
	// From here on the victim's writes reach no replica.
	require.NoError(t, cl.CutReplication(context.Background(), victim))
	require.Len(t, unmarked(t, c, lost), len(lost), "the leases expired before the cut: raise the TTL")
	waitAllMarked(t, h, c, ids, 30*time.Second)
	// The replica, cut off, still has the victim's leases unmarked: they
	// are the marks the failover will lose.
	rc := reps[0].Direct(t)
	missed := 0
	for _, id := range lost {
		res := rc.DoMulti(context.Background(), rc.B().Readonly().Build(),
			rc.B().Hget().Key(keys.Exec(id).Core()).Field("ownership_state").Build())
		v, err := res[1].ToString()
		require.NoError(t, err)
		if v != "lease_expired_reclaimable" {
			missed++
		}
	}
	require.NotZero(t, missed, "the replica received the marks: the cut did not hold")
	// Let a few cycles see the marks (a scanner that remembers what it
	// read back would remember these entries now).
	cycle := leaseStatus(h).Cycle
	waitFor(t, h, 30*time.Second, "", func() bool { return leaseStatus(h).Cycle >= cycle+3 })

	victim.Kill()
	_, err = cl.WaitServed(context.Background(), "{fp:5}")
	require.NoError(t, err)
	t0 := time.Now()
	// Every lost mark is made again, well within the memory's own expiry
	// (50 cycles): the host's store epoch changed during the failover.
	waitAllMarked(t, h, c, ids, 40*failoverInterval)
	t.Logf("failover with lost writes: %d of %d marks lost, all marked again %s after the failover completed", missed, len(ids), time.Since(t0).Round(time.Millisecond))
}

// With the only configured address dead after its failover, the host
// keeps working: clock reads and readiness go to live nodes.
func TestClusterDeadSeed(t *testing.T) {
	cl := testserver.NewClusterWith(t, testserver.ClusterOptions{Masters: 3, Replicas: 1})
	c := cl.Client(t)
	seedNode := cl.Nodes[0]
	h := clusterLeaseHost(t, seedNode.Addr)
	t0 := time.Now()
	seedNode.Kill()
	_, err := cl.WaitServed(context.Background(), "{fp:0}")
	require.NoError(t, err)
	// Once a cycle ran clean after the failover, every later one must.
	var from struct {
		Cycle    uint64
		Errors   int64
		Restarts int
	}
	waitFor(t, h, 60*time.Second, "", func() bool {
		st := leaseStatus(h)
		if from.Cycle != 0 && st.Cycle >= from.Cycle+2 && st.Errors == from.Errors {
			return true
		}
		if from.Cycle == 0 || st.Errors != from.Errors {
			from = st
		}
		return false
	})
	t.Logf("dead seed: cycles clean again %s after the kill", time.Since(t0).Round(time.Millisecond))
	for i := 0; i < 100; i++ {
		require.NoError(t, h.Ready(context.Background()), "readiness %d with the seed dead", i)
	}
	ids := plantLeases(t, cl, c, 300, func(int) time.Duration { return 100 * time.Millisecond })
	waitAllMarked(t, h, c, ids, 30*time.Second)
	cy := leaseStatus(h).Cycle
	waitFor(t, h, 60*time.Second, "", func() bool { return leaseStatus(h).Cycle >= cy+20 })
	st := leaseStatus(h)
	require.Equal(t, from.Errors, st.Errors, "no cycle failed after the failover (%d cycles)", st.Cycle-from.Cycle)
	nodes := h.Status().ValkeyNodes
	require.NotContains(t, nodes, seedNode.Addr, "status lists the nodes in use, not the dead seed")
}

// While one master fails over (a slow failover: 6 s node timeout), the
// partitions of the other masters keep being scanned.
func TestClusterOneFailingMasterDoesNotStallTheOthers(t *testing.T) {
	cl := testserver.NewClusterWith(t, testserver.ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: 6 * time.Second})
	c := cl.Client(t)
	h := clusterLeaseHost(t, cl.Nodes[0].Addr)
	victim, err := cl.MasterOf(context.Background(), "{fp:5}")
	require.NoError(t, err)
	ids := plantLeases(t, cl, c, 480, func(int) time.Duration { return 600 * time.Millisecond })
	var healthy []keys.ExecutionID
	for _, id := range ids {
		m, err := cl.MasterOf(context.Background(), keys.FlowPart(id.Partition()).Tag())
		require.NoError(t, err)
		if m != victim {
			healthy = append(healthy, id)
		}
	}
	t0 := time.Now()
	victim.Kill()
	took := waitAllMarked(t, h, c, healthy, 30*time.Second)
	// The victim's slots are still unserved: the healthy masters' leases
	// were marked during the failover, not after it.
	_, err = cl.MasterOf(context.Background(), "{fp:5}")
	require.Error(t, err, "the healthy masters' leases were marked only after the failover of the victim completed")
	t.Logf("one failing master: %d leases of the healthy masters marked %s after the kill, before the failover", len(healthy), took.Round(time.Millisecond))
	_, err = cl.WaitServed(context.Background(), "{fp:5}")
	require.NoError(t, err)
	waitAllMarked(t, h, c, ids, 30*time.Second)
	t.Logf("one failing master: all %d marked %s after the kill", len(ids), time.Since(t0).Round(time.Millisecond))
	require.Zero(t, leaseStatus(h).Restarts)
}

// Slots migrated with MIGRATE while leases expire: ASK, TRYAGAIN and the
// script's cross-slot refusals are transient, not item failures, so no
// lease is backed off (15 s) and every one is marked promptly; processed
// counts every lease marked, each once, also those whose call marked them
// and then failed on a key already migrated.
func TestClusterReshardUnderLoad(t *testing.T) {
	cl := testserver.NewClusterWith(t, testserver.ClusterOptions{Masters: 3})
	c := cl.Client(t)
	h := clusterLeaseHost(t, cl.Nodes[0].Addr)
	processed0 := leaseProcessed(h)
	ids := plantLeases(t, cl, c, 1600, func(i int) time.Duration { return time.Duration(100+(i%40)*50) * time.Millisecond })
	ctx := context.Background()
	from, err := cl.MasterOf(ctx, "{fp:5}")
	require.NoError(t, err)
	to := cl.Nodes[0]
	if to == from {
		to = cl.Nodes[1]
	}
	moved := 0
	t0 := time.Now()
	for p := 0; p < 16; p++ {
		tag := fmt.Sprintf("{fp:%d}", p)
		m, err := cl.MasterOf(ctx, tag)
		require.NoError(t, err)
		if m != from {
			continue
		}
		require.NoError(t, cl.MigrateSlot(ctx, int(keys.ClusterSlot(tag)), from, to, 5))
		moved++
	}
	require.NotZero(t, moved)
	// The last lease expires 2.1 s after planting; a lease backed off as
	// poison would wait 15 s more.
	waitAllMarked(t, h, c, ids, 8*time.Second)
	t.Logf("reshard: %d partitions moved, all %d leases marked %s after the migration began", moved, len(ids), time.Since(t0).Round(time.Millisecond))
	require.Zero(t, leaseStatus(h).Restarts)
	// The calls that marked the last leases are counted when their sweep
	// (or their node's lane) ends.
	waitFor(t, h, 30*time.Second, "processed counts every marked lease", func() bool { return leaseProcessed(h)-processed0 >= int64(len(ids)) })
	require.Equal(t, int64(len(ids)), leaseProcessed(h)-processed0, "processed equals what was marked")
}

// A master killed while the host's FCALLs are in flight on it (its writes
// paused, so that the calls wait there, then SIGKILL): those calls hang in
// the client until the failover, and before the scheduler dispatched node
// by node, the cycle waited for them, and with it every healthy master's
// leases (3.5-4.4 s in 3 of 8 such kills with a 2 s node timeout). Now the
// healthy masters' leases, claimed after the kill, are all marked while
// the victim's slots are still unserved, and the host's calls on it were
// given a long deadline, so only the dispatch's isolation can explain it.
func TestClusterKillDuringFCallsDelaysNoOtherMaster(t *testing.T) {
	// The node timeout is the window the healthy masters' leases must
	// all be marked in (the failover starts when it passes): long enough
	// for a machine busy with other work to mark a thousand leases, since
	// what is checked is the order (before the failover), not the speed.
	cl := testserver.NewClusterWith(t, testserver.ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: 20 * time.Second})
	c := cl.Client(t)
	cfg := testConfig(t, cl.Nodes[0].Addr, config.Scanner{Plugin: "leaseexpiry", Interval: failoverInterval})
	cfg.Valkey.Cluster = "auto"
	cfg.Scheduler.CallTimeout = 60 * time.Second
	cfg.Scanners = map[string]config.Scanner{"lease_expiry": cfg.Scanners["hostwork"]}
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return leaseStatus(h).Cycle >= 1 })
	ctx := context.Background()
	victim, err := cl.MasterOf(ctx, "{fp:5}")
	require.NoError(t, err)
	require.NotEqual(t, cl.Nodes[0], victim, "the seed is the subject of another test")

	// Executions on every partition, granted, not yet leased.
	for p := 0; p < 16; p++ {
		require.NoError(t, c.Do(ctx, c.B().Exists().Key(fmt.Sprintf("{fp:%d}", p)).Build()).Error())
	}
	lib := lua.New(c, lua.Options{})
	_, err = lib.Ensure(ctx)
	require.NoError(t, err)
	s := seed.New(lib, keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4})
	ids := s.IDs(1600)
	require.NoError(t, s.Prepare(ctx, ids))
	onVictim := onMaster(t, cl, victim, ids)
	isVictim := map[keys.ExecutionID]bool{}
	for _, id := range onVictim {
		isVictim[id] = true
	}
	var healthy []keys.ExecutionID
	for _, id := range ids {
		if !isVictim[id] {
			healthy = append(healthy, id)
		}
	}

	// The victim's leases run out in 300 ms; its writes are paused, so
	// the host's FCALLs marking them wait on it.
	require.NoError(t, s.Claim(ctx, onVictim, func(int) time.Duration { return 300 * time.Millisecond }))
	vd := victim.Direct(t)
	require.NoError(t, vd.Do(ctx, vd.B().ClientPause().Timeout(60000).Write().Build()).Error())
	waitFor(t, h, 30*time.Second, "FCALLs in flight on the victim", func() bool {
		list, err := vd.Do(ctx, vd.B().ClientList().Build()).ToString()
		return err == nil && strings.Contains(list, "cmd=fcall")
	})
	victim.Kill()
	killed := time.Now()

	// The healthy masters' leases, claimed now, run out in 200 ms.
	require.NoError(t, s.Claim(ctx, healthy, func(int) time.Duration { return 200 * time.Millisecond }))
	took := waitAllMarked(t, h, c, healthy, 30*time.Second)
	_, err = cl.MasterOf(ctx, "{fp:5}")
	require.Error(t, err, "the healthy masters' leases were marked only after the victim's failover completed")
	lat := markLatencies(t, c, healthy)
	t.Logf("kill during FCALLs: %d leases of the healthy masters marked %s after the kill, before the failover; expiry -> marked max %s",
		len(healthy), took.Round(time.Millisecond), lat.Round(time.Millisecond))

	_, err = cl.WaitServed(ctx, "{fp:5}")
	require.NoError(t, err)
	waitAllMarked(t, h, c, onVictim, 60*time.Second)
	t.Logf("kill during FCALLs: the victim's %d leases marked %s after the kill", len(onVictim), time.Since(killed).Round(time.Millisecond))
}

// markLatencies returns the longest expiry -> mark of the leases, from the
// stamps the library wrote (the server's clock).
func markLatencies(t *testing.T, c valkey.Client, ids []keys.ExecutionID) time.Duration {
	t.Helper()
	vals, err := seed.Fields(context.Background(), c, ids, "lease_expires_at", "lease_expired_at")
	require.NoError(t, err)
	var worst time.Duration
	for _, v := range vals {
		exp, err1 := strconv.ParseInt(v[0], 10, 64)
		marked, err2 := strconv.ParseInt(v[1], 10, 64)
		require.NoError(t, err1)
		require.NoError(t, err2)
		worst = max(worst, time.Duration(marked-exp)*time.Millisecond)
	}
	return worst
}
