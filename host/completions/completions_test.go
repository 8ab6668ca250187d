package completions_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/completions"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/service/servicetest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// The listener end to end on a real server, with flows created through
// sdk/client and no reconciler anywhere:
//   - completing A of A -> B -> C releases B within milliseconds;
//   - after CLIENT KILL of the subscriber connection it resubscribes, and
//     completing B then releases C as promptly;
//   - malformed messages are counted and dropped, and the listener keeps
//     working (a failed D of D -> E -> G skips E and G);
//   - Stop is clean.
func TestListenerEndToEnd(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	vk := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lib := lua.New(vk, lua.Options{})
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	c, err := client.New(ctx, vk, client.Options{Library: lib, Partitions: parts})
	require.NoError(t, err)

	met := completions.NewPrometheusMetrics()
	reg := prometheus.NewRegistry()
	require.NoError(t, met.Register(reg))
	ch := &service.Changes{}
	l := completions.New(completions.Config{Enabled: true, Library: lib,
		Metrics: met, Partitions: parts, Changes: ch,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "completions", Level: hclog.Warn, Output: os.Stderr}),
	})
	require.NoError(t, l.Start(ctx))
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	servicetest.WaitFor(t, ch, 0, l.Subscribed)
	assert.Equal(t, 1.0, testutil.ToFloat64(met.Collectors()[4]), "subscribed gauge")

	chain := func(n int) []keys.ExecutionID {
		r, err := c.CreateFlow(ctx, client.CreateFlowRequest{})
		require.NoError(t, err)
		fid := r.ID
		ids := make([]keys.ExecutionID, n)
		for i := range ids {
			m, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: "default", Payload: []byte("x")})
			require.NoError(t, err)
			ids[i] = m.ID
			if i > 0 {
				_, err := c.AddDependency(ctx, client.DependencyRequest{Flow: fid, Upstream: ids[i-1], Downstream: ids[i]})
				require.NoError(t, err)
			}
		}
		return ids
	}
	state := func(id keys.ExecutionID) string {
		core, err := flowtest.Core(ctx, vk, id)
		require.NoError(t, err)
		return core["public_state"]
	}
	// released waits for id to leave waiting_children (checked at every
	// cascade's end) and returns how long it took since t0.
	released := func(id keys.ExecutionID, want string, t0 time.Time) time.Duration {
		servicetest.WaitFor(t, ch, 0, func() bool { return state(id) == want }, "%s becomes %s", id, want)
		return time.Since(t0)
	}

	abc := chain(3)
	t0 := time.Now()
	require.NoError(t, flowtest.Succeed(ctx, lib, abc[0], []byte("a")))
	took := released(abc[1], "waiting", t0)
	t.Logf("B released %s after A's completion was sent", took)
	// Nothing else runs here that could release B: released() seeing it
	// is the listener's doing. How fast is the DAG benchmark's to say.
	assert.Equal(t, "waiting_children", state(abc[2]))

	// Kill the subscriber connection: it comes back on its own.
	killed, err := vk.Do(ctx, vk.B().ClientKill().TypePubsub().Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), killed, "exactly the listener's connection")
	servicetest.WaitFor(t, ch, 0, func() bool { return l.Stats().Reconnects >= 1 && l.Subscribed() })
	names, err := vk.Do(ctx, vk.B().ClientList().TypePubsub().Build()).ToString()
	require.NoError(t, err)
	assert.Contains(t, names, "name="+completions.ConnectionName)
	t0 = time.Now()
	require.NoError(t, flowtest.Succeed(ctx, lib, abc[1], []byte("b")))
	took = released(abc[2], "waiting", t0)
	t.Logf("C released %s after B's completion, following a resubscription", took)

	// Malformed messages are counted and dropped.
	before := l.Stats()
	wrongPart, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 1}, keys.NewUUID())
	require.NoError(t, err)
	fid := keys.NewFlowID()
	for parts.FlowPartition(fid).Index == 1 {
		fid = keys.NewFlowID()
	}
	for _, payload := range []string{
		"garbage",
		`{"execution_id":"not-an-id","flow_id":"` + fid.String() + `"}`,
		`{"execution_id":"` + wrongPart.String() + `","flow_id":"` + fid.String() + `"}`,
	} {
		require.NoError(t, vk.Do(ctx, vk.B().Publish().Channel(keys.DagCompletionsChannel).Message(payload).Build()).Error())
	}
	servicetest.WaitFor(t, ch, 0, func() bool { return l.Stats().Malformed == before.Malformed+3 })
	assert.Equal(t, before.Accepted, l.Stats().Accepted)
	assert.Equal(t, float64(l.Stats().Malformed), testutil.ToFloat64(mustVec(t, met, "malformed")))

	// Still working: a failure skips the chain below it.
	deg := chain(3)
	t0 = time.Now()
	require.NoError(t, flowtest.Flunk(ctx, lib, deg[0], "boom"))
	released(deg[1], "skipped", t0)
	took = released(deg[2], "skipped", t0)
	t.Logf("E and G skipped %s after D failed", took)

	// Counters move when a cascade returns, just after its last write.
	servicetest.WaitFor(t, ch, 0, func() bool {
		st := l.Stats()
		return st.Resolved >= 4 && st.Dispatched == st.Accepted // A->B, B->C, D->E, E->G (+ duplicates from skip messages)
	})
	st := l.Stats()
	assert.Zero(t, st.Panics)
	assert.Zero(t, st.Failed)
	require.NoError(t, l.Stop(ctx))
	assert.False(t, l.Subscribed())
	assert.Equal(t, 0.0, testutil.ToFloat64(met.Collectors()[4]))
	assert.Equal(t, 1.0, testutil.ToFloat64(met.Collectors()[5]), "one reconnect")
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	assert.Positive(t, n)
}

func mustVec(t *testing.T, m *completions.PrometheusMetrics, outcome string) prometheus.Collector {
	t.Helper()
	vec, ok := m.Collectors()[0].(*prometheus.CounterVec)
	require.True(t, ok)
	return vec.WithLabelValues(outcome)
}

// On a real 3-master cluster: the subscriber sits on one node, completions
// published by functions running on every master reach it (PUBLISH is
// cluster-wide), and the cascades run through the cluster client.
func TestListenerOnACluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := testserver.NewCluster(t, 3)
	vk := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lib := lua.New(vk, lua.Options{})
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	c, err := client.New(ctx, vk, client.Options{Library: lib})
	require.NoError(t, err)
	ch := &service.Changes{}
	l := completions.New(completions.Config{Enabled: true, Concurrency: 4, Library: lib, Partitions: c.Partitions(), Changes: ch})
	require.NoError(t, l.Start(ctx))
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	servicetest.WaitFor(t, ch, 0, l.Subscribed)

	var children []keys.ExecutionID
	for range 12 { // flows spread over the masters
		r, err := c.CreateFlow(ctx, client.CreateFlowRequest{})
		require.NoError(t, err)
		fid := r.ID
		var ids [2]keys.ExecutionID
		for i := range ids {
			m, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: "default", Payload: []byte("x")})
			require.NoError(t, err)
			ids[i] = m.ID
		}
		_, err = c.AddDependency(ctx, client.DependencyRequest{Flow: fid, Upstream: ids[0], Downstream: ids[1]})
		require.NoError(t, err)
		require.NoError(t, flowtest.Succeed(ctx, lib, ids[0], []byte("a")))
		children = append(children, ids[1])
	}
	for _, id := range children {
		servicetest.WaitFor(t, ch, 0, func() bool {
			core, err := flowtest.Core(ctx, vk, id)
			return err == nil && core["public_state"] == "waiting"
		}, "%s released", id)
	}
	assert.Zero(t, l.Stats().Malformed)
	assert.Zero(t, l.Stats().Failed)
}
