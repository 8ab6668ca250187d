package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// prometheusBin finds Debian's prometheus; without it the test skips,
// except where FFSCAN_TEST_REQUIRE_PROMETHEUS is set (.ci/run installs it).
func prometheusBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("FFSCAN_TEST_REQUIRE_PROMETHEUS") != "" {
			t.Fatal("no prometheus on PATH and FFSCAN_TEST_REQUIRE_PROMETHEUS is set (apt-get install -y prometheus)")
		}
		t.Skip("no prometheus on PATH (apt-get install -y prometheus); the dashboard and alerts' live test is skipped")
	}
	return p
}

// promQuery runs an instant query and returns its result, or the error
// Prometheus gave (a query that does not parse among them).
func promQuery(addr, q string) ([]json.RawMessage, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s", body.Error)
	}
	return body.Data.Result, nil
}

// startPrometheus runs Debian's prometheus scraping target every second
// with the alert rules loaded, and returns its address and a poll of its
// API (Prometheus is another process with no event to wait on: it is
// asked every 500 ms until ok says yes, or the deadline).
func startPrometheus(t *testing.T, prom, target string) (string, func(what string, timeout time.Duration, ok func() (bool, string))) {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs("../configs/prometheus/alerts.yaml")
	require.NoError(t, err)
	promAddr := proctest.FreeAddr(t)
	pcfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: ffscan
    static_configs: [{targets: [%q]}]
`, rules, target)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(pcfg), 0o644))
	p := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	p.Stderr = os.Stderr
	require.NoError(t, p.Start())
	t.Cleanup(func() {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait()
	})
	poll := func(what string, timeout time.Duration, ok func() (bool, string)) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		last := ""
		for {
			done, why := ok()
			if done {
				return
			}
			last = why
			select {
			case <-ctx.Done():
				t.Fatalf("%s: %s", what, last)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return promAddr, poll
}

// dashboardQueries are the expressions of every panel of the dashboard,
// with Grafana's variables as a dashboard showing every scanner sets
// them.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../configs/grafana/ffscan.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	out := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			q := strings.NewReplacer("$__rate_interval", "20s", "$scanner", ".*").Replace(tg.Expr)
			out[fmt.Sprintf("%s [%d]", p.Title, i)] = q
		}
	}
	require.NotEmpty(t, out)
	return out
}

// alertExprs are the alert rules' expressions by alert name.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../configs/prometheus/alerts.yaml")
	require.NoError(t, err)
	re := regexp.MustCompile(`(?ms)- alert: (\S+)\n.*?expr: \|\n(.*?)\n\s+(?:for|labels):`)
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
		out[m[1]] = strings.TrimSpace(m[2])
	}
	require.Len(t, out, strings.Count(string(raw), "- alert:"))
	return out
}

// Debian's prometheus scrapes a real host (Valkey and Postgres, real
// plugins) under the demo workload with the alert rules loaded: every
// query of the dashboard and every alert expression parses and returns
// data, and a plugin that stopped (killed, and its binary now one that
// cannot start) fires FFScanPluginDown.
func TestDashboardAndAlertsAgainstAPrometheus(t *testing.T) {
	t.Parallel()
	prom := prometheusBin(t)
	srv := testserver.New(t)
	db := postgrestest.SchemaDB(t, 4)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.HTTP.Listen = proctest.FreeAddr(t)
	cfg.Postgres.DSN = db.Config().ConnString()
	cfg.Watch.Plugins = false
	cfg.Lanes = []string{"default", "workers-a"}
	cfg.PluginDir = ownPluginDir(t, "leaseexpiry", "timers", "hostwork")
	copyFile(t, variant("pgreconcilers"), filepath.Join(cfg.PluginDir, "pgreconcilers"))
	sc := func(plugin string) config.Scanner {
		return config.Scanner{Enabled: true, Plugin: plugin, Options: map[string]string{}}
	}
	cfg.Scanners = map[string]config.Scanner{
		"lease_expiry": sc("leaseexpiry"), "attempt_timeout": sc("timers"), "execution_deadline": sc("timers"),
		"suspension_timeout": sc("timers"), "pending_wp_expiry": sc("timers"), "delayed_promoter": sc("timers"),
		"pg_execution_deadline": sc("pgreconcilers"), "pg_delayed_promoter": sc("pgreconcilers"),
		"hostwork": sc("hostwork"),
	}
	for n, s := range cfg.Scanners {
		s.Interval = 500 * time.Millisecond
		cfg.Scanners[n] = s
	}
	h, _ := running(t, cfg)
	// The bounds here are hang guards: on a loaded two-core box nine
	// plugins and a PostgreSQL can take well over a minute to be up.
	waiting := ""
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, h.changes.WaitFor(ctx, func() bool {
		for _, s := range h.Status().Scanners {
			if s.State != "running" || s.Cycle < 1 {
				waiting = fmt.Sprintf("%s is %s at cycle %d", s.Name, s.State, s.Cycle)
				return false
			}
		}
		return true
	}), "every scanner running (last seen: %s)", waiting)

	demo := exec.Command(variant("demo"), "-addr", srv.Addr, "-rate", "30")
	require.NoError(t, demo.Start())
	t.Cleanup(func() {
		_ = demo.Process.Signal(syscall.SIGTERM)
		_ = demo.Wait()
	})

	promAddr, poll := startPrometheus(t, prom, h.http.Addr())
	queries := dashboardQueries(t)
	pending := map[string]string{}
	for k, v := range queries {
		pending[k] = v
	}
	poll("every dashboard query returns data", 3*time.Minute, func() (bool, string) {
		for name, q := range pending {
			res, err := promQuery(promAddr, q)
			if err != nil {
				return false, fmt.Sprintf("%s: %s: %v", name, q, err)
			}
			if len(res) == 0 {
				return false, fmt.Sprintf("%s: no data yet: %s", name, q)
			}
			delete(pending, name)
		}
		return true, ""
	})
	t.Logf("%d dashboard queries returned data", len(queries))

	// Every alert expression parses; the series it reads exist.
	for name, expr := range alertExprs(t) {
		_, err := promQuery(promAddr, expr)
		assert.NoError(t, err, "alert %s", name)
	}
	for _, series := range []string{"ffscan_scanner_last_cycle_timestamp_seconds", "ffscan_scanner_interval_seconds",
		"ffscan_scanner_oldest_due_lag_seconds", "ffscan_scanner_backlog", "ffscan_plugin_up", "ffscan_scanner_enabled",
		"ffscan_plugin_policy_pending_approval", "ffscan_completions_subscribed", "ffscan_ready"} {
		res, err := promQuery(promAddr, series)
		require.NoError(t, err)
		assert.NotEmpty(t, res, "an alert reads %s and the host does not export it", series)
	}

	// A plugin stops: killed, with a binary in its place that cannot
	// start. Its alert fires.
	pid := scannerPid(h, "hostwork")
	require.NotZero(t, pid)
	install(t, cfg.PluginDir, "hostwork", variant("exit"))
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	poll("FFScanPluginDown fires for the stopped plugin", 3*time.Minute, func() (bool, string) {
		res, err := promQuery(promAddr, `ALERTS{alertname="FFScanPluginDown",alertstate="firing",scanner="hostwork"}`)
		if err != nil {
			return false, err.Error()
		}
		return len(res) > 0, "not firing yet"
	})
	res, err := promQuery(promAddr, `ALERTS{alertname="FFScanPluginDown",alertstate="firing",scanner!="hostwork"}`)
	require.NoError(t, err)
	assert.Empty(t, res, "only the stopped plugin's alert fires")
}

// scannerPid is the pid of a scanner's plugin process.
func scannerPid(h *Host, name string) int {
	for _, s := range h.Status().Scanners {
		if s.Name == name {
			return s.Pid
		}
	}
	return 0
}
