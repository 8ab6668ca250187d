// Package listeners runs the completion push paths the configuration
// enables (completions.*): the Valkey one (host/completions) on a host
// with Valkey, the Postgres one (host/pgcompletions) on a host with a
// database. They start, stop and restart together, so that a shutdown
// and a reload stop them the same way.
package listeners

import (
	"context"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/completions"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/pgcompletions"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Deps are what the listeners are built from; fixed for the host's life.
type Deps struct {
	// Library runs the Valkey cascades (nil: no Valkey).
	Library *lua.Library
	// Postgres is the host's database (nil: none); PostgresListen the
	// Postgres listener's own connection (nil: the pool's settings).
	Postgres       *pgxpool.Pool
	PostgresListen *pgx.ConnConfig
	PostgresFilter scannerapi.Filter
	Partitions     keys.PartitionConfig
	// Owns is this host's share of the partitions (nil: every one), and
	// Gains counts the times it came to own partitions it could not act on
	// before (sharing.Coordinator.Gains; nil with Owns nil): the Postgres
	// listener reads the events left meanwhile at each.
	Owns    func(keys.Partition) bool
	Gains   func() (uint64, <-chan struct{})
	Metrics completions.Metrics
	Clock   clock.Clock
	Logger  hclog.Logger
	// Changes, when set, is told of every change of the listeners'
	// counters.
	Changes *service.Changes
}

// Listeners are the running push paths.
type Listeners struct {
	deps Deps

	mu     sync.Mutex
	ctx    context.Context // Start's: restarts run under it
	cfg    config.Completions
	valkey *completions.Listener
	pg     *pgcompletions.Listener
}

// New returns the listeners cfg enables; Start runs them.
func New(d Deps, cfg config.Completions) *Listeners {
	return &Listeners{deps: d, cfg: cfg}
}

// Start starts the listeners the configuration enables.
func (l *Listeners) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx != nil {
		return service.ErrStarted
	}
	l.ctx = ctx
	l.startLocked()
	l.deps.Changes.Notify()
	return nil
}

func (l *Listeners) startLocked() {
	c, d := l.cfg, l.deps
	l.valkey, l.pg = nil, nil
	if !c.Enabled {
		return
	}
	if d.Postgres != nil {
		pc := pgcompletions.Config{Pool: d.Postgres, Listen: d.PostgresListen, Partitions: d.Partitions.Flow, Concurrency: c.Concurrency,
			Owns: d.Owns, Gains: d.Gains, Filter: d.PostgresFilter, Clock: d.Clock, Logger: d.Logger.Named("pgcompletions"), Changes: d.Changes}
		pg := pgcompletions.New(pc)
		if err := pg.Start(l.ctx); err != nil {
			d.Logger.Error("postgres completion listener did not start; dependency resolution relies on pg_dependency", "error", err)
		} else {
			l.pg = pg
			d.Logger.Info("postgres completion listener started", "channel", pgcompletions.Channel, "concurrency", c.Concurrency)
		}
	}
	if d.Library == nil {
		return
	}
	v := completions.New(completions.Config{Enabled: true, Concurrency: c.Concurrency, Clock: d.Clock}, d.Library, completions.Options{
		Logger:     d.Logger.Named("completions"),
		Metrics:    d.Metrics,
		Partitions: d.Partitions,
		Owns:       d.Owns,
		Changes:    d.Changes,
	})
	if err := v.Start(l.ctx); err != nil {
		d.Logger.Error("completion listener did not start; dependency resolution relies on the dependency_reconciler", "error", err)
		return
	}
	l.valkey = v
}

// Stop stops both listeners at once: they stop receiving, and what they
// are dispatching may finish until ctx ends, then it is cancelled (each
// says so in the log). Stop and Restart must not overlap (the host
// serializes reloads and its shutdown).
func (l *Listeners) Stop(ctx context.Context) error {
	return service.StopAll(ctx, l.running()...)
}

// running are the listeners that run now.
func (l *Listeners) running() []service.Service {
	l.mu.Lock()
	defer l.mu.Unlock()
	var svcs []service.Service
	if l.valkey != nil {
		svcs = append(svcs, l.valkey)
	}
	if l.pg != nil {
		svcs = append(svcs, l.pg)
	}
	return svcs
}

// Restart stops the running listeners (within stopCtx) and starts those
// cfg enables, when the listeners run (a reload).
func (l *Listeners) Restart(stopCtx context.Context, cfg config.Completions) {
	_ = l.Stop(stopCtx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cfg = cfg
	if l.ctx != nil && l.ctx.Err() == nil {
		l.startLocked()
	} else {
		l.valkey, l.pg = nil, nil
	}
	l.deps.Changes.Notify()
}

// Stats are the running listeners' counters (nil for one not running),
// and the configuration they run with.
func (l *Listeners) Stats() (config.Completions, *completions.Stats, *pgcompletions.Stats) {
	l.mu.Lock()
	v, pg, cfg := l.valkey, l.pg, l.cfg
	l.mu.Unlock()
	var vs *completions.Stats
	var ps *pgcompletions.Stats
	if v != nil {
		st := v.Stats()
		vs = &st
	}
	if pg != nil {
		st := pg.Stats()
		ps = &st
	}
	return cfg, vs, ps
}
