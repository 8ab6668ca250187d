// Package host wires the runtime together, in the order data flows:
// config -> boot (Valkey, partitions, library, lanes) -> catalog ->
// supervisors start plugins -> schedulers tick scanners -> callbacks run
// their commands -> metrics and the HTTP endpoints report it. Each step
// lives in its own package; this one only connects them and owns what
// spans them: the shutdown sequence, configuration reloads (reload.go),
// the file watches that drive reloads and hot swaps (watch.go), the
// completion listener, and the status view (status.go).
package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/census"
	"github.com/ffscan/ffscan/host/completions"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/keyless"
	"github.com/ffscan/ffscan/host/lanes"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/pgcompletions"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
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

// Host is a booted host: connected, partitions agreed, library loaded.
type Host struct {
	log    hclog.Logger
	client valkey.Client
	// epoch is the store epoch every runner shares (scheduler.StoreEpoch).
	epoch   *scheduler.StoreEpoch
	lib     *lua.Library
	svc     *callbacks.Service
	met     *metrics.Metrics
	compMet *completions.PrometheusMetrics
	cat     *catalog.Catalog
	// approvals admits each launch's declared policy (restart keys, so
	// fixed for the host's life).
	approvals *policy.Store
	res       resolver
	// census knows which lane keys exist (runCensus keeps it).
	census *census.Census
	// pg is the FlowFabric Postgres database (nil without postgres.dsn),
	// pgSchema what Boot recognised there.
	pg       *pgxpool.Pool
	pgSchema postgres.Schema
	// pgLibrary is the version of ffscan's function library Boot made
	// sure of (0 for a read-only host, which installs nothing).
	pgLibrary int
	// readOnly: booted by BootReadOnly; only dry-run sessions may run.
	readOnly bool

	libMu   sync.Mutex
	libErr  error // the last library check's failure; nil when it passed
	parts   keys.PartitionConfig
	lanes   atomic.Pointer[[]string]
	started time.Time

	cfgMu sync.RWMutex
	cfg   *config.Config

	reloadMu sync.Mutex // serializes reloads (held for a whole reload)
	relMu    sync.Mutex // guards src and reloads (held briefly; status reads them)
	src      ConfigSource
	reloads  reloadState

	// Set by Run.
	runCtx  context.Context
	callCtx context.Context
	laneNow chan struct{} // asks refreshLanes for an immediate merge
	disc    *lanes.Discovery
	share   *sharing.Coordinator // this host's share of the partitions (Run)

	mu    sync.Mutex
	units map[string]*unit
	comp  *completions.Listener
	// pgComp is the Postgres completion listener (nil without a database
	// or with completions disabled).
	pgComp *pgcompletions.Listener
	bg     sync.WaitGroup // scanners being stopped by a reload
}

// unit is one enabled scanner: its supervisor and its scheduler.
type unit struct {
	name   string
	sc     config.Scanner
	sup    *supervisor.Supervisor
	run    *scheduler.Runner
	cancel context.CancelFunc // stops the runner's dispatch
	done   chan struct{}      // closed when the runner returned

	watch fileWatch // the plugin binary (watch.go)

	// notApplied says why the configuration's plugin, pin or options for
	// this scanner are not what runs (a reload's update failed); empty
	// when they are. Guarded by Host.mu.
	notApplied string
}

// ErrBoot marks failures before any scanner ran (Valkey unreachable,
// partition mismatch, incompatible library): operator problems, not bugs.
var ErrBoot = errors.New("boot failed")

// Boot connects to Valkey and prepares the keyspace: the partition counts
// are recorded or checked, the library is loaded, the lanes are merged.
func Boot(ctx context.Context, cfg *config.Config, log hclog.Logger) (*Host, error) {
	return bootHost(ctx, cfg, log, false)
}

// BootReadOnly is Boot for a host that must not change the keyspace
// (scan-once --dry-run): the partition counts are checked when recorded
// but not recorded, the lanes are read but not merged, and the library is
// not loaded (a dry run refuses every FCALL anyway). Run is refused.
func BootReadOnly(ctx context.Context, cfg *config.Config, log hclog.Logger) (*Host, error) {
	return bootHost(ctx, cfg, log, true)
}

func bootHost(ctx context.Context, cfg *config.Config, log hclog.Logger, readOnly bool) (*Host, error) {
	h := &Host{cfg: cfg, log: log, met: metrics.New(), started: time.Now(), units: map[string]*unit{}, laneNow: make(chan struct{}, 1), epoch: scheduler.NewStoreEpoch()}
	cat, err := catalog.New(cfg.PluginDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBoot, err)
	}
	h.cat = cat
	if h.approvals, err = policy.NewStore(cfg.PluginApprovalsFile, policy.Mode(cfg.PluginApproval)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBoot, err)
	}
	if cfg.HasValkey() {
		if h.client, err = boot.Connect(ctx, cfg.Valkey); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBoot, err)
		}
	}
	fail := func(err error) (*Host, error) {
		if h.client != nil {
			h.client.Close()
		}
		if h.pg != nil {
			h.pg.Close()
		}
		return nil, fmt.Errorf("%w: %w", ErrBoot, err)
	}
	if cfg.Postgres.DSN != "" {
		// Before anything else touches it: a schema this ffscan does not
		// know stops the boot, with what was found.
		if h.pg, err = postgres.Connect(ctx, postgres.Options{DSN: cfg.Postgres.DSN, PoolSize: cfg.Postgres.PoolSize}); err != nil {
			return fail(err)
		}
		if h.pgSchema, err = postgres.Recognize(ctx, h.pg); err != nil {
			return fail(err)
		}
		if !readOnly {
			// ffscan's own functions, in its own schema: installed or
			// upgraded now, a newer one refused.
			action, err := postgres.InstallLibrary(ctx, h.pg)
			if err != nil {
				return fail(err)
			}
			h.pgLibrary = postgres.LibraryVersion
			log.Info("postgres function library", "version", postgres.LibraryVersion, "action", string(action))
		}
		log.Info("postgres", "schema", h.pgSchema.String(), "pool_size", h.pg.Config().MaxConns, "filter", cfg.Postgres.Filter().String())
	}
	h.readOnly = readOnly
	var lanesList []string
	switch {
	case h.client == nil:
		// Postgres alone: the partition counts are the configuration's,
		// as FlowFabric's own server takes them from its environment
		// (nothing reads ff_partition_config), and there are no lanes to
		// discover (the Postgres reads do not go by lane).
		h.parts = cfg.Partitions
		lanesList = append(lanesList, cfg.Lanes...)
		log.Info("no valkey: this host serves its Postgres database alone", "flow", h.parts.Flow, "budget", h.parts.Budget)
	case readOnly:
		parts, recorded, err := boot.ReadPartitions(ctx, h.client, cfg.Partitions)
		if err != nil {
			return fail(err)
		}
		h.parts = parts
		log.Info("partitions (read only)", "flow", parts.Flow, "budget", parts.Budget, "quota", parts.Quota, "recorded", recorded)
		h.lib = lua.New(h.client, lua.Options{})
		if lanesList, err = boot.ReadLanes(ctx, h.client, cfg.Lanes, log); err != nil {
			return fail(err)
		}
	default:
		parts, created, err := boot.EnsurePartitions(ctx, h.client, cfg.Partitions)
		if err != nil {
			return fail(err)
		}
		h.parts = parts
		log.Info("partitions", "flow", parts.Flow, "budget", parts.Budget, "quota", parts.Quota, "recorded_now", created)
		if h.lib, err = boot.LoadLibrary(ctx, h.client, cfg.Lua.ForceReplace, log); err != nil {
			return fail(err)
		}
		if lanesList, err = boot.MergeLanes(ctx, h.client, cfg.Lanes, log); err != nil {
			return fail(err)
		}
	}
	h.lanes.Store(&lanesList)
	if h.client != nil {
		h.disc = lanes.New(h.client)
		h.census = census.New(h.client, h.epoch.Load)
		// Lanes in use that nobody configured or recorded: one full
		// discovery pass before anything runs.
		h.discoverLanes(ctx)
		log.Info("lanes", "lanes", h.Lanes())
	}
	h.svc = callbacks.New(h.lib, h.met)
	h.svc.SetPostgres(h.pg, cfg.Postgres.Filter()) // PGCALLs (refused when there is no database)
	h.svc.SetBudget(budgetOf(cfg.Callbacks))
	h.compMet = completions.NewPrometheusMetrics()
	if err := h.compMet.Register(h.met.Registry); err != nil {
		return fail(fmt.Errorf("register completion metrics: %w", err))
	}
	h.reloads.loadedAt = time.Now()
	return h, nil
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
func (h *Host) Lanes() []string { return *h.lanes.Load() }

// LaneRefresh is how often a running host re-reads ff:idx:lanes, so
// lane-scoped sources pick up lanes producers add after boot.
const LaneRefresh = 30 * time.Second

// DiscoveryPages bounds the lane discovery SCAN of one LaneRefresh tick:
// pages of lanes.PageSize keys per primary. A lane a producer starts using
// after boot is found within ceil(keys per primary / (DiscoveryPages *
// lanes.PageSize)) ticks: within one tick (30 s) up to 50,000 keys per
// primary, within 10 ticks (5 min) at 500,000.
const DiscoveryPages = 50

// owns is the ownership check the scanners' cycles use (nil, every
// partition, before partition sharing runs). Callers hold h.mu.
func (h *Host) owns() func(keys.Partition) bool {
	if h.share == nil {
		return nil
	}
	return h.share.Owns
}

// hostID names this host among the hosts sharing the keyspace: host name
// and pid, and a random suffix so that a restarted process is a new
// member.
func hostID() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "host"
	}
	return fmt.Sprintf("%s:%d:%s", name, os.Getpid(), keys.NewUUID().String()[:8])
}

// discoverLanes runs one full discovery pass and adds the lanes found to
// the known ones (and to ff:idx:lanes, unless the host is read only). A
// failure is logged: the known lanes stay.
func (h *Host) discoverLanes(ctx context.Context) {
	if h.disc == nil {
		return // no Valkey
	}
	found, _, err := h.disc.Step(ctx, 0)
	if err != nil {
		h.log.Warn("lane discovery failed; lanes in use that are not recorded stay unseen until it succeeds", "error", err)
	}
	if len(found) == 0 {
		return
	}
	known := h.Lanes()
	merged := boot.UnionLanes(known, found, h.log)
	if !h.readOnly {
		if m, err := boot.MergeLanes(ctx, h.client, append(append([]string{}, h.config().Lanes...), merged...), h.log); err != nil {
			h.log.Warn("could not record discovered lanes in "+keys.LanesIndex, "error", err)
		} else {
			merged = m
		}
	}
	if !slices.Equal(known, merged) {
		h.log.Info("lanes discovered", "lanes", merged)
	}
	h.lanes.Store(&merged)
}

func (h *Host) refreshLanes(ctx context.Context) {
	t := time.NewTicker(LaneRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.laneNow:
		}
		record := append([]string{}, h.config().Lanes...)
		found, _, derr := h.disc.Step(ctx, DiscoveryPages)
		if derr != nil && ctx.Err() == nil {
			h.log.Warn("lane discovery step failed; it starts over on the next tick", "error", derr)
		}
		record = append(record, found...)
		lanes, err := boot.MergeLanes(ctx, h.client, record, h.log)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("lane refresh failed; keeping the known lanes", "error", err)
			}
			continue
		}
		if old := h.Lanes(); !slices.Equal(old, lanes) {
			h.log.Info("lanes changed", "lanes", lanes)
		}
		h.lanes.Store(&lanes)
	}
}

// LibraryCheck is how often a running host checks that every primary
// still serves the flowfabric library. A server restarted without
// persistence (or a new primary that never had it) has lost it; the
// host's own FCALLs would reload it on "function not found", but
// producers and workers would fail until then, and an idle host makes
// none.
const LibraryCheck = 5 * time.Second

// watchLibrary reloads the library wherever it went missing, every
// LibraryCheck, until ctx ends.
func (h *Host) watchLibrary(ctx context.Context) {
	t := time.NewTicker(LibraryCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.checkLibrary(ctx); err != nil && ctx.Err() == nil {
			h.log.Error("flowfabric library check failed; checking again", "error", err, "in", LibraryCheck)
		}
	}
}

// checkLibrary makes every primary serve the library (lua.Library.Ensure)
// and logs every node where it had to load or replace it: at run time
// that means the server lost it.
func (h *Host) checkLibrary(ctx context.Context) error {
	results, err := h.lib.Ensure(ctx)
	for _, r := range results {
		if r.Action == lua.ActionKept || r.Action == lua.ActionFlowFabric {
			continue
		}
		h.log.Warn("flowfabric library reloaded at run time (the server had lost it: restarted without persistence, or a new primary)",
			"node", r.Node, "action", string(r.Action), "found", r.Found, "version", lua.Version())
	}
	h.libMu.Lock()
	h.libErr = err
	h.libMu.Unlock()
	return err
}

// Close releases the Valkey client and removes the private copies of the
// plugin binaries.
func (h *Host) Close() {
	if h.client != nil {
		h.client.Close()
	}
	if h.pg != nil {
		h.pg.Close()
	}
	_ = h.cat.Close()
}

// Metrics exposes the host's collectors (tests, embedding).
func (h *Host) Metrics() *metrics.Metrics { return h.met }

// scannerConfig is the configuration of scanner name (defaults when it is
// not configured), with the binary that serves it resolved.
func (h *Host) scannerConfig(ctx context.Context, cfg *config.Config, name string) (config.Scanner, error) {
	sc, ok := cfg.Scanners[name]
	if !ok {
		sc = config.Scanner{Enabled: true, Options: map[string]string{}}
	}
	bin, err := h.res.pluginFor(ctx, h.cat, name, sc, probeOf(cfg), h.log)
	if err != nil {
		return sc, err
	}
	sc.Plugin = bin
	return sc, nil
}

func (h *Host) launcherFor(cfg *config.Config, name string, sc config.Scanner, readOnly bool) *launcher.Launcher {
	return launcher.New(launcher.Config{
		Scanner:      name,
		Binary:       sc.Plugin,
		Pin:          sc.SHA256,
		Options:      sc.Options,
		ReadOnly:     readOnly,
		StartTimeout: cfg.Supervisor.StartTimeout,
		Isolation:    cfg.PluginIsolation.Mode(),
		Approvals:    h.approvals,
		Postgres:     h.pg != nil,
		NoValkey:     h.client == nil,
	}, h.cat, h.svc, h.scannerLog(name))
}

// scannerLog tags every line about a scanner (the plugin's own included)
// with its name.
func (h *Host) scannerLog(name string) hclog.Logger {
	return h.log.Named(name).With("scanner", name)
}

// Run starts every enabled scanner and the completion listener and serves
// HTTP until ctx is done, reloading the configuration and hot-swapping
// plugins as files change (see ConfigSource, watch.go). Then it shuts down
// within the configured shutdown_timeout: dispatching and receiving
// completions stop at once, in-flight scans and cascades get half the
// budget to finish (then their calls are cancelled), plugins are closed
// gracefully and killed at 90% of it.
func (h *Host) Run(ctx context.Context) error {
	if h.readOnly {
		return errors.New("this host was booted read only; it runs dry-run sessions, not scanners")
	}
	cfg, err := h.res.resolveAll(ctx, h.config(), h.cat, h.log)
	if err != nil {
		return err
	}
	h.cfgMu.Lock()
	h.cfg = cfg
	h.cfgMu.Unlock()
	if len(cfg.Enabled()) == 0 {
		h.log.Warn("no scanners enabled: this host runs none until a reload enables some (list them under scanners:, as configs/ffscan.yaml does for the shipped set)")
	}
	var srv *http.Server
	// Plugins run as this process's user: keep them out of its memory and
	// /proc/<pid>/environ (credentials), confined or not.
	if err := pluginhost.ProtectHostProcess(); err != nil {
		h.log.Warn("could not make the host non-dumpable: plugins of this user may read its memory and environment", "error", err)
	}
	if cfg.HTTP.Listen != "" && cfg.HTTP.Admin {
		if _, err := h.ensureAdminToken(cfg.HTTP); err != nil {
			return fmt.Errorf("http.admin is on: %w (set http.admin_token_file, or http.admin: false)", err)
		}
	}
	if cfg.HTTP.Listen != "" {
		ln, err := net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
		}
		srv = &http.Server{Handler: httpapi.Handler(h.met.Registry, h), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				h.log.Error("http server failed", "error", err)
			}
		}()
		h.log.Info("http listening", "addr", ln.Addr().String(), "admin", cfg.HTTP.Admin)
	}

	callCtx, abortCalls := context.WithCancel(context.Background())
	defer abortCalls()
	// Partition sharing: this host's share is known before any scanner
	// runs (a single host owns every partition from its first tick). The
	// shares live on Valkey: a host without it scans every partition.
	var share *sharing.Coordinator
	if h.client != nil {
		share = sharing.New(h.client, sharing.Options{ID: hostID(), Partitions: h.parts, Logger: h.log.Named("sharing")})
		if err := share.Tick(ctx); err != nil {
			h.log.Warn("partition sharing: first tick failed; scanners wait for a tick that succeeds", "error", err)
		}
		shareCtx, stopShare := context.WithCancel(context.Background())
		shareDone := make(chan struct{})
		go func() { defer close(shareDone); share.Run(shareCtx) }()
		defer func() { stopShare(); <-shareDone }()
	} else {
		h.log.Info("no valkey: partitions are not shared; every host on this database scans every partition (the library's functions re-check each row under its lock, so several hosts are safe, at a multiplied cost)")
	}
	h.mu.Lock()
	h.share = share
	h.runCtx, h.callCtx = ctx, callCtx
	for _, name := range cfg.Enabled() {
		h.startUnit(cfg, name, cfg.Scanners[name])
	}
	h.startCompletions(cfg.Completions)
	h.mu.Unlock()
	if h.client != nil {
		go h.refreshLanes(ctx)
		go h.runCensus(ctx)
		go h.watchLibrary(ctx)
	}
	go h.watchFiles(ctx)
	h.log.Info("host running", "scanners", cfg.Enabled(), "version", Version, "scanner_api", fmt.Sprintf("%d..%d", scannerapi.MinAPIVersion, scannerapi.APIVersion))

	<-ctx.Done()
	start := time.Now()
	// A reload in progress finishes first (it may be starting plugins);
	// none starts after this.
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	budget := h.config().ShutdownTimeout
	h.log.Info("shutting down", "timeout", budget)

	// 1. Dispatch has stopped (the runners watch ctx) and the completion
	// listener stops receiving; calls and cascades in flight get up to
	// half the budget, then they are cancelled.
	h.mu.Lock()
	units := make([]*unit, 0, len(h.units))
	for _, u := range h.units {
		units = append(units, u)
	}
	comp, pgComp := h.comp, h.pgComp
	h.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		for _, u := range units {
			<-u.done
		}
		close(drained)
	}()
	compDone := make(chan struct{})
	go func() {
		defer close(compDone)
		cctx, cancel := context.WithDeadline(context.Background(), start.Add(budget/2))
		defer cancel()
		if pgComp != nil {
			if err := pgComp.Stop(cctx); err != nil {
				h.log.Warn("postgres completion listener: dispatches still running at the deadline were cancelled", "error", err)
			}
		}
		if comp == nil {
			return
		}
		if err := comp.Stop(cctx); err != nil {
			h.log.Warn("completion listener: cascades still running at the deadline were cancelled", "error", err)
		}
	}()
	if !waitUntil(drained, start.Add(budget/2)) {
		h.log.Warn("scans still in flight; cancelling them")
		abortCalls()
		waitUntil(drained, start.Add(budget*6/10))
	}
	abortCalls()
	waitUntil(compDone, start.Add(budget*6/10))

	// 2. Close plugins gracefully, all at once; kill what remains at 90%.
	closeCtx, cancel := context.WithDeadline(context.Background(), start.Add(budget*9/10))
	defer cancel()
	var sw sync.WaitGroup
	for _, u := range units {
		sw.Add(1)
		go func() { defer sw.Done(); u.sup.Stop(closeCtx) }()
	}
	sw.Wait()
	// Scanners a reload was stopping stop under the same deadline.
	bgDone := make(chan struct{})
	go func() { h.bg.Wait(); close(bgDone) }()
	waitUntil(bgDone, start.Add(budget*9/10))

	// 3. HTTP last, so /readyz reports the shutdown until the end.
	if srv != nil {
		sctx, scancel := context.WithDeadline(context.Background(), start.Add(budget*95/100))
		_ = srv.Shutdown(sctx)
		scancel()
	}
	h.log.Info("shutdown complete", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// startUnit starts a scanner's supervisor and runner. h.mu must be held,
// and Run must have set runCtx.
func (h *Host) startUnit(cfg *config.Config, name string, sc config.Scanner) *unit {
	log := h.scannerLog(name)
	sup := supervisor.New(supervisor.Config{
		Name:           name,
		HealthInterval: cfg.Supervisor.HealthInterval,
		StartTimeout:   cfg.Supervisor.StartTimeout,
		SwapProbation:  probation(cfg.Supervisor.SwapProbation),
		DrainTimeout:   cfg.Scheduler.CallTimeout + 5*time.Second,
	}, h.launcherFor(cfg, name, sc, false), h.met, log)
	run := scheduler.New(scheduler.Config{
		Name:           name,
		Interval:       sc.Interval,
		Batch:          sc.Batch,
		Partitions:     h.parts,
		LanesFunc:      h.Lanes,
		Owns:           h.owns(),
		Concurrency:    cfg.Scheduler.Concurrency,
		CallTimeout:    cfg.Scheduler.CallTimeout,
		CallParent:     h.callCtx,
		Epoch:          h.epoch,
		Census:         h.laneCensus(),
		Postgres:       h.pg,
		PostgresFilter: cfg.Postgres.Filter(),
	}, h.client, supTarget{sup}, nil, h.met, log)
	ctx, cancel := context.WithCancel(h.runCtx)
	u := &unit{name: name, sc: sc, sup: sup, run: run, cancel: cancel, done: make(chan struct{})}
	h.units[name] = u
	sup.Start()
	go func() {
		defer close(u.done)
		run.Run(ctx)
	}()
	return u
}

// probation maps the config's "0 = none" to the supervisor's "negative =
// none" (its zero means the default).
func probation(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// stopUnit stops a scanner a reload disabled: dispatch stops now, its
// calls in flight finish (bounded by the call timeout), then the plugin is
// closed. It runs in the background; Run's shutdown waits for it. h.mu
// must be held.
func (h *Host) stopUnit(u *unit, callTimeout time.Duration) {
	delete(h.units, u.name)
	u.cancel()
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		select {
		case <-u.done:
		case <-time.After(callTimeout + 5*time.Second):
			h.log.Warn("scanner still busy after its call timeout; stopping its plugin anyway", "scanner", u.name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		u.sup.Stop(ctx)
		h.log.Info("scanner stopped", "scanner", u.name)
	}()
}

// startCompletions starts the completion listener when enabled. h.mu must
// be held.
func (h *Host) startCompletions(c config.Completions) {
	if !c.Enabled {
		h.comp, h.pgComp = nil, nil
		return
	}
	if h.pg != nil {
		l := pgcompletions.New(pgcompletions.Options{Pool: h.pg, Concurrency: c.Concurrency, Owns: h.owns(),
			Filter: h.config().Postgres.Filter(), Logger: h.log.Named("pgcompletions")})
		l.Start(h.runCtx)
		h.pgComp = l
		h.log.Info("postgres completion listener started", "channel", pgcompletions.Channel, "concurrency", c.Concurrency)
	}
	if h.client == nil {
		h.comp = nil
		return
	}
	l := completions.New(completions.Config{Enabled: true, Concurrency: c.Concurrency}, h.lib, completions.Options{
		Logger:     h.log.Named("completions"),
		Metrics:    h.compMet,
		Partitions: h.parts,
		Owns:       h.owns(),
	})
	if err := l.Start(h.runCtx); err != nil {
		h.log.Error("completion listener did not start; dependency resolution relies on the dependency_reconciler", "error", err)
		h.comp = nil
		return
	}
	h.comp = l
	h.log.Info("completion listener started", "concurrency", c.Concurrency)
}

func waitUntil(ch <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// Ready implements httpapi.Source.
func (h *Host) Ready(ctx context.Context) error {
	if h.client != nil {
		if err := keyless.Do(ctx, h.client, func(b valkey.Builder) valkey.Completed { return b.Ping().Build() }).Error(); err != nil {
			return fmt.Errorf("valkey: %w", err)
		}
	}
	if h.pg != nil {
		if err := h.pg.Ping(ctx); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	h.libMu.Lock()
	libErr := h.libErr
	h.libMu.Unlock()
	if libErr != nil {
		return fmt.Errorf("flowfabric library: %w", libErr)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, u := range h.units {
		if st := u.sup.Status(); st.State != supervisor.StateRunning {
			return fmt.Errorf("scanner %s is %s", u.name, st.State)
		}
	}
	return nil
}

// ScanOnce runs one cycle of a scanner over all partitions (partition < 0)
// or one, with a plugin process of its own, and returns what it did. In a
// dry run the scanner is asked not to mutate, and the callback service
// refuses its writes and FCALLs should it try.
func (h *Host) ScanOnce(ctx context.Context, name string, partition int, dryRun bool) (scheduler.Summary, error) {
	s, err := h.OpenSession(ctx, name, SessionOptions{DryRun: dryRun})
	if err != nil {
		return scheduler.Summary{}, err
	}
	defer s.Close()
	return s.Cycle(ctx, partition)
}

// SessionOptions say how OpenSession runs a scanner.
type SessionOptions struct {
	// Linked, when set, is the scanner itself, run in this process
	// instead of a plugin process (wrapped with pluginhost.Linked, so it
	// behaves as a plugin would).
	Linked scannerapi.Scanner
	// DryRun asks for dry-run cycles and refuses writes and FCALLs.
	DryRun bool
	// Observe, when set, sees every batch the scanner runs through the
	// callback service, with its replies (refusals included).
	Observe func(cmds []scannerapi.Command, replies []scannerapi.Reply)
}

// Session runs cycles of one scanner on demand through the same path as
// Run: the configured options checked against the scanner's schema, its
// command policy enforced by the callback service, candidates fetched by
// the scheduler. Test kits and scan-once use it.
type Session struct {
	h      *Host
	run    *scheduler.Runner
	dryRun bool
	close  func()
}

// OpenSession prepares a scanner configured as scanners.<name> (or with
// defaults when it is not configured): a plugin process launched from the
// plugin directory, or opts.Linked.
func (h *Host) OpenSession(ctx context.Context, name string, opts SessionOptions) (*Session, error) {
	if h.readOnly && !opts.DryRun {
		return nil, errors.New("this host was booted read only; it opens dry-run sessions only")
	}
	cfg := h.config()
	sc, ok := cfg.Scanners[name]
	if !ok {
		sc = config.Scanner{Enabled: true, Options: map[string]string{}}
	}
	var scanner scannerapi.Scanner
	var host scannerapi.Host
	closeFn := func() {}
	if opts.Linked != nil {
		info := opts.Linked.Info()
		if info.Name != name {
			return nil, fmt.Errorf("the linked scanner is named %q, not %q", info.Name, name)
		}
		if err := scannerapi.ValidateInfo(info); err != nil {
			return nil, err
		}
		if err := scheduler.CheckInfo(info); err != nil {
			return nil, err
		}
		if info.UsesPostgres() && h.pg == nil {
			return nil, fmt.Errorf("scanner %s works on a FlowFabric Postgres database and this host has none: set postgres.dsn (or --postgres-dsn)", name)
		}
		if !info.UsesPostgres() && h.client == nil {
			return nil, fmt.Errorf("scanner %s works on Valkey and this host has none (it serves its Postgres database alone): set valkey.addrs", name)
		}
		resolved, err := launcher.ResolveOptions(name, info.Options, sc.Options)
		if err != nil {
			return nil, err
		}
		pol, _ := callbacks.PolicyFromInfo(info, opts.DryRun)
		cb := observed(h.svc.Bind(name, pol).Callbacks(), opts.Observe)
		scanner = pluginhost.Linked(opts.Linked, cb)
		host = pluginhost.BindHost(cb, name)
		if err := scanner.Configure(ctx, resolved); err != nil {
			return nil, fmt.Errorf("scanner %s rejected its options: %w", name, err)
		}
	} else {
		var err error
		if sc, err = h.scannerConfig(ctx, cfg, name); err != nil {
			return nil, err
		}
		l := h.launcherFor(cfg, name, sc, opts.DryRun)
		l.Observe(opts.Observe)
		inst, _, err := l.Launch(ctx)
		if err != nil {
			return nil, err
		}
		closeFn = func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = inst.Close(cctx)
			inst.Kill()
		}
		scanner, host = inst.Scanner(), instanceHost(inst)
	}
	run := scheduler.New(scheduler.Config{
		Name:           name,
		Interval:       sc.Interval,
		Batch:          sc.Batch,
		Partitions:     h.parts,
		LanesFunc:      h.Lanes,
		Concurrency:    cfg.Scheduler.Concurrency,
		CallTimeout:    cfg.Scheduler.CallTimeout,
		NoJitter:       true,
		Epoch:          h.epoch,
		Postgres:       h.pg,
		PostgresFilter: cfg.Postgres.Filter(),
	}, h.client, staticTarget{scanner}, host, h.met, h.scannerLog(name))
	return &Session{h: h, run: run, dryRun: opts.DryRun, close: closeFn}, nil
}

// observed wraps callbacks so obs sees every batch and its replies.
func observed(cb pluginhost.Callbacks, obs func([]scannerapi.Command, []scannerapi.Reply)) pluginhost.Callbacks {
	if obs == nil {
		return cb
	}
	return pluginhost.CallbacksFunc(func(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		replies, err := cb.Exec(ctx, scanner, cmds)
		if err == nil {
			obs(cmds, replies)
		}
		return replies, err
	})
}

// Cycle runs one cycle over every partition (partition < 0) or one.
func (s *Session) Cycle(ctx context.Context, partition int) (scheduler.Summary, error) {
	// A cycle on demand sees every lane in use now, not as of the last
	// discovery step.
	s.h.discoverLanes(ctx)
	opts := scheduler.CycleOptions{DryRun: s.dryRun}
	if partition >= 0 {
		if partition > 65535 {
			return scheduler.Summary{}, fmt.Errorf("partition %d is out of range", partition)
		}
		opts.Partitions = []uint16{uint16(partition)}
	}
	return s.run.Cycle(ctx, opts)
}

// Close stops the session's plugin process, if any.
func (s *Session) Close() { s.close() }

type staticTarget struct{ s scannerapi.Scanner }

func (t staticTarget) Current() (scannerapi.Scanner, scannerapi.Info, error) {
	return t.s, t.s.Info(), nil
}

// instanceHost is the Host an instance's calls run on: its own (its
// command policy) when it has one.
func instanceHost(inst supervisor.Instance) scannerapi.Host {
	if hi, ok := inst.(supervisor.HostInstance); ok {
		return hi.Host()
	}
	return nil
}

// supTarget lets a scheduler lease the supervisor's current instance per
// call, so that hot swaps switch between calls.
type supTarget struct{ s *supervisor.Supervisor }

func (t supTarget) Current() (scannerapi.Scanner, scannerapi.Info, error) { return t.s.Current() }

func (t supTarget) Acquire() (scheduler.Lease, error) {
	l, err := t.s.Acquire()
	if err != nil {
		return scheduler.Lease{}, err
	}
	return scheduler.Lease{Scanner: l.Scanner, Info: l.Info, Host: l.Host, Release: l.Release, Outcome: l.Outcome}, nil
}

// budgetOf is the callbacks budget the configuration sets.
func budgetOf(c config.Callbacks) callbacks.Budget {
	return callbacks.Budget{MaxInFlight: c.MaxInFlight, CommandsPerSecond: float64(c.CommandsPerSecond), MaxReplyBytes: int64(c.MaxReplyBytes)}
}

// laneCensus is the census the runners consult: none on a host without
// Valkey (a nil *census.Census in the interface would be called).
func (h *Host) laneCensus() scheduler.Census {
	if h.census == nil {
		return nil
	}
	return h.census
}
