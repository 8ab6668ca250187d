package host

// The services, built from the configuration once Boot prepared the
// stores; Run starts them.

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/census"
	"github.com/ffscan/ffscan/host/completions"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/console"
	"github.com/ffscan/ffscan/host/distribution"
	"github.com/ffscan/ffscan/host/filewatch"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/keyevents"
	"github.com/ffscan/ffscan/host/lanes"
	"github.com/ffscan/ffscan/host/libwatch"
	"github.com/ffscan/ffscan/host/listeners"
	"github.com/ffscan/ffscan/host/pgcompletions"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/host/sharing/pgstore"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/host/unit"
	"github.com/ffscan/ffscan/keys"
)

// Every service the host starts has the one shape.
var (
	_ service.Service = (*supervisor.Supervisor)(nil)
	_ service.Service = (*scheduler.Runner)(nil)
	_ service.Service = (*unit.Set)(nil)
	_ service.Service = (*sharing.Coordinator)(nil)
	_ service.Service = (*listeners.Listeners)(nil)
	_ service.Service = (*completions.Listener)(nil)
	_ service.Service = (*pgcompletions.Listener)(nil)
	_ service.Service = (*keyevents.Feed)(nil)
	_ service.Service = (*lanes.Keeper)(nil)
	_ service.Service = (*census.Controller)(nil)
	_ service.Service = (*libwatch.Watch)(nil)
	_ service.Service = (*filewatch.Watcher)(nil)
	_ service.Service = (*httpapi.Server)(nil)
	_ service.Service = (*audit.Recorder)(nil)
)

// build makes every service of the host from cfg.
func (h *Host) build(_ context.Context, cfg *config.Config) error {
	h.svc = callbacks.New(h.lib, h.met)
	h.svc.SetClock(h.clk)
	h.svc.SetPostgres(h.pg, cfg.Postgres.Filter()) // PGCALLs (refused when there is no database)
	h.svc.SetBudget(budgetOf(cfg.Callbacks))
	h.compMet = completions.NewPrometheusMetrics()
	if err := h.compMet.Register(h.met.Registry); err != nil {
		return fmt.Errorf("register completion metrics: %w", err)
	}
	id := hostID()
	h.audit = h.newAudit(cfg, id)
	if store := h.shareStore(cfg); store != nil {
		h.share = sharing.New(store, sharing.Config{ID: id, Partitions: h.parts, Clock: h.clk, Logger: h.log.Named("sharing"), Changes: &h.changes})
		if err := h.met.Registry.Register(sharing.NewCollector(h.share)); err != nil {
			return fmt.Errorf("register sharing metrics: %w", err)
		}
	}
	if h.pg != nil && !h.readOnly {
		h.pgSlots = h.newActionSlots(cfg)
		h.svc.SetActionSlots(h.pgSlots)
	}
	if err := h.met.Registry.Register(stateCollector{h}); err != nil {
		return fmt.Errorf("register the host's state gauges: %w", err)
	}
	if h.client != nil {
		h.nodes = scheduler.NewNodeMap(h.client, h.clk, h.epoch)
		h.events = keyevents.New(h.client, keyevents.Config{Mode: keyevents.Mode(cfg.KeyEvents.Mode), Configure: cfg.KeyEvents.Configure && !h.readOnly,
			Clock: h.clk, Logger: h.log.Named("key_events"), Changes: &h.changes})
		// Before any runner watches: a runner told of a new lane's key
		// reads it with the lane already known.
		h.events.Watch(h.sawKey)
		h.census = census.New(h.client, h.epoch.Load)
		h.censusCtl = census.NewController(h.census, h.client, census.ControllerConfig{
			Mode: census.Mode(cfg.Scheduler.LaneCensus), Load: func() census.Load { return h.units.LaneLoad() },
			Lanes: func() int { return len(h.Lanes()) }, Clock: h.clk, Logger: h.log})
		if !h.readOnly {
			h.library = libwatch.New(h.lib, libwatch.Config{Clock: h.clk, Logger: h.log})
		}
	}
	h.units = unit.NewSet(unit.Config{Deps: h.unitDeps()})
	comp := listeners.Config{Settings: completionSettings(cfg.Completions), Library: h.lib, Postgres: h.pg, PostgresReads: h.pgReads, PostgresSlots: h.pgSlots,
		PostgresFilter: cfg.Postgres.Filter(), Partitions: h.parts, Owns: h.owns(), Metrics: h.compMet, Clock: h.clk, Logger: h.log, Changes: &h.changes}
	if h.share != nil {
		comp.Gains = h.share.Gains
	}
	if dsn := cfg.Postgres.ListenDSN; dsn != "" && h.pg != nil {
		lc, err := pgx.ParseConfig(dsn)
		if err != nil {
			// pgx's message may quote the DSN, password included.
			return errors.New("postgres.listen_dsn is not a valid connection string")
		}
		comp.PostgresListen = lc
	}
	h.listeners = listeners.New(comp)
	h.files = h.newFileWatch(cfg.Watch)
	if cfg.HTTP.Listen != "" {
		h.http = httpapi.NewServer(httpapi.ServerConfig{Listen: cfg.HTTP.Listen, Clock: h.clk, Logger: h.log, Console: console.Handler(h)}, h.met.Registry, h)
	}
	return nil
}

// newActionSlots are the host's part of postgres.shared_transactions (0:
// its pool's size), by its share of the partitions (all of them without
// sharing).
func (h *Host) newActionSlots(cfg *config.Config) *postgres.ActionSlots {
	total := cfg.Postgres.SharedTransactions
	if total == 0 {
		total = int(h.pg.Config().MaxConns)
	}
	var share func() (int, int)
	if h.share != nil {
		share = h.share.Share
	}
	return postgres.NewActionSlots(total, share)
}

// shareStore is where this host shares the partitions with the others:
// the keyspace on a host with Valkey (its Postgres scanners, if any, go by
// the same partitions), the database on a host that serves Postgres alone
// (the hosts with the same filter share it). Nil for a read-only host
// without Valkey, which installs nothing in the database and runs no
// scanner of its own.
func (h *Host) shareStore(cfg *config.Config) sharing.Store {
	switch {
	case h.client != nil:
		return sharing.NewValkeyStore(h.client)
	case h.pg != nil && !h.readOnly:
		return pgstore.New(h.pg, cfg.Postgres.Filter(), h.parts)
	}
	return nil
}

// unitDeps are what the scanners are built from.
func (h *Host) unitDeps() unit.Deps {
	d := unit.Deps{
		Catalog: h.cat, Callbacks: h.svc, Approvals: h.approvals, Client: h.client, Postgres: h.pg, PostgresReads: h.pgReads,
		Partitions: h.parts, Lanes: h.Lanes, Owns: h.owns(), Epoch: h.epoch, Nodes: h.nodes, Metrics: h.met, Clock: h.clk, Logger: h.log,
		Changes: &h.changes, Launches: h.launches, Cgroups: h.bounds.Cgroups,
		NoCgroups: h.bounds.Kind, Shadows: h.shadows, CanaryRecords: h.cfg.DecisionRecords.Canary,
	}
	if h.audit != nil {
		d.Audit = h.audit
	}
	if h.cfg.PluginSignature == config.SignatureRequired {
		d.Locked = distribution.LockChecker(h.cfg.LockFile())
	}
	if !h.readOnly {
		d.Taps = &h.taps
	}
	// A nil pointer in an interface would be called.
	if h.census != nil {
		d.Census = h.census
	}
	if h.events != nil {
		d.Events = h.events
	}
	return d
}

// owns is the ownership check of this host's share of the partitions
// (nil, every partition, without partition sharing).
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

// sawKey hears of every key created (new-key events): the first key of a
// lane makes the lane known at once.
func (h *Host) sawKey(key string, _ keys.Partition, _ bool) {
	if lane, ok := lanes.LaneOfKey(key); ok {
		h.lanes.Saw(lane)
	}
}

// sessionRunner is the scheduler configuration of a session of scanner
// name: every partition (no sharing, no census), its first cycle when
// asked.
func (h *Host) sessionRunner(cfg *config.Config, name string, sc config.Scanner) scheduler.Config {
	c := h.units.Deps().RunnerConfig(unit.SettingsOf(cfg), name, sc)
	c.Owns, c.Census, c.Events, c.NoJitter = nil, nil, nil, true
	return c
}

// background are the services that keep the host's view current: they
// follow the run context alone, and have nothing to finish.
func (h *Host) background() []service.Service {
	var svcs []service.Service
	if h.client != nil {
		svcs = append(svcs, h.events, h.lanes, h.censusCtl)
	}
	if h.library != nil {
		svcs = append(svcs, h.library)
	}
	return append(svcs, h.files)
}
