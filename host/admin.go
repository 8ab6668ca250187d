package host

// The admin endpoints' actions (httpapi.Admin): the token, and a plugin's
// hot swap on request.

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/supervisor"
)

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
	out := swapResult(name, r, err)
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
