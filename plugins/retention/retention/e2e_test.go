package retention_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/internal/testenv"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/retention/retention"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// The host runs the real plugin binary as a subprocess against executions
// made and run to completion through sdk/client (a producer and a worker).
// One that ended longer ago than the default retention disappears entirely,
// one with a shorter per-execution retention too, a younger one stays, and
// an old execution that is not terminal is never touched.
func TestHostPurgesExpiredExecutionsEndToEnd(t *testing.T) {
	srv := testenv.New(t)
	vk := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	dir := filepath.Join(t.TempDir(), "plugins")
	require.NoError(t, os.Mkdir(dir, 0o755))
	scannertest.InstallPlugin(t, pluginPkg, dir, "retention")
	cfg := config.Defaults()
	cfg.Valkey.Addrs = []string{srv.Addr}
	cfg.Partitions = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}
	cfg.PluginDir = dir
	cfg.HTTP.Listen = ""
	cfg.Supervisor.HealthInterval = 500 * time.Millisecond
	const interval = 500 * time.Millisecond
	cfg.Scanners = map[string]config.Scanner{retention.Name: {
		Enabled: true, Plugin: "retention", Interval: interval, Options: map[string]string{},
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
			if s.Name == retention.Name {
				return s.State, s.Cycle, s.Restarts
			}
		}
		return "", 0, 0
	}
	require.Eventually(t, func() bool { st, cy, _ := status(); return st == "running" && cy >= 1 },
		30*time.Second, 20*time.Millisecond, "the scanner is cycling")

	c, err := client.New(ctx, vk, client.Options{Partitions: cfg.Partitions, Namespace: "e2e"})
	require.NoError(t, err)
	w, err := c.NewWorker(ctx, client.WorkerOptions{WorkerID: "e2e", Lanes: []string{"default"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	create := func() keys.ExecutionID {
		r, err := c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Kind: "job", Payload: []byte("in"),
			Tags: map[string]string{"app.k": "v"}})
		require.NoError(t, err)
		return r.ID
	}
	run := func() keys.ExecutionID {
		id := create()
		task, err := w.ClaimNext(ctx)
		require.NoError(t, err)
		require.Equal(t, id, task.ID())
		_, err = task.Complete(ctx, []byte("out"))
		require.NoError(t, err)
		return id
	}
	old, young, short := run(), run(), run()
	pending := create() // runnable, never claimed

	// sdk/client writes no stream policy; a FlowFabric producer can. Set
	// the override on the stored policy as such a producer would have.
	ek := keys.Exec(short)
	raw, err := vk.Do(ctx, vk.B().Get().Key(ek.Policy()).Build()).ToString()
	require.NoError(t, err)
	var pol map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &pol))
	pol["stream_policy"] = map[string]any{"retention_ttl_ms": (2 * time.Hour).Milliseconds()}
	b, err := json.Marshal(pol)
	require.NoError(t, err)
	require.NoError(t, vk.Do(ctx, vk.B().Set().Key(ek.Policy()).Value(string(b)).Build()).Error())

	// Age them: the terminal index score is the completion time, and
	// completed_at mirrors it. Rewrite both rather than wait a day; the
	// index entries change in one ZADD, so the scanner sees them all at
	// once. The runnable execution gets a stale terminal entry a day and a
	// half old, the only way it could ever become a candidate.
	tm, err := vk.Do(ctx, vk.B().Time().Build()).AsIntSlice()
	require.NoError(t, err)
	now := tm[0]*1000 + tm[1]/1000
	ago := func(d time.Duration) string { return strconv.FormatInt(now-d.Milliseconds(), 10) }
	ages := map[keys.ExecutionID]string{old: ago(25 * time.Hour), young: ago(2 * time.Hour), short: ago(3 * time.Hour)}
	for id, at := range ages {
		require.NoError(t, vk.Do(ctx, vk.B().Hset().Key(keys.Exec(id).Core()).FieldValue().FieldValue("completed_at", at).Build()).Error())
	}
	pk := keys.FlowPart(old.Partition())
	require.Equal(t, old.Partition(), pending.Partition(), "solo executions of one lane share a partition")
	require.NoError(t, vk.Do(ctx, vk.B().Arbitrary("ZADD", pk.LaneTerminal("default"),
		ages[old], old.String(), ages[young], young.String(), ages[short], short.String(),
		ago(36*time.Hour), pending.String()).Build()).Error())

	keysOf := func(id keys.ExecutionID) []string {
		var out []string
		var cur uint64
		for {
			e, err := vk.Do(ctx, vk.B().Scan().Cursor(cur).Match("*"+id.UUID().String()+"*").Count(1000).Build()).AsScanEntry()
			require.NoError(t, err)
			out = append(out, e.Elements...)
			if e.Cursor == 0 {
				return out
			}
			cur = e.Cursor
		}
	}
	member := func(key string, id keys.ExecutionID) bool {
		err := vk.Do(ctx, vk.B().Zscore().Key(key).Member(id.String()).Build()).Error()
		if valkey.IsValkeyNil(err) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	inAll := func(id keys.ExecutionID) bool {
		n, err := vk.Do(ctx, vk.B().Sismember().Key(pk.AllExecutions()).Member(id.String()).Build()).AsInt64()
		require.NoError(t, err)
		return n == 1
	}
	require.NotEmpty(t, keysOf(old))
	require.Eventually(t, func() bool { return len(keysOf(old)) == 0 && len(keysOf(short)) == 0 },
		10*interval+10*time.Second, 50*time.Millisecond, "the expired executions are purged")
	for _, id := range []keys.ExecutionID{old, short} {
		assert.Empty(t, keysOf(id), "no key of %s is left", id)
		assert.False(t, member(pk.LaneTerminal("default"), id))
		assert.False(t, inAll(id))
	}

	// The younger one and the non-terminal one are intact, a few more
	// cycles later.
	_, cycle, _ := status()
	require.Eventually(t, func() bool { _, cy, _ := status(); return cy >= cycle+3 }, 30*time.Second, 20*time.Millisecond)
	st, err := c.GetExecution(ctx, young)
	require.NoError(t, err)
	assert.Equal(t, "terminal", st.LifecyclePhase)
	res, err := c.Result(ctx, young)
	require.NoError(t, err)
	assert.Equal(t, "out", string(res))
	assert.True(t, inAll(young))
	st, err = c.GetExecution(ctx, pending)
	require.NoError(t, err)
	assert.Equal(t, "runnable", st.LifecyclePhase, "a non-terminal execution is never touched")
	assert.True(t, member(pk.LaneTerminal("default"), pending), "not even its stale entry")
	assert.True(t, inAll(pending))
	assert.Contains(t, keysOf(pending), keys.Exec(pending).Payload())
	_, _, restarts := status()
	assert.Zero(t, restarts)
}
