package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/census"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/filewatch"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/supervisor"
)

// ConfigSource lets a running host re-read its configuration: on SIGHUP
// (the caller calls ReloadConfig), on an admin request, and when File
// changes (watch.config).
type ConfigSource struct {
	// Load builds a fresh configuration from all its layers (file,
	// environment, flags) and validates it.
	Load func() (*config.Config, error)
	// File is the configuration file to watch; empty: none.
	File string
}

// SetConfigSource tells the host where its configuration comes from. Call
// it before Run.
func (h *Host) SetConfigSource(src ConfigSource) {
	h.relMu.Lock()
	defer h.relMu.Unlock()
	h.src = src
	if src.File != "" {
		h.reloads.fileSig, _ = filewatch.Stat(src.File)
		h.reloads.fileSHA, _ = filewatch.Hash(src.File)
	}
}

// reloadState is what status reports about reloads. Guarded by relMu.
type reloadState struct {
	loadedAt    time.Time
	reloads     int
	refused     int
	lastError   string
	lastErrorAt time.Time
	// The config file as last loaded, for the watch.
	fileSig filewatch.Sig
	fileSHA string
}

// ErrReloadRefused wraps the reason a reload was refused; the running
// configuration stays.
var ErrReloadRefused = errors.New("configuration reload refused; the running configuration stays")

// ReloadConfig re-reads the configuration through the ConfigSource and
// applies it (see Reload). A configuration that does not load or validate
// is refused as a whole, with the reason logged and returned in the
// result's Error.
func (h *Host) ReloadConfig(ctx context.Context, reason string) (httpapi.ReloadResult, error) {
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	h.relMu.Lock()
	src := h.src
	h.relMu.Unlock()
	if src.Load == nil {
		return httpapi.ReloadResult{}, errors.New("this host has no configuration source to reload from")
	}
	var sig filewatch.Sig
	var sha string
	if src.File != "" {
		sig, _ = filewatch.Stat(src.File)
		sha, _ = filewatch.Hash(src.File)
	}
	cfg, err := src.Load()
	if err == nil {
		cfg, err = h.res.resolveAll(ctx, cfg, h.cat, h.log)
	}
	if err == nil {
		err = h.check(cfg)
	}
	if err != nil {
		return h.refuse(reason, err), nil
	}
	if src.File != "" {
		h.relMu.Lock()
		h.reloads.fileSig, h.reloads.fileSHA = sig, sha
		h.relMu.Unlock()
	}
	return h.apply(ctx, reason, cfg), nil
}

// Reload applies cfg to the running host (see ReloadConfig, which loads it
// first): scanners newly enabled start, scanners disabled or removed stop
// after the calls they have in flight, interval and batch changes apply
// from each scanner's next cycle, and a changed plugin, pin or options
// relaunch the plugin by a hot swap (options reach a scanner of API
// version 2 or later in place, through Configure). A configuration that
// changes a setting only a restart can apply (valkey.*, partitions,
// plugin_dir, lua, http.listen, log.json), names a binary that fails the
// catalog checks, or gives a running scanner options its schema rejects is
// refused as a whole and nothing changes.
func (h *Host) Reload(ctx context.Context, cfg *config.Config, reason string) (httpapi.ReloadResult, error) {
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	cfg, err := h.res.resolveAll(ctx, cfg, h.cat, h.log)
	if err == nil {
		err = h.check(cfg)
	}
	if err != nil {
		return h.refuse(reason, err), nil
	}
	return h.apply(ctx, reason, cfg), nil
}

func (h *Host) refuse(reason string, err error) httpapi.ReloadResult {
	h.relMu.Lock()
	h.reloads.refused++
	h.reloads.lastError = err.Error()
	h.reloads.lastErrorAt = time.Now()
	h.relMu.Unlock()
	h.log.Error(ErrReloadRefused.Error(), "trigger", reason, "reason", err)
	h.met.ConfigReload("refused")
	return httpapi.ReloadResult{Error: fmt.Sprintf("%v: %v", ErrReloadRefused, err)}
}

// check validates a new configuration against the running host. reloadMu
// must be held.
func (h *Host) check(n *config.Config) error {
	old := h.config()
	var problems []string
	if ks := old.RestartKeys(n); len(ks) > 0 {
		problems = append(problems, fmt.Sprintf("%s changed; that takes a restart of ffscan", strings.Join(ks, ", ")))
	}
	if n.HTTP.Admin && n.HTTP.Listen != "" && !old.HTTP.Admin {
		// Admin turned on: the CLI needs the token file from now on.
		if _, err := h.ensureAdminToken(n.HTTP); err != nil {
			problems = append(problems, "http.admin: "+err.Error())
		}
	}
	h.mu.Lock()
	units := maps.Clone(h.units)
	h.mu.Unlock()
	for _, name := range n.Enabled() {
		sc := n.Scanners[name]
		key := "scanners." + name
		u := units[name]
		if u == nil || sc.Plugin != u.sc.Plugin || sc.SHA256 != u.sc.SHA256 {
			if _, err := h.cat.Verify(sc.Plugin, sc.SHA256); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", key, err))
				continue
			}
		}
		if u != nil && sc.Plugin == u.sc.Plugin && !maps.Equal(sc.Options, u.sc.Options) {
			// The running plugin's schema judges the options now; a new
			// binary's would only be known once launched.
			if _, info, err := u.sup.Current(); err == nil {
				if _, err := launcher.ResolveOptions(name, info.Options, sc.Options); err != nil {
					problems = append(problems, err.Error())
				}
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// apply makes n the configuration in force and changes the running
// scanners to match. reloadMu must be held and n must have passed check.
func (h *Host) apply(ctx context.Context, reason string, n *config.Config) httpapi.ReloadResult {
	old := h.config()
	h.cfgMu.Lock()
	h.cfg = n
	h.cfgMu.Unlock()
	h.relMu.Lock()
	h.reloads.reloads++
	h.reloads.loadedAt = time.Now()
	h.relMu.Unlock()
	h.met.ConfigReload("applied")
	res := httpapi.ReloadResult{}

	if old.Callbacks != n.Callbacks {
		h.svc.SetBudget(budgetOf(n.Callbacks))
		res.Notes = append(res.Notes, "callbacks.* (the scanners' budget) applies from the next batch")
	}
	if old.Log.Level != n.Log.Level {
		h.log.SetLevel(hclog.LevelFromString(n.Log.Level))
		res.Notes = append(res.Notes, "log.level is now "+n.Log.Level)
	}
	if !slices.Equal(old.Lanes, n.Lanes) {
		h.lanes.SetConfigured(n.Lanes)
		res.Notes = append(res.Notes, "lanes merged into ff:idx:lanes")
	}
	if h.censusCtl != nil {
		h.censusCtl.SetMode(census.Mode(n.Scheduler.LaneCensus))
	}
	h.files.Retune(watchSettings(n.Watch))
	if old.Supervisor != n.Supervisor {
		res.Notes = append(res.Notes, "supervisor.* applies to scanners started from now on; running ones keep their settings until disabled and enabled again or the host restarts")
	}

	h.mu.Lock()
	if h.runCtx != nil {
		// A shutdown cuts the relaunches short: Run waits for the reload.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(h.runCtx, cancel)()
	}
	if h.runCtx == nil || h.runCtx.Err() != nil {
		// Not running (yet, or any more): the new configuration is
		// simply what Run will use.
		h.mu.Unlock()
		h.log.Info("configuration reloaded", "trigger", reason)
		return res
	}
	tuneAll := old.Scheduler != n.Scheduler
	type update struct {
		u    *unit
		l    *launcher.Launcher
		prev config.Scanner // what runs until the update succeeds
	}
	var updates []update
	for name, u := range h.units {
		sc, ok := n.Scanners[name]
		if !ok || !sc.Enabled {
			h.stopUnit(u, old.Scheduler.CallTimeout)
			res.Stopped = append(res.Stopped, name)
			continue
		}
		if tuneAll || sc.Interval != u.sc.Interval || sc.Batch != u.sc.Batch {
			u.run.Retune(scheduler.Tuning{Interval: sc.Interval, Batch: sc.Batch, Concurrency: n.Scheduler.Concurrency, CallTimeout: n.Scheduler.CallTimeout})
			res.Retuned = append(res.Retuned, name)
		}
		if sc.Plugin != u.sc.Plugin || sc.SHA256 != u.sc.SHA256 || !maps.Equal(sc.Options, u.sc.Options) {
			updates = append(updates, update{u, h.launcherFor(n, name, sc, false), u.sc})
		}
		u.sc = sc
	}
	for _, name := range n.Enabled() {
		if _, ok := h.units[name]; !ok {
			h.startUnit(n, name, n.Scanners[name])
			res.Started = append(res.Started, name)
		}
	}
	if old.Completions != n.Completions {
		if h.comp != nil {
			cctx, cancel := context.WithTimeout(context.Background(), n.ShutdownTimeout/2)
			if err := h.comp.Stop(cctx); err != nil {
				h.log.Warn("completion listener: cascades cut short by the restart", "error", err)
			}
			cancel()
		}
		if h.pgComp != nil {
			cctx, cancel := context.WithTimeout(context.Background(), n.ShutdownTimeout/2)
			if err := h.pgComp.Stop(cctx); err != nil {
				h.log.Warn("postgres completion listener: dispatches cut short by the restart", "error", err)
			}
			cancel()
		}
		h.startCompletions(n.Completions)
		res.Notes = append(res.Notes, fmt.Sprintf("completion listener restarted (enabled %t, concurrency %d)", n.Completions.Enabled, n.Completions.Concurrency))
	}
	h.mu.Unlock()

	// Relaunches run in parallel; each keeps its old plugin if it fails.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, up := range updates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := up.u.sup.Update(ctx, up.l, "configuration reload", nil)
			out := swapResult(up.u.name, r, err)
			mu.Lock()
			res.Plugins = append(res.Plugins, out)
			mu.Unlock()
			// What runs is what status shows: a plugin, pin or options
			// the update could not bring in stay out of the unit's
			// configuration (so the next reload tries them again) and
			// are reported as not applied until one succeeds.
			h.mu.Lock()
			if out.Error != "" {
				sc := up.u.sc
				sc.Plugin, sc.SHA256, sc.Options = up.prev.Plugin, up.prev.SHA256, up.prev.Options
				up.u.sc = sc
				up.u.notApplied = fmt.Sprintf("%s: the configuration's plugin, pin or options are not running: %s", time.Now().UTC().Format(time.RFC3339), out.Error)
			} else {
				up.u.notApplied = ""
			}
			h.mu.Unlock()
			if out.Error != "" {
				h.log.Error("configuration reload: the scanner keeps its running plugin and options", "scanner", up.u.name, "error", out.Error)
			}
		}()
	}
	wg.Wait()
	sort.Strings(res.Started)
	sort.Strings(res.Stopped)
	sort.Strings(res.Retuned)
	sort.Slice(res.Plugins, func(i, j int) bool { return res.Plugins[i].Scanner < res.Plugins[j].Scanner })
	h.log.Info("configuration reloaded", "trigger", reason, "started", res.Started, "stopped", res.Stopped, "retuned", res.Retuned, "relaunched", len(res.Plugins))
	return res
}

func swapResult(name string, r supervisor.SwapResult, err error) httpapi.PluginSwapResult {
	out := httpapi.PluginSwapResult{
		Scanner: name, Outcome: string(r.Outcome),
		FromSHA256: r.From.SHA256, ToSHA256: r.To.SHA256, FromVersion: r.From.Version, ToVersion: r.To.Version,
	}
	switch {
	case err != nil:
		out.Outcome, out.Error = string(supervisor.SwapFailed), err.Error()
	case r.Err != nil:
		out.Error = r.Err.Error()
	}
	return out
}

// AdminEnabled implements httpapi.Admin.
func (h *Host) AdminEnabled() bool { return h.config().HTTP.Admin }

// AdminToken implements httpapi.Admin: the token is read from its file at
// every admin request (they are rare), so replacing the file rotates it
// without a restart; a missing file is created.
func (h *Host) AdminToken() (string, error) {
	return h.ensureAdminToken(h.config().HTTP)
}

func (h *Host) ensureAdminToken(c config.HTTP) (string, error) {
	path, err := admintoken.Resolve(c.AdminTokenFile)
	if err != nil {
		return "", err
	}
	tok, created, err := admintoken.Ensure(path)
	if err != nil {
		return "", err
	}
	if created {
		h.log.Info("admin token created; ffscan reload and ffscan plugins reload read it from there", "file", path)
	}
	return tok, nil
}

// ReloadPlugin hot-swaps a running scanner's plugin from the file in the
// plugin directory (implements httpapi.Admin): the new process is verified
// (sha256 pin), started and health-checked while the old one serves, then
// takes over between two calls. Unless force, nothing happens when the
// file is what already runs, or was already tried and rejected. With wait,
// it returns once probation is over (kept or rolled back).
func (h *Host) ReloadPlugin(ctx context.Context, name string, force, wait bool) (httpapi.PluginSwapResult, error) {
	h.mu.Lock()
	u := h.units[name]
	h.mu.Unlock()
	if u == nil {
		return httpapi.PluginSwapResult{}, fmt.Errorf("%w: %q is not an enabled scanner of this host", httpapi.ErrNotFound, name)
	}
	var settled chan supervisor.SwapResult
	if wait {
		settled = make(chan supervisor.SwapResult, 1)
	}
	r, err := u.sup.Swap(ctx, force, "reload requested", settled)
	out := swapResult(name, r, err)
	if err == nil && wait {
		select {
		case final := <-settled:
			if final.Outcome == supervisor.SwapRolledBack {
				out = swapResult(name, final, nil)
			} else if final.Outcome == supervisor.SwapKept {
				out.Outcome = string(supervisor.SwapKept)
			}
		case <-ctx.Done():
		}
	}
	out.Pid = u.sup.Status().Pid
	return out, nil
}
