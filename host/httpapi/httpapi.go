// Package httpapi serves the host's HTTP endpoints: /metrics (Prometheus,
// from the host's own registry), /healthz (the process is alive), /readyz
// (Valkey answers and every enabled scanner is running) and /v1/status (an
// admin JSON view of every scanner). It only reads; nothing here changes the
// host.
package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// StatusDoc is the /v1/status document.
type StatusDoc struct {
	Version   string          `json:"version"`
	StartedAt time.Time       `json:"started_at"`
	Valkey    []string        `json:"valkey_addrs"`
	Lanes     []string        `json:"lanes"`
	Scanners  []ScannerStatus `json:"scanners"`
}

// ScannerStatus is one scanner in /v1/status.
type ScannerStatus struct {
	Name              string     `json:"name"`
	Enabled           bool       `json:"enabled"`
	Plugin            string     `json:"plugin"`
	Path              string     `json:"path,omitempty"`
	Version           string     `json:"version,omitempty"`
	SHA256            string     `json:"sha256,omitempty"`
	Pid               int        `json:"pid,omitempty"`
	State             string     `json:"state"`
	Since             time.Time  `json:"since"`
	NextAttempt       *time.Time `json:"next_attempt,omitempty"`
	Restarts          int        `json:"restarts"`
	LastError         string     `json:"last_error,omitempty"`
	Cycle             uint64     `json:"cycle"`
	LastCycleAt       *time.Time `json:"last_cycle_at,omitempty"`
	LastCycleDuration string     `json:"last_cycle_duration,omitempty"`
	Processed         int64      `json:"processed"`
	Skipped           int64      `json:"skipped"`
	Errors            int64      `json:"errors"`
	// Backlog is null until a complete cycle measured it.
	Backlog       *int64 `json:"backlog"`
	LastScanError string `json:"last_scan_error,omitempty"`
}

// Source is what the endpoints read (the host implements it).
type Source interface {
	Status() StatusDoc
	// Ready returns nil when Valkey answers and every enabled scanner is
	// running, else the reason.
	Ready(ctx context.Context) error
}

// Handler returns the mux of all endpoints.
func Handler(reg *prometheus.Registry, src Source) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := src.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(src.Status())
	})
	return mux
}
