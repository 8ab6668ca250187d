package host

// Configuration reloads: load, check against the running host, apply.

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
	"github.com/ffscan/ffscan/host/unit"
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
func (h *Host) ReloadConfig(ctx context.Context, reason string) (res httpapi.ReloadResult, err error) {
	defer func() { h.auditOperator(ctx, "reload", "", reloadDetail(reason, res, err)) }()
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
		h.applyOverrides(cfg)
		cfg, err = h.res.ResolveAll(ctx, cfg, h.cat, h.log)
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
// plugin_dir, lua, http.listen, log.json, key_events), names a binary that fails the
// catalog checks, or gives a running scanner options its schema rejects is
// refused as a whole and nothing changes.
func (h *Host) Reload(ctx context.Context, cfg *config.Config, reason string) (httpapi.ReloadResult, error) {
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	h.applyOverrides(cfg)
	cfg, err := h.res.ResolveAll(ctx, cfg, h.cat, h.log)
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
	h.reloads.lastErrorAt = h.clk.Now()
	h.relMu.Unlock()
	h.log.Error(ErrReloadRefused.Error(), "trigger", reason, "reason", err)
	h.met.ConfigReload("refused")
	h.changes.Notify()
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
	running := h.units.Views()
	for _, name := range n.Enabled() {
		if p := h.checkEnabled(name, n.Scanners[name], running[name]); p != "" {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// checkEnabled says what is wrong with an enabled scanner's new
// configuration sc, given what runs (a zero View: not running).
func (h *Host) checkEnabled(name string, sc config.Scanner, run unit.View) string {
	if run.Unit == nil || sc.Plugin != run.Scanner.Plugin || sc.SHA256 != run.Scanner.SHA256 {
		if _, err := h.cat.Verify(sc.Plugin, sc.SHA256); err != nil {
			return fmt.Sprintf("scanners.%s: %v", name, err)
		}
	}
	if run.Unit != nil && sc.Plugin == run.Scanner.Plugin && !maps.Equal(sc.Options, run.Scanner.Options) {
		// The running plugin's schema judges the options now; a new
		// binary's would only be known once launched.
		if _, info, err := run.Unit.Supervisor().Current(); err == nil {
			if _, err := launcher.ResolveOptions(name, info.Options, sc.Options); err != nil {
				return err.Error()
			}
		}
	}
	return ""
}

// apply makes n the configuration in force and changes the running
// services to match. reloadMu must be held and n must have passed check.
func (h *Host) apply(ctx context.Context, reason string, n *config.Config) httpapi.ReloadResult {
	old := h.install(n)
	res := httpapi.ReloadResult{Notes: h.retune(old, n)}
	if !h.units.Running() {
		// Not running (yet, or any more): the new configuration is
		// simply what Run will use.
		h.log.Info("configuration reloaded", "trigger", reason)
		return res
	}
	relaunch := h.applyScanners(old, n, &res)
	if old.Completions != n.Completions {
		cctx, cancel := context.WithTimeout(context.Background(), n.ShutdownTimeout/2)
		err := h.listeners.Restart(cctx, completionSettings(n.Completions))
		cancel()
		if err != nil {
			res.Notes = append(res.Notes, "completion listener: "+err.Error())
		}
		res.Notes = append(res.Notes, fmt.Sprintf("completion listener restarted (enabled %t, concurrency %d)", n.Completions.Enabled, n.Completions.Concurrency))
	}
	res.Plugins = h.relaunch(ctx, n, relaunch)
	sort.Strings(res.Started)
	sort.Strings(res.Stopped)
	sort.Strings(res.Retuned)
	h.log.Info("configuration reloaded", "trigger", reason, "started", res.Started, "stopped", res.Stopped, "retuned", res.Retuned, "relaunched", len(res.Plugins))
	return res
}

// install makes n the configuration in force and returns the one it
// replaces.
func (h *Host) install(n *config.Config) *config.Config {
	h.cfgMu.Lock()
	old := h.cfg
	h.cfg = n
	h.cfgMu.Unlock()
	h.relMu.Lock()
	h.reloads.reloads++
	h.reloads.loadedAt = h.clk.Now()
	h.relMu.Unlock()
	h.met.ConfigReload("applied")
	h.changes.Notify()
	return old
}

// retune applies the settings a running service takes in place, and
// returns the notes that say so.
func (h *Host) retune(old, n *config.Config) []string {
	var notes []string
	if old.Callbacks != n.Callbacks {
		h.svc.SetBudget(budgetOf(n.Callbacks))
		notes = append(notes, "callbacks.* (the scanners' budget) applies from the next batch")
	}
	if old.Log.Level != n.Log.Level {
		h.log.SetLevel(hclog.LevelFromString(n.Log.Level))
		notes = append(notes, "log.level is now "+n.Log.Level)
	}
	if !slices.Equal(old.Lanes, n.Lanes) {
		h.lanes.SetConfigured(n.Lanes)
		notes = append(notes, "lanes merged into ff:idx:lanes")
	}
	if h.censusCtl != nil {
		h.censusCtl.SetMode(census.Mode(n.Scheduler.LaneCensus))
	}
	h.files.Retune(watchSettings(n.Watch))
	if old.Supervisor != n.Supervisor {
		notes = append(notes, "supervisor.* applies to scanners started from now on; running ones keep their settings until disabled and enabled again or the host restarts")
	}
	return notes
}

// applyScanners stops the scanners n disables, retunes those whose
// interval, batch or scheduler settings changed and starts those it
// enables; it returns the scanners whose plugin, pin, options, mode or
// bounds changed, which need a relaunch.
func (h *Host) applyScanners(old, n *config.Config, res *httpapi.ReloadResult) []string {
	tuneAll := old.Scheduler != n.Scheduler
	var relaunch []string
	for name, run := range h.units.Views() {
		sc, ok := n.Scanners[name]
		if !ok || !sc.Enabled {
			h.units.Remove(name, old.Scheduler.CallTimeout)
			res.Stopped = append(res.Stopped, name)
			continue
		}
		if tuneAll || sc.Interval != run.Scanner.Interval || sc.Batch != run.Scanner.Batch {
			run.Unit.Runner().Retune(scheduler.Tuning{Interval: sc.Interval, Batch: sc.Batch, Concurrency: n.Scheduler.Concurrency, CallTimeout: n.Scheduler.CallTimeout,
				PollOnly: !n.Scheduler.Wakeups})
			res.Retuned = append(res.Retuned, name)
		}
		if b := sc.Budget(name); b != run.Unit.Runner().ActionBudget() {
			run.Unit.Runner().SetActionBudget(b)
			if !slices.Contains(res.Retuned, name) {
				res.Retuned = append(res.Retuned, name)
			}
		}
		runs := sc
		if !sc.LaunchEqual(run.Scanner) {
			relaunch = append(relaunch, name)
			// What runs until the relaunch succeeds.
			runs = sc.LaunchedAs(run.Scanner)
		}
		h.units.SetScanner(name, runs)
	}
	settings := unit.SettingsOf(n)
	for _, name := range n.Enabled() {
		if h.units.Get(name) != nil {
			continue
		}
		if err := h.units.Add(settings, name, n.Scanners[name]); err != nil {
			h.log.Error("configuration reload: scanner not started", "scanner", name, "error", err)
			continue
		}
		res.Started = append(res.Started, name)
	}
	return relaunch
}

// relaunch relaunches the named scanners' plugins as n says, in parallel;
// each keeps its running plugin and options if its relaunch fails (status
// shows them as not applied until one succeeds).
func (h *Host) relaunch(ctx context.Context, n *config.Config, names []string) []httpapi.PluginSwapResult {
	settings := unit.SettingsOf(n)
	out := make([]httpapi.PluginSwapResult, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := h.units.Update(ctx, settings, name, n.Scanners[name])
			out[i] = swapResult(name, r, err)
			if out[i].Error != "" {
				h.log.Error("configuration reload: the scanner keeps its running plugin and options", "scanner", name, "error", out[i].Error)
			}
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Scanner < out[j].Scanner })
	return out
}

// Operator overrides: a scanner enabled or disabled from the console or
// the admin API, on top of the configuration. They last until the host
// restarts (or the operator turns them back), and every configuration
// reload keeps them: a reload applies the file as it is, then them. To
// make one permanent, write it in the configuration.

func onOff(enabled bool) string {
	if enabled {
		return "enabled"
	}
	return "disabled"
}

// applyOverrides sets the operator overrides on a configuration just
// loaded (a reload's).
func (h *Host) applyOverrides(cfg *config.Config) {
	h.relMu.Lock()
	defer h.relMu.Unlock()
	for name, on := range h.overrides {
		if sc, ok := cfg.Scanners[name]; ok && sc.Enabled != on {
			sc.Enabled = on
			cfg.Scanners[name] = sc
		}
	}
	for name, mode := range h.modeOverrides {
		if sc, ok := cfg.Scanners[name]; ok && sc.Mode != mode {
			sc.Mode = mode
			cfg.Scanners[name] = sc
		}
	}
}

// override says whether an operator turned a scanner on or off ("" when
// not).
func (h *Host) override(name string) string {
	h.relMu.Lock()
	defer h.relMu.Unlock()
	var parts []string
	if on, ok := h.overrides[name]; ok {
		parts = append(parts, onOff(on))
	}
	if mode, ok := h.modeOverrides[name]; ok {
		parts = append(parts, "in mode "+mode)
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ", ") + " by an operator until the host restarts"
}

// ensureAdminToken makes sure the admin token file c names exists (a
// configuration with http.admin on passes only if it can, at Run and at
// every reload; admin.go reads it at each request).
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

// swapResult is a hot swap's outcome as the admin endpoints report it
// (a reload's relaunches, an admin plugin reload).
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
