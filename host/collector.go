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
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, b2f(h.Ready(ctx) == nil))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
