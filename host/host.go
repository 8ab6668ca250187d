// Package host wires the runtime together, in the order data flows:
// config -> boot (Valkey, partitions, library, lanes) -> catalog ->
// supervisors start plugins -> schedulers tick scanners -> callbacks run
// their commands -> metrics and the HTTP endpoints report it. Each step
// lives in its own package, and every service has one shape (see
// host/service): this package only builds, starts and stops them. Its
// files are its table of contents, and each calls only into the files
// listed after it (host/internal/rootgraph checks it):
//
//   - boot.go: Boot, which connects to the stores and prepares them.
//   - run.go: Run, which starts the services and waits.
//   - shutdown.go: the shutdown, phase by phase, within its budget.
//   - sessions.go: scanners run on demand (scan-once, the test kits).
//   - explainer.go: the explain view, the host's facts per scanner for
//     host/explain.
//   - collector.go: gauges computed at scrape time (interval, enabled,
//     pending approval, readiness, pauses, canaries).
//   - pauses.go: resuming a scanner paused at its action budget.
//   - status.go: the status and readiness views.
//   - admin.go: the admin endpoints' actions (plugin reload and approval,
//     the token, a scanner enabled or disabled by an operator).
//   - services.go: every service built from the configuration.
//   - watch.go: what the file watch follows.
//   - canaries.go: canary swaps on request and from the file watch.
//   - reload.go: configuration reloads (SIGHUP, the admin call, the file
//     watch), and the operator overrides they keep.
//   - auditing.go: the audit trail's recorder, the operator actions it
//     records, and the trail read back.
//   - settings.go: a configuration section as a service's settings.
//   - host.go: the Host and what it holds.
//
// The operator commands on the plugin directory, and finding the binary
// that serves a scanner, are host/plugindir's.
package host

import (
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/census"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/completions"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/filewatch"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/keyevents"
	"github.com/ffscan/ffscan/host/lanes"
	"github.com/ffscan/ffscan/host/libwatch"
	"github.com/ffscan/ffscan/host/listeners"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/plugindir"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/host/unit"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// Version is the host build version (set with -ldflags -X).
var Version = "dev"

// NewLogger builds the host logger from the log config. Its level can be
// changed later (a reload of log.level).
func NewLogger(c config.Log) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "ffscan",
		Level:      hclog.LevelFromString(c.Level),
		JSONFormat: c.JSON,
		Output:     os.Stderr,
	})
}

// Host is a booted host: connected, partitions agreed, library loaded,
// its services built.
type Host struct {
	log hclog.Logger
	clk clock.Clock
	met *metrics.Metrics

	// What Boot connected and prepared (boot.go), fixed for the host's
	// life.
	client valkey.Client // nil: the host serves Postgres alone
	lib    *lua.Library
	// pg is the FlowFabric Postgres database (nil without postgres.dsn),
	// pgSchema what Boot recognised there, pgLibrary the version of
	// ffscan's function library Boot made sure of (0 for a read-only
	// host, which installs nothing), pgReads the connections of the
	// candidate reads (with pg).
	pg      *pgxpool.Pool
	pgReads *postgres.Readers
	// pgSlots bound the action transactions in flight (nil on a host
	// without Postgres, or read only).
	pgSlots   *postgres.ActionSlots
	pgSchema  postgres.Schema
	pgLibrary int
	// readOnly: booted by BootReadOnly; only dry-run sessions may run.
	readOnly bool
	parts    keys.PartitionConfig
	// epoch is the store epoch every runner shares; nodes the map of
	// which master serves which partition.
	epoch *scheduler.StoreEpoch
	nodes *scheduler.NodeMap
	cat   *catalog.Catalog
	// launches bounds the plugin launches under way at once, for every
	// scanner of this host (supervisor.LaunchGate).
	launches *supervisor.LaunchGate
	// bounds are the plugins' control groups (or why there are none).
	bounds boot.PluginBounds
	// shadows record what scanners in shadow mode would have written.
	shadows *shadow.Logs
	// taps link each scanner's launches to its canary (unit/canary.go).
	taps canary.Taps
	// audit records what scanners and operators did (nil: no trail).
	audit *audit.Recorder
	// approvals admits each launch's declared policy (restart keys, so
	// fixed for the host's life).
	approvals *policy.Store
	svc       *callbacks.Service
	compMet   *completions.PrometheusMetrics
	res       plugindir.Resolver
	started   time.Time

	// The configuration in force and its reloads (reload.go).
	cfgMu    sync.RWMutex
	cfg      *config.Config
	reloadMu sync.Mutex // serializes reloads and the shutdown
	relMu    sync.Mutex // guards src and reloads (held briefly; status reads them)
	src      ConfigSource
	reloads  reloadState
	// overrides are the scanners an operator enabled (true) or disabled
	// (false) at run time (admin.go); guarded by relMu.
	overrides map[string]bool
	// modeOverrides are the scanners an operator switched to shadow or
	// act (guarded by relMu).
	modeOverrides map[string]string

	// The services (services.go), in the order Run starts them;
	// shutdown.go stops them. Nil where the host has no use for one
	// (census and library without Valkey, share on a read-only host
	// without Valkey, http without http.listen).
	share     *sharing.Coordinator
	events    *keyevents.Feed
	lanes     *lanes.Keeper
	census    *census.Census
	censusCtl *census.Controller
	library   *libwatch.Watch
	units     *unit.Set
	listeners *listeners.Listeners
	files     *filewatch.Watcher
	http      *httpapi.Server

	// changes is told of every change of the status: a scanner's plugin
	// or cycle, the set of scanners, a reload.
	changes service.Changes
	// testSignals fire at the host's events for tests that Init them.
	testSignals testSignals
}

// testSignals are the host's own events (its services have theirs).
type testSignals struct {
	// pluginSwitched: an admin plugin reload switched to the new process
	// (its pid); with wait, probation runs from here.
	pluginSwitched testsignal.Signal[int]
}

// config returns the configuration in force.
func (h *Host) config() *config.Config {
	h.cfgMu.RLock()
	defer h.cfgMu.RUnlock()
	return h.cfg
}

// Config returns the configuration in force (it changes with reloads; do
// not modify it).
func (h *Host) Config() *config.Config { return h.config() }

// Lanes returns the lanes the host currently knows.
func (h *Host) Lanes() []string { return h.lanes.Lanes() }

// Metrics exposes the host's collectors (tests, embedding).
func (h *Host) Metrics() *metrics.Metrics { return h.met }

// Close releases the Valkey client and the Postgres pool and removes the
// private copies of the plugin binaries.
func (h *Host) Close() {
	if h.client != nil {
		h.client.Close()
	}
	if h.pgReads != nil {
		h.pgReads.Close()
	}
	if h.pg != nil {
		h.pg.Close()
	}
	if h.cat != nil {
		_ = h.cat.Close()
	}
	if err := h.bounds.Close(); err != nil {
		h.log.Warn("plugins' control groups left behind", "error", err)
	}
}
