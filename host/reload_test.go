package host

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// fileConfig runs a host whose configuration comes from a YAML file the
// test rewrites; the file watch reloads it.
type fileConfig struct {
	path string
	base string // fixed part: server, plugin dir, timings
}

func newFileConfig(t *testing.T, addr, pluginDir string) *fileConfig {
	t.Helper()
	base := "valkey: {addrs: [\"" + addr + "\"]}\n" +
		"partitions: {flow: 16, budget: 4, quota: 4}\n" +
		"plugin_dir: " + pluginDir + "\n" +
		"http: {listen: \"\"}\n" +
		"log: {level: warn}\n" +
		"supervisor: {health_interval: 500ms, swap_probation: 0s}\n" +
		"watch: {interval: 100ms}\n" +
		"completions: {enabled: false}\n" +
		"plugin_approvals_file: " + filepath.Join(t.TempDir(), "plugin-approvals.json") + "\n"
	return &fileConfig{path: filepath.Join(t.TempDir(), "ffscan.yaml"), base: base}
}

// write replaces the file atomically (as editors and config management
// do), with the scanners section given.
func (f *fileConfig) write(t *testing.T, scanners string) {
	t.Helper()
	tmp := f.path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(f.base+scanners), 0o600))
	require.NoError(t, os.Rename(tmp, f.path))
}

func (f *fileConfig) load() (*config.Config, error) {
	return config.Load(config.Sources{File: f.path, Environ: []string{}})
}

func (f *fileConfig) start(t *testing.T) *Host {
	t.Helper()
	cfg, err := f.load()
	require.NoError(t, err)
	h, _ := running(t, cfg, func(h *Host) { h.SetConfigSource(ConfigSource{Load: f.load, File: f.path}) })
	return h
}

func statusOf(h *Host, name string) httpapi.ScannerStatus {
	for _, s := range h.Status().Scanners {
		if s.Name == name {
			return s
		}
	}
	return httpapi.ScannerStatus{}
}

// Enabling and disabling scanners by editing the config file: the watch
// reloads it, the enabled scanner's plugin starts, the disabled one's
// stops after its current call, interval and batch changes show from the
// next cycle, and an options change reaches the running (API v2) plugin
// in place.
func TestReloadEnablesAndDisablesScanners(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	f := newFileConfig(t, srv.Addr, pluginDir)
	f.write(t, `
scanners:
  hostwork: {interval: 100ms}
  lease_expiry: {enabled: false, plugin: leaseexpiry}
`)
	h := f.start(t)
	waitFor(t, h, 30*time.Second, "", func() bool { return statusOf(h, "hostwork").State == "running" })
	assert.Equal(t, "stopped", statusOf(h, "lease_expiry").State)
	hostworkPid := statusOf(h, "hostwork").Pid

	// Enable leaseexpiry, retune hostwork and give it an option.
	f.write(t, `
scanners:
  hostwork: {interval: 300ms, batch: 7, options: {delay: 1ms}}
  lease_expiry: {enabled: true, plugin: leaseexpiry, interval: 500ms}
`)
	waitFor(t, h, 30*time.Second, "", func() bool { return statusOf(h, "lease_expiry").State == "running" })
	hw := statusOf(h, "hostwork")
	assert.Equal(t, "300ms", hw.Interval)
	assert.Equal(t, 7, hw.Batch)
	assert.Equal(t, hostworkPid, hw.Pid, "new options reach an API v2 plugin in place")
	assert.Equal(t, 1, h.Status().Config.Reloads)
	le := statusOf(h, "lease_expiry")
	assert.True(t, le.Enabled)
	assert.NotZero(t, le.Pid)
	waitFor(t, h, 10*time.Second, "", func() bool { return statusOf(h, "lease_expiry").Cycle >= 1 })

	// Disable hostwork: no new work is dispatched, its plugin stops (a
	// call in flight finishes first: TestDisableFinishesTheCallInFlight).
	f.write(t, `
scanners:
  hostwork: {enabled: false, interval: 300ms, batch: 7, options: {delay: 1500ms}}
  lease_expiry: {enabled: true, plugin: leaseexpiry, interval: 500ms}
`)
	waitFor(t, h, 10*time.Second, "", func() bool { return h.Status().Config.Reloads == 2 })
	// (A disabled scanner's other changes are moot: it just stops.)
	waitFor(t, h, 10*time.Second, "", func() bool { return statusOf(h, "hostwork").State == "stopped" })
	proctest.WaitGone(t, hostworkPid, 20*time.Second, "the disabled plugin stopped")
	parts := []uint16{2}
	addWork(t, c, parts, 2)
	// Two cycles of the other scanner (about a second) pass.
	cycled := statusOf(h, "lease_expiry").Cycle
	waitFor(t, h, 30*time.Second, "the other scanner cycles", func() bool { return statusOf(h, "lease_expiry").Cycle >= cycled+2 })
	assert.Zero(t, doneCount(c, parts), "a disabled scanner does no work")
	assert.Equal(t, "running", statusOf(h, "lease_expiry").State, "the other scanner is untouched")
	assert.NoError(t, h.Ready(context.Background()))

	// And back on: a fresh plugin process picks the work up.
	f.write(t, `
scanners:
  hostwork: {interval: 100ms}
  lease_expiry: {enabled: true, plugin: leaseexpiry, interval: 500ms}
`)
	waitFor(t, h, 30*time.Second, "", func() bool { return allDone(c, parts, 2) })
	assert.NotEqual(t, hostworkPid, statusOf(h, "hostwork").Pid)
}

// A disabled scanner stops only after its call in flight: the items of
// that call are finished, none is lost.
func TestDisableFinishesTheCallInFlight(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond, Options: map[string]string{"delay": "1s"}})
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).Cycle >= 1 })
	pid := scannerStatus(h).Pid
	parts := []uint16{5}
	want := addWork(t, c, parts, 3)
	// The call is in its 1 s delay.
	waitFor(t, h, 30*time.Second, "a call in flight", func() bool { return h.units.Get("hostwork").Runner().Status().InFlight > 0 })
	require.Zero(t, doneCount(c, parts))

	n := *h.Config()
	n.Scanners = map[string]config.Scanner{"hostwork": {Enabled: false, Plugin: "hostwork", Options: map[string]string{"delay": "1s"}}}
	res, err := h.Reload(context.Background(), &n, "test")
	require.NoError(t, err)
	assert.Equal(t, []string{"hostwork"}, res.Stopped)
	proctest.WaitGone(t, pid, 20*time.Second)
	assert.True(t, allDone(c, parts, want), "the call in flight finished before the plugin stopped")
}

// An invalid configuration is refused as a whole, with the reason; the
// running configuration and scanners stay exactly as they were.
func TestInvalidReloadIsRefusedAndTheOldConfigKeepsRunning(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	f := newFileConfig(t, srv.Addr, pluginDir)
	f.write(t, `
scanners:
  hostwork: {interval: 100ms}
`)
	h := f.start(t)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	before := h.Config()
	pid := scannerStatus(h).Pid

	cases := []struct {
		name, scanners, want string
	}{
		{"unknown key", "scanners:\n  hostwork: {interval: 200ms, intervall: 1s}\n", "scanners.hostwork.intervall: unknown key"},
		{"bad value", "scanners:\n  hostwork: {interval: fast}\n", `scanners.hostwork.interval: "fast" is not a duration`},
		{"unknown scanner", "scanners:\n  hostwork: {interval: 200ms}\n  nothere: {}\n", `scanners.nothere: no plugin in ` + h.Config().PluginDir + ` declares scanner "nothere"`},
		{"missing binary", "scanners:\n  hostwork: {interval: 200ms}\n  nothere: {plugin: nothere}\n", `scanners.nothere: plugin "nothere": plugin not found`},
		{"wrong pin", "scanners:\n  hostwork: {interval: 200ms, sha256: \"" + strings.Repeat("0", 64) + "\"}\n", "scanners.hostwork: plugin"},
		{"option the plugin rejects", "scanners:\n  hostwork: {interval: 200ms, options: {delay: soon}}\n", `scanners.hostwork.options.delay: "soon" is not a duration`},
		{"unknown option", "scanners:\n  hostwork: {interval: 200ms, options: {speed: 3}}\n", "scanners.hostwork.options.speed: unknown option (the scanner accepts: delay)"},
	}
	for i, tc := range cases {
		f.write(t, tc.scanners)
		waitFor(t, h, 10*time.Second, tc.name, func() bool { return h.Status().Config.Refused == i+1 })
		doc := h.Status()
		assert.Contains(t, doc.Config.LastError, tc.want, tc.name)
		assert.Same(t, before, h.Config(), "%s: the running configuration stays", tc.name)
		assert.Zero(t, doc.Config.Reloads, tc.name)
		st := scannerStatus(h)
		assert.Equal(t, "running", st.State, tc.name)
		assert.Equal(t, pid, st.Pid, tc.name)
		assert.Equal(t, "100ms", st.Interval, "%s: nothing of the refused file was applied", tc.name)
	}

	// A setting that needs a restart is refused too (here through the
	// admin path, which answers with the reason).
	f.base = strings.Replace(f.base, "flow: 16", "flow: 32", 1)
	f.write(t, "scanners:\n  hostwork: {interval: 200ms}\n")
	res, err := h.ReloadConfig(context.Background(), "test")
	require.NoError(t, err)
	assert.Contains(t, res.Error, "partitions changed; that takes a restart")
	assert.Same(t, before, h.Config())

	// The host still works.
	parts := []uint16{1, 11}
	want := addWork(t, c, parts, 3)
	waitFor(t, h, 20*time.Second, "", func() bool { return allDone(c, parts, want) })
}

// The admin endpoints: config reload and plugin reload over HTTP, refused
// without the admin token (created 0600 by the host at boot), with a
// replaced token's old value, or with http.admin off.
func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond})
	cfg.HTTP.Listen = proctest.FreeAddr(t)
	cfg.Supervisor.SwapProbation = 0
	h, _ := running(t, cfg, func(h *Host) {
		h.SetConfigSource(ConfigSource{Load: func() (*config.Config, error) {
			n := *cfg
			n.Scanners = map[string]config.Scanner{"hostwork": {Enabled: true, Plugin: "hostwork", Interval: 250 * time.Millisecond, Options: map[string]string{}}}
			return &n, nil
		}})
	})
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })

	token, err := admintoken.Read(cfg.HTTP.AdminTokenFile)
	require.NoError(t, err, "the host created the token file at boot")
	post := func(path string, admin bool) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodPost, "http://"+cfg.HTTP.Listen+path, nil)
		require.NoError(t, err)
		if admin {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	code, _ := post("/v1/reload", false)
	assert.Equal(t, http.StatusUnauthorized, code)
	code, body := post("/v1/reload", true)
	assert.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, []any{"hostwork"}, body["retuned"])
	assert.Equal(t, "250ms", scannerStatus(h).Interval)

	code, body = post("/v1/scanners/hostwork/reload?force=1", true)
	assert.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, "kept", body["outcome"])
	assert.Equal(t, 1, scannerStatus(h).Swaps)
	code, _ = post("/v1/scanners/nosuch/reload", true)
	assert.Equal(t, http.StatusNotFound, code)
	code, body = post("/v1/scanners/hostwork/reload", true)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "unchanged", body["outcome"])

	// Replacing the file rotates the token at once.
	old := token
	require.NoError(t, os.Remove(cfg.HTTP.AdminTokenFile))
	token, _, err = admintoken.Ensure(cfg.HTTP.AdminTokenFile)
	require.NoError(t, err)
	require.NotEqual(t, old, token)
	code, _ = post("/v1/reload", true)
	assert.Equal(t, http.StatusOK, code)
	token = old
	code, _ = post("/v1/reload", true)
	assert.Equal(t, http.StatusUnauthorized, code, "the replaced token is refused")

	n := *h.Config()
	n.HTTP.Admin = false
	_, err = h.Reload(context.Background(), &n, "test")
	require.NoError(t, err)
	code, _ = post("/v1/reload", true)
	assert.Equal(t, http.StatusForbidden, code)
}

// The completion listener runs with the host: subscribed after boot,
// visible in /v1/status and /metrics, restarted or stopped by a reload.
func TestCompletionListenerIsWired(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.Completions = config.Completions{Enabled: true, Concurrency: 3}
	h, _ := running(t, cfg)
	waitFor(t, h, 20*time.Second, "subscribed", func() bool {
		comp := h.Status().Completions
		return comp != nil && comp.Subscribed
	})
	assert.Equal(t, 3, h.Status().Completions.Concurrency)
	require.NoError(t, c.Do(context.Background(), c.B().Publish().Channel("ff:dag:completions").Message("not json").Build()).Error())
	waitFor(t, h, 10*time.Second, "", func() bool { return h.Status().Completions.Malformed == 1 })
	var buf strings.Builder
	mfs, err := h.Metrics().Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		buf.WriteString(mf.GetName() + "\n")
	}
	assert.Contains(t, buf.String(), "ffscan_completions_messages_total")
	assert.Contains(t, buf.String(), "ffscan_completions_subscribed")

	n := *h.Config()
	n.Completions.Enabled = false
	res, err := h.Reload(context.Background(), &n, "test")
	require.NoError(t, err)
	assert.Contains(t, strings.Join(res.Notes, ";"), "completion listener restarted (enabled false")
	assert.Nil(t, h.Status().Completions)
	n2 := n
	n2.Completions = config.Completions{Enabled: true, Concurrency: 5}
	_, err = h.Reload(context.Background(), &n2, "test")
	require.NoError(t, err)
	waitFor(t, h, 20*time.Second, "resubscribed", func() bool {
		comp := h.Status().Completions
		return comp != nil && comp.Subscribed && comp.Concurrency == 5
	})
}

// Options a running scanner refuses on reload are not silently taken for
// what runs: status names them as not applied, with the reason, and shows
// the failed attempt as the last swap; the configuration generation is
// counted; the next reload tries again, and once the options apply the
// note is gone.
func TestRefusedOptionsShowInStatus(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	f := newFileConfig(t, srv.Addr, pluginDir)
	// Only this test's reloads: no watch reloading the file behind it.
	f.base = strings.Replace(f.base, "watch: {interval: 100ms}", "watch: {config: false, plugins: false}", 1)
	f.write(t, "scanners:\n  hostwork: {interval: 100ms, options: {delay: 1ms}}\n")
	h := f.start(t)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	assert.Equal(t, 1, h.Status().Config.Generation)
	assert.Regexp(t, "^[0-9a-f]{64}$", h.Status().Config.FileSHA256)
	pid := scannerStatus(h).Pid

	f.write(t, "scanners:\n  hostwork: {interval: 100ms, options: {delay: -1s}}\n")
	res, err := h.ReloadConfig(context.Background(), "test")
	require.NoError(t, err)
	require.Len(t, res.Plugins, 1)
	assert.Contains(t, res.Plugins[0].Error, "delay -1s is negative")
	st := scannerStatus(h)
	assert.Contains(t, st.NotApplied, "delay -1s is negative")
	require.NotNil(t, st.LastSwap)
	assert.Equal(t, "failed", st.LastSwap.Outcome)
	assert.Contains(t, st.LastSwap.Reason, "delay -1s is negative")
	assert.Equal(t, pid, st.Pid, "the running plugin keeps serving")
	assert.Equal(t, 2, h.Status().Config.Generation)

	// The same file again: tried again (not taken as already running).
	res, err = h.ReloadConfig(context.Background(), "test")
	require.NoError(t, err)
	require.Len(t, res.Plugins, 1, "the refused options are tried again")
	assert.NotEmpty(t, scannerStatus(h).NotApplied)

	f.write(t, "scanners:\n  hostwork: {interval: 100ms, options: {delay: 2ms}}\n")
	res, err = h.ReloadConfig(context.Background(), "test")
	require.NoError(t, err)
	require.Len(t, res.Plugins, 1)
	assert.Empty(t, res.Plugins[0].Error)
	assert.Empty(t, scannerStatus(h).NotApplied)
	assert.Equal(t, 4, h.Status().Config.Generation)
}
