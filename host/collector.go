package host

// Gauges computed from the host's state when Prometheus scrapes: what an
// alert needs and no cycle reports (a scanner's interval, a policy
// waiting for approval, readiness).

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffscan/ffscan/host/httpapi"
)

var (
	intervalDesc = prometheus.NewDesc("ffscan_scanner_interval_seconds",
		"The scanner's sweep interval (configured, or its plugin's default): a sweep should end about this often.", []string{"scanner"}, nil)
	pendingDesc = prometheus.NewDesc("ffscan_plugin_policy_pending_approval",
		"1 while the scanner's plugin is refused (a launch, restart or swap) until an operator approves its policy (ffscan plugins approve).", []string{"scanner"}, nil)
	enabledDesc = prometheus.NewDesc("ffscan_scanner_enabled",
		"1 for a configured scanner that is enabled (by the configuration or an operator), 0 for one that is disabled.", []string{"scanner"}, nil)
	memoryDesc = prometheus.NewDesc("ffscan_plugin_memory_bytes",
		"Memory charged to the scanner's plugin process's control group (files it holds in memory included); absent without one.", []string{"scanner"}, nil)
	cpuDesc = prometheus.NewDesc("ffscan_plugin_cpu_seconds_total",
		"CPU time of the scanner's plugin process's control group since the process started; absent without one.", []string{"scanner"}, nil)
	throttledDesc = prometheus.NewDesc("ffscan_plugin_cpu_throttled_seconds_total",
		"Time the scanner's plugin process waited at its CPU bound (plugin_cpu_limit) since it started; absent without a control group.", []string{"scanner"}, nil)
	tasksDesc = prometheus.NewDesc("ffscan_plugin_tasks",
		"Tasks (threads) in the scanner's plugin process's control group, bounded by plugin_pids_limit; absent without one.", []string{"scanner"}, nil)
	shadowDesc = prometheus.NewDesc("ffscan_shadow_would_act_total",
		"Writes a scanner in shadow mode sent and the host held back (what it would have done), by command (FCALL and PGCALL by function).", []string{"scanner", "command"}, nil)
	auditDesc = prometheus.NewDesc("ffscan_audit_entries_total",
		"Entries of the audit trail by fate: written, dropped (its queue was full), failed (the write to Valkey failed).", []string{"fate"}, nil)
	pausedDesc = prometheus.NewDesc("ffscan_scanner_paused",
		"1 while the scanner is paused at its action budget (it acted on more items per window than scanners.NAME.action_budget allows) until an operator resumes it or its cool-down passes.", []string{"scanner"}, nil)
	pausesDesc = prometheus.NewDesc("ffscan_scanner_budget_pauses_total",
		"Times the scanner paused itself at its action budget since it started.", []string{"scanner"}, nil)
	canaryDesc = prometheus.NewDesc("ffscan_canary_running",
		"1 while a canary of the scanner (a new binary in shadow beside the running one) is compared with it or being promoted.", []string{"scanner"}, nil)
	canaryCyclesDesc = prometheus.NewDesc("ffscan_canary_cycles",
		"Cycles the running canary was compared in, by outcome: clean (no difference), differed, not_compared (a canary call failed).", []string{"scanner", "outcome"}, nil)
	canaryItemsDesc = prometheus.NewDesc("ffscan_canary_items",
		"Items the running canary's decisions were compared on, by outcome: same, only_new (the canary would act, the running version does not), only_old, differ.", []string{"scanner", "outcome"}, nil)
	canaryDiffDesc = prometheus.NewDesc("ffscan_canary_differences",
		"Items the running canary decided differently from the running version (only_new + only_old + differ); a canary with differences is never promoted on its own.", []string{"scanner"}, nil)
	readyDesc = prometheus.NewDesc("ffscan_ready",
		"1 while the host is ready (/readyz): its stores answer, the library is loaded, every enabled scanner runs.", nil, nil)
)

// readyTimeout bounds the readiness check a scrape makes.
const readyTimeout = 2 * time.Second

// stateCollector is the host's scrape-time gauges.
type stateCollector struct{ h *Host }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- intervalDesc
	ch <- pendingDesc
	ch <- enabledDesc
	ch <- readyDesc
	ch <- memoryDesc
	ch <- cpuDesc
	ch <- throttledDesc
	ch <- tasksDesc
	ch <- shadowDesc
	ch <- pausedDesc
	ch <- pausesDesc
	ch <- auditDesc
	ch <- canaryDesc
	ch <- canaryCyclesDesc
	ch <- canaryItemsDesc
	ch <- canaryDiffDesc
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.h
	for n, sc := range h.config().Scanners {
		ch <- prometheus.MustNewConstMetric(enabledDesc, prometheus.GaugeValue, b2f(sc.Enabled), n)
	}
	for _, n := range h.units.Names() {
		u := h.units.Get(n)
		if u == nil {
			continue
		}
		if _, info, err := u.Supervisor().Current(); err == nil {
			iv := u.Runner().Tuning().Interval
			if iv == 0 {
				iv = info.DefaultInterval
			}
			ch <- prometheus.MustNewConstMetric(intervalDesc, prometheus.GaugeValue, iv.Seconds(), n)
		}
		var s httpapi.ScannerStatus
		fillStatus(&s, u)
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, b2f(pendingApproval(s)), n)
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, b2f(s.Paused != nil), n)
		ch <- prometheus.MustNewConstMetric(pausesDesc, prometheus.CounterValue, float64(u.Runner().Pauses()), n)
		if r := s.Resources; r != nil {
			ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(r.MemoryBytes), n)
			ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.CounterValue, r.CPUSeconds, n)
			ch <- prometheus.MustNewConstMetric(throttledDesc, prometheus.CounterValue, r.ThrottledSeconds, n)
			ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(r.Tasks), n)
		}
	}
	for _, n := range h.units.Names() {
		collectCanary(ch, h, n)
		if l, ok := h.shadows.Lookup(n); ok {
			for cmd, v := range l.Snapshot(1).ByCommand {
				ch <- prometheus.MustNewConstMetric(shadowDesc, prometheus.CounterValue, float64(v), n, cmd)
			}
		}
	}
	if h.audit != nil {
		st := h.audit.Stats()
		for fate, v := range map[string]uint64{"written": st.Written, "dropped": st.Dropped, "failed": st.Failed} {
			ch <- prometheus.MustNewConstMetric(auditDesc, prometheus.CounterValue, float64(v), fate)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, b2f(h.Ready(ctx) == nil))
}

// collectCanary is scanner n's canary gauges: running or not, and the
// running one's counts (none once it ended).
func collectCanary(ch chan<- prometheus.Metric, h *Host, n string) {
	cs, ok := h.units.CanaryStatus(n, 1)
	active := ok && cs.Active()
	ch <- prometheus.MustNewConstMetric(canaryDesc, prometheus.GaugeValue, b2f(active), n)
	if !active {
		return
	}
	clean := cs.Cycles - cs.WithDifference - cs.Unsure
	for outcome, v := range map[string]uint64{"clean": clean, "differed": cs.WithDifference, "not_compared": cs.Unsure} {
		ch <- prometheus.MustNewConstMetric(canaryCyclesDesc, prometheus.GaugeValue, float64(v), n, outcome)
	}
	for outcome, v := range cs.Items {
		ch <- prometheus.MustNewConstMetric(canaryItemsDesc, prometheus.GaugeValue, float64(v), n, outcome)
	}
	ch <- prometheus.MustNewConstMetric(canaryDiffDesc, prometheus.GaugeValue, float64(cs.Differences()), n)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
