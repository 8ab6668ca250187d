// Package listeners runs the completion push paths the configuration
// enables (completions.*): the Valkey one (host/completions) on a host
// with Valkey, the Postgres one (host/pgcompletions) on a host with a
// database. They start, stop and restart together, so that a shutdown
// and a reload stop them the same way.
package listeners

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/completions"
	"github.com/ffscan/ffscan/host/pgcompletions"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Settings are what the configuration sets (completions.*); a reload
// restarts the listeners with new ones.
type Settings struct {
	// Enabled runs the listeners; when false none runs and dependency
	// resolution relies on the reconcilers alone.
	Enabled bool
	// Concurrency bounds each listener's cascades in flight
	// (completions.DefaultConcurrency).
	Concurrency int
}

// Config configures the listeners: their settings at Start and what they
// are built from (fixed for the host's life). Zero fields take the
// defaults.
type Config struct {
	Settings
	// Library runs the Valkey cascades (nil: no Valkey).
	Library *lua.Library
	// Postgres is the host's database (nil: none); PostgresListen the
	// Postgres listener's own connection (nil: the pool's settings).
	Postgres *pgxpool.Pool
	// PostgresReads are the connections of the drains' reads (nil:
	// Postgres's).
	PostgresReads *postgres.Readers
	// PostgresSlots are the host's action slots, which each dispatch
	// holds (nil: unbounded).
	PostgresSlots  *postgres.ActionSlots
	PostgresListen *pgx.ConnConfig
	PostgresFilter scannerapi.Filter
	Partitions     keys.PartitionConfig
	// Owns is this host's share of the partitions (nil: every one), and
	// Gains counts the times it came to own partitions it could not act on
	// before (sharing.Coordinator.Gains; nil with Owns nil). The Postgres
	// listener listens for the share while this host owns flow partition
	// pgcompletions.ListenPartition, and drains at each gain.
	Owns    func(keys.Partition) bool
	Gains   func() (uint64, <-chan struct{})
	Metrics completions.Metrics
	Clock   clock.Clock
	Logger  hclog.Logger
	// Changes, when set, is told of every change of the listeners'
	// counters.
	Changes *service.Changes
}

func (c Config) withDefaults() Config {
	c.Settings = c.Settings.withDefaults()
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

func (s Settings) withDefaults() Settings {
	service.Default(&s.Concurrency, completions.DefaultConcurrency)
	return s
}

// Listeners are the running push paths.
type Listeners struct {
	cfg  Config
	loop service.Loop
	// reqs are run by the loop, under Start's context (Restart).
	reqs chan func(ctx context.Context)

	mu     sync.Mutex
	set    Settings // what runs, or ran last
	valkey *completions.Listener
	pg     *pgcompletions.Listener
}

// New returns the listeners cfg enables; Start runs them.
func New(cfg Config) *Listeners {
	cfg = cfg.withDefaults()
	return &Listeners{cfg: cfg, set: cfg.Settings, reqs: make(chan func(context.Context))}
}

// Start starts the listeners the settings enable, and returns their start
// errors (those that did start run until Stop). A Restart later runs
// them under ctx. A second Start returns service.ErrStarted.
func (l *Listeners) Start(ctx context.Context) error {
	started := make(chan error, 1)
	err := l.loop.Start(ctx, func(ctx context.Context) {
		l.mu.Lock()
		started <- l.startLocked(ctx)
		l.mu.Unlock()
		l.cfg.Changes.Notify()
		l.serve(ctx)
	})
	if err != nil {
		return err
	}
	return <-started
}

// serve runs the requests that need Start's context until it ends (or
// until Stop).
func (l *Listeners) serve(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-l.reqs:
			f(ctx)
		}
	}
}

func (l *Listeners) startLocked(ctx context.Context) error {
	c, d := l.set, l.cfg
	l.valkey, l.pg = nil, nil
	if !c.Enabled {
		return nil
	}
	var errs []error
	if d.Postgres != nil {
		pc := pgcompletions.Config{Pool: d.Postgres, Reads: d.PostgresReads, Slots: d.PostgresSlots, Listen: d.PostgresListen, Partitions: d.Partitions.Flow, Concurrency: c.Concurrency,
			Owns: d.Owns, Gains: d.Gains, Filter: d.PostgresFilter, Clock: d.Clock, Logger: d.Logger.Named("pgcompletions"), Changes: d.Changes}
		pg := pgcompletions.New(pc)
		if err := pg.Start(ctx); err != nil {
			d.Logger.Error("postgres completion listener did not start; dependency resolution relies on pg_dependency", "error", err)
			errs = append(errs, fmt.Errorf("postgres completion listener: %w", err))
		} else {
			l.pg = pg
			d.Logger.Info("postgres completion listener started", "channel", pgcompletions.Channel, "concurrency", c.Concurrency)
		}
	}
	if d.Library == nil {
		return errors.Join(errs...)
	}
	v := completions.New(completions.Config{Enabled: true, Concurrency: c.Concurrency, Clock: d.Clock, Library: d.Library,
		Logger: d.Logger.Named("completions"), Metrics: d.Metrics, Partitions: d.Partitions, Owns: d.Owns, Changes: d.Changes})
	if err := v.Start(ctx); err != nil {
		d.Logger.Error("completion listener did not start; dependency resolution relies on the dependency_reconciler", "error", err)
		errs = append(errs, fmt.Errorf("completion listener: %w", err))
	} else {
		l.valkey = v
	}
	return errors.Join(errs...)
}

// Stop stops both listeners at once: they stop receiving, and what they
// are dispatching may finish until ctx ends, then it is cancelled (each
// says so in the log); no Restart starts them again. Stop and Restart
// must not overlap (the host serializes reloads and its shutdown).
func (l *Listeners) Stop(ctx context.Context) error {
	return errors.Join(l.loop.Stop(ctx), l.stopRunning(ctx))
}

// stopRunning stops the listeners that run now (Stop; Restart, which
// starts others after).
func (l *Listeners) stopRunning(ctx context.Context) error {
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
// set enables, when the listeners run (a reload); it returns their start
// errors.
func (l *Listeners) Restart(stopCtx context.Context, set Settings) error {
	_ = l.stopRunning(stopCtx)
	set = set.withDefaults()
	done := make(chan error, 1)
	select {
	case l.reqs <- func(ctx context.Context) {
		l.mu.Lock()
		l.set = set
		done <- l.startLocked(ctx)
		l.mu.Unlock()
	}:
	case <-l.loop.Done():
		l.mu.Lock()
		l.set = set
		l.valkey, l.pg = nil, nil
		l.mu.Unlock()
		done <- nil
	}
	l.cfg.Changes.Notify()
	return <-done
}

// Stats are the running listeners' counters (nil for one not running),
// and the configuration they run with.
func (l *Listeners) Stats() (Settings, *completions.Stats, *pgcompletions.Stats) {
	l.mu.Lock()
	v, pg, cfg := l.valkey, l.pg, l.set
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
