package host

// Boot: connect to the stores, prepare them, build the services.

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/internal/plaintext"
	"github.com/ffscan/ffscan/host/lanes"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/lua"
)

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
	// Every line the host logs is one line, whatever text (a plugin's
	// error, a key) it quotes.
	log = plaintext.Logger(log, plaintext.MaxLog)
	h := &Host{cfg: cfg, log: log, clk: clock.Real(), met: metrics.New(), epoch: scheduler.NewStoreEpoch(), readOnly: readOnly,
		launches: supervisor.NewLaunchGate(0)}
	h.shadows = shadow.NewLogs(h.clk, cfg.DecisionRecords.Shadow)
	h.started = h.clk.Now()
	h.reloads.loadedAt = h.started
	for _, step := range []func(context.Context, *config.Config) error{h.connect, h.connectPostgres, h.prepareKeyspace, h.build} {
		if err := step(ctx, cfg); err != nil {
			h.Close()
			return nil, fmt.Errorf("%w: %w", ErrBoot, err)
		}
	}
	return h, nil
}

// connect opens the plugin catalog, the approvals and the Valkey client.
func (h *Host) connect(ctx context.Context, cfg *config.Config) error {
	var err error
	if h.cat, err = catalog.New(cfg.PluginDir); err != nil {
		return err
	}
	if h.approvals, err = policy.NewStore(cfg.PluginApprovalsFile, policy.Mode(cfg.PluginApproval)); err != nil {
		return err
	}
	if h.bounds, err = boot.OpenPluginBounds(cfg); err != nil {
		return err
	}
	h.log.Info("plugin bounds", "applies", h.bounds.Kind)
	if cfg.HasValkey() {
		h.client, err = boot.Connect(ctx, cfg.Valkey)
	}
	return err
}

// connectPostgres opens the FlowFabric database, when there is one:
// before anything else touches it, a schema this ffscan does not know
// stops the boot, with what was found; then ffscan's own functions are
// installed or upgraded in its own schema (a newer one is refused), and
// the pool is opened again ready (postgres.Options.Ready).
func (h *Host) connectPostgres(ctx context.Context, cfg *config.Config) error {
	if cfg.Postgres.DSN == "" {
		return nil
	}
	var err error
	if h.pg, err = postgres.Connect(ctx, postgres.Options{DSN: cfg.Postgres.DSN, PoolSize: cfg.Postgres.PoolSize,
		Transaction: cfg.Postgres.Pooling == config.PoolingTransaction}); err != nil {
		return err
	}
	if h.pgSchema, err = postgres.Recognize(ctx, h.pg); err != nil {
		return err
	}
	if !h.readOnly {
		action, err := postgres.InstallLibrary(ctx, h.pg)
		if err != nil {
			return err
		}
		h.pgLibrary = postgres.LibraryVersion
		h.log.Info("postgres function library", "version", postgres.LibraryVersion, "action", string(action))
		// The serving pool: every connection open, each having run the
		// library's functions it serves once (all but the candidate
		// reads, which have connections of their own, below), so that
		// no action or dispatch pays a first call's planning.
		boot := h.pg
		h.pg, err = postgres.Connect(ctx, postgres.Options{DSN: cfg.Postgres.DSN, PoolSize: cfg.Postgres.PoolSize,
			Transaction: cfg.Postgres.Pooling == config.PoolingTransaction, Ready: true})
		boot.Close()
		if err != nil {
			return err
		}
		// The candidate reads' own connections, each function pinned to
		// one (postgres.Readers).
		if h.pgReads, err = postgres.OpenReaders(ctx, postgres.Options{DSN: cfg.Postgres.DSN,
			Transaction: cfg.Postgres.Pooling == config.PoolingTransaction}, cfg.Postgres.ReadConnections); err != nil {
			return err
		}
	} else {
		// A read-only host installs nothing, so it warms nothing up
		// either: its reads run on its pool.
		h.pgReads = postgres.SharedReaders(h.pg)
	}
	h.log.Info("postgres", "schema", h.pgSchema.String(), "pool_size", h.pg.Config().MaxConns, "read_connections", h.pgReads.Connections(),
		"filter", cfg.Postgres.Filter().String())
	return nil
}

// prepareKeyspace agrees on the partition counts, makes sure of the
// library and merges the lanes (only reads them when read only).
func (h *Host) prepareKeyspace(ctx context.Context, cfg *config.Config) error {
	switch {
	case h.client == nil:
		// Postgres alone: the partition counts are the configuration's,
		// as FlowFabric's own server takes them from its environment
		// (nothing reads ff_partition_config), and there are no lanes to
		// discover (the Postgres reads do not go by lane).
		h.parts = cfg.Partitions
		h.log.Info("no valkey: this host serves its Postgres database alone", "flow", h.parts.Flow, "budget", h.parts.Budget)
	case h.readOnly:
		parts, recorded, err := boot.ReadPartitions(ctx, h.client, cfg.Partitions)
		if err != nil {
			return err
		}
		h.parts = parts
		h.log.Info("partitions (read only)", "flow", parts.Flow, "budget", parts.Budget, "quota", parts.Quota, "recorded", recorded)
		h.lib = lua.New(h.client, lua.Options{})
	default:
		parts, created, err := boot.EnsurePartitions(ctx, h.client, cfg.Partitions)
		if err != nil {
			return err
		}
		h.parts = parts
		h.log.Info("partitions", "flow", parts.Flow, "budget", parts.Budget, "quota", parts.Quota, "recorded_now", created)
		if h.lib, err = boot.LoadLibrary(ctx, h.client, cfg.Lua.ForceReplace, h.log); err != nil {
			return err
		}
	}
	// The lanes configured, recorded, and in use though nobody configured
	// or recorded them, before anything runs.
	h.lanes = lanes.NewKeeper(h.client, lanes.KeeperConfig{Configured: cfg.Lanes, ReadOnly: h.readOnly, Clock: h.clk, Logger: h.log})
	if h.client != nil {
		if err := h.lanes.Load(ctx); err != nil {
			return err
		}
		h.log.Info("lanes", "lanes", h.Lanes())
	}
	return nil
}
