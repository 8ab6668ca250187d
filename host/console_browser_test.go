package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
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
	cfg.HTTP.Listen = freeAddr(t)
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

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	defer cancelT()
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
