package depreconciler_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/internal/flowtest"
	"github.com/ffscan/ffscan/internal/testenv"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/plugins/depreconciler/depreconciler"
	"github.com/ffscan/ffscan/sdk/client"
)

// The real plugin run by the host as a subprocess, with no completion
// listener, on flows created through sdk/client (batch 1, so every
// partition's blocked set is visited one child per cycle):
//   - A -> B -> C, A completed: B becomes eligible, C keeps waiting on B;
//   - D -> E -> G, D failed: E and G are skipped;
//   - in a partition of its own, an old child stuck behind a running
//     parent does not keep a newer child, whose parent completed, waiting:
//     it is released within two cycles of the rotation (three when the
//     host's window first wraps past the end of the set).
func TestHostRunsDependencyReconciler(t *testing.T) {
	srv := testenv.New(t)
	vk := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	bin := pluginBinary(t)
	cfg := config.Defaults()
	cfg.Valkey.Addrs = []string{srv.Addr}
	cfg.Partitions = parts
	cfg.PluginDir = filepath.Dir(bin)
	cfg.HTTP.Listen = ""
	cfg.Supervisor.HealthInterval = 500 * time.Millisecond
	cfg.Completions.Enabled = false // the reconciler alone: every push is "lost"
	cfg.Scanners = map[string]config.Scanner{depreconciler.Name: {
		Enabled: true, Plugin: filepath.Base(bin), Interval: 200 * time.Millisecond, Batch: 1, Options: map[string]string{},
	}}
	h, err := host.Boot(ctx, &cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert.NoError(t, h.Run(runCtx))
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(cfg.ShutdownTimeout + 5*time.Second):
			t.Error("host did not stop")
		}
		h.Close()
	})
	cycle := func() uint64 {
		for _, s := range h.Status().Scanners {
			return s.Cycle
		}
		return 0
	}
	require.Eventually(t, func() bool { return cycle() >= 1 }, 30*time.Second, 10*time.Millisecond, "scanner cycling")

	lib := lua.New(vk, lua.Options{})
	c, err := client.New(ctx, vk, client.Options{Library: lib, RequireStoredPartitions: true})
	require.NoError(t, err)
	flowIn := func(p keys.Partition) keys.FlowID {
		for {
			fid := keys.NewFlowID()
			if parts.FlowPartition(fid) == p {
				_, err := c.CreateFlow(ctx, client.CreateFlowRequest{ID: fid})
				require.NoError(t, err)
				return fid
			}
		}
	}
	chain := func(fid keys.FlowID, n int) []keys.ExecutionID {
		ids := make([]keys.ExecutionID, n)
		for i := range ids {
			r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: "default", Payload: []byte("x")})
			require.NoError(t, err)
			ids[i] = r.ID
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
	p := func(i uint16) keys.Partition { return keys.Partition{Family: keys.FamilyFlow, Index: i} }
	const deadline = 20 * time.Second

	// A child whose parent completed while no listener ran.
	abc := chain(flowIn(p(3)), 3)
	require.NoError(t, flowtest.Succeed(ctx, lib, abc[0], []byte("a")))
	require.Eventually(t, func() bool { return state(abc[1]) == "waiting" }, deadline, 10*time.Millisecond, "B released")
	assert.Equal(t, "waiting_children", state(abc[2]), "C waits for B")

	// A failed parent skips its descendants.
	deg := chain(flowIn(p(7)), 3)
	require.NoError(t, flowtest.Flunk(ctx, lib, deg[0], "boom"))
	require.Eventually(t, func() bool { return state(deg[1]) == "skipped" && state(deg[2]) == "skipped" },
		deadline, 10*time.Millisecond, "E and G skipped")

	// Rotation past an old stuck child, batch 1.
	fid := flowIn(p(11))
	old := chain(fid, 2)
	time.Sleep(5 * time.Millisecond) // blocked sets are scored by created_at (ms)
	fresh := chain(fid, 2)
	blocked, err := vk.Do(ctx, vk.B().Zrange().Key(keys.FlowPart(p(11)).LaneBlockedDependencies("default")).Min("0").Max("-1").Build()).AsStrSlice()
	require.NoError(t, err)
	require.Equal(t, []string{old[1].String(), fresh[1].String()}, blocked, "the stuck child is the oldest")
	// Let the old child be visited at least once first.
	c0 := cycle()
	require.Eventually(t, func() bool { return cycle() >= c0+3 }, deadline, 10*time.Millisecond)
	require.NoError(t, flowtest.Succeed(ctx, lib, fresh[0], []byte("m")))
	c1 := cycle()
	require.Eventually(t, func() bool { return state(fresh[1]) == "waiting" }, deadline, 5*time.Millisecond, "newer child released")
	t.Logf("newer child released %d cycle(s) after its parent completed", cycle()-c1)
	assert.LessOrEqual(t, cycle()-c1, uint64(3), "released within the rotation (two visits, plus the host's wrap read)")
	assert.Equal(t, "waiting_children", state(old[1]))
	assert.Equal(t, "waiting_children", state(abc[2]))

	// Status counters are written when a cycle ends.
	require.Eventually(t, func() bool {
		for _, s := range h.Status().Scanners {
			return s.Processed >= 4 // B, E, G (by cascade), N
		}
		return false
	}, deadline, 10*time.Millisecond)
	for _, s := range h.Status().Scanners {
		assert.Equal(t, "running", s.State)
		assert.Zero(t, s.Restarts)
		assert.Zero(t, s.Errors)
	}
}
