package host

// The admin endpoints' actions (httpapi.Admin): the token, a plugin's hot
// swap or approval on request, a scanner enabled or disabled by an
// operator (applied as a reload is, reload.go).

import (
	"context"
	"fmt"
	"maps"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/plugindir"
	"github.com/ffscan/ffscan/host/supervisor"
)

// AdminEnabled implements httpapi.Admin.
func (h *Host) AdminEnabled() bool { return h.config().HTTP.Admin }

// AdminToken implements httpapi.Admin: the token is read from its file at
// every admin request (they are rare), so replacing the file rotates it
// without a restart; a missing file is created.
func (h *Host) AdminToken() (string, error) {
	return h.ensureAdminToken(h.config().HTTP)
}

// ReloadPlugin hot-swaps a running scanner's plugin from the file in the
// plugin directory (implements httpapi.Admin): the new process is verified
// (sha256 pin), started and health-checked while the old one serves, then
// takes over between two calls. Unless force, nothing happens when the
// file is what already runs, or was already tried and rejected. With wait,
// it returns once probation is over (kept or rolled back).
func (h *Host) ReloadPlugin(ctx context.Context, name string, force, wait bool) (out httpapi.PluginSwapResult, err error) {
	defer func() { h.auditOperator(ctx, "swap", name, swapDetail(out, err)) }()
	u := h.units.Get(name)
	if u == nil {
		return httpapi.PluginSwapResult{}, fmt.Errorf("%w: %q is not an enabled scanner of this host", httpapi.ErrNotFound, name)
	}
	var settled chan supervisor.SwapResult
	if wait {
		settled = make(chan supervisor.SwapResult, 1)
	}
	sup := u.Supervisor()
	r, err := sup.Swap(ctx, force, "reload requested", settled)
	out = swapResult(name, r, err)
	if err == nil && r.Outcome == supervisor.SwapDone {
		h.testSignals.pluginSwitched.Signal(sup.Status().Pid)
	}
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
	out.Pid = sup.Status().Pid
	return out, nil
}

// SetScannerEnabled enables or disables a configured scanner now (the
// admin action behind POST /v1/scanners/{name}/enable and /disable): the
// configuration in force with the scanner's enabled flag changed is
// checked and applied as a reload is, and remembered as an override.
func (h *Host) SetScannerEnabled(ctx context.Context, name string, enabled bool, who string) (res httpapi.ReloadResult, err error) {
	defer func() {
		h.auditOperator(ctx, map[bool]string{true: "enable", false: "disable"}[enabled], name, reloadDetail(who, res, err))
	}()
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	cur := h.config()
	sc, ok := cur.Scanners[name]
	if !ok {
		return httpapi.ReloadResult{}, fmt.Errorf("%w: %q is not a configured scanner", httpapi.ErrNotFound, name)
	}
	h.relMu.Lock()
	if h.overrides == nil {
		h.overrides = map[string]bool{}
	}
	h.overrides[name] = enabled
	h.relMu.Unlock()
	if sc.Enabled == enabled {
		return httpapi.ReloadResult{Notes: []string{fmt.Sprintf("scanner %s was already %s", name, onOff(enabled))}}, nil
	}
	sc.Enabled = enabled
	return h.applyScanner(ctx, who, name, sc, "scanner "+onOff(enabled)+" by an operator (until the host restarts)", func() {
		delete(h.overrides, name)
	})
}

// applyScanner checks and applies, as a reload is, the configuration in
// force with scanner name configured as sc (an operator's override), and
// logs what; a refused one calls undo (under relMu) to forget the
// override. reloadMu must be held.
func (h *Host) applyScanner(ctx context.Context, who, name string, sc config.Scanner, what string, undo func()) (httpapi.ReloadResult, error) {
	n := *h.config()
	n.Scanners = maps.Clone(n.Scanners)
	n.Scanners[name] = sc
	resolved, err := h.res.ResolveAll(ctx, &n, h.cat, h.log)
	if err == nil {
		err = h.check(resolved)
	}
	if err != nil {
		h.relMu.Lock()
		undo()
		h.relMu.Unlock()
		return h.refuse(who, err), nil
	}
	h.log.Info(what, "scanner", name, "by", who)
	return h.apply(ctx, who, resolved), nil
}

// SetScannerMode puts a configured scanner in shadow mode or back to act
// now (the admin action behind POST /v1/scanners/{name}/shadow and /act,
// `ffscan scanners shadow|act NAME` and the console): the configuration
// in force with the scanner's mode changed is checked and applied as a
// reload is (a relaunch of its plugin), and remembered as an override
// until the host restarts.
func (h *Host) SetScannerMode(ctx context.Context, name, mode, who string) (res httpapi.ReloadResult, err error) {
	defer func() { h.auditOperator(ctx, "mode "+mode, name, reloadDetail(who, res, err)) }()
	if mode != config.ModeAct && mode != config.ModeShadow {
		return httpapi.ReloadResult{}, fmt.Errorf("%w: mode %q is not act or shadow", httpapi.ErrBadRequest, mode)
	}
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	cur := h.config()
	sc, ok := cur.Scanners[name]
	if !ok {
		return httpapi.ReloadResult{}, fmt.Errorf("%w: %q is not a configured scanner", httpapi.ErrNotFound, name)
	}
	h.relMu.Lock()
	prev, had := h.modeOverrides[name]
	if h.modeOverrides == nil {
		h.modeOverrides = map[string]string{}
	}
	h.modeOverrides[name] = mode
	h.relMu.Unlock()
	if sc.Mode == mode || (sc.Mode == "" && mode == config.ModeAct) {
		return httpapi.ReloadResult{Notes: []string{fmt.Sprintf("scanner %s already runs in mode %s", name, mode)}}, nil
	}
	sc.Mode = mode
	return h.applyScanner(ctx, who, name, sc, "scanner switched to mode "+mode+" by an operator (until the host restarts)", func() {
		if had {
			h.modeOverrides[name] = prev
		} else {
			delete(h.modeOverrides, name)
		}
	})
}

// ApprovePlugin approves the policy scanner name's binary declares now
// (as `ffscan plugins approve NAME` does: read twice, and refused when
// it is not what the operator reviewed) and relaunches the plugin with
// it (a forced hot swap, or the restart of a plugin that was refused).
func (h *Host) ApprovePlugin(ctx context.Context, name string, reviewed httpapi.ApprovalReview) (out httpapi.PluginSwapResult, err error) {
	defer func() {
		h.auditOperator(ctx, "approve", name, fmt.Sprintf("binary sha256 %.12s, policy %.12s: %s", reviewed.SHA256, reviewed.Policy, swapDetail(out, err)))
	}()
	cfg := h.config()
	if _, ok := cfg.Scanners[name]; !ok {
		return httpapi.PluginSwapResult{}, fmt.Errorf("%w: %q is not a configured scanner", httpapi.ErrNotFound, name)
	}
	res, err := plugindir.ApproveIn(ctx, cfg, h.approvals, []string{name}, plugindir.Reviewed(reviewed), h.log.Named("approve"))
	if err != nil {
		return httpapi.PluginSwapResult{}, err
	}
	for _, r := range res {
		if r.Err != nil {
			return httpapi.PluginSwapResult{Scanner: name, Outcome: string(supervisor.SwapFailed), Error: "not approved: " + r.Err.Error()}, nil
		}
		h.log.Info("plugin policy approved by an operator", "scanner", name, "policy", r.Digest, "binary", r.Binary, "sha256", r.SHA256)
	}
	if h.units.Get(name) == nil {
		return httpapi.PluginSwapResult{Scanner: name, Outcome: "approved"}, nil
	}
	return h.ReloadPlugin(ctx, name, true, false)
}
