// Package httpapi serves the host's HTTP endpoints: /metrics (Prometheus,
// from the host's own registry), /healthz (the process is alive), /readyz
// (Valkey answers and every enabled scanner is running), /v1/status (an
// admin JSON view of every scanner, the configuration and the completion
// listener) and, when the source allows it, two admin actions:
//
//	POST /v1/reload                     re-read the configuration
//	POST /v1/scanners/{name}/reload     hot-swap a scanner's plugin
//	     ?force=1  swap even if the file is unchanged or was rejected before
//	     ?wait=0   answer at the switch instead of after the probation
//	POST /v1/scanners/{name}/approve    approve the policy its binary declares
//	     ?sha256=S&policy=D  only if the binary and its policy are still
//	                          the ones reviewed (the pending ones in status)
//
// Admin requests must carry the host's admin token (Authorization: Bearer,
// see host/admintoken): another local user, or a web page the operator
// visits, cannot read it.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/explain"
	"github.com/ffscan/ffscan/host/shadow"
)

// StatusDoc is the /v1/status document.
type StatusDoc struct {
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	Valkey    []string  `json:"valkey_addrs"` // configured seeds
	// ValkeyNodes: on a cluster, the masters that serve slots now, as the
	// cluster reports them (the seeds only started the client).
	ValkeyNodes []string `json:"valkey_nodes,omitempty"`
	// Postgres: the FlowFabric Postgres database, when postgres.dsn is set.
	Postgres *PostgresStatus `json:"postgres,omitempty"`
	Lanes    []string        `json:"lanes"`
	// LaneCensus: "on" (lane-scoped sources read only the lane keys that
	// exist), "warming" (on, its first pass not done: every lane is read)
	// or "off" (scheduler.lane_census).
	LaneCensus string `json:"lane_census"`
	// KeyEvents: whether the servers' new-key events are used
	// (key_events), and why not.
	KeyEvents   *KeyEventsStatus   `json:"key_events,omitempty"`
	ScannerAPI  string             `json:"scanner_api"` // versions this host runs, e.g. "1..2"
	Config      ConfigStatus       `json:"config"`
	Completions *CompletionsStatus `json:"completions"`
	Sharing     *SharingStatus     `json:"sharing,omitempty"`
	// Audit: the trail's counts (absent without a trail).
	Audit    *audit.Stats    `json:"audit,omitempty"`
	Scanners []ScannerStatus `json:"scanners"`
}

// KeyEventsStatus is the new-key event feed's state (host/keyevents).
type KeyEventsStatus struct {
	Mode string `json:"mode"`
	// On: every master publishes new-key events and is subscribed to;
	// partitions read empty are skipped until one of their keys is
	// created.
	On bool `json:"on"`
	// Reason says why it is off.
	Reason string `json:"reason,omitempty"`
	// Generation moves on at every gap; Gaps counts them; Events the
	// new-key events received.
	Generation uint64          `json:"generation"`
	Gaps       uint64          `json:"gaps"`
	Events     uint64          `json:"events"`
	Nodes      []KeyEventsNode `json:"nodes,omitempty"`
}

// KeyEventsNode is one node's notify-keyspace-events.
type KeyEventsNode struct {
	Addr       string `json:"addr"`
	Master     bool   `json:"master"`
	Setting    string `json:"setting"`
	Publishes  bool   `json:"publishes"`
	Subscribed bool   `json:"subscribed"`
	Error      string `json:"error,omitempty"`
}

// SharingStatus is this host's share of the partitions among the hosts
// that share its store (the Valkey keyspace, or the Postgres database of
// a host without Valkey).
type SharingStatus struct {
	HostID string `json:"host_id"`
	// Store is where the hosts share: "valkey", or "postgres (filter
	// ...)" (on Postgres the hosts with one filter share).
	Store  string         `json:"store"`
	Hosts  []string       `json:"hosts"`
	Owned  map[string]int `json:"owned"`  // partitions owned now, per family
	Totals map[string]int `json:"totals"` // partitions per family
	// Partitions are the indexes owned now, per family: this host's
	// fencing view, taken At and valid until ValidUntil without a renewal.
	Partitions map[string][]int `json:"partitions"`
	At         time.Time        `json:"at"`
	ValidUntil *time.Time       `json:"valid_until,omitempty"`
	// Ticks counts the renewals that succeeded, Failures those that
	// failed; LastError is why the last tick failed (empty once one
	// succeeds). Changes counts changes of the owned set.
	Ticks     uint64 `json:"ticks"`
	Failures  uint64 `json:"failures"`
	LastError string `json:"last_error,omitempty"`
	Changes   uint64 `json:"changes"`
}

// ConfigStatus describes the configuration in force and its reloads.
type ConfigStatus struct {
	File string `json:"file,omitempty"`
	// FileSHA256 is the sha256 of the file as last applied (compare it
	// with sha256sum of the file on disk).
	FileSHA256 string `json:"file_sha256,omitempty"`
	// Generation counts the configurations this host has run: 1 is the
	// one it started with, each applied reload adds one.
	Generation int       `json:"generation"`
	LoadedAt   time.Time `json:"loaded_at"`
	Reloads    int       `json:"reloads"`
	Refused    int       `json:"refused"`
	LastError  string    `json:"last_error,omitempty"` // why the last refused reload was refused
	// LastErrorAt is when that reload was refused.
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
}

// CompletionsStatus is the completion listener's state; null when it is
// disabled.
type CompletionsStatus struct {
	Concurrency int   `json:"concurrency"`
	Subscribed  bool  `json:"subscribed"`
	Messages    int64 `json:"messages"`
	Accepted    int64 `json:"accepted"`
	Malformed   int64 `json:"malformed"`
	Dropped     int64 `json:"dropped"`
	Dispatched  int64 `json:"dispatched"`
	Failed      int64 `json:"failed"`
	Panics      int64 `json:"panics"`
	Resolved    int64 `json:"resolved"`
	Reconnects  int64 `json:"reconnects"`
}

// Resources are a plugin's control group counters when status was read.
type Resources struct {
	MemoryBytes      int64   `json:"memory_bytes"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	ThrottledSeconds float64 `json:"cpu_throttled_seconds"`
	Tasks            int64   `json:"tasks"`
	OOMKills         int64   `json:"oom_kills"`
}

// ScannerStatus is one scanner in /v1/status.
type ScannerStatus struct {
	Name       string `json:"name"`
	Enabled    bool   `json:"enabled"`
	Plugin     string `json:"plugin"`
	Path       string `json:"path,omitempty"`
	Version    string `json:"version,omitempty"`
	APIVersion int    `json:"api_version,omitempty"`
	SHA256     string `json:"sha256,omitempty"`
	// Isolation: the confinement the plugin process runs under, or
	// "none (why)" (plugin_isolation).
	Isolation string `json:"isolation,omitempty"`
	// Bounds: the kernel's bounds on the plugin process's resources:
	// its control group's (memory, CPU, tasks) or its rlimits.
	Bounds string `json:"bounds,omitempty"`
	// Mode: act, or shadow (its writes held back and recorded).
	Mode string `json:"mode,omitempty"`
	// Shadow: the writes held back while the scanner ran in shadow
	// mode: counts, and the latest (host/shadow).
	Shadow *shadow.Snapshot `json:"shadow,omitempty"`
	// ActionBudget: the items the scanner may act on per window
	// ("50000 per 1m0s"), or "off".
	ActionBudget string `json:"action_budget,omitempty"`
	// Paused: the scanner paused itself at its action budget: why, the
	// figures, and until when (a cool-down), or until an operator
	// resumes it.
	Paused *PauseStatus `json:"paused,omitempty"`
	// Swap: direct, or canary (a changed binary runs as a canary first).
	Swap string `json:"swap,omitempty"`
	// Canary: the canary running beside the scanner, or the latest that
	// ended: its state, counts and latest differences (host/canary).
	Canary *canary.Status `json:"canary,omitempty"`
	// Resources: the plugin's usage, read from its control group (none
	// without one).
	Resources *Resources `json:"resources,omitempty"`
	// Policy: the digest of the approved policy (commands, key scopes,
	// functions) the plugin runs under; `ffscan plugins verify` lists it.
	Policy            string     `json:"policy,omitempty"`
	Pid               int        `json:"pid,omitempty"`
	State             string     `json:"state"`
	Since             time.Time  `json:"since"`
	NextAttempt       *time.Time `json:"next_attempt,omitempty"`
	Restarts          int        `json:"restarts"`
	Swaps             int        `json:"swaps"`
	LastSwap          *SwapInfo  `json:"last_swap,omitempty"`
	LastError         string     `json:"last_error,omitempty"`
	Interval          string     `json:"interval,omitempty"`
	Batch             int        `json:"batch,omitempty"`
	Cycle             uint64     `json:"cycle"`
	LastCycleAt       *time.Time `json:"last_cycle_at,omitempty"`
	LastCycleDuration string     `json:"last_cycle_duration,omitempty"`
	Processed         int64      `json:"processed"`
	Skipped           int64      `json:"skipped"`
	Errors            int64      `json:"errors"`
	// FailedPartitions counts partition visits whose fetch or call failed.
	FailedPartitions int64 `json:"failed_partitions"`
	// Wakeups counts the sweeps of partitions woken at their due time
	// between interval sweeps; Scheduled the partitions with a wake-up
	// scheduled now (scheduler.wakeups).
	Wakeups   uint64 `json:"wakeups"`
	Scheduled int    `json:"wakeups_scheduled"`
	// Quiet counts the partitions read empty that the sweeps skip until
	// a new-key event names one of their keys (key_events).
	Quiet int `json:"quiet_partitions"`
	// Backlog is null until a complete cycle measured it.
	Backlog       *int64 `json:"backlog"`
	LastScanError string `json:"last_scan_error,omitempty"`
	// NotApplied says why the configured plugin, pin or options of this
	// scanner are not what runs (a reload's update failed; the next
	// reload tries again). Empty when they are.
	NotApplied string `json:"not_applied,omitempty"`
	// PendingApproval: the plugin is refused until an operator approves
	// its policy.
	PendingApproval bool `json:"pending_approval,omitempty"`
	// Approval is the scanner's recorded approval and, when a launch was
	// refused for it, the declaration waiting for the operator.
	Approval *ApprovalStatus `json:"approval,omitempty"`
	// Override says an operator enabled or disabled the scanner at run
	// time (until the host restarts).
	Override string `json:"override,omitempty"`
	// Lag is the oldest due entry's lag at the last complete cycle.
	Lag string `json:"lag,omitempty"`
}

// ApprovalStatus is what is approved for a scanner and what waits.
type ApprovalStatus struct {
	Approved *ApprovedPolicy `json:"approved,omitempty"`
	Pending  *PendingPolicy  `json:"pending,omitempty"`
}

// ApprovedPolicy is a recorded approval.
type ApprovedPolicy struct {
	// Digest names the policy (sha256 of its lines).
	Digest string `json:"digest"`
	// SHA256 is the binary whose declaration was approved (empty in
	// approvals recorded before it was kept); Running the one last
	// launched under the approval.
	SHA256  string    `json:"sha256,omitempty"`
	Running string    `json:"running_sha256,omitempty"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	Lines   []string  `json:"lines"`
}

// PendingPolicy is a declaration a launch refused: approving it takes
// its SHA256 and Digest (POST /v1/scanners/{name}/approve?sha256=&policy=).
type PendingPolicy struct {
	SHA256 string    `json:"sha256"`
	Digest string    `json:"digest"`
	Lines  []string  `json:"lines"`
	Added  []string  `json:"added"`
	At     time.Time `json:"at"`
}

// ApprovalReview is what the operator reviewed before approving: the
// binary's sha256 and its policy's digest. The approval is refused when
// the binary or what it declares is not that. Empty fields are not
// checked.
type ApprovalReview struct {
	SHA256 string
	Policy string
}

// SwapInfo is a scanner's last hot swap (or attempt).
type SwapInfo struct {
	At          time.Time `json:"at"`
	Outcome     string    `json:"outcome"`
	FromSHA256  string    `json:"from_sha256,omitempty"`
	ToSHA256    string    `json:"to_sha256,omitempty"`
	FromVersion string    `json:"from_version,omitempty"`
	ToVersion   string    `json:"to_version,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	Probation   bool      `json:"probation,omitempty"`
}

// ReloadResult answers POST /v1/reload.
type ReloadResult struct {
	// Error is set when the reload was refused; the running
	// configuration stays.
	Error   string             `json:"error,omitempty"`
	Started []string           `json:"started,omitempty"`
	Stopped []string           `json:"stopped,omitempty"`
	Retuned []string           `json:"retuned,omitempty"`
	Plugins []PluginSwapResult `json:"plugins,omitempty"`
	Notes   []string           `json:"notes,omitempty"`
}

// PluginSwapResult answers POST /v1/scanners/{name}/reload, and reports
// each plugin a configuration reload relaunched or reconfigured.
type PluginSwapResult struct {
	Scanner     string `json:"scanner"`
	Outcome     string `json:"outcome"` // supervisor.SwapOutcome
	Error       string `json:"error,omitempty"`
	FromSHA256  string `json:"from_sha256,omitempty"`
	ToSHA256    string `json:"to_sha256,omitempty"`
	FromVersion string `json:"from_version,omitempty"`
	ToVersion   string `json:"to_version,omitempty"`
	Pid         int    `json:"pid,omitempty"`
}

// Switches is implemented by sources whose operators may enable and
// disable scanners at run time and approve a plugin's pending policy
// (POST /v1/scanners/{name}/enable, /disable, /approve; admin token).
type Switches interface {
	SetScannerEnabled(ctx context.Context, name string, enabled bool, who string) (ReloadResult, error)
	// SetScannerMode switches a scanner to shadow or act (POST
	// /v1/scanners/{name}/shadow, /act).
	SetScannerMode(ctx context.Context, name, mode, who string) (ReloadResult, error)
	ApprovePlugin(ctx context.Context, name string, reviewed ApprovalReview) (PluginSwapResult, error)
}

// PauseStatus is a scanner's pause at its action budget.
type PauseStatus struct {
	Since    time.Time `json:"since"`
	Reason   string    `json:"reason"`
	Acted    int64     `json:"acted"`
	Examined int64     `json:"examined"`
	Window   string    `json:"window"`
	Max      int64     `json:"max,omitempty"`
	// MaxFraction bounds acted/examined once MinExamined were examined.
	MaxFraction float64 `json:"max_fraction,omitempty"`
	MinExamined int64   `json:"min_examined,omitempty"`
	// Until: the cool-down's end (absent: an operator resumes it).
	Until *time.Time `json:"until,omitempty"`
}

// Resumer is implemented by sources whose paused scanners an operator
// may resume (POST /v1/scanners/{name}/resume; admin token).
type Resumer interface {
	ResumeScanner(ctx context.Context, name, who string) (ResumeResult, error)
}

// ResumeResult reports a resume: whether the scanner was paused, and
// the pause it ended.
type ResumeResult struct {
	Scanner string       `json:"scanner"`
	Resumed bool         `json:"resumed"`
	Pause   *PauseStatus `json:"pause,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// Canaries is implemented by sources that run canary swaps: a scanner's
// new binary in shadow beside the running one, compared decision by
// decision, then promoted or aborted (POST /v1/scanners/{name}/canary,
// /canary/promote, /canary/abort; admin token).
type Canaries interface {
	Canary(ctx context.Context, name, action, who string) (CanaryResult, error)
}

// The canary actions.
const (
	CanaryStart   = "start"
	CanaryPromote = "promote"
	CanaryAbort   = "abort"
)

// CanaryResult reports a canary action: the canary as it stands after
// it, and why the action was refused or failed.
type CanaryResult struct {
	Scanner string         `json:"scanner"`
	Action  string         `json:"action"`
	Canary  *canary.Status `json:"canary,omitempty"`
	Error   string         `json:"error,omitempty"`
}

// ErrBadRequest is returned for a request that makes no sense (HTTP 400).
var ErrBadRequest = errors.New("bad request")

// LiftWriteDeadline lifts the server's write timeout for one response:
// an admin action that waits for plugins (a relaunch, a hot swap's
// probation) may answer after it. Called only once the request carried
// the admin token.
func LiftWriteDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
}

// writeReload answers with a reload's result.
func writeReload(w http.ResponseWriter, res ReloadResult, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, ReloadResult{Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, ReloadResult{Error: err.Error()})
	case res.Error != "":
		writeJSON(w, http.StatusConflict, res)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// writeSwap answers with a plugin swap's result.
func writeSwap(w http.ResponseWriter, name string, res PluginSwapResult, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, PluginSwapResult{Scanner: name, Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, PluginSwapResult{Scanner: name, Error: err.Error()})
	case res.Error != "":
		writeJSON(w, http.StatusConflict, res)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// writeCanary answers with a canary action's result.
func writeCanary(w http.ResponseWriter, name, action string, res CanaryResult, err error) {
	res.Scanner, res.Action = name, action
	switch {
	case errors.Is(err, ErrNotFound):
		res.Error = err.Error()
		writeJSON(w, http.StatusNotFound, res)
	case errors.Is(err, ErrBadRequest):
		res.Error = err.Error()
		writeJSON(w, http.StatusBadRequest, res)
	case err != nil:
		res.Error = err.Error()
		writeJSON(w, http.StatusInternalServerError, res)
	case res.Error != "":
		writeJSON(w, http.StatusConflict, res)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// ErrNotFound is returned by Admin.ReloadPlugin for an unknown or disabled
// scanner (HTTP 404).
var ErrNotFound = errors.New("no such running scanner")

// Admin is implemented by sources that accept admin actions.
type Admin interface {
	// AdminEnabled says whether the actions are allowed (http.admin).
	AdminEnabled() bool
	// AdminToken returns the token admin requests must present as
	// "Authorization: Bearer TOKEN", or an error when it cannot be read
	// (then every admin request is refused).
	AdminToken() (string, error)
	// ReloadConfig re-reads the configuration and applies it. A refused
	// reload returns a result with Error set and a nil error.
	ReloadConfig(ctx context.Context, reason string) (ReloadResult, error)
	// ReloadPlugin hot-swaps a scanner's plugin.
	ReloadPlugin(ctx context.Context, scanner string, force, wait bool) (PluginSwapResult, error)
}

// Auditor is implemented by sources that keep an audit trail (GET
// /v1/audit?execution=&scanner=&kind=&since=1h&limit=100).
type Auditor interface {
	Audit(ctx context.Context, f audit.Filter) ([]audit.Entry, error)
}

// MaxAuditLimit bounds the entries one request returns.
const MaxAuditLimit = 10_000

// auditFilter reads a trail query's parameters.
func auditFilter(q url.Values) (audit.Filter, error) {
	f := audit.Filter{Execution: q.Get("execution"), Scanner: q.Get("scanner"), Kind: q.Get("kind"), Limit: 100}
	if f.Kind != "" && f.Kind != audit.KindScanner && f.Kind != audit.KindOperator {
		return f, fmt.Errorf("kind %q: want scanner or operator", f.Kind)
	}
	if s := q.Get("since"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return f, fmt.Errorf("since %q: want a positive duration such as 1h", s)
		}
		f.Within = d
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxAuditLimit {
			return f, fmt.Errorf("limit %q: want 1..%d", s, MaxAuditLimit)
		}
		f.Limit = n
	}
	return f, nil
}

// Explainer is implemented by sources that explain an execution
// (GET /v1/explain/{id}).
type Explainer interface {
	Explain(ctx context.Context, id string) (*explain.Report, error)
}

// explainTimeout bounds one explanation (it asks every running scanner).
const explainTimeout = 10 * time.Second

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
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(w, r) {
			return
		}
		writeJSON(w, http.StatusOK, src.Status())
	})
	if at, ok := src.(Auditor); ok {
		mux.HandleFunc("GET /v1/audit", func(w http.ResponseWriter, r *http.Request) {
			if !hostAllowed(w, r) {
				return
			}
			f, err := auditFilter(r.URL.Query())
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
			defer cancel()
			entries, err := at.Audit(ctx, f)
			if err != nil {
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"entries": entries})
		})
	}
	if ex, ok := src.(Explainer); ok {
		mux.HandleFunc("GET /v1/explain/{id}", func(w http.ResponseWriter, r *http.Request) {
			if !hostAllowed(w, r) {
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), explainTimeout)
			defer cancel()
			rep, err := ex.Explain(ctx, r.PathValue("id"))
			switch {
			case errors.Is(err, explain.ErrBadID):
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			case err != nil:
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			default:
				writeJSON(w, http.StatusOK, rep)
			}
		})
	}
	if admin, ok := src.(Admin); ok {
		if sw, ok := src.(Switches); ok {
			for _, act := range []string{"enable", "disable"} {
				on := act == "enable"
				mux.HandleFunc("POST /v1/scanners/{name}/"+act, func(w http.ResponseWriter, r *http.Request) {
					r, ok := authorized(w, r, admin)
					if !ok {
						return
					}
					LiftWriteDeadline(w)
					res, err := sw.SetScannerEnabled(r.Context(), r.PathValue("name"), on, "admin request from "+r.RemoteAddr)
					writeReload(w, res, err)
				})
			}
			for _, mode := range []string{"shadow", "act"} {
				mux.HandleFunc("POST /v1/scanners/{name}/"+mode, func(w http.ResponseWriter, r *http.Request) {
					r, ok := authorized(w, r, admin)
					if !ok {
						return
					}
					LiftWriteDeadline(w)
					res, err := sw.SetScannerMode(r.Context(), r.PathValue("name"), mode, "admin request from "+r.RemoteAddr)
					if errors.Is(err, ErrBadRequest) {
						writeJSON(w, http.StatusBadRequest, ReloadResult{Error: err.Error()})
						return
					}
					writeReload(w, res, err)
				})
			}
			mux.HandleFunc("POST /v1/scanners/{name}/approve", func(w http.ResponseWriter, r *http.Request) {
				r, ok := authorized(w, r, admin)
				if !ok {
					return
				}
				LiftWriteDeadline(w)
				q := r.URL.Query()
				res, err := sw.ApprovePlugin(r.Context(), r.PathValue("name"), ApprovalReview{SHA256: q.Get("sha256"), Policy: q.Get("policy")})
				writeSwap(w, r.PathValue("name"), res, err)
			})
		}
		if rs, ok := src.(Resumer); ok {
			mux.HandleFunc("POST /v1/scanners/{name}/resume", func(w http.ResponseWriter, r *http.Request) {
				r, ok := authorized(w, r, admin)
				if !ok {
					return
				}
				res, err := rs.ResumeScanner(r.Context(), r.PathValue("name"), "admin request from "+r.RemoteAddr)
				res.Scanner = r.PathValue("name")
				switch {
				case errors.Is(err, ErrNotFound):
					res.Error = err.Error()
					writeJSON(w, http.StatusNotFound, res)
				case err != nil:
					res.Error = err.Error()
					writeJSON(w, http.StatusInternalServerError, res)
				default:
					writeJSON(w, http.StatusOK, res)
				}
			})
		}
		if cs, ok := src.(Canaries); ok {
			for _, act := range []struct{ path, action string }{{"canary", CanaryStart}, {"canary/promote", CanaryPromote}, {"canary/abort", CanaryAbort}} {
				mux.HandleFunc("POST /v1/scanners/{name}/"+act.path, func(w http.ResponseWriter, r *http.Request) {
					r, ok := authorized(w, r, admin)
					if !ok {
						return
					}
					LiftWriteDeadline(w)
					res, err := cs.Canary(r.Context(), r.PathValue("name"), act.action, "admin request from "+r.RemoteAddr)
					writeCanary(w, r.PathValue("name"), act.action, res, err)
				})
			}
		}
		mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
			r, ok := authorized(w, r, admin)
			if !ok {
				return
			}
			LiftWriteDeadline(w)
			res, err := admin.ReloadConfig(r.Context(), "admin request from "+r.RemoteAddr)
			switch {
			case err != nil:
				writeJSON(w, http.StatusInternalServerError, ReloadResult{Error: err.Error()})
			case res.Error != "":
				writeJSON(w, http.StatusConflict, res)
			default:
				writeJSON(w, http.StatusOK, res)
			}
		})
		mux.HandleFunc("POST /v1/scanners/{name}/reload", func(w http.ResponseWriter, r *http.Request) {
			r, ok := authorized(w, r, admin)
			if !ok {
				return
			}
			LiftWriteDeadline(w)
			q := r.URL.Query()
			res, err := admin.ReloadPlugin(r.Context(), r.PathValue("name"), q.Get("force") == "1" || q.Get("force") == "true", q.Get("wait") != "0" && q.Get("wait") != "false")
			switch {
			case errors.Is(err, ErrNotFound):
				writeJSON(w, http.StatusNotFound, PluginSwapResult{Scanner: r.PathValue("name"), Error: err.Error()})
			case err != nil:
				writeJSON(w, http.StatusInternalServerError, PluginSwapResult{Scanner: r.PathValue("name"), Error: err.Error()})
			case res.Error != "":
				writeJSON(w, http.StatusConflict, res)
			default:
				writeJSON(w, http.StatusOK, res)
			}
		})
	}
	return mux
}

// hostAllowed refuses /v1 requests whose Host is a DNS name other than
// localhost: a web page can point its own name at 127.0.0.1 (DNS
// rebinding) and then talk to this listener as if same-origin, but it
// cannot make the browser send an IP address or "localhost" as the Host
// of its own origin. Reach the API by IP or as localhost.
func hostAllowed(w http.ResponseWriter, r *http.Request) bool { return HostAllowed(w, r) }

// HostAllowed answers 403 and returns false for a request whose Host is a
// DNS name other than localhost (see hostAllowed); the console's pages
// follow the same rule.
func HostAllowed(w http.ResponseWriter, r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" || net.ParseIP(host) != nil {
		return true
	}
	http.Error(w, fmt.Sprintf("Host %q refused: the API answers requests addressed to an IP address or localhost only", r.Host), http.StatusForbidden)
	return false
}

// authorized is allowed, with the request's context carrying the actor
// for the audit trail: the channel (the ffscan CLI says it is one) and
// the token's identity and the peer.
func authorized(w http.ResponseWriter, r *http.Request, admin Admin) (*http.Request, bool) {
	if !allowed(w, r, admin) {
		return r, false
	}
	got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	ch := audit.ChannelAPI
	if r.Header.Get(ClientHeader) == "cli" {
		ch = audit.ChannelCLI
	}
	return r.WithContext(audit.WithActor(r.Context(), audit.Actor{Channel: ch, Who: audit.TokenIdentity(strings.TrimSpace(got)) + " from " + r.RemoteAddr})), true
}

// ClientHeader names the client of an admin request ("cli": the ffscan
// command), for the audit trail's channel.
const ClientHeader = "X-FFScan-Client"

func allowed(w http.ResponseWriter, r *http.Request, admin Admin) bool {
	if !hostAllowed(w, r) {
		return false
	}
	if !admin.AdminEnabled() {
		http.Error(w, "admin actions are disabled (http.admin: false)", http.StatusForbidden)
		return false
	}
	want, err := admin.AdminToken()
	if err != nil {
		http.Error(w, "admin actions are unavailable: the host cannot read its admin token: "+err.Error(), http.StatusServiceUnavailable)
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !admintoken.Equal(strings.TrimSpace(got), want) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ffscan admin"`)
		http.Error(w, "admin requests need the host's admin token (Authorization: Bearer TOKEN; the token is in the file http.admin_token_file names, which the host creates at its first start)", http.StatusUnauthorized)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// PostgresStatus is the host's view of the Postgres database.
type PostgresStatus struct {
	// Schema is what the host recognised at boot ("flowfabric migration
	// 22").
	Schema string `json:"schema"`
	// Library is the version of ffscan's function library the host
	// installed or found (0: a read-only host, which installs nothing).
	Library  int `json:"library"`
	PoolSize int `json:"pool_size"`
	// Filter is the host's namespace / instance-tag filter ("none" when
	// not set).
	Filter string `json:"filter"`
	// Connections open now, and of those in use.
	Connections int `json:"connections"`
	InUse       int `json:"in_use"`
	// ReadConnections are the candidate reads' own connections
	// (postgres.read_connections; 0: a read-only host, which reads on
	// its pool).
	ReadConnections int `json:"read_connections"`
	// SharedTransactions is the budget of action transactions the
	// sharing hosts divide (postgres.shared_transactions, or the pool's
	// size), ActionSlots this host's part of it now, by its share of the
	// partitions (0 and 0: a read-only host, which runs no action).
	SharedTransactions int `json:"shared_transactions"`
	ActionSlots        int `json:"action_slots"`
	// Completions is the Postgres completion listener (null when disabled).
	Completions *PGCompletionsStatus `json:"completions,omitempty"`
}

// PGCompletionsStatus counts what the Postgres completion listener did:
// notifications received, drains run (each a read of the pending events
// of every partition and their dispatches), events it
// dispatched, events it found already dispatched, events of executions
// the host's filter leaves to others, failures and reconnects.
type PGCompletionsStatus struct {
	Notifications int64 `json:"notifications"`
	Drains        int64 `json:"drains"`
	Dispatched    int64 `json:"dispatched"`
	AlreadyDone   int64 `json:"already_done"`
	Filtered      int64 `json:"filtered"`
	Errors        int64 `json:"errors"`
	Reconnects    int64 `json:"reconnects"`
	// Listening is true while the listener's connection listens.
	Listening bool `json:"listening"`
	// Standby is true while another host of the share holds the
	// listener's role (the owner of flow partition 0): this one neither
	// listens nor drains.
	Standby bool `json:"standby"`
}
