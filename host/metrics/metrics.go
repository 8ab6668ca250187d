// Package metrics holds the host's Prometheus collectors, on a registry of
// its own (no global state, so tests and several hosts in one process do not
// collide). Every series carries the scanner name; the only other labels are
// small closed sets (error class, refusal reason, RPC method) and the error
// code, whose cardinality is capped per scanner.
package metrics

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// MaxCodesPerScanner caps distinct error codes per scanner; later codes are
// reported as "other". Codes come from plugins and Lua replies, so without a
// cap a misbehaving plugin could create unbounded series.
const MaxCodesPerScanner = 32

// Metrics is the set of host collectors.
type Metrics struct {
	Registry *prometheus.Registry
	// hist keeps recent cycles per scanner for the console.
	hist *history

	cycleDuration    *prometheus.HistogramVec
	cycles           *prometheus.CounterVec
	lastCycle        *prometheus.GaugeVec
	processed        *prometheus.CounterVec
	skipped          *prometheus.CounterVec
	errors           *prometheus.CounterVec
	partitions       *prometheus.CounterVec
	backlog          *prometheus.GaugeVec
	lag              *prometheus.GaugeVec
	restarts         *prometheus.CounterVec
	pluginUp         *prometheus.GaugeVec
	rpcLatency       *prometheus.HistogramVec
	callbackCommands *prometheus.CounterVec
	callbackRefused  *prometheus.CounterVec
	swaps            *prometheus.CounterVec
	launches         *prometheus.HistogramVec
	configReloads    *prometheus.CounterVec

	mu    sync.Mutex
	codes map[string]map[string]bool
}

// New builds the collectors and registers them with the Go runtime and
// process collectors on a fresh registry.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), codes: map[string]map[string]bool{}, hist: newHistory()}
	s := []string{"scanner"}
	m.cycleDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ffscan_scanner_cycle_duration_seconds",
		Help:    "Wall time of one full sweep of a scanner over its partitions, follow-up passes included.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, s)
	m.cycles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_scanner_cycles_total", Help: "Completed sweeps, idle ones included.",
	}, []string{"scanner"})
	m.lastCycle = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ffscan_scanner_last_cycle_timestamp_seconds", Help: "When the scanner's last complete sweep ended (Unix seconds).",
	}, s)
	m.processed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_scanner_items_processed_total", Help: "Items a scanner acted on (its own definition).",
	}, s)
	m.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_scanner_items_skipped_total", Help: "Candidates a scanner left alone on purpose (filtered, backed off, not yet due).",
	}, s)
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_scanner_errors_total", Help: "Failures by class (transport, lua, refused, server) and code.",
	}, []string{"scanner", "class", "code"})
	m.partitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_scanner_partitions_total", Help: "Partition visits by outcome: scanned (the plugin was called), empty (skipped, nothing to do), failed (fetch or call failed).",
	}, []string{"scanner", "outcome"})
	m.backlog = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ffscan_scanner_backlog", Help: "Backlog summed over all partitions; written only when every partition was sampled in the cycle.",
	}, s)
	m.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ffscan_scanner_oldest_due_lag_seconds", Help: "How long the oldest due candidate has been due, at the start of the last complete cycle.",
	}, s)
	m.restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_plugin_restarts_total", Help: "Plugin process restarts, by reason: exited, memory_limit, health_check, hung_calls, launch_failed (the launch failed or passed the start timeout), other.",
	}, []string{"scanner", "reason"})
	m.pluginUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ffscan_plugin_up", Help: "1 while the scanner's plugin is running and healthy.",
	}, s)
	m.rpcLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ffscan_plugin_rpc_duration_seconds",
		Help:    "Latency of host-to-plugin calls, by method.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5},
	}, []string{"scanner", "method"})
	m.callbackCommands = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_callback_commands_total", Help: "Commands scanners sent through the host callback service.",
	}, s)
	m.callbackRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_callback_refused_total", Help: "Commands the callback service refused, by reason.",
	}, []string{"scanner", "reason"})
	m.swaps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_plugin_swaps_total", Help: "Hot swap requests by outcome: swapped, kept (probation passed), rolled_back, failed, reconfigured (options applied in place), started (launched a stopped plugin).",
	}, []string{"scanner", "outcome"})
	m.launches = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ffscan_plugin_launch_duration_seconds",
		Help: "Time from a launch's start (once the launch gate admits it) until the plugin runs configured, by scanner: against supervisor.start_timeout.",
		// Up to the default start timeout and beyond: a tail near it
		// is what the timeout would cut.
		Buckets: []float64{.025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, s)
	m.configReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ffscan_config_reloads_total", Help: "Configuration reloads by outcome: applied or refused (the running configuration stayed).",
	}, []string{"outcome"})
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.cycleDuration, m.cycles, m.lastCycle, m.processed, m.skipped, m.errors, m.partitions,
		m.backlog, m.lag, m.restarts, m.pluginUp, m.rpcLatency,
		m.callbackCommands, m.callbackRefused, m.swaps, m.launches, m.configReloads,
	)
	return m
}

// Cycle records one completed sweep.
func (m *Metrics) Cycle(scanner string, d time.Duration) {
	m.cycleDuration.WithLabelValues(scanner).Observe(d.Seconds())
	m.cycles.WithLabelValues(scanner).Inc()
	m.lastCycle.WithLabelValues(scanner).SetToCurrentTime()
	m.hist.cycle(scanner)
	// The scanner's counters exist from its first sweep, at 0 until
	// something happens: a dashboard's rate is 0, not "no data".
	m.processed.WithLabelValues(scanner)
	m.skipped.WithLabelValues(scanner)
	m.restarts.WithLabelValues(scanner, supervisor.RestartExited)
}

// Swap implements supervisor.SwapRecorder.
func (m *Metrics) Swap(scanner string, outcome supervisor.SwapOutcome) {
	m.swaps.WithLabelValues(scanner, string(outcome)).Inc()
}

// ConfigReload counts a configuration reload: "applied" or "refused".
func (m *Metrics) ConfigReload(outcome string) {
	m.configReloads.WithLabelValues(outcome).Inc()
}

// Items adds processed and skipped counts.
func (m *Metrics) Items(scanner string, processed, skipped int64) {
	m.hist.items(scanner, processed)
	if processed > 0 {
		m.processed.WithLabelValues(scanner).Add(float64(processed))
	}
	if skipped > 0 {
		m.skipped.WithLabelValues(scanner).Add(float64(skipped))
	}
}

// Errors adds error counts.
func (m *Metrics) Errors(scanner string, class scannerapi.ErrorClass, code string, n int64) {
	if n <= 0 {
		return
	}
	m.errors.WithLabelValues(scanner, boundClass(class), m.boundCode(scanner, code)).Add(float64(n))
}

// Partitions counts partition visits by outcome.
func (m *Metrics) Partitions(scanner, outcome string, n int) {
	if n > 0 {
		m.partitions.WithLabelValues(scanner, outcome).Add(float64(n))
	}
}

// Backlog sets the backlog gauge.
func (m *Metrics) Backlog(scanner string, v int64) {
	m.backlog.WithLabelValues(scanner).Set(float64(v))
	m.hist.backlog(scanner, v)
}

// Lag sets the oldest-due lag gauge.
func (m *Metrics) Lag(scanner string, d time.Duration) {
	m.lag.WithLabelValues(scanner).Set(d.Seconds())
	m.hist.lag(scanner, d)
}

// Restart counts a plugin restart.
// Restart counts one restart of scanner's plugin, by class
// (supervisor.RestartClass).
func (m *Metrics) Restart(scanner, class string) { m.restarts.WithLabelValues(scanner, class).Inc() }

// Launched observes one successful plugin launch.
func (m *Metrics) Launched(scanner string, d time.Duration) {
	m.launches.WithLabelValues(scanner).Observe(d.Seconds())
}

// PluginUp sets the plugin-up gauge.
func (m *Metrics) PluginUp(scanner string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.pluginUp.WithLabelValues(scanner).Set(v)
}

// RPC observes one host-to-plugin call.
func (m *Metrics) RPC(scanner, method string, d time.Duration) {
	m.rpcLatency.WithLabelValues(scanner, method).Observe(d.Seconds())
}

// CallbackCommands implements callbacks.Recorder.
func (m *Metrics) CallbackCommands(scanner string, n int) {
	m.callbackCommands.WithLabelValues(scanner).Add(float64(n))
}

// CallbackRefused implements callbacks.Recorder.
func (m *Metrics) CallbackRefused(scanner, reason string) {
	m.callbackRefused.WithLabelValues(scanner, reason).Inc()
}

func boundClass(c scannerapi.ErrorClass) string {
	switch c {
	case scannerapi.ErrTransport, scannerapi.ErrLua, scannerapi.ErrRefused, scannerapi.ErrServer, scannerapi.ErrInvalid:
		return string(c)
	}
	return "other"
}

// boundCode keeps codes short, in a safe alphabet, and at most
// MaxCodesPerScanner distinct values per scanner.
func (m *Metrics) boundCode(scanner, code string) string {
	code = SanitizeCode(code)
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.codes[scanner]
	if seen == nil {
		seen = map[string]bool{}
		m.codes[scanner] = seen
	}
	if seen[code] {
		return code
	}
	if len(seen) >= MaxCodesPerScanner {
		return "other"
	}
	seen[code] = true
	return code
}

// SanitizeCode maps a code to [a-z0-9_], at most 48 bytes; anything else
// becomes "other" (Lua codes are snake_case already).
func SanitizeCode(code string) string {
	if code == "" {
		return ""
	}
	code = strings.ToLower(code)
	if len(code) > 48 {
		return "other"
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return "other"
		}
	}
	return code
}
