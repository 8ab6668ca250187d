package host

// Run: start the services in the order data flows, wait, shut down.

import (
	"context"
	"errors"
	"fmt"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/unit"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Run starts every enabled scanner and the completion listeners and serves
// HTTP until ctx is done, reloading the configuration and hot-swapping
// plugins as files change (see ConfigSource, host/filewatch). Then it
// shuts down within the configured shutdown_timeout (shutdown.go).
func (h *Host) Run(ctx context.Context) error {
	if h.readOnly {
		return errors.New("this host was booted read only; it runs dry-run sessions, not scanners")
	}
	cfg, err := h.prepareRun(ctx)
	if err != nil {
		return err
	}
	if err := h.start(ctx, cfg); err != nil {
		return err
	}
	h.log.Info("host running", "scanners", cfg.Enabled(), "version", Version, "scanner_api", fmt.Sprintf("%d..%d", pluginhost.MinAPIVersion, scannerapi.APIVersion))
	<-ctx.Done()
	h.shutdown()
	return nil
}

// prepareRun makes the configuration in force name every enabled
// scanner's binary, and readies the process for plugins and the admin
// endpoints.
func (h *Host) prepareRun(ctx context.Context) (*config.Config, error) {
	cfg, err := h.res.ResolveAll(ctx, h.config(), h.cat, h.log)
	if err != nil {
		return nil, err
	}
	h.cfgMu.Lock()
	h.cfg = cfg
	h.cfgMu.Unlock()
	if len(cfg.Enabled()) == 0 {
		h.log.Warn("no scanners enabled: this host runs none until a reload enables some (list them under scanners:, as configs/ffscan.yaml does for the shipped set)")
	}
	// Plugins run as this process's user: keep them out of its memory and
	// /proc/<pid>/environ (credentials), confined or not.
	if err := pluginhost.ProtectHostProcess(); err != nil {
		h.log.Warn("could not make the host non-dumpable: plugins of this user may read its memory and environment", "error", err)
	}
	if h.http != nil && cfg.HTTP.Admin {
		if _, err := h.ensureAdminToken(cfg.HTTP); err != nil {
			return nil, fmt.Errorf("http.admin is on: %w (set http.admin_token_file, or http.admin: false)", err)
		}
	}
	return cfg, nil
}

// start starts the services: the endpoints, this host's share of the
// partitions (known before any scanner runs: a single host owns every
// partition from its first tick), the scanners, the completion listeners,
// then what keeps the host's view current (lanes, lane census, library,
// file watch). What runs until the shutdown stops it (the plugins, the
// share) is not stopped by ctx.
func (h *Host) start(ctx context.Context, cfg *config.Config) (err error) {
	if h.http != nil {
		if err := h.http.Start(ctx); err != nil {
			return err // nothing started
		}
		h.log.Info("http listening", "addr", h.http.Addr(), "admin", cfg.HTTP.Admin)
	}
	defer func() {
		if err != nil {
			h.shutdown() // what did start
		}
	}()
	if h.share != nil {
		if err := h.share.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	if h.audit != nil {
		// Stopped after the scanners, so their last actions are written.
		if err := h.audit.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	if err := h.units.Start(ctx); err != nil {
		return err
	}
	settings := unit.SettingsOf(cfg)
	for _, name := range cfg.Enabled() {
		if err := h.units.Add(settings, name, cfg.Scanners[name]); err != nil {
			return err
		}
	}
	if err := h.listeners.Start(ctx); err != nil {
		return err
	}
	for _, s := range h.background() {
		if err := s.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}
