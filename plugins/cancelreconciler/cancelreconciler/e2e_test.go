package cancelreconciler_test

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
	"github.com/ffscan/ffscan/internal/testenv"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/cancelreconciler/cancelreconciler"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// The host runs the real plugin binary as a subprocess against state made
// only through sdk/client: a flow cancelled with grace 0 over members that
// are eligible, claimed by a worker (active), and already completed. The
// reconciler cancels every member still running or waiting, acknowledges
// the completed one, and empties pending_cancels and the backlog.
func TestHostCancelsFlowMembersEndToEnd(t *testing.T) {
	srv := testenv.New(t)
	vk := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	dir := filepath.Join(t.TempDir(), "plugins")
	require.NoError(t, os.Mkdir(dir, 0o755))
	scannertest.InstallPlugin(t, pluginPkg, dir, "cancelreconciler")
	cfg := config.Defaults()
	cfg.Valkey.Addrs = []string{srv.Addr}
	cfg.Partitions = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}
	cfg.PluginDir = dir
	cfg.HTTP.Listen = ""
	cfg.Supervisor.HealthInterval = 500 * time.Millisecond
	const interval = 500 * time.Millisecond
	cfg.Scanners = map[string]config.Scanner{cancelreconciler.Name: {
		Enabled: true, Plugin: "cancelreconciler", Interval: interval, Options: map[string]string{},
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
	status := func() (state string, cycle uint64, restarts int) {
		for _, s := range h.Status().Scanners {
			if s.Name == cancelreconciler.Name {
				return s.State, s.Cycle, s.Restarts
			}
		}
		return "", 0, 0
	}
	require.Eventually(t, func() bool { st, cy, _ := status(); return st == "running" && cy >= 1 },
		30*time.Second, 20*time.Millisecond, "the scanner is cycling")

	c, err := client.New(ctx, vk, client.Options{Partitions: cfg.Partitions, Namespace: "e2e"})
	require.NoError(t, err)
	flow, err := c.CreateFlow(ctx, client.CreateFlowRequest{})
	require.NoError(t, err)
	fid := flow.ID
	member := func(lane string) keys.ExecutionID {
		r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: lane, Kind: "step"})
		require.NoError(t, err)
		return r.ID
	}
	claim := func(lane string) *client.Task {
		w, err := c.NewWorker(ctx, client.WorkerOptions{WorkerID: "e2e-" + lane, Lanes: []string{lane}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close(context.Background()) })
		task, err := w.ClaimNext(ctx)
		require.NoError(t, err)
		require.NotNil(t, task)
		return task
	}
	eligible := []keys.ExecutionID{member("default"), member("default"), member("default")}
	active := member("running")
	running := claim("running")
	require.Equal(t, active, running.ID())
	completed := member("finished")
	finished := claim("finished")
	require.Equal(t, completed, finished.ID())
	_, err = finished.Complete(ctx, []byte("ok"))
	require.NoError(t, err)

	zero := time.Duration(0)
	res, err := c.CancelFlow(ctx, fid, client.CancelFlowOptions{Reason: "e2e", Grace: &zero})
	require.NoError(t, err)
	require.Len(t, res.Members, 5)
	fk := keys.Flow(c.Partitions(), fid)
	backlog := keys.FlowPart(c.Partitions().FlowPartition(fid)).CancelBacklog()

	state := func(id keys.ExecutionID) string {
		s, err := c.GetExecution(ctx, id)
		require.NoError(t, err)
		return s.LifecyclePhase + "/" + s.TerminalOutcome
	}
	require.Eventually(t, func() bool {
		n, err := vk.Do(ctx, vk.B().Zcard().Key(backlog).Build()).AsInt64()
		return err == nil && n == 0
	}, 10*interval+5*time.Second, 20*time.Millisecond, "the backlog drains")
	for _, id := range append(eligible, active) {
		assert.Equal(t, "terminal/cancelled", state(id), "%s", id)
	}
	assert.Equal(t, "terminal/success", state(completed), "an already completed member stays as it ended")
	n, err := vk.Do(ctx, vk.B().Exists().Key(fk.PendingCancels()).Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n, "pending_cancels is empty")
	running.Abandon() // its lease is gone; stop renewing it
	_, _, restarts := status()
	assert.Zero(t, restarts)
}
