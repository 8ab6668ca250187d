// Package host wires the runtime together, in the order data flows:
// config -> boot (Valkey, partitions, library, lanes) -> catalog ->
// supervisors start plugins -> schedulers tick scanners -> callbacks run
// their commands -> metrics and the HTTP endpoints report it. Each step
// lives in its own package; this one only connects them and owns the
// shutdown sequence.
package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Version is the host build version (set with -ldflags -X).
var Version = "dev"

// NewLogger builds the host logger from the log config.
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
	cfg     *config.Config
	log     hclog.Logger
	client  valkey.Client
	lib     *lua.Library
	svc     *callbacks.Service
	met     *metrics.Metrics
	cat     *catalog.Catalog
	parts   keys.PartitionConfig
	lanes   atomic.Pointer[[]string]
	started time.Time

	mu    sync.Mutex
	units []*unit
}

// unit is one enabled scanner: its supervisor and its scheduler.
type unit struct {
	name string
	sc   config.Scanner
	sup  *supervisor.Supervisor
	run  *scheduler.Runner
}

// ErrBoot marks failures before any scanner ran (Valkey unreachable,
// partition mismatch, incompatible library): operator problems, not bugs.
var ErrBoot = errors.New("boot failed")

// Boot connects to Valkey and prepares the keyspace: the partition counts
// are recorded or checked, the library is loaded, the lanes are merged.
func Boot(ctx context.Context, cfg *config.Config, log hclog.Logger) (*Host, error) {
	h := &Host{cfg: cfg, log: log, met: metrics.New(), started: time.Now()}
	cat, err := catalog.New(cfg.PluginDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBoot, err)
	}
	h.cat = cat
	h.client, err = boot.Connect(ctx, cfg.Valkey)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBoot, err)
	}
	fail := func(err error) (*Host, error) {
		h.client.Close()
		return nil, fmt.Errorf("%w: %w", ErrBoot, err)
	}
	parts, created, err := boot.EnsurePartitions(ctx, h.client, cfg.Partitions)
	if err != nil {
		return fail(err)
	}
	h.parts = parts
	log.Info("partitions", "flow", parts.Flow, "budget", parts.Budget, "quota", parts.Quota, "recorded_now", created)
	h.lib, err = boot.LoadLibrary(ctx, h.client, cfg.Lua.ForceReplace, log)
	if err != nil {
		return fail(err)
	}
	lanes, err := boot.MergeLanes(ctx, h.client, cfg.Lanes, log)
	if err != nil {
		return fail(err)
	}
	h.lanes.Store(&lanes)
	log.Info("lanes", "lanes", lanes)
	h.svc = callbacks.New(h.lib, h.met)
	return h, nil
}

// Lanes returns the lanes the host currently knows.
func (h *Host) Lanes() []string { return *h.lanes.Load() }

// LaneRefresh is how often a running host re-reads ff:idx:lanes, so
// lane-scoped sources pick up lanes producers add after boot.
const LaneRefresh = 30 * time.Second

func (h *Host) refreshLanes(ctx context.Context) {
	t := time.NewTicker(LaneRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lanes, err := boot.MergeLanes(ctx, h.client, h.cfg.Lanes, h.log)
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

// Close releases the Valkey client.
func (h *Host) Close() { h.client.Close() }

// Metrics exposes the host's collectors (tests, embedding).
func (h *Host) Metrics() *metrics.Metrics { return h.met }

func (h *Host) scannerConfig(name string) config.Scanner {
	if sc, ok := h.cfg.Scanners[name]; ok {
		return sc
	}
	return config.Scanner{Enabled: true, Plugin: name, Options: map[string]string{}}
}

func (h *Host) launcherFor(name string, sc config.Scanner, readOnly bool) *launcher.Launcher {
	return launcher.New(launcher.Config{
		Scanner:      name,
		Binary:       sc.Plugin,
		Pin:          sc.SHA256,
		Options:      sc.Options,
		ReadOnly:     readOnly,
		StartTimeout: h.cfg.Supervisor.StartTimeout,
	}, h.cat, h.svc, h.scannerLog(name))
}

// scannerLog tags every line about a scanner (the plugin's own included)
// with its name.
func (h *Host) scannerLog(name string) hclog.Logger {
	return h.log.Named(name).With("scanner", name)
}

// Run starts every enabled scanner and serves HTTP until ctx is done, then
// shuts down within cfg.ShutdownTimeout: dispatching stops at once,
// in-flight scans get half the budget to finish (then their calls are
// cancelled), plugins are closed gracefully and killed at 90% of it.
func (h *Host) Run(ctx context.Context) error {
	var srv *http.Server
	if h.cfg.HTTP.Listen != "" {
		ln, err := net.Listen("tcp", h.cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("http.listen %s: %w", h.cfg.HTTP.Listen, err)
		}
		srv = &http.Server{Handler: httpapi.Handler(h.met.Registry, h), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				h.log.Error("http server failed", "error", err)
			}
		}()
		h.log.Info("http listening", "addr", ln.Addr().String())
	}

	callCtx, abortCalls := context.WithCancel(context.Background())
	defer abortCalls()
	var wg sync.WaitGroup
	h.mu.Lock()
	for _, name := range h.cfg.Enabled() {
		sc := h.cfg.Scanners[name]
		log := h.scannerLog(name)
		sup := supervisor.New(supervisor.Config{
			Name:           name,
			HealthInterval: h.cfg.Supervisor.HealthInterval,
			StartTimeout:   h.cfg.Supervisor.StartTimeout,
		}, h.launcherFor(name, sc, false), h.met, log)
		run := scheduler.New(scheduler.Config{
			Name:        name,
			Interval:    sc.Interval,
			Batch:       sc.Batch,
			Partitions:  h.parts,
			LanesFunc:   h.Lanes,
			Concurrency: h.cfg.Scheduler.Concurrency,
			CallTimeout: h.cfg.Scheduler.CallTimeout,
			CallParent:  callCtx,
		}, h.client, supTarget{sup}, nil, h.met, log)
		u := &unit{name: name, sc: sc, sup: sup, run: run}
		h.units = append(h.units, u)
		sup.Start()
		wg.Add(1)
		go func() {
			defer wg.Done()
			run.Run(ctx)
		}()
	}
	h.mu.Unlock()
	go h.refreshLanes(ctx)
	h.log.Info("host running", "scanners", h.cfg.Enabled(), "version", Version)

	<-ctx.Done()
	start := time.Now()
	budget := h.cfg.ShutdownTimeout
	h.log.Info("shutting down", "timeout", budget)

	// 1. Dispatch has stopped (the runners watch ctx); let calls in flight
	// finish for up to half the budget, then cancel them.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	if !waitUntil(drained, start.Add(budget/2)) {
		h.log.Warn("scans still in flight; cancelling them")
		abortCalls()
		waitUntil(drained, start.Add(budget*6/10))
	}
	abortCalls()

	// 2. Close plugins gracefully, all at once; kill what remains at 90%.
	closeCtx, cancel := context.WithDeadline(context.Background(), start.Add(budget*9/10))
	defer cancel()
	var sw sync.WaitGroup
	h.mu.Lock()
	for _, u := range h.units {
		sw.Add(1)
		go func() { defer sw.Done(); u.sup.Stop(closeCtx) }()
	}
	h.mu.Unlock()
	sw.Wait()

	// 3. HTTP last, so /readyz reports the shutdown until the end.
	if srv != nil {
		sctx, scancel := context.WithDeadline(context.Background(), start.Add(budget*95/100))
		_ = srv.Shutdown(sctx)
		scancel()
	}
	h.log.Info("shutdown complete", "took", time.Since(start).Round(time.Millisecond))
	return nil
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
	if err := h.client.Do(ctx, h.client.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("valkey: %w", err)
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

// Status implements httpapi.Source.
func (h *Host) Status() httpapi.StatusDoc {
	doc := httpapi.StatusDoc{Version: Version, StartedAt: h.started, Valkey: h.cfg.Valkey.Addrs, Lanes: h.Lanes()}
	h.mu.Lock()
	running := map[string]*unit{}
	for _, u := range h.units {
		running[u.name] = u
	}
	h.mu.Unlock()
	names := make([]string, 0, len(h.cfg.Scanners))
	for n := range h.cfg.Scanners {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sc := h.cfg.Scanners[n]
		s := httpapi.ScannerStatus{Name: n, Enabled: sc.Enabled, Plugin: sc.Plugin, State: string(supervisor.StateStopped)}
		if u, ok := running[n]; ok {
			ss := u.sup.Status()
			rs := u.run.Status()
			s.Path, s.Version, s.SHA256, s.Pid = ss.Meta.Path, ss.Meta.Version, ss.Meta.SHA256, ss.Pid
			s.State, s.Since, s.Restarts, s.LastError = string(ss.State), ss.Since, ss.Restarts, ss.LastError
			if !ss.NextAttempt.IsZero() {
				t := ss.NextAttempt
				s.NextAttempt = &t
			}
			s.Cycle, s.Processed, s.Skipped, s.Errors = rs.Cycle, rs.Processed, rs.Skipped, rs.Errors
			if !rs.LastCycleAt.IsZero() {
				t := rs.LastCycleAt
				s.LastCycleAt = &t
				s.LastCycleDuration = rs.LastDuration.Round(time.Microsecond).String()
			}
			if rs.BacklogKnown {
				b := rs.Backlog
				s.Backlog = &b
			}
			s.LastScanError = rs.LastError
		}
		doc.Scanners = append(doc.Scanners, s)
	}
	return doc
}

// ScanOnce runs one cycle of a scanner over all partitions (partition < 0)
// or one, with a plugin process of its own, and returns what it did. In a
// dry run the scanner is asked not to mutate, and the callback service
// refuses its writes and FCALLs should it try.
func (h *Host) ScanOnce(ctx context.Context, name string, partition int, dryRun bool) (scheduler.Summary, error) {
	sc := h.scannerConfig(name)
	inst, _, err := h.launcherFor(name, sc, dryRun).Launch(ctx)
	if err != nil {
		return scheduler.Summary{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = inst.Close(cctx)
		inst.Kill()
	}()
	run := scheduler.New(scheduler.Config{
		Name:        name,
		Interval:    sc.Interval,
		Batch:       sc.Batch,
		Partitions:  h.parts,
		Lanes:       h.Lanes(),
		Concurrency: h.cfg.Scheduler.Concurrency,
		CallTimeout: h.cfg.Scheduler.CallTimeout,
		NoJitter:    true,
	}, h.client, staticTarget{inst.Scanner()}, instanceHost(inst), h.met, h.scannerLog(name))
	opts := scheduler.CycleOptions{DryRun: dryRun}
	if partition >= 0 {
		if partition > 65535 {
			return scheduler.Summary{}, fmt.Errorf("partition %d is out of range", partition)
		}
		opts.Partitions = []uint16{uint16(partition)}
	}
	return run.Cycle(ctx, opts)
}

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
	return scheduler.Lease{Scanner: l.Scanner, Info: l.Info, Host: l.Host, Release: l.Release}, nil
}
