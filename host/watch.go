package host

// The file watch's view of the host (host/filewatch polls the files): the
// configuration file as last loaded, and the running scanners' binaries.

import (
	"context"
	"path/filepath"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/filewatch"
	"github.com/ffscan/ffscan/host/supervisor"
)

// newFileWatch builds the file watch: it reloads the configuration when
// its file changed and hot-swaps the plugins whose binary changed.
func (h *Host) newFileWatch(c config.Watch) *filewatch.Watcher {
	return filewatch.New(filewatch.Config{
		Settings:   watchSettings(c),
		ConfigFile: h.loadedConfigFile,
		Reload: func(ctx context.Context) {
			if _, err := h.ReloadConfig(audit.WithActor(ctx, audit.Actor{Channel: audit.ChannelFileWatch}), "config file changed"); err != nil {
				h.log.Error("configuration reload failed", "error", err)
			}
		},
		Plugins: h.watchedPlugins,
		Clock:   h.clk,
		Logger:  h.log,
	})
}

// loadedConfigFile is the configuration file and how it was when last
// loaded.
func (h *Host) loadedConfigFile() (string, filewatch.Sig, string) {
	h.relMu.Lock()
	defer h.relMu.Unlock()
	return h.src.File, h.reloads.fileSig, h.reloads.fileSHA
}

// watchedPlugins are the running scanners' binaries, each with its swap.
func (h *Host) watchedPlugins() []filewatch.Plugin {
	running := h.units.Views()
	out := make([]filewatch.Plugin, 0, len(running))
	for name, run := range running {
		sup := run.Unit.Supervisor()
		p := filewatch.Plugin{Name: name, Path: filepath.Join(h.cat.Dir(), run.Scanner.Plugin), Swap: func(ctx context.Context) {
			h.swapChanged(audit.WithActor(ctx, audit.Actor{Channel: audit.ChannelFileWatch}), name, sup)
		}}
		if st := sup.Status(); st.State == supervisor.StateRunning {
			p.Running = st.Meta.SHA256
		}
		out = append(out, p)
	}
	return out
}

// swapChanged hot-swaps a scanner whose binary changed on disk and logs
// how it went.
func (h *Host) swapChanged(ctx context.Context, name string, sup *supervisor.Supervisor) {
	if h.swapsByCanary(name) {
		if sha, err := filewatch.Hash(filepath.Join(h.cat.Dir(), h.units.Views()[name].Scanner.Plugin)); err == nil {
			if why, rejected := h.units.CanaryRejected(name, sha); rejected {
				h.log.Info("plugin binary changed to a canary that was aborted; not started again (replace the file, or start a canary by hand)", "scanner", name, "sha256", sha, "aborted", why)
				return
			}
		}
		h.canaryChanged(ctx, name)
		return
	}
	res, err := sup.Swap(ctx, false, "binary changed on disk", nil)
	h.auditSwap(ctx, name, res, err)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			h.log.Error("hot swap request failed", "scanner", name, "error", err)
		}
	case res.Outcome == supervisor.SwapFailed:
		h.log.Error("hot swap refused; the running plugin keeps serving", "scanner", name, "error", res.Err)
	case res.Outcome == supervisor.SwapUnchanged:
		h.log.Debug("plugin binary touched but unchanged", "scanner", name)
	}
}
