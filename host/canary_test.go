package host

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// canaryHost runs retention_trimmer from the stock plugin (retention of
// 3 h, swaps through a canary promoted after promoteAfter clean cycles)
// and gives a world to plant ended executions in.
func canaryHost(t *testing.T, promoteAfter int) (*Host, *config.Config, *scannertest.World) {
	t.Helper()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.PluginDir = ownPluginDir(t)
	copyFile(t, variant("retention"), cfg.PluginDir+"/retention")
	cfg.Scanners = map[string]config.Scanner{"retention_trimmer": {Enabled: true, Plugin: "retention", Interval: 200 * time.Millisecond,
		Options: map[string]string{"default_retention": "3h", "min_retention": "1h"}, Mode: config.ModeAct,
		Swap: config.SwapCanary, CanaryPromoteAfter: promoteAfter}}
	cfg.Watch.Interval = 100 * time.Millisecond
	cfg.Supervisor.HealthInterval = 3 * time.Second
	cfg.Supervisor.SwapProbation = 0
	cfg.Completions.Enabled = false
	h, _ := running(t, cfg)
	w := scannertest.NewWorld(t, c, client.Options{Partitions: h.parts, Namespace: "ns"})
	return h, cfg, w
}

// endedAgo plants n executions that ended d ago (their completion time
// and terminal index score set back).
func endedAgo(t *testing.T, w *scannertest.World, n int, d time.Duration) []keys.ExecutionID {
	t.Helper()
	var ids []keys.ExecutionID
	for range n {
		r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Lane: "default", Kind: "k"})
		require.NoError(t, err)
		task := w.Claim(w.Worker(client.WorkerOptions{WorkerID: "w", InstanceID: "i-" + keys.NewUUID().String(), Lanes: []string{"default"}}))
		require.Equal(t, r.ID, task.ID())
		_, err = task.Complete(w.Ctx, nil)
		require.NoError(t, err)
		then := strconv.FormatInt(w.NowMs()-d.Milliseconds(), 10)
		w.Do("HSET", keys.Exec(r.ID).Core(), "completed_at", then)
		w.Do("ZADD", keys.FlowPart(r.ID.Partition()).LaneTerminal("default"), then, r.ID.String())
		ids = append(ids, r.ID)
	}
	return ids
}

func retentionStatus(h *Host) httpapi.ScannerStatus {
	for _, s := range h.Status().Scanners {
		if s.Name == "retention_trimmer" {
			return s
		}
	}
	return httpapi.ScannerStatus{}
}

func exists(w *scannertest.World, id keys.ExecutionID) bool {
	n, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Exists().Key(keys.Exec(id).Core()).Build()).AsInt64()
	return err == nil && n == 1
}

// Swapping retention_trimmer for a build with a shorter retention holds
// the swap: the new binary runs as a canary, acts on nothing, and shows
// the extra executions it would purge (only_new), while both purge what
// both find due (same). It is never promoted on its own, and aborting it
// leaves the running process serving, every cycle, as before.
func TestCanaryOfAShorterRetentionIsHeldAndShowsWhatItWouldPurge(t *testing.T) {
	t.Parallel()
	h, cfg, w := canaryHost(t, 2)
	ctx := context.Background()
	waitFor(t, h, time.Minute, "no cycle", func() bool { return retentionStatus(h).Cycle >= 2 })
	before := retentionStatus(h)
	extra := endedAgo(t, w, 3, 2*time.Hour) // due under 1 h, not under 3 h

	install(t, cfg.PluginDir, "retention", variant("retention-1h"))
	newSHA := fileSHA(t, variant("retention-1h"))
	waitFor(t, h, time.Minute, "the file watch never started a canary", func() bool {
		cs := retentionStatus(h).Canary
		return cs != nil && cs.State == canary.Comparing && cs.To.SHA256 == newSHA
	})
	both := endedAgo(t, w, 2, 5*time.Hour) // due under both
	waitFor(t, h, time.Minute, "the running version never purged what both find due", func() bool {
		return !exists(w, both[0]) && !exists(w, both[1])
	})
	// Enough cycles after that to see every extra execution differ.
	cycle := retentionStatus(h).Canary.Cycles
	waitFor(t, h, time.Minute, "no more canary cycles", func() bool { return retentionStatus(h).Canary.Cycles >= cycle+3 })

	st := retentionStatus(h)
	cs := st.Canary
	t.Logf("canary: %+v", *cs)
	assert.Equal(t, before.Pid, st.Pid, "the running process is the one from before the canary")
	assert.Equal(t, before.SHA256, st.SHA256)
	assert.Equal(t, canary.Comparing, cs.State, "a canary with differences is never promoted on its own")
	assert.Equal(t, before.SHA256, cs.From.SHA256)
	assert.Positive(t, cs.WithDifference)
	assert.Zero(t, cs.Items[canary.OnlyOld])
	assert.Zero(t, cs.Items[canary.Differ])
	assert.GreaterOrEqual(t, cs.Items["same"], uint64(2), "both purged the executions due under both")
	for _, id := range extra {
		assert.True(t, exists(w, id), "the canary acts on nothing: %s is still there", id)
		found := slices.ContainsFunc(cs.Latest, func(d canary.Diff) bool {
			return d.Kind == canary.OnlyNew && len(d.New) > 0 && containsID(d.Item, id)
		})
		assert.True(t, found, "the differences name %s as one only the canary would purge", id)
	}

	// Abort: the canary goes, the running process serves on, every
	// cycle, and the aborted file is not started again.
	res, err := h.Canary(ctx, "retention_trimmer", httpapi.CanaryAbort, "test")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	assert.Equal(t, canary.Aborted, res.Canary.State)
	c0 := retentionStatus(h).Cycle
	waitFor(t, h, time.Minute, "cycles stopped after the abort", func() bool { return retentionStatus(h).Cycle >= c0+5 })
	after := retentionStatus(h)
	assert.Equal(t, before.Pid, after.Pid, "the running process never changed")
	assert.Equal(t, before.SHA256, after.SHA256)
	assert.Zero(t, after.FailedPartitions, "no cycle failed")
	assert.Zero(t, after.Errors)
	for _, id := range extra {
		assert.True(t, exists(w, id), "nothing was purged by the aborted canary: %s", id)
	}
	assert.Equal(t, canary.Aborted, after.Canary.State)
	// Its digest is remembered: the same file does not start it again.
	_, rejected := h.units.CanaryRejected("retention_trimmer", newSHA)
	assert.True(t, rejected)
}

func containsID(item string, id keys.ExecutionID) bool {
	return strings.Contains(item, id.String())
}

// A build whose decisions are the running one's is promoted after
// canary_promote_after cycles without a difference: a hot swap to
// exactly the bytes compared.
func TestCanaryWithIdenticalDecisionsIsPromoted(t *testing.T) {
	t.Parallel()
	h, cfg, w := canaryHost(t, 3)
	waitFor(t, h, time.Minute, "no cycle", func() bool { return retentionStatus(h).Cycle >= 1 })
	before := retentionStatus(h)
	install(t, cfg.PluginDir, "retention", variant("retention-same"))
	newSHA := fileSHA(t, variant("retention-same"))
	waitFor(t, h, time.Minute, "no canary", func() bool {
		cs := retentionStatus(h).Canary
		return cs != nil && cs.To.SHA256 == newSHA
	})
	due := endedAgo(t, w, 3, 5*time.Hour)
	waitFor(t, h, 2*time.Minute, "the canary was never promoted", func() bool {
		st := retentionStatus(h)
		if os.Getenv("CANARY_DEBUG") != "" {
			t.Logf("%s %+v", st.SHA256[:8], *st.Canary)
		}
		return st.Canary.State == canary.Promoted && st.SHA256 == newSHA
	})
	st := retentionStatus(h)
	t.Logf("canary: %+v", *st.Canary)
	assert.NotEqual(t, before.Pid, st.Pid)
	assert.Zero(t, st.Canary.Differences())
	assert.GreaterOrEqual(t, st.Canary.Clean, uint64(3))
	waitFor(t, h, time.Minute, "the due executions were never purged", func() bool {
		for _, id := range due {
			if exists(w, id) {
				return false
			}
		}
		return true
	})
	// The promoted build keeps serving: cycles go on.
	c0 := st.Cycle
	waitFor(t, h, time.Minute, "no cycle after the promotion", func() bool { return retentionStatus(h).Cycle >= c0+2 })
}

// An operator starts, sees and promotes a canary by hand; requests that
// make no sense are refused with the reason and change nothing.
func TestCanaryByHand(t *testing.T) {
	t.Parallel()
	h, cfg, _ := canaryHost(t, 0)
	ctx := context.Background()
	waitFor(t, h, time.Minute, "no cycle", func() bool { return retentionStatus(h).Cycle >= 1 })
	res, err := h.Canary(ctx, "retention_trimmer", httpapi.CanaryStart, "test")
	require.NoError(t, err)
	assert.Contains(t, res.Error, "holds the bytes that run now", "nothing new to compare")
	_, err = h.Canary(ctx, "nope", httpapi.CanaryStart, "test")
	assert.ErrorIs(t, err, httpapi.ErrNotFound)
	_, err = h.Canary(ctx, "retention_trimmer", httpapi.CanaryPromote, "test")
	assert.ErrorIs(t, err, httpapi.ErrNotFound, "no canary to promote")

	// Direct swaps from the watch are off for this one: start by hand.
	cfg2 := *cfg
	sc := cfg.Scanners["retention_trimmer"]
	sc.Swap = config.SwapDirect
	cfg2.Scanners = map[string]config.Scanner{"retention_trimmer": sc}
	cfg2.Watch.Plugins = false
	_, err = h.Reload(ctx, &cfg2, "test")
	require.NoError(t, err)
	install(t, cfg.PluginDir, "retention", variant("retention-same"))
	res, err = h.Canary(ctx, "retention_trimmer", httpapi.CanaryStart, "test")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	assert.Equal(t, canary.Comparing, res.Canary.State)
	res, err = h.Canary(ctx, "retention_trimmer", httpapi.CanaryStart, "test")
	require.NoError(t, err)
	assert.Contains(t, res.Error, "already has a canary")
	c0 := retentionStatus(h).Canary.Cycles
	waitFor(t, h, time.Minute, "no canary cycle", func() bool { return retentionStatus(h).Canary.Cycles >= c0+2 })
	assert.Equal(t, canary.Comparing, retentionStatus(h).Canary.State, "promote_after 0: only an operator promotes")
	res, err = h.Canary(ctx, "retention_trimmer", httpapi.CanaryPromote, "test")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	assert.Equal(t, canary.Promoted, res.Canary.State)
	assert.Equal(t, fileSHA(t, variant("retention-same")), retentionStatus(h).SHA256)
}
