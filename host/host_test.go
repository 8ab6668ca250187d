package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/host/service/servicetest"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/internal/pgtest"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// pluginDir holds the test plugins, built once for the package;
// variantDir holds variants of the hostwork plugin (other bytes, other
// behaviour) that hot-swap tests install into plugin directories of their
// own.
var pluginDir, variantDir string

const testplugin = "github.com/ffscan/ffscan/host/internal/testplugin"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ffscan-host-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = os.Chmod(dir, 0o755)
	pluginDir = filepath.Join(dir, "plugins")
	variantDir = filepath.Join(dir, "variants")
	_ = os.Mkdir(pluginDir, 0o755)
	_ = os.Mkdir(variantDir, 0o755)
	builds := [][3]string{ // output, package, ldflags
		{filepath.Join(pluginDir, "hostwork"), testplugin, ""},
		{filepath.Join(pluginDir, "leaseexpiry"), "github.com/ffscan/ffscan/plugins/leaseexpiry/cmd/leaseexpiry", ""},
		{filepath.Join(pluginDir, "customscanner"), "github.com/ffscan/ffscan/examples/customscanner", ""},
		{filepath.Join(pluginDir, "timers"), "github.com/ffscan/ffscan/plugins/timers/cmd/timers", ""},
		{filepath.Join(variantDir, "pgreconcilers"), "github.com/ffscan/ffscan/plugins/pgreconcilers/cmd/pgreconcilers", ""},
		{filepath.Join(variantDir, "pgreconcilers-stripped"), "github.com/ffscan/ffscan/plugins/pgreconcilers/cmd/pgreconcilers", "-s -w"},
		{filepath.Join(variantDir, "demo"), "github.com/ffscan/ffscan/examples/demo", ""},
		{filepath.Join(variantDir, "unblock"), "github.com/ffscan/ffscan/plugins/unblock/cmd/unblock", ""},
		{filepath.Join(variantDir, "observers"), "github.com/ffscan/ffscan/plugins/observers/cmd/observers", ""},
		{filepath.Join(variantDir, "retention"), "github.com/ffscan/ffscan/plugins/retention/cmd/retention", ""},
		{filepath.Join(variantDir, "depreconciler"), "github.com/ffscan/ffscan/plugins/depreconciler/cmd/depreconciler", ""},
		{filepath.Join(variantDir, "v2"), testplugin, "-X main.version=1.0.1"},
		{filepath.Join(variantDir, "v3"), testplugin, "-X main.version=1.0.2"},
		{filepath.Join(variantDir, "exit"), testplugin, "-X main.mode=exit"},
		{filepath.Join(variantDir, "crash"), testplugin, "-X main.version=1.0.9-crash -X main.mode=crash"},
		{filepath.Join(variantDir, "api1"), testplugin, "-X main.version=0.9.0-api1 -X main.mode=api1"},
		{filepath.Join(variantDir, "raw99"), testplugin, "-X main.mode=raw99"},
		{filepath.Join(variantDir, "greedy"), testplugin, "-X main.mode=greedy"},
		{filepath.Join(variantDir, "wide"), testplugin, "-X main.version=1.1.0-wide -X main.mode=wide"},
		{filepath.Join(variantDir, "lanes"), testplugin, "-X main.mode=lanes"},
		{filepath.Join(variantDir, "retention-1h"), "github.com/ffscan/ffscan/host/internal/retentionbuild", "-X main.age=1h"},
		{filepath.Join(variantDir, "retention-same"), "github.com/ffscan/ffscan/host/internal/retentionbuild", ""},
	}
	errs := make(chan error, len(builds))
	for _, b := range builds {
		go func() {
			out, err := exec.Command("go", "build", "-ldflags", b[2], "-o", b[0], b[1]).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("build %s (%s): %v\n%s", b[1], b[2], err, out)
			} else {
				// As the catalog wants it whatever the umask.
				err = os.Chmod(b[0], 0o755)
			}
			errs <- err
		}()
	}
	for range builds {
		if err := <-errs; err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	scannertest.Cleanup() // the plugins a test built with scannertest.InstallPlugin
	os.Exit(code)
}

func testConfig(t *testing.T, addr string, sc config.Scanner) *config.Config {
	t.Helper()
	cfg := config.Defaults()
	cfg.Valkey.Addrs = []string{addr}
	cfg.Partitions = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}
	cfg.PluginDir = pluginDir
	cfg.HTTP.Listen = ""
	cfg.HTTP.AdminTokenFile = filepath.Join(t.TempDir(), "admin-token")
	cfg.PluginApprovalsFile = filepath.Join(t.TempDir(), "plugin-approvals.json")
	cfg.Supervisor.HealthInterval = 500 * time.Millisecond
	if sc.Plugin == "" {
		sc.Plugin = "hostwork"
	}
	if sc.Options == nil {
		sc.Options = map[string]string{}
	}
	sc.Enabled = true
	cfg.Scanners = map[string]config.Scanner{"hostwork": sc}
	return &cfg
}

// running starts a booted host in the background; stop cancels it and
// returns how long Run took to return.
func running(t *testing.T, cfg *config.Config, setup ...func(*Host)) (h *Host, stop func() time.Duration) {
	t.Helper()
	h, err := Boot(context.Background(), cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	require.NoError(t, err)
	for _, f := range setup {
		f(h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// Run's error is checked by stop, in the test's time: an assertion
	// made by this goroutine after the test ended would panic the whole
	// package's run.
	var runErr error
	go func() {
		defer close(done)
		runErr = h.Run(ctx)
	}()
	var stopped bool
	var took time.Duration
	stop = func() time.Duration {
		if stopped {
			return took
		}
		stopped = true
		t0 := time.Now()
		cancel()
		select {
		case <-done:
			assert.NoError(t, runErr, "Run")
		case <-time.After(cfg.ShutdownTimeout + 5*time.Second):
			t.Error("Run did not return after the shutdown timeout")
		}
		took = time.Since(t0)
		h.Close()
		return took
	}
	t.Cleanup(func() { stop() })
	return h, stop
}

// waitFor waits until cond holds, checking it whenever the host's status
// changes (a plugin started, stopped or swapped, a cycle ended, the
// scanners or the configuration changed): no polling. Conditions on the
// store are checked at every cycle end, which is when the scanners change
// it.
func waitFor(t *testing.T, h *Host, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	servicetest.WaitFor(t, &h.changes, timeout, cond, what)
}

func workKey(p uint16) string { return fmt.Sprintf("ff:idx:{fp:%d}:hostwork", p) }
func doneKey(p uint16) string { return fmt.Sprintf("ff:test:{fp:%d}:done", p) }

func addWork(t *testing.T, c valkey.Client, parts []uint16, perPartition int) int {
	t.Helper()
	n := 0
	for _, p := range parts {
		for i := range perPartition {
			require.NoError(t, c.Do(context.Background(), c.B().Zadd().Key(workKey(p)).ScoreMember().ScoreMember(float64(i+1), fmt.Sprintf("item-%d-%d", p, i)).Build()).Error())
			n++
		}
	}
	return n
}

// allDone reports whether every item moved from the work index to the
// done set.
func allDone(c valkey.Client, parts []uint16, want int) bool {
	got := 0
	for _, p := range parts {
		left, err := c.Do(context.Background(), c.B().Zcard().Key(workKey(p)).Build()).AsInt64()
		if err != nil || left != 0 {
			return false
		}
		n, err := c.Do(context.Background(), c.B().Scard().Key(doneKey(p)).Build()).AsInt64()
		if err != nil {
			return false
		}
		got += int(n)
	}
	return got == want
}

func doneCount(c valkey.Client, parts []uint16) int {
	got := 0
	for _, p := range parts {
		n, _ := c.Do(context.Background(), c.B().Scard().Key(doneKey(p)).Build()).AsInt64()
		got += int(n)
	}
	return got
}

func scannerStatus(h *Host) httpapi.ScannerStatus {
	for _, s := range h.Status().Scanners {
		if s.Name == "hostwork" {
			return s
		}
	}
	return httpapi.ScannerStatus{}
}

func TestEndToEndThroughPluginProcess(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 200 * time.Millisecond})
	cfg.HTTP.Listen = proctest.FreeAddr(t)
	h, _ := running(t, cfg)

	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == string(supervisor.StateRunning) })
	parts := []uint16{0, 5, 15}
	want := addWork(t, c, parts, 7)
	waitFor(t, h, 20*time.Second, "", func() bool { return allDone(c, parts, want) })

	st := scannerStatus(h)
	assert.Equal(t, "1.0.0", st.Version)
	assert.Len(t, st.SHA256, 64)
	assert.NotZero(t, st.Pid)
	assert.True(t, proctest.Alive(st.Pid))
	waitFor(t, h, 10*time.Second, "", func() bool { return scannerStatus(h).Processed >= int64(want) })

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + cfg.HTTP.Listen + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, _ := get("/healthz")
	assert.Equal(t, 200, code)
	code, body := get("/readyz")
	assert.Equal(t, 200, code, body)
	code, body = get("/metrics")
	assert.Equal(t, 200, code)
	for _, m := range []string{
		`ffscan_scanner_cycle_duration_seconds_count{scanner="hostwork"}`,
		`ffscan_scanner_cycles_total{scanner="hostwork"}`,
		`ffscan_scanner_items_processed_total{scanner="hostwork"}`,
		`ffscan_scanner_backlog{scanner="hostwork"}`,
		`ffscan_plugin_rpc_duration_seconds_count{method="scan_partition",scanner="hostwork"}`,
		`ffscan_callback_commands_total{scanner="hostwork"}`,
	} {
		assert.Contains(t, body, m)
	}
	code, body = get("/v1/status")
	assert.Equal(t, 200, code)
	var doc httpapi.StatusDoc
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Len(t, doc.Scanners, 1)
	assert.Equal(t, "running", doc.Scanners[0].State)
	assert.NotNil(t, doc.Scanners[0].LastCycleAt)
}

// kill -9 of the plugin while scans are in flight: the supervisor restarts
// it and every item is still handled (items stay in the index until the
// scanner removes them, so a lost call only delays them).
func TestKillPluginMidCycleRestartsWithoutLoss(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond, Batch: 2, Options: map[string]string{"delay": "150ms"}})
	cfg.Scheduler.Concurrency = 2
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	oldPid := scannerStatus(h).Pid

	parts := []uint16{1, 2, 3, 4, 5, 6, 7, 8}
	want := addWork(t, c, parts, 6)
	// Kill once some work was done but not all of it.
	waitFor(t, h, 20*time.Second, "", func() bool { return doneCount(c, parts) > 0 })
	require.Less(t, doneCount(c, parts), want, "the kill must land mid-work")
	require.NoError(t, syscall.Kill(oldPid, syscall.SIGKILL))

	waitFor(t, h, 30*time.Second, "", func() bool {
		st := scannerStatus(h)
		return st.Restarts >= 1 && st.State == "running" && st.Pid != oldPid
	})
	waitFor(t, h, 30*time.Second, "", func() bool { return allDone(c, parts, want) })
	assert.False(t, proctest.Alive(oldPid))
	assert.Contains(t, scannerStatus(h).LastError, "exited")
}

func TestWrongSHA256IsRefusedWithAClearError(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{SHA256: strings.Repeat("0", 64)})
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool {
		return strings.Contains(scannerStatus(h).LastError, "sha256 mismatch")
	})
	st := scannerStatus(h)
	assert.Contains(t, st.LastError, "configured pin is "+strings.Repeat("0", 64))
	assert.NotEqual(t, "running", st.State)
	assert.Zero(t, st.Pid, "nothing was launched")
	err := h.Ready(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hostwork")
}

// Cancelling Run while a scan is in flight (SIGTERM's path) stops within
// the shutdown timeout and leaves no plugin process behind.
func TestShutdownDuringScanIsBounded(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond, Options: map[string]string{"delay": "30s"}})
	cfg.Scheduler.CallTimeout = time.Minute
	cfg.ShutdownTimeout = 2 * time.Second
	h, stop := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	pid := scannerStatus(h).Pid
	addWork(t, c, []uint16{3}, 1)
	// The scanner picks it up within an interval or two and then sits in
	// its 30 s delay.
	waitFor(t, h, 30*time.Second, "a call in flight", func() bool { return h.units.Get("hostwork").Runner().Status().InFlight > 0 })

	took := stop()
	// The alternative is the 30 s delay; the margin is for a busy machine.
	assert.Less(t, took, cfg.ShutdownTimeout+5*time.Second, "Run returned within the shutdown timeout")
	proctest.WaitGone(t, pid, 5*time.Second, "plugin gone")
}

func TestScanOnceDryRunDoesNotMutate(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	h, err := Boot(context.Background(), cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	defer h.Close()
	addWork(t, c, []uint16{2, 9}, 3)

	sum, err := h.ScanOnce(context.Background(), "hostwork", -1, true)
	require.NoError(t, err)
	assert.Equal(t, 16, sum.Partitions)
	assert.Equal(t, 2, sum.Scanned)
	assert.Equal(t, 14, sum.Empty)
	assert.Equal(t, int64(6), sum.Skipped)
	assert.NotEmpty(t, sum.Notes)
	assert.False(t, allDone(c, []uint16{2, 9}, 6))

	sum, err = h.ScanOnce(context.Background(), "hostwork", 9, false)
	require.NoError(t, err)
	assert.Equal(t, 1, sum.Partitions)
	assert.Equal(t, int64(3), sum.Processed)
	assert.True(t, allDone(c, []uint16{9}, 3))
	assert.False(t, allDone(c, []uint16{2}, 3), "partition 2 was not part of this run")
}

func TestBootRefusesPartitionMismatch(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	h, err := Boot(context.Background(), cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	h.Close()
	cfg.Partitions.Flow = 32
	_, err = Boot(context.Background(), cfg, hclog.NewNullLogger())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "num_flow_partitions: configured 32, stored 16")
}

// A plugin whose calls keep running into call_timeout (here: a delay far
// longer than the timeout, while it still answers pings) is restarted,
// and status says why.
func TestPluginWithHungCallsIsRestarted(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond, Options: map[string]string{"delay": "1h"}})
	cfg.Scheduler.CallTimeout = 200 * time.Millisecond
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	pid := scannerStatus(h).Pid
	addWork(t, c, []uint16{3}, 1)
	// The restart is counted a moment before its reason is recorded:
	// wait for both.
	waitFor(t, h, 60*time.Second, "", func() bool {
		st := scannerStatus(h)
		return st.Restarts >= 1 && strings.Contains(st.LastError, "calls in a row ran into their deadline")
	})
	proctest.WaitGone(t, pid, 10*time.Second, "the hung plugin is gone")
}

// A plugin that declares commands no plugin may run (FLUSHALL, CONFIG) is
// refused at launch, with the reason, instead of running with a warning.
func TestPluginDeclaringDeniedCommandsIsRefused(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.PluginDir = ownPluginDir(t)
	install(t, cfg.PluginDir, "hostwork", variant("greedy"))
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool {
		return strings.Contains(scannerStatus(h).LastError, "declares commands no plugin may run: CONFIG, FLUSHALL")
	})
	assert.NotEqual(t, "running", scannerStatus(h).State)
}

// With many lanes, the lane census lets a lane-scoped scanner read only
// the lane keys that exist: an idle cycle costs next to nothing whatever
// the number of lanes, and work that appears in a lane that was empty is
// still found and done.
func TestLaneCensusFindsWorkInEmptyLanes(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 200 * time.Millisecond})
	cfg.PluginDir = ownPluginDir(t)
	install(t, cfg.PluginDir, "hostwork", variant("lanes"))
	cfg.Scheduler.LaneCensus = "on"
	cfg.Lanes = nil
	for i := range 400 {
		cfg.Lanes = append(cfg.Lanes, fmt.Sprintf("lane-%d", i))
	}
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" && h.census.Ready() })
	assert.Equal(t, "on", h.Status().LaneCensus)

	// Idle: a cycle reads no lane key (16 partitions x 400 lanes would
	// be 400 EXISTS commands per cycle at least; the census itself uses
	// SCAN, so the lane reads are what EXISTS and ZRANGE count).
	// A window counts only if the store epoch stayed the same: a read
	// that got no reply (possible on a loaded machine) starts a new
	// epoch, and then the census is rightly dropped and every lane read
	// once until the next pass.
	cycle := func() uint64 { return scannerStatus(h).Cycle }
	measured := false
	for try := 0; try < 5 && !measured; try++ {
		waitFor(t, h, 30*time.Second, "", h.census.Ready)
		// A cycle that began before the census was ready still reads
		// every lane: the window starts once a whole cycle began after.
		ready := cycle()
		waitFor(t, h, 30*time.Second, "", func() bool { return cycle() >= ready+2 })
		epoch, resets, start := h.epoch.Load(), h.census.Resets(), cycle()
		before := laneReads(t, c)
		waitFor(t, h, 30*time.Second, "", func() bool { return cycle() >= start+5 })
		reads := laneReads(t, c) - before
		if h.epoch.Load() != epoch || !h.census.Ready() {
			t.Logf("window %d: the store epoch changed (%d lane reads); measuring again", try, reads)
			continue
		}
		if h.census.Resets() != resets {
			t.Logf("window %d: the census was forgotten meanwhile (%d lane reads); measuring again", try, reads)
			continue
		}
		measured = true
		t.Logf("idle with 400 lanes and the census: %d lane reads (EXISTS, ZRANGE) over %d cycles", reads, cycle()-start)
		assert.Less(t, reads, int64(10), "no lane key exists: nothing to read")
	}
	require.True(t, measured, "five windows in a row saw the store epoch change")

	type item struct {
		part uint16
		lane string
	}
	items := []item{{3, "lane-17"}, {11, "lane-350"}, {0, "lane-0"}}
	for _, it := range items {
		fp := keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: it.part})
		require.NoError(t, c.Do(context.Background(), c.B().Zadd().Key("ff:idx:"+fp.Tag()+":lane:"+it.lane+":hostwork").ScoreMember().ScoreMember(1, "w-"+it.lane).Build()).Error())
	}
	waitFor(t, h, 30*time.Second, "", func() bool {
		for _, it := range items {
			n, err := c.Do(context.Background(), c.B().Sismember().Key(doneKey(it.part)).Member("w-"+it.lane).Build()).AsInt64()
			if err != nil || n != 1 {
				return false
			}
		}
		return true
	})
}

// laneReads counts the EXISTS and ZRANGE commands the server has run.
func laneReads(t *testing.T, c valkey.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || (name != "cmdstat_exists" && name != "cmdstat_zrange") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err)
		n += v
	}
	return n
}

// With postgres.dsn set, the host connects and recognises the schema
// before anything runs; a database whose schema it does not know stops
// the boot, saying what was found.
func TestBootRecognisesThePostgresSchema(t *testing.T) {
	t.Parallel()
	pg := pgtest.New(t)
	srv := testserver.New(t)
	ctx := context.Background()
	empty, err := pg.CreateDatabase(ctx, "empty")
	require.NoError(t, err)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.Postgres.DSN = empty
	_, err = Boot(ctx, cfg, hclog.NewNullLogger())
	require.ErrorIs(t, err, ErrBoot)
	assert.Contains(t, err.Error(), "no _sqlx_migrations table")

	migrated, err := pg.CreateDatabase(ctx, "migrated")
	require.NoError(t, err)
	postgrestest.MigrateLikeFlowFabric(t, migrated)
	cfg.Postgres.DSN, cfg.Postgres.PoolSize = migrated, 3
	h, err := Boot(ctx, cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	st := h.Status().Postgres
	require.NotNil(t, st)
	assert.Equal(t, "flowfabric migration 22", st.Schema)
	assert.Equal(t, 3, st.PoolSize)
	assert.Equal(t, postgres.LibraryVersion, st.Library, "the host installed ffscan's function library")

	// It went into ffscan's own schema; FlowFabric's ledger is as it was.
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: migrated, PoolSize: 1})
	require.NoError(t, err)
	defer pool.Close()
	var version, ledgerRows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT version FROM ffscan.library), (SELECT count(*) FROM _sqlx_migrations)").Scan(&version, &ledgerRows))
	assert.Equal(t, postgres.LibraryVersion, version)
	assert.Equal(t, 21, ledgerRows)
	h.Close()

	// Running, the host dispatches DAG completions committed on the
	// database (LISTEN) and says so in its status.
	cfg.Completions.Enabled = true
	rh, stop := running(t, cfg)
	defer stop()
	const a, b = "c0000000-0000-4000-8000-000000000001", "c0000000-0000-4000-8000-000000000002"
	dbPool, err := postgres.Connect(ctx, postgres.Options{DSN: migrated, PoolSize: 2})
	require.NoError(t, err)
	defer dbPool.Close()
	postgrestest.DAG(t, dbPool, 7, "f7000000-0000-4000-8000-000000000001", nil, [][2]string{{a, b}})
	waitFor(t, rh, 30*time.Second, "the Postgres completion listener starts with the host", func() bool { return rh.Status().Postgres.Completions != nil })
	// Committed before or after its LISTEN is in place: a catch-up after
	// each connect dispatches what came before.
	postgrestest.Complete(t, dbPool, 7, a, "success")
	waitFor(t, rh, 30*time.Second, "the downstream released by the host's listener", func() bool {
		var eligible string
		_ = dbPool.QueryRow(ctx, "SELECT eligibility_state FROM ff_exec_core WHERE execution_id = $1", b).Scan(&eligible)
		return eligible == "eligible_now"
	})
	waitFor(t, rh, 10*time.Second, "", func() bool { return rh.Status().Postgres.Completions.Dispatched == 1 })
}

// A host given a Postgres database and no Valkey serves the database
// alone: its completion listener dispatches, its status and readiness
// speak of Postgres only, and a Valkey scanner is refused with a message.
func TestPostgresOnlyHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPool := postgrestest.SchemaDB(t, 2)
	cfg := testConfig(t, "", config.Scanner{})
	cfg.Valkey.Addrs = nil
	cfg.Postgres.DSN = dbPool.Config().ConnString()

	h, err := Boot(ctx, cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	_, err = h.OpenSession(ctx, "hostwork", SessionOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "scanner hostwork works on Valkey and this host has none")
	h.Close()

	cfg.Scanners = map[string]config.Scanner{}
	cfg.Completions.Enabled = true
	rh, stop := running(t, cfg)
	defer stop()
	// The completion is committed once the listener listens and the host
	// owns every partition: before that, its notification would be left
	// to the dependency reconciler (not running here) or found by the
	// catch-up (dispatched without a route).
	waitFor(t, rh, 30*time.Second, "the listener listening, every flow partition owned", func() bool {
		st := rh.Status()
		c := st.Postgres.Completions
		return c != nil && c.Listening && st.Sharing != nil && st.Sharing.Owned["flow"] == 16
	})
	const a, b = "d0000000-0000-4000-8000-000000000001", "d0000000-0000-4000-8000-000000000002"
	postgrestest.DAG(t, dbPool, 3, "fd000000-0000-4000-8000-000000000001", nil, [][2]string{{a, b}})
	postgrestest.Complete(t, dbPool, 3, a, "success")
	waitFor(t, rh, 30*time.Second, "the downstream released by the listener (it owns every partition)",
		func() bool { c := rh.Status().Postgres.Completions; return c.Dispatched == 1 })
	st := rh.Status()
	assert.Empty(t, st.Valkey)
	assert.Nil(t, st.Completions, "no Valkey completion listener")
	require.NotNil(t, st.Sharing, "the hosts of a database share its partitions through it")
	assert.Equal(t, "postgres (filter none)", st.Sharing.Store)
	assert.Equal(t, map[string]int{"flow": 16, "budget": 4, "quota": 4}, st.Sharing.Owned, "a host alone owns every partition")
	assert.Len(t, st.Sharing.Partitions["flow"], 16)
	assert.NotNil(t, st.Sharing.ValidUntil)
	var held int
	require.NoError(t, dbPool.QueryRow(ctx, "SELECT count(*) FROM ffscan.share_owner WHERE host_id = $1 AND expires_at_ms > ffscan.now_ms()",
		st.Sharing.HostID).Scan(&held))
	assert.Equal(t, 24, held, "its entries in the database")
	metrics := gather(t, rh)
	assert.Equal(t, 16.0, metrics[`ffscan_sharing_owned_partitions{family="flow"}`])
	assert.Equal(t, 1.0, metrics[`ffscan_sharing_hosts`])
	assert.Equal(t, 1.0, metrics[`ffscan_sharing_info{host_id="`+st.Sharing.HostID+`",store="postgres (filter none)"}`])
	assert.Positive(t, metrics[`ffscan_sharing_valid_seconds`])
	assert.NoError(t, rh.Ready(ctx))
}

// gather reads the host's gauges and counters, by name{labels}.
func gather(t *testing.T, h *Host) map[string]float64 {
	t.Helper()
	mfs, err := h.Metrics().Registry.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			out[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out
}

// The due backlog of a Postgres scanner: counted from the candidate read
// where it returned less than a batch, and counted again where it came
// back full (batch 1 here).
func TestPostgresBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPool := postgrestest.SchemaDB(t, 2)
	for i, pk := range []int{3, 3, 3, 5} {
		eid := fmt.Sprintf("e0000000-0000-4000-8000-%012d", i)
		_, err := dbPool.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
			eligibility_state, public_state, attempt_state, created_at_ms, raw_fields)
			VALUES ($1, $2, 'default', 'active', 'leased', 'not_applicable', 'running', 'running_attempt', 1, '{}')`, pk, eid)
		require.NoError(t, err)
		_, err = dbPool.Exec(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, lease_epoch,
			lease_expires_at_ms) VALUES ($1, $2, 0, 'w', 1, ffscan.now_ms() - 1000)`, pk, eid)
		require.NoError(t, err)
	}
	cfg := testConfig(t, "", config.Scanner{})
	cfg.Valkey.Addrs = nil
	cfg.Postgres.DSN = dbPool.Config().ConnString()
	cfg.Scanners = map[string]config.Scanner{pgreconcilers.AttemptTimeoutName: {Enabled: true, Batch: 1, Options: map[string]string{}}}
	h, err := Boot(ctx, cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	defer h.Close()
	s, err := h.OpenSession(ctx, pgreconcilers.AttemptTimeoutName, SessionOptions{Linked: pgreconcilers.NewAttemptTimeout(), DryRun: true})
	require.NoError(t, err)
	defer s.Close()
	sum, err := s.Cycle(ctx, -1)
	require.NoError(t, err)
	assert.True(t, sum.BacklogKnown)
	assert.Equal(t, int64(4), sum.Backlog, "3 in partition 3 (its read was full), 1 in partition 5")
	assert.Equal(t, 2, sum.Scanned)
	assert.GreaterOrEqual(t, sum.Lag, time.Second, "the oldest lapse waited at least its second")
}
