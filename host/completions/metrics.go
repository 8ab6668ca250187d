package completions

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Metrics receives what the listener does. Implementations must be safe
// for concurrent use. NewPrometheusMetrics is the host's implementation.
type Metrics interface {
	// Message counts one message received, by outcome (OutcomeAccepted,
	// OutcomeMalformed, OutcomeDropped).
	Message(outcome string)
	// Dispatched records one finished cascade: its wall time and what it
	// resolved.
	Dispatched(d time.Duration, res depresolve.Result)
	// Error counts failures by class and code: depresolve's per-edge
	// classes, transport "exec" for a cascade whose batch could not run,
	// transport "subscribe" for a lost subscription, ErrPanic for a
	// recovered panic.
	Error(class scannerapi.ErrorClass, code string, n int64)
	// Subscribed reports the subscription going up or down.
	Subscribed(up bool)
	// Reconnect counts a resubscription after a lost connection.
	Reconnect()
}

type nopMetrics struct{}

func (nopMetrics) Message(string)                              {}
func (nopMetrics) Dispatched(time.Duration, depresolve.Result) {}
func (nopMetrics) Error(scannerapi.ErrorClass, string, int64)  {}
func (nopMetrics) Subscribed(bool)                             {}
func (nopMetrics) Reconnect()                                  {}

var _ Metrics = nopMetrics{}

// MaxErrorCodes caps the distinct error codes exported; later codes are
// reported as "other" (codes come from library replies).
const MaxErrorCodes = 32

// PrometheusMetrics implements Metrics with Prometheus collectors. Register
// them on the host's registry with Register (or Collectors).
type PrometheusMetrics struct {
	messages   *prometheus.CounterVec
	duration   prometheus.Histogram
	resolved   *prometheus.CounterVec
	errors     *prometheus.CounterVec
	subscribed prometheus.Gauge
	reconnects prometheus.Counter

	mu    sync.Mutex
	codes map[string]bool
}

// NewPrometheusMetrics builds the listener's collectors:
//
//	ffscan_completions_messages_total{outcome}        accepted | malformed | dropped | elsewhere
//	ffscan_completions_dispatch_duration_seconds      one cascade, histogram
//	ffscan_completions_edges_total{result}            satisfied | impossible | already_resolved | pending | already_fired | not_terminal
//	ffscan_completions_errors_total{class,code}       by error class and code
//	ffscan_completions_subscribed                     1 while subscribed
//	ffscan_completions_reconnects_total               resubscriptions after a lost connection
func NewPrometheusMetrics() *PrometheusMetrics {
	return &PrometheusMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffscan_completions_messages_total",
			Help: "Messages received on ff:dag:completions, by outcome: accepted (queued for a cascade), malformed (dropped), dropped (listener stopping).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ffscan_completions_dispatch_duration_seconds",
			Help:    "Wall time of one completion cascade (all levels of skipped children included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 30},
		}),
		resolved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffscan_completions_edges_total",
			Help: "Dependency edges handled by completion cascades, by result.",
		}, []string{"result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffscan_completions_errors_total",
			Help: "Completion listener failures by class (transport, server, refused, lua, data, panic) and code.",
		}, []string{"class", "code"}),
		subscribed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ffscan_completions_subscribed",
			Help: "1 while the completion listener is subscribed to ff:dag:completions.",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ffscan_completions_reconnects_total",
			Help: "Resubscriptions of the completion listener after a lost connection.",
		}),
		codes: map[string]bool{},
	}
}

// Collectors returns the collectors, for a registry.
func (m *PrometheusMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.messages, m.duration, m.resolved, m.errors, m.subscribed, m.reconnects}
}

// Register registers every collector on r.
func (m *PrometheusMetrics) Register(r prometheus.Registerer) error {
	for _, c := range m.Collectors() {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Message implements Metrics.
func (m *PrometheusMetrics) Message(outcome string) { m.messages.WithLabelValues(outcome).Inc() }

// Dispatched implements Metrics.
func (m *PrometheusMetrics) Dispatched(d time.Duration, res depresolve.Result) {
	m.duration.Observe(d.Seconds())
	for result, n := range map[string]int64{
		"satisfied": res.Satisfied, "impossible": res.Impossible, "already_resolved": res.AlreadyResolved,
		"pending": res.Pending, "already_fired": res.AlreadyFired, "not_terminal": res.NotTerminal,
	} {
		if n > 0 {
			m.resolved.WithLabelValues(result).Add(float64(n))
		}
	}
}

// Error implements Metrics.
func (m *PrometheusMetrics) Error(class scannerapi.ErrorClass, code string, n int64) {
	if n <= 0 {
		return
	}
	m.errors.WithLabelValues(string(class), m.boundCode(code)).Add(float64(n))
}

// Subscribed implements Metrics.
func (m *PrometheusMetrics) Subscribed(up bool) {
	if up {
		m.subscribed.Set(1)
	} else {
		m.subscribed.Set(0)
	}
}

// Reconnect implements Metrics.
func (m *PrometheusMetrics) Reconnect() { m.reconnects.Inc() }

func (m *PrometheusMetrics) boundCode(code string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.codes[code] {
		return code
	}
	if len(m.codes) >= MaxErrorCodes {
		return "other"
	}
	m.codes[code] = true
	return code
}
