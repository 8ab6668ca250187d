// Package pgcompletions is the push path of DAG dispatch on a FlowFabric
// Postgres database: a listener on the ff_completion notifications that
// FlowFabric's completion outbox sends at every commit, which dispatches
// each event at once through ffscan.dispatch_completion. FlowFabric's
// Postgres server has no such path, so each DAG hop waits 15-30 s for its
// dependency reconciler (PG11); here a hop takes milliseconds, and the
// reconciler (pg_dependency) stays as the safety net for what the
// listener misses (a dropped connection, a host restart).
//
// The notification carries only the event id. The listener finds the
// event's partition, skips partitions another host owns (its listener
// dispatches them), and calls the library function, which re-checks the
// event under its row lock: a duplicate delivery, or the reconciler
// racing the listener, dispatches an event exactly once.
package pgcompletions

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Channel is FlowFabric's completion notification channel.
const Channel = "ff_completion"

// checkPayload is what the listener notifies itself after connecting, to
// prove that notifications reach it (a pooler in transaction mode drops
// LISTEN silently).
const checkPayload = "ffscan-listen-check"

// catchUpLimit bounds the events dispatched after each (re)connect.
const catchUpLimit = 1000

// Defaults of Config.
const (
	DefaultConcurrency = 16
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
	// DefaultStableAfter is how long a connection must have listened for
	// the reconnection backoff to start over.
	DefaultStableAfter = 30 * time.Second
	// DefaultCheckTimeout bounds the wait for the listener's own check
	// notification on a new connection.
	DefaultCheckTimeout = 10 * time.Second
)

// Config configures a Listener. Zero fields take the defaults above.
type Config struct {
	// Pool runs the dispatches and gives the listening connection's
	// settings (the listener opens a connection of its own: LISTEN needs a
	// session).
	Pool *pgxpool.Pool
	// Concurrency bounds dispatches in flight (the configuration's
	// completions.concurrency, shared with the Valkey listener).
	Concurrency int
	// Owns says whether this host dispatches a partition (nil: all).
	Owns func(keys.Partition) bool
	// Filter is the host's namespace / instance-tag filter: events of
	// executions it does not keep are left to their own hosts.
	Filter scannerapi.Filter
	// MinBackoff and MaxBackoff bound the wait between reconnections
	// (MaxBackoff at least MinBackoff).
	MinBackoff, MaxBackoff time.Duration
	StableAfter            time.Duration
	CheckTimeout           time.Duration
	// Clock is the time source of the backoff (the system clock).
	Clock  clock.Clock
	Logger hclog.Logger
	// Changes, when set, is told of every change of the Stats (a
	// dispatch's end follows its commit).
	Changes *service.Changes
}

func (c Config) withDefaults() Config {
	service.Default(&c.Concurrency, DefaultConcurrency)
	service.Default(&c.MinBackoff, DefaultMinBackoff)
	service.Default(&c.MaxBackoff, DefaultMaxBackoff)
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	service.Default(&c.StableAfter, DefaultStableAfter)
	service.Default(&c.CheckTimeout, DefaultCheckTimeout)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Stats counts what the listener did.
type Stats struct {
	Notifications, Dispatched, AlreadyDone, NotOwned, Filtered, Errors, Reconnects int64
}

// Listener dispatches completion events as they are committed.
type Listener struct {
	loop service.Loop
	o    Config
	clk  clock.Clock
	log  hclog.Logger
	work sync.WaitGroup
	sem  chan struct{}
	// listening is closed once the first LISTEN is in place and checked.
	listening chan struct{}
	once      sync.Once

	notifications, dispatched, alreadyDone, notOwned, filtered, errs, reconnects atomic.Int64
}

// New returns a listener; Start runs it.
func New(cfg Config) *Listener {
	cfg = cfg.withDefaults()
	return &Listener{o: cfg, clk: cfg.Clock, log: cfg.Logger, sem: make(chan struct{}, cfg.Concurrency), listening: make(chan struct{})}
}

// Start runs the listener until Stop (or until ctx ends). It returns at
// once: the connection is made in the background, and Listening says when
// it listens.
func (l *Listener) Start(ctx context.Context) error {
	return l.loop.Start(ctx, l.run)
}

// Listening is closed once the listener's first connection listens and
// has seen its own check notification.
func (l *Listener) Listening() <-chan struct{} { return l.listening }

// Stop stops listening (dispatches in flight are cancelled) and waits for
// them to return until ctx ends; then it returns ctx's error, saying so in
// the log.
func (l *Listener) Stop(ctx context.Context) error {
	err := l.loop.Stop(ctx)
	if err == nil {
		err = service.Wait(ctx, service.Drained(&l.work))
	}
	if err != nil {
		l.log.Warn("postgres completion listener: dispatches still running at the deadline were cancelled; the dependency reconciler dispatches what they left", "error", err)
	}
	return err
}

// Stats returns the counters.
func (l *Listener) Stats() Stats {
	return Stats{Notifications: l.notifications.Load(), Dispatched: l.dispatched.Load(), AlreadyDone: l.alreadyDone.Load(),
		NotOwned: l.notOwned.Load(), Filtered: l.filtered.Load(), Errors: l.errs.Load(), Reconnects: l.reconnects.Load()}
}

// run keeps a listening connection, reconnecting with backoff (MinBackoff
// doubling to MaxBackoff) when it drops.
func (l *Listener) run(ctx context.Context) {
	backoff := l.o.MinBackoff
	for ctx.Err() == nil {
		start := l.clk.Now()
		err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		l.reconnects.Add(1)
		if clock.Since(l.clk, start) > l.o.StableAfter {
			backoff = l.o.MinBackoff // it ran for a while: start over
		}
		l.log.Warn("completion listener lost its connection; reconnecting", "error", err, "in", backoff)
		if !clock.Sleep(ctx, l.clk, backoff) {
			return
		}
		backoff = min(2*backoff, l.o.MaxBackoff)
	}
}

// session is one connection's life: LISTEN, the self-check, a catch-up of
// undispatched events, then dispatching notifications until it fails.
func (l *Listener) session(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.o.Pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	if err := l.check(ctx, conn); err != nil {
		return err
	}
	l.once.Do(func() { close(l.listening) })
	l.catchUp(ctx)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == checkPayload {
			continue
		}
		ev, err := strconv.ParseInt(n.Payload, 10, 64)
		if err != nil {
			l.errs.Add(1)
			l.log.Warn("completion notification without an event id", "payload", n.Payload)
			continue
		}
		l.notifications.Add(1)
		l.dispatch(ctx, ev, -1)
	}
}

// check notifies the channel and waits for the notification to come
// back, proving the connection receives them.
func (l *Listener) check(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", Channel, checkPayload); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, l.o.CheckTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(cctx)
		if err != nil {
			if cctx.Err() != nil && ctx.Err() == nil {
				return errors.New("LISTEN receives nothing on this connection (a pooler in transaction mode drops it; connect the host to PostgreSQL or to a session pooler)")
			}
			return err
		}
		if n.Payload == checkPayload {
			return nil
		}
		// A real event arrived first: dispatch it, keep waiting.
		if ev, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
			l.notifications.Add(1)
			l.dispatch(ctx, ev, -1)
		}
	}
}

// catchUp dispatches events committed while no connection listened (the
// oldest first); the reconciler covers whatever is left.
func (l *Listener) catchUp(ctx context.Context) {
	rows, err := l.o.Pool.Query(ctx, "SELECT partition_key, event_id FROM ff_completion_event WHERE dispatched_at_ms IS NULL ORDER BY event_id LIMIT $1", catchUpLimit)
	if err != nil {
		l.errs.Add(1)
		l.log.Warn("completion listener catch-up read failed; the dependency reconciler will find those events", "error", err)
		return
	}
	type event struct {
		pk int16
		id int64
	}
	var evs []event
	for rows.Next() {
		var e event
		if err := rows.Scan(&e.pk, &e.id); err != nil {
			break
		}
		evs = append(evs, e)
	}
	rows.Close()
	for _, e := range evs {
		l.dispatch(ctx, e.id, int(e.pk))
	}
}

// dispatch runs one event's dispatch with bounded concurrency; pk < 0
// means its partition is looked up first.
func (l *Listener) dispatch(ctx context.Context, ev int64, pk int) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	l.work.Add(1)
	go func() {
		defer l.work.Done()
		defer func() { <-l.sem }()
		defer l.o.Changes.Notify()
		if err := l.dispatchOne(ctx, ev, pk); err != nil && ctx.Err() == nil {
			l.errs.Add(1)
			l.log.Warn("completion dispatch failed; the dependency reconciler retries it", "event_id", ev, "error", err)
		}
	}()
}

func (l *Listener) dispatchOne(ctx context.Context, ev int64, pk int) error {
	if pk < 0 {
		var p *int16
		if err := l.o.Pool.QueryRow(ctx, "SELECT ffscan.completion_partition($1)", ev).Scan(&p); err != nil {
			return err
		}
		if p == nil {
			return fmt.Errorf("event %d not found", ev)
		}
		pk = int(*p)
	}
	if own := l.o.Owns; own != nil && !own(keys.Partition{Family: keys.FamilyFlow, Index: uint16(pk)}) {
		l.notOwned.Add(1)
		return nil
	}
	out, err := postgres.Call(ctx, l.o.Pool, "dispatch_completion", []string{strconv.Itoa(pk), strconv.FormatInt(ev, 10)}, l.o.Filter)
	if err != nil {
		return err
	}
	if len(out) < 2 || out[0] == nil || *out[0] != "1" || out[1] == nil {
		return fmt.Errorf("dispatch_completion answered %v", out)
	}
	switch *out[1] {
	case "dispatched":
		l.dispatched.Add(1)
	case "filtered":
		l.filtered.Add(1)
	default:
		l.alreadyDone.Add(1)
	}
	return nil
}
