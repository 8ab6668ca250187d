package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// browser finds a Chromium to drive: Debian's chromium, or
// FFSCAN_TEST_BROWSER. Without one the test skips (one line), except
// where FFSCAN_TEST_REQUIRE_BROWSER is set (.ci/run installs chromium).
func browser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FFSCAN_TEST_BROWSER"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("FFSCAN_TEST_REQUIRE_BROWSER") != "" {
		t.Fatal("no chromium on PATH and FFSCAN_TEST_REQUIRE_BROWSER is set (apt-get install -y chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install -y chromium); the console's browser test is skipped")
	return ""
}

// browse starts the headless Chromium at bin, with a profile of its own,
// for at most timeout; it ends with the test.
func browse(t *testing.T, bin string, timeout time.Duration) context.Context {
	t.Helper()
	// Chromium makes a directory for its singleton socket in TMPDIR and
	// leaves it behind: give it one that goes with the test (short, as
	// the socket's path must be).
	tmp, err := os.MkdirTemp("", "chromium-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.Env("TMPDIR=" + tmp),
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancelT)
	return ctx
}

// The console in a real headless Chromium, on a real host with real
// plugins: the page shows every scanner, a disable click with the admin
// token stops one, a click without it is refused and stops nothing, and
// the explain form shows the verdict for a planted lease. It takes the
// screenshot README shows (written to FFSCAN_CONSOLE_SCREENSHOT when
// set, e.g. docs/images/console.png).
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	bin := browser(t)
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.HTTP.Listen = proctest.FreeAddr(t)
	scanners := map[string]config.Scanner{}
	for _, n := range []string{"attempt_timeout", "execution_deadline", "suspension_timeout", "pending_wp_expiry", "delayed_promoter"} {
		scanners[n] = config.Scanner{Enabled: true, Plugin: "timers", Options: map[string]string{}}
	}
	scanners["lease_expiry"] = config.Scanner{Enabled: true, Plugin: "leaseexpiry", Options: map[string]string{}}
	scanners["hostwork"] = config.Scanner{Enabled: true, Plugin: "hostwork", Interval: 500 * time.Millisecond, Options: map[string]string{}}
	cfg.Scanners = scanners
	h, _ := running(t, cfg)
	waitFor(t, h, 60*time.Second, "every scanner running and cycling", func() bool {
		for _, s := range h.Status().Scanners {
			if s.State != "running" || s.Cycle < 1 {
				return false
			}
		}
		return true
	})
	tokPath, err := admintoken.Resolve(cfg.HTTP.AdminTokenFile)
	require.NoError(t, err)
	token, _, err := admintoken.Ensure(tokPath)
	require.NoError(t, err)
	// A lease far from expiry: explain's verdict does not change while
	// the test looks.
	lease := leaseFor(t, c, keys.Partition{Family: keys.FamilyFlow, Index: 9}, time.Hour)

	ctx := browse(t, bin, 60*time.Second)
	base := "http://" + h.http.Addr()

	// The page shows each scanner.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/?refresh=0"),
		chromedp.WaitVisible(chromedp.CSS(`#scanners`))))
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#scanners tr[data-scanner]")).map(r => r.dataset.scanner + "=" + r.dataset.state)`))
	require.NoError(t, err)
	for n := range scanners {
		assert.Contains(t, rows, n+"=running")
	}
	shot := os.Getenv("FFSCAN_CONSOLE_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "console.png")
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.Greater(t, len(png), 10_000, "a screenshot of the page")
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	t.Logf("console screenshot: %s (%d bytes)", shot, len(png))

	// Explain shows the verdict for the planted lease.
	row := chromedp.CSS(`#verdicts tr[data-scanner="lease_expiry"]`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=id]`), lease.String()),
		chromedp.Submit(chromedp.CSS(`input[name=id]`)),
		chromedp.WaitVisible(row)))
	verdict, err := chromedp.Run(ctx, chromedp.AttributeValue(row, "data-verdict"))
	require.NoError(t, err)
	detail, err := chromedp.Run(ctx, chromedp.Text(row))
	require.NoError(t, err)
	assert.Equal(t, "waits", verdict.Value, detail)
	assert.Contains(t, detail, "lease_expiry")

	// Without the token: refused, and the scanner keeps running.
	disable := chromedp.CSS(`tr[data-scanner="hostwork"] button[data-action=disable]`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/?refresh=0"),
		chromedp.WaitVisible(chromedp.CSS(`#scanners`)),
		chromedp.Click(disable),
		chromedp.WaitVisible(chromedp.CSS(`#message`))))
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#message`)))
	require.NoError(t, err)
	assert.Contains(t, msg, "needs the admin token")
	require.NotNil(t, h.units.Get("hostwork"), "a refused click stopped nothing")
	assert.True(t, h.config().Scanners["hostwork"].Enabled)

	// With the token (typed into the token box): the scanner stops.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/?refresh=0"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#tokenform button[type=submit]`)),
		chromedp.Click(disable),
		chromedp.WaitVisible(chromedp.CSS(`#message`))))
	msg, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#message`)))
	require.NoError(t, err)
	assert.Contains(t, msg, "scanner hostwork disabled")
	assert.Nil(t, h.units.Get("hostwork"), "the scanner's unit is gone")
	assert.False(t, h.config().Scanners["hostwork"].Enabled)
	state, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`tr[data-scanner="hostwork"]`), "data-state"))
	require.NoError(t, err)
	assert.Equal(t, "stopped", state.Value)
	assert.False(t, strings.Contains(msg, "refused"), msg)
}

// A canary from the console, in a real Chromium, on a real host running
// retention_trimmer (3 h retention): a build with 1 h retention is put in
// place by hand (the file watch off), a click on "start canary" runs it
// beside the running version, the page shows the ended executions only it
// would purge, and a click on "abort" stops it: the running process is
// the one from before, and nothing was purged.
func TestConsoleCanaryInABrowser(t *testing.T) {
	t.Parallel()
	bin := browser(t)
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.HTTP.Listen = proctest.FreeAddr(t)
	cfg.PluginDir = ownPluginDir(t)
	copyFile(t, variant("retention"), filepath.Join(cfg.PluginDir, "retention"))
	cfg.Scanners = map[string]config.Scanner{"retention_trimmer": {Enabled: true, Plugin: "retention", Interval: 200 * time.Millisecond,
		Options: map[string]string{"default_retention": "3h", "min_retention": "1h"}, Mode: config.ModeAct}}
	cfg.Watch.Plugins = false
	cfg.Supervisor.HealthInterval = 3 * time.Second
	cfg.Supervisor.SwapProbation = 0
	cfg.Completions.Enabled = false
	h, _ := running(t, cfg)
	w := scannertest.NewWorld(t, c, client.Options{Partitions: h.parts, Namespace: "ns"})
	waitFor(t, h, time.Minute, "no cycle", func() bool { return retentionStatus(h).Cycle >= 2 })
	before := retentionStatus(h)
	planted := endedAgo(t, w, 3, 2*time.Hour) // due under 1 h, not under 3 h
	install(t, cfg.PluginDir, "retention", variant("retention-1h"))
	newSHA := fileSHA(t, variant("retention-1h"))
	tokPath, err := admintoken.Resolve(cfg.HTTP.AdminTokenFile)
	require.NoError(t, err)
	token, _, err := admintoken.Ensure(tokPath)
	require.NoError(t, err)

	ctx := browse(t, bin, 2*time.Minute)
	base := "http://" + h.http.Addr()
	message := func() string {
		t.Helper()
		msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#message`)))
		require.NoError(t, err)
		return msg
	}

	// The token, then "start canary".
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/?refresh=0"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#tokenform button[type=submit]`)),
		chromedp.Click(chromedp.CSS(`tr[data-scanner="retention_trimmer"] button[data-action=canary-start]`)),
		chromedp.WaitVisible(chromedp.CSS(`#message`))))
	msg := message()
	require.Contains(t, msg, "canary of retention_trimmer started: sha256 "+newSHA[:12], msg)

	// The page, reloaded as the canary's cycles go by, comes to name
	// every planted execution as one only the canary would purge.
	canaryRow := `tr[data-canary="retention_trimmer"]`
	var onlyNew []string
	waitFor(t, h, time.Minute, "the page never showed the planted executions as only_new", func() bool {
		if chromedp.Do(ctx, chromedp.Navigate(base+"/?refresh=0")) != nil {
			return false
		}
		onlyNew, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll('`+canaryRow+` tr[data-kind="only_new"]')).map(r => r.textContent)`))
		if err != nil {
			return false
		}
		for _, id := range planted {
			if !slices.ContainsFunc(onlyNew, func(d string) bool { return strings.Contains(d, id.String()) }) {
				return false
			}
		}
		return true
	})
	row, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(canaryRow)))
	require.NoError(t, err)
	t.Logf("canary row: %s", row)
	state, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(canaryRow), "data-canary-state"))
	require.NoError(t, err)
	assert.Equal(t, canary.Comparing, state.Value)
	assert.Contains(t, row, before.SHA256[:12], "from: the running version")
	assert.Contains(t, row, newSHA[:12], "to: the file put in place")
	assert.Contains(t, row, "cycles compared")
	assert.Contains(t, row, "only_new")
	for _, d := range onlyNew {
		assert.Contains(t, d, "nothing", "the running version decides nothing on it: %s", d)
	}

	// Abort.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(canaryRow+` button[data-action=canary-abort]`)),
		chromedp.WaitVisible(chromedp.CSS(`#message`))))
	msg = message()
	assert.Contains(t, msg, "canary of retention_trimmer aborted", msg)
	assert.NotContains(t, msg, "refused")
	state, err = chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(canaryRow), "data-canary-state"))
	require.NoError(t, err)
	assert.Equal(t, canary.Aborted, state.Value, "the page shows the canary aborted")

	st := retentionStatus(h)
	require.NotNil(t, st.Canary)
	assert.Equal(t, canary.Aborted, st.Canary.State)
	assert.Equal(t, before.Pid, st.Pid, "the running process is the one from before the canary")
	assert.Equal(t, before.SHA256, st.SHA256)
	for _, id := range planted {
		assert.True(t, exists(w, id), "nothing was purged: %s", id)
	}
}
