package budget_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/budget"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// runHost boots a host on addr running both budget scanners from the real
// plugin binary (two processes of it), and stops it when the test ends.
func runHost(t *testing.T, addr string, interval time.Duration) *host.Host {
	t.Helper()
	bin := pluginBinary(t)
	cfg := config.Defaults()
	cfg.Valkey.Addrs = []string{addr}
	cfg.Partitions = parts
	cfg.PluginDir = filepath.Dir(bin)
	cfg.HTTP.Listen = ""
	cfg.PluginApprovalsFile = filepath.Join(t.TempDir(), "plugin-approvals.json")
	cfg.Supervisor.HealthInterval = 500 * time.Millisecond
	cfg.Scanners = map[string]config.Scanner{
		budget.ResetName:      {Enabled: true, Plugin: filepath.Base(bin), Interval: interval, Options: map[string]string{}},
		budget.ReconcilerName: {Enabled: true, Plugin: filepath.Base(bin), Interval: interval, Options: map[string]string{}},
	}
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr})
	h, err := host.Boot(context.Background(), &cfg, log)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert.NoError(t, h.Run(ctx))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(cfg.ShutdownTimeout + 5*time.Second):
			t.Error("host did not stop")
		}
		h.Close()
	})
	return h
}

// errorCount reads ffscan_scanner_errors_total for a scanner, class and
// code from the host's registry.
func errorCount(t *testing.T, reg *prometheus.Registry, scanner, class, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "ffscan_scanner_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["scanner"] == scanner && l["class"] == class && l["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// The budget plugin run by the host as real subprocesses, on budgets
// created through sdk/client on every budget partition: a due budget is
// reset and a budget not yet due is untouched (budget_reset); a lifetime
// budget over its hard limit gets breached_at and loses it once under, an
// orphan id is pruned and a wrong-type usage key is counted as an error and
// left (budget_reconciler).
func TestHostRunsBudgetPlugin(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	vk := srv.Client(t)
	h := runHost(t, srv.Addr, 200*time.Millisecond)
	// RequireStoredPartitions: the host recorded the partition counts.
	w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts, RequireStoredPartitions: true})
	ctx, c := w.Ctx, w.Client

	mk := func(every time.Duration, hard, used int64) keys.BudgetID {
		r, err := c.CreateBudget(ctx, client.CreateBudgetRequest{ResetInterval: every,
			Dimensions: []client.BudgetDimension{{Name: "tokens", Hard: hard}}})
		require.NoError(t, err)
		if used > 0 {
			_, err = c.ReportUsage(ctx, client.UsageReport{Budget: r.ID, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: used}}})
			require.NoError(t, err)
		}
		return r.ID
	}
	bk := func(id keys.BudgetID) keys.BudgetKeys { return keys.Budget(parts, id) }

	var due, notDue, over, wrong []keys.BudgetID
	for range 4 { // spread over the partitions
		due = append(due, mk(300*time.Millisecond, 0, 9))
		notDue = append(notDue, mk(time.Hour, 0, 9))
		id := mk(0, 100, 100)
		w.Do("HINCRBY", bk(id).Usage(), "tokens", "1")
		over = append(over, id)
		id = mk(0, 100, 0)
		w.Do("SET", bk(id).Usage(), "not a hash")
		wrong = append(wrong, id)
	}
	orphan := keys.NewBudgetID()
	w.Do("SADD", bk(orphan).Partition().BudgetPolicies(), orphan.String())

	deadline := 20 * time.Second
	for _, id := range due {
		require.Eventually(t, func() bool {
			s, err := c.ReadBudget(ctx, id)
			u, _ := s.Dimension("tokens")
			return err == nil && s.ResetCount >= 1 && u.Used == 0
		}, deadline, 20*time.Millisecond, "due budget %s reset", id)
	}
	for _, id := range over {
		require.Eventually(t, func() bool {
			s, err := c.ReadBudget(ctx, id)
			return err == nil && !s.BreachedAt.IsZero()
		}, deadline, 20*time.Millisecond, "budget %s over its hard limit marked", id)
	}
	require.Eventually(t, func() bool {
		ok, err := vk.Do(ctx, vk.B().Sismember().Key(bk(orphan).Partition().BudgetPolicies()).Member(orphan.String()).Build()).AsBool()
		return err == nil && !ok
	}, deadline, 20*time.Millisecond, "orphan pruned")
	require.Eventually(t, func() bool {
		return errorCount(t, h.Metrics().Registry, budget.ReconcilerName, "server", "wrongtype") >= float64(len(wrong))
	}, deadline, 20*time.Millisecond, "wrong-type usage keys counted")

	// Back under the limit: the marker goes.
	for _, id := range over {
		w.Do("HSET", bk(id).Usage(), "tokens", "50")
	}
	for _, id := range over {
		require.Eventually(t, func() bool {
			s, err := c.ReadBudget(ctx, id)
			return err == nil && s.BreachedAt.IsZero()
		}, deadline, 20*time.Millisecond, "marker of %s cleared", id)
	}

	for _, id := range notDue {
		s, err := c.ReadBudget(ctx, id)
		require.NoError(t, err)
		u, _ := s.Dimension("tokens")
		assert.Equal(t, int64(9), u.Used, "not due: untouched")
		assert.Zero(t, s.ResetCount)
	}
	for _, id := range wrong {
		typ, err := vk.Do(ctx, vk.B().Type().Key(bk(id).Usage()).Build()).ToString()
		require.NoError(t, err)
		assert.Equal(t, "string", typ, "wrong-type key left as it is")
		ok, err := vk.Do(ctx, vk.B().Sismember().Key(bk(id).Partition().BudgetPolicies()).Member(id.String()).Build()).AsBool()
		require.NoError(t, err)
		assert.True(t, ok)
	}
	for _, s := range h.Status().Scanners {
		assert.Equal(t, "running", s.State, s.Name)
		assert.Zero(t, s.Restarts, s.Name)
		assert.Equal(t, filepath.Base(pluginBinary(t)), s.Plugin)
	}
}
