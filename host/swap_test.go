package host

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/filewatch"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// ownPluginDir is a plugin directory for one test, holding copies of the
// shared test plugins, so the test can replace files in it.
func ownPluginDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugins")
	require.NoError(t, os.Mkdir(dir, 0o755))
	for _, n := range names {
		copyFile(t, filepath.Join(pluginDir, n), filepath.Join(dir, n))
	}
	return dir
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// install replaces dir/name with src the way operators should: write a
// hidden file next to it, then rename it into place (atomic; the running
// process keeps its own inode).
func install(t *testing.T, dir, name, src string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".new")
	copyFile(t, src, tmp)
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
}

func variant(name string) string { return filepath.Join(variantDir, name) }

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	sha, err := filewatch.Hash(path)
	require.NoError(t, err)
	return sha
}

// producer adds work items to random partitions until stopped, and says
// how many it added.
type producer struct {
	c     valkey.Client
	parts []uint16
	n     atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

func produce(c valkey.Client, parts []uint16, every time.Duration) *producer {
	p := &producer{c: c, parts: parts, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			part := parts[rand.IntN(len(parts))]
			if err := c.Do(context.Background(), c.B().Zadd().Key(workKey(part)).ScoreMember().ScoreMember(1, fmt.Sprintf("load-%d", i)).Build()).Error(); err == nil {
				p.n.Add(1)
			}
		}
	}()
	return p
}

func (p *producer) finish() int {
	close(p.stop)
	<-p.done
	return int(p.n.Load())
}

// cycleClock follows a scanner's cycle starts (at every status change: a
// cycle's end reports its start) and keeps the longest gap between two
// consecutive ones.
type cycleClock struct {
	mu     sync.Mutex
	maxGap time.Duration
	starts int
	stop   chan struct{}
	done   chan struct{}
}

func watchCycles(h *Host) *cycleClock {
	c := &cycleClock{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		var last time.Time
		for {
			changed := h.changes.C()
			if st := scannerStatus(h); st.LastCycleAt != nil && !st.LastCycleAt.Equal(last) {
				c.mu.Lock()
				if !last.IsZero() {
					c.maxGap = max(c.maxGap, st.LastCycleAt.Sub(last))
				}
				c.starts++
				c.mu.Unlock()
				last = *st.LastCycleAt
			}
			select {
			case <-c.stop:
				return
			case <-changed:
			}
		}
	}()
	return c
}

func (c *cycleClock) finish() (time.Duration, int) {
	close(c.stop)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxGap, c.starts
}

// Swap the plugin binary over and over while work flows: every swap
// switches, no cycle is skipped or fails, no scan fails, every item is
// handled exactly once, and every old process is gone at the end. Half
// of the swaps come from the file watch, half from the admin call.
func TestHotSwapUnderLoad(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	const interval = 200 * time.Millisecond
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: interval, Batch: 5})
	cfg.PluginDir = ownPluginDir(t, "hostwork")
	cfg.Scheduler.Concurrency = 4
	cfg.Supervisor.SwapProbation = 300 * time.Millisecond
	// The new process's health check pings with min(health_interval, 5 s):
	// on a machine busy with the rest of the suite a ping can take longer
	// than the test default's 500 ms, and a slow ping is not this test's
	// subject.
	cfg.Supervisor.HealthInterval = 3 * time.Second
	cfg.Watch.Interval = 100 * time.Millisecond
	cfg.Completions.Enabled = false
	h, _ := running(t, cfg)
	// Measure from the first cycle on (the runner starts with a random
	// delay of up to an interval).
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).Cycle >= 1 })

	parts := []uint16{0, 1, 2, 3, 5, 8, 13, 15}
	load := produce(c, parts, 2*time.Millisecond)
	clock := watchCycles(h)
	startCycle := scannerStatus(h).Cycle
	t0 := time.Now()

	binaries := []string{variant("v2"), variant("v3"), filepath.Join(pluginDir, "hostwork")}
	const swaps = 6
	pids := []int{scannerStatus(h).Pid}
	for i := range swaps {
		src := binaries[i%len(binaries)]
		want := fileSHA(t, src)
		install(t, cfg.PluginDir, "hostwork", src)
		if i%2 == 0 {
			// The file watch notices and swaps.
			waitFor(t, h, 30*time.Second, fmt.Sprintf("swap %d by the file watch", i), func() bool {
				st := scannerStatus(h)
				return st.SHA256 == want && st.LastSwap != nil && !st.LastSwap.Probation
			})
		} else {
			// An explicit reload, waiting out probation.
			res, err := h.ReloadPlugin(context.Background(), "hostwork", false, true)
			require.NoError(t, err)
			if res.Outcome == "unchanged" {
				// The watch was quicker; wait for its probation.
				waitFor(t, h, 30*time.Second, "", func() bool { st := scannerStatus(h); return st.LastSwap != nil && !st.LastSwap.Probation })
			} else {
				require.Equal(t, "kept", res.Outcome, "swap %d: %+v", i, res)
				assert.Equal(t, want, res.ToSHA256)
			}
		}
		st := scannerStatus(h)
		require.Equal(t, want, st.SHA256)
		require.Equal(t, "running", st.State)
		pids = append(pids, st.Pid)
		// Some cycles run on the new process.
		cycled := st.Cycle
		waitFor(t, h, 30*time.Second, "cycles on the new process", func() bool { return scannerStatus(h).Cycle >= cycled+3 })
	}
	elapsed := time.Since(t0)
	produced := load.finish()
	maxGap, starts := clock.finish()
	t.Logf("observed cycle starts: %d", starts)
	waitFor(t, h, 30*time.Second, "", func() bool { return allDone(c, parts, produced) })
	// Status counts a cycle's items when the whole cycle ends, so the
	// cycle that did the last items may still be running now. Once a
	// cycle that started after this point has ended, every item is
	// counted: then the count must be exact (ZREM's reply counts an item
	// for the one call that removed it, so a double handling would show
	// as more, a lost result as fewer).
	settled := scannerStatus(h).Cycle + 2
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).Cycle >= settled })

	st := scannerStatus(h)
	cycles := int(st.Cycle - startCycle)
	expected := int(elapsed / interval)
	t.Logf("%d swaps in %s under load: %d cycles (about %d expected at %s), longest gap between cycle starts %s, %d items produced and processed, %d failed partitions, %d errors",
		st.Swaps, elapsed.Round(time.Millisecond), cycles, expected, interval, maxGap.Round(time.Millisecond), produced, st.FailedPartitions, st.Errors)
	assert.Equal(t, swaps, st.Swaps)
	assert.Zero(t, st.Restarts)
	assert.Zero(t, st.FailedPartitions, "no scan failed")
	assert.Zero(t, st.Errors, "no item failed")
	assert.Equal(t, int64(produced), st.Processed, "every item handled exactly once")
	cycleErrors := h.units.Get("hostwork").Runner().Status().CycleErrors
	// No cycle was lost to a swap: a cycle that found no plugin to call
	// counts as a cycle error. (How close the cycles kept to the interval
	// is logged above, not asserted: on a busy machine that is the
	// machine's speed, not the swap's correctness; the benchmarks measure
	// it.)
	assert.Zero(t, cycleErrors, "every cycle ran")
	for _, pid := range pids[:len(pids)-1] {
		proctest.WaitGone(t, pid, 10*time.Second, "old plugin %d stopped", pid)
	}
	assert.True(t, proctest.Alive(pids[len(pids)-1]))
}

// A new binary that fails its handshake never serves; the old one keeps
// serving without a gap, and the file watch does not retry the same file.
func TestHotSwapToBinaryThatFailsHandshakeKeepsTheOld(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond})
	cfg.PluginDir = ownPluginDir(t, "hostwork")
	cfg.Watch.Interval = 100 * time.Millisecond
	// The default start timeout: the broken binary exits at once, failing
	// its handshake whatever the timeout, while the good one's launch
	// must not race a short one on a busy machine (3 s did: its Info
	// call timed out, and it never ran).
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	before := scannerStatus(h)

	install(t, cfg.PluginDir, "hostwork", variant("exit"))
	waitFor(t, h, 30*time.Second, "", func() bool {
		st := scannerStatus(h)
		return st.LastSwap != nil && st.LastSwap.Outcome == "failed"
	})
	st := scannerStatus(h)
	assert.Equal(t, before.Pid, st.Pid)
	assert.Equal(t, before.SHA256, st.SHA256)
	assert.Equal(t, "running", st.State)
	assert.Contains(t, st.LastSwap.Reason, "plugin")
	assert.Equal(t, fileSHA(t, variant("exit")), st.LastSwap.ToSHA256)
	assert.Zero(t, st.Swaps)

	// Work still flows through the old process.
	parts := []uint16{4, 9}
	want := addWork(t, c, parts, 3)
	waitFor(t, h, 20*time.Second, "", func() bool { return allDone(c, parts, want) })

	// An explicit reload reports why, without launching it again.
	res, err := h.ReloadPlugin(context.Background(), "hostwork", false, true)
	require.NoError(t, err)
	assert.Equal(t, "failed", res.Outcome)
	assert.Contains(t, res.Error, "already tried and rejected")
	assert.Equal(t, before.Pid, res.Pid)
}

// A new binary that crashes right after the switch is rolled back: the
// old process, kept on probation, serves again.
func TestHotSwapToBinaryThatCrashesRollsBack(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond})
	cfg.PluginDir = ownPluginDir(t, "hostwork")
	cfg.Watch.Plugins = false
	cfg.Supervisor.SwapProbation = 20 * time.Second
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	before := scannerStatus(h)

	// The new binary crashes when the test says so: once the swap has
	// switched to it, during its probation.
	install(t, cfg.PluginDir, "hostwork", variant("crash"))
	h.testSignals.pluginSwitched.Init()
	type reload struct {
		res httpapi.PluginSwapResult
		err error
	}
	reloaded := make(chan reload, 1)
	go func() {
		res, err := h.ReloadPlugin(context.Background(), "hostwork", false, true)
		reloaded <- reload{res, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pid, err := h.testSignals.pluginSwitched.Wait(ctx)
	require.NoError(t, err, "the swap did not switch to the new plugin")
	require.NotEqual(t, before.Pid, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGUSR1))
	var r reload
	select {
	case r = <-reloaded:
	case <-ctx.Done():
		t.Fatal("the reload did not settle")
	}
	require.NoError(t, r.err)
	res := r.res
	assert.Equal(t, "rolled_back", res.Outcome, "%+v", res)
	assert.Contains(t, res.Error, "plugin process exited")
	assert.Equal(t, before.Pid, res.Pid)

	st := scannerStatus(h)
	assert.Equal(t, "running", st.State)
	assert.Equal(t, before.Pid, st.Pid)
	assert.Equal(t, before.SHA256, st.SHA256)
	assert.Equal(t, "rolled_back", st.LastSwap.Outcome)
	assert.Contains(t, st.LastError, "hot swap rolled back")
	assert.Zero(t, st.Restarts)
	assert.True(t, proctest.Alive(before.Pid))

	parts := []uint16{6, 7}
	want := addWork(t, c, parts, 3)
	waitFor(t, h, 20*time.Second, "", func() bool { return allDone(c, parts, want) })
}

// A plugin built against scanner API version 1 runs; an options change,
// which a version 1 scanner cannot take in place, relaunches it by a hot
// swap. A plugin speaking a version this host does not run is refused
// with a message naming both sides.
func TestOlderAPIVersionRunsAndNewerIsRefused(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond})
	cfg.PluginDir = ownPluginDir(t)
	copyFile(t, variant("api1"), filepath.Join(cfg.PluginDir, "hostwork"))
	copyFile(t, variant("raw99"), filepath.Join(cfg.PluginDir, "future"))
	cfg.Scanners["future"] = config.Scanner{Enabled: true, Plugin: "future", Options: map[string]string{}}
	cfg.Supervisor.SwapProbation = 0
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	st := scannerStatus(h)
	assert.Equal(t, 1, st.APIVersion)
	assert.Equal(t, "0.9.0-api1", st.Version)
	parts := []uint16{3}
	want := addWork(t, c, parts, 4)
	waitFor(t, h, 20*time.Second, "", func() bool { return allDone(c, parts, want) })

	n := *h.Config()
	n.Scanners = map[string]config.Scanner{
		"hostwork": {Enabled: true, Plugin: "hostwork", Interval: 100 * time.Millisecond, Options: map[string]string{"delay": "1ms"}},
		"future":   {Enabled: false, Plugin: "future", Options: map[string]string{}},
	}
	res, err := h.Reload(context.Background(), &n, "test")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	require.Len(t, res.Plugins, 1)
	assert.Equal(t, "swapped", res.Plugins[0].Outcome, "a v1 plugin takes new options by a new process")
	assert.NotEqual(t, st.Pid, scannerStatus(h).Pid)

	var future httpapi.ScannerStatus
	for _, s := range h.Status().Scanners {
		if s.Name == "future" {
			future = s
		}
	}
	assert.Equal(t, "stopped", future.State, "disabled by the reload")
}

func TestNewerAPIVersionIsRefused(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.PluginDir = ownPluginDir(t)
	copyFile(t, variant("raw99"), filepath.Join(cfg.PluginDir, "hostwork"))
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).LastError != "" })
	st := scannerStatus(h)
	assert.NotEqual(t, "running", st.State)
	assert.Contains(t, st.LastError, "speaks scanner API version 99; this host runs versions 1 to 2")
}

// A new binary that declares more than the approved policy (here DEL on
// any key) is refused, the running plugin keeps serving, and status says
// what it would add; once the operator approved the new policy, a forced
// reload swaps to it.
func TestHotSwapThatWidensThePolicyWaitsForApproval(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond})
	cfg.PluginDir = ownPluginDir(t, "hostwork")
	cfg.Watch.Plugins = false
	// The swap that must succeed health-checks the new process; a slow
	// ping on a busy machine is not what this test is about (as in
	// TestHotSwapUnderLoad).
	cfg.Supervisor.HealthInterval = 3 * time.Second
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	before := scannerStatus(h)
	require.NotEmpty(t, before.Policy, "status names the approved policy")

	store, err := policy.NewStore(cfg.PluginApprovalsFile, policy.Required)
	require.NoError(t, err)
	rec, ok, err := store.Lookup("hostwork")
	require.NoError(t, err)
	require.True(t, ok, "approved on first use")
	assert.Equal(t, "first use", rec.ApprovedBy)
	assert.Equal(t, before.Policy, rec.Digest)

	install(t, cfg.PluginDir, "hostwork", variant("wide"))
	res, err := h.ReloadPlugin(context.Background(), "hostwork", false, true)
	require.NoError(t, err)
	assert.Equal(t, "failed", res.Outcome, "%+v", res)
	assert.Contains(t, res.Error, "declares more than its approved policy")
	assert.Contains(t, res.Error, "+ DEL (any ff: key)")
	assert.Contains(t, res.Error, "ffscan plugins approve hostwork")
	st := scannerStatus(h)
	assert.Equal(t, "running", st.State)
	assert.Equal(t, before.Pid, st.Pid)
	assert.Equal(t, before.SHA256, st.SHA256)

	parts := []uint16{2, 5}
	want := addWork(t, c, parts, 3)
	waitFor(t, h, 20*time.Second, "the old plugin still works", func() bool { return allDone(c, parts, want) })

	// The operator approves what the new binary declares.
	_, err = store.Approve("hostwork", fileSHA(t, variant("wide")), wideHostworkPolicy())
	require.NoError(t, err)
	res, err = h.ReloadPlugin(context.Background(), "hostwork", true, true)
	require.NoError(t, err)
	assert.Equal(t, "kept", res.Outcome, "%+v", res)
	st = scannerStatus(h)
	assert.Equal(t, fileSHA(t, variant("wide")), st.SHA256)
	assert.Equal(t, wideHostworkPolicy().Digest(), st.Policy)
}

// wideHostworkPolicy is what the "wide" test plugin declares.
func wideHostworkPolicy() policy.Policy {
	return policy.Policy{
		Commands: map[string][]string{
			"ZREM": {"ff:idx:{*}:hostwork"},
			"SADD": {"ff:test:{*}:done"},
			"DEL":  nil,
		},
		Schedule: &policy.Schedule{Family: "flow", Sources: []string{"work: zset_due ff:idx:{p}:hostwork backlog due"}, Batch: 20},
	}
}
