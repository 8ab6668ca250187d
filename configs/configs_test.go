// Package configs holds the example configurations, the Grafana dashboard
// and the Prometheus alert rules; its tests check the rules.
package configs

import (
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// promtool finds Debian's promtool; without it the test skips, except
// where FFSCAN_TEST_REQUIRE_PROMETHEUS is set (.ci/run installs it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("FFSCAN_TEST_REQUIRE_PROMETHEUS") != "" {
			t.Fatal("no promtool on PATH and FFSCAN_TEST_REQUIRE_PROMETHEUS is set (apt-get install -y prometheus)")
		}
		t.Skip("no promtool on PATH (apt-get install -y prometheus); the alert rules' tests are skipped")
	}
	return p
}

// The alert rules load, and their unit tests (alerts_test.yaml) pass.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	out, err := exec.Command(bin, "check", "rules", "prometheus/alerts.yaml").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "test", "rules", "prometheus/alerts_test.yaml").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "SUCCESS")
}

// Every alert has a unit test: a case that expects it to fire.
func TestEveryAlertHasAUnitTest(t *testing.T) {
	t.Parallel()
	rules, err := os.ReadFile("prometheus/alerts.yaml")
	require.NoError(t, err)
	tests, err := os.ReadFile("prometheus/alerts_test.yaml")
	require.NoError(t, err)
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\S+)`).FindAllStringSubmatch(string(rules), -1)
	require.NotEmpty(t, alerts)
	for _, a := range alerts {
		firing := regexp.MustCompile(`(?m)alertname: ` + regexp.QuoteMeta(a[1]) + `\s*\n\s*exp_alerts:\s*\n\s*- exp_labels`)
		assert.Regexp(t, firing, string(tests), "alert %s has no unit test that expects it to fire", a[1])
	}
}
