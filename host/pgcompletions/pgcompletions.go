// Package pgcompletions is the push path of DAG dispatch on a FlowFabric
// Postgres database: a listener on the ff_completion notifications that
// FlowFabric's completion outbox sends at every commit, which dispatches
// each event at once through ffscan.dispatch_completion. FlowFabric's
// Postgres server has no such path, so each DAG hop waits 15-30 s for its
// dependency reconciler (PG11); here a hop takes milliseconds, and the
// reconciler (pg_dependency) stays as the safety net for what the
// listener misses (a dropped connection, a host restart, a partition
// being handed over between hosts).
//
// The notification carries only the event id, and every listening host
// receives every one. A host alone (Owns nil) finds the event's partition
// and dispatches it. Hosts that share the partitions act only on their
// own: one host routes each event (the owner of flow partition event id
// mod the partition count, so no two hosts look the same event up), which
// finds its partition and passes it, by a notification on the share's own
// channel (ffscan.route_completion), to every host of the share; the
// owner of the event's partition dispatches it, the others drop it
// without a query. An event then costs one lookup and one dispatch
// however many hosts share the database. The dispatch re-checks the event
// under its row lock: a duplicate delivery, or the reconciler racing the
// listener, dispatches an event exactly once.
//
// LISTEN needs a session: the listener keeps a connection of its own
// (Config.Listen; the pool's settings by default), never one of the pool,
// which may sit behind a transaction pooler.
package pgcompletions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Channel is FlowFabric's completion notification channel.
const Channel = "ff_completion"

// checkPayload starts what the listener notifies itself after connecting,
// to prove that notifications reach it (a pooler in transaction mode drops
// LISTEN silently).
const checkPayload = "ffscan-listen-check"

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
	// Pool runs the lookups, routes and dispatches (it may reach the
	// database through a transaction pooler).
	Pool *pgxpool.Pool
	// Listen is the listening connection's settings (nil: the pool's). It
	// must reach a session of its own: PostgreSQL itself, or a session
	// pooler (a transaction pooler drops LISTEN, and the listener's check
	// says so).
	Listen *pgx.ConnConfig
	// Partitions is the flow partition count: the catch-up reads those
	// partitions, and a host routes the events whose id mod the count is
	// a flow partition it owns.
	Partitions uint16
	// Concurrency bounds dispatches in flight (the configuration's
	// completions.concurrency, shared with the Valkey listener).
	Concurrency int
	// Owns says whether this host dispatches a partition (nil: all, and no
	// routing).
	Owns func(keys.Partition) bool
	// Route is the channel on which the hosts sharing the partitions pass
	// each other the events they route (RouteChannel of their share);
	// required with Owns.
	Route string
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

// Stats counts what the listener did: the notifications received, the
// events this host routed to their owner (sharing hosts), dispatched, found
// dispatched already, left to the host that owns their partition, left to
// another tenant's host, failed, and the reconnections.
type Stats struct {
	Notifications, Routed, Dispatched, AlreadyDone, NotOwned, Filtered, Errors, Reconnects int64
	// Listening is true while a connection listens (checked, its catch-up
	// read): an event committed meanwhile comes by notification.
	Listening bool
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
	// id tells this listener's check notification from other listeners'.
	id   string
	once sync.Once

	notifications, routed, dispatched, alreadyDone, notOwned, filtered, errs, reconnects atomic.Int64
	live                                                                                 atomic.Bool // Stats.Listening
}

// RouteChannel is the channel of the hosts of one share (share names it:
// the store and, on Postgres, the filter; see sharing.Status.Store): a
// valid identifier of PostgreSQL's, the same on every host of the share.
func RouteChannel(share string) string {
	sum := sha256.Sum256([]byte(share))
	return "ffscan_route_" + hex.EncodeToString(sum[:8])
}

// ErrNoRoute refuses a listener of a sharing host without a route channel.
var ErrNoRoute = errors.New("pgcompletions: Owns without Route: sharing hosts pass events on their share's channel")

// New returns a listener; Start runs it.
func New(cfg Config) *Listener {
	cfg = cfg.withDefaults()
	return &Listener{o: cfg, clk: cfg.Clock, log: cfg.Logger, sem: make(chan struct{}, cfg.Concurrency), listening: make(chan struct{}),
		id: keys.NewUUID().String()}
}

// Start runs the listener until Stop (or until ctx ends). It returns at
// once: the connection is made in the background, and Listening says when
// it listens.
func (l *Listener) Start(ctx context.Context) error {
	if l.o.Owns != nil && l.o.Route == "" {
		return ErrNoRoute
	}
	return l.loop.Start(ctx, l.run)
}

// Listening is closed once the listener's first connection listens, has
// seen its own check notification, and has read the events its catch-up
// dispatches (an event committed after that comes by notification only).
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
	return Stats{Notifications: l.notifications.Load(), Routed: l.routed.Load(), Dispatched: l.dispatched.Load(), AlreadyDone: l.alreadyDone.Load(),
		NotOwned: l.notOwned.Load(), Filtered: l.filtered.Load(), Errors: l.errs.Load(), Reconnects: l.reconnects.Load(), Listening: l.live.Load()}
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
		l.o.Changes.Notify()
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
// undispatched events, then acting on notifications until it fails.
func (l *Listener) session(ctx context.Context) error {
	cfg := l.o.Listen
	if cfg == nil {
		cfg = l.o.Pool.Config().ConnConfig
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	if l.o.Route != "" {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.o.Route}.Sanitize()); err != nil {
			return err
		}
	}
	if err := l.check(ctx, conn); err != nil {
		return err
	}
	l.catchUp(ctx)
	l.live.Store(true)
	defer l.live.Store(false)
	l.once.Do(func() { close(l.listening) })
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.notified(ctx, n)
	}
}

// notified acts on one notification: a completion (dispatched by this
// host alone, or routed by the one host whose turn it is), or an event
// routed to the share (dispatched by its partition's owner).
func (l *Listener) notified(ctx context.Context, n *pgconn.Notification) {
	if n.Channel == Channel && strings.HasPrefix(n.Payload, checkPayload) {
		return // this listener's check, or another's
	}
	if n.Channel == l.o.Route && l.o.Route != "" {
		pk, ev, err := parseRouted(n.Payload)
		if err != nil {
			l.errs.Add(1)
			l.log.Warn("routed completion not <partition>/<event id>", "payload", n.Payload)
			return
		}
		if !l.o.Owns(keys.Partition{Family: keys.FamilyFlow, Index: pk}) {
			l.notOwned.Add(1)
			l.o.Changes.Notify()
			return
		}
		l.dispatch(ctx, ev, int(pk))
		return
	}
	ev, err := strconv.ParseInt(n.Payload, 10, 64)
	if err != nil {
		l.errs.Add(1)
		l.log.Warn("completion notification without an event id", "payload", n.Payload)
		return
	}
	l.notifications.Add(1)
	if l.o.Owns == nil {
		l.dispatch(ctx, ev, -1)
		return
	}
	if l.routes(ev) {
		l.route(ctx, ev)
	}
}

// routes says whether this host routes event ev: when it owns flow
// partition ev mod the partition count (ownership is exclusive, so one
// host of the share does).
func (l *Listener) routes(ev int64) bool {
	count := int64(max(l.o.Partitions, 1))
	return l.o.Owns(keys.Partition{Family: keys.FamilyFlow, Index: uint16(((ev % count) + count) % count)})
}

// parseRouted reads route_completion's '<partition>/<event id>'.
func parseRouted(payload string) (uint16, int64, error) {
	a, b, ok := strings.Cut(payload, "/")
	if !ok {
		return 0, 0, errors.New("no /")
	}
	pk, err := strconv.ParseUint(a, 10, 16)
	if err != nil {
		return 0, 0, err
	}
	ev, err := strconv.ParseInt(b, 10, 64)
	if err != nil {
		return 0, 0, err
	}
	return uint16(pk), ev, nil
}

// route passes event ev to its partition's owner (ffscan.route_completion),
// with bounded concurrency.
func (l *Listener) route(ctx context.Context, ev int64) {
	l.async(ctx, func() error {
		var pk *int16
		if err := l.o.Pool.QueryRow(ctx, "SELECT ffscan.route_completion($1, $2)", ev, l.o.Route).Scan(&pk); err != nil {
			return err
		}
		if pk == nil {
			return fmt.Errorf("event %d not found", ev)
		}
		l.routed.Add(1)
		return nil
	}, ev)
}

// check notifies the channel from another connection (one of the pool)
// and waits for the notification to come back, proving the listening
// connection receives what other sessions send. (Sent from the listening
// connection itself, a notification would come back through a
// transaction pooler too, when the pooler ran the NOTIFY on the server
// connection that had run the LISTEN; the next one, sent by another
// session while the pooler holds that server connection idle, would
// not.)
func (l *Listener) check(ctx context.Context, conn *pgx.Conn) error {
	payload := checkPayload + ":" + l.id
	if _, err := l.o.Pool.Exec(ctx, "SELECT pg_notify($1, $2)", Channel, payload); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, l.o.CheckTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(cctx)
		if err != nil {
			if cctx.Err() != nil && ctx.Err() == nil {
				return errors.New("LISTEN receives nothing on this connection (a pooler in transaction mode drops it): give the listener a " +
					"connection to PostgreSQL itself or through a session pooler (postgres.listen_dsn, with postgres.pooling: transaction)")
			}
			return err
		}
		if n.Channel == Channel && n.Payload == payload {
			return nil
		}
		// A real event arrived first: act on it, keep waiting.
		l.notified(ctx, n)
	}
}

// catchUpPerPartition bounds the events dispatched per partition after
// each (re)connect; the reconciler covers whatever is left.
const catchUpPerPartition = 100

// catchUp dispatches the events of this host's partitions committed while
// no connection listened (the oldest first), read per partition by
// ffscan.completions_pending (with the host's filter).
func (l *Listener) catchUp(ctx context.Context) {
	var parts []uint16
	for i := range max(l.o.Partitions, 1) {
		if l.o.Owns == nil || l.o.Owns(keys.Partition{Family: keys.FamilyFlow, Index: i}) {
			parts = append(parts, i)
		}
	}
	if len(parts) == 0 {
		return
	}
	evs, err := postgres.ReadCandidates(ctx, l.o.Pool, "completions_pending", parts, max(l.o.Partitions, 1), catchUpPerPartition, l.o.Filter)
	if err != nil {
		l.errs.Add(1)
		l.log.Warn("completion listener catch-up read failed; the dependency reconciler will find those events", "error", err)
		return
	}
	for _, e := range evs {
		id, err := strconv.ParseInt(e.Member, 10, 64)
		if err != nil {
			continue
		}
		l.dispatch(ctx, id, int(e.Partition))
	}
}

// dispatch runs one event's dispatch with bounded concurrency; pk < 0
// means its partition is looked up first.
func (l *Listener) dispatch(ctx context.Context, ev int64, pk int) {
	l.async(ctx, func() error { return l.dispatchOne(ctx, ev, pk) }, ev)
}

// async runs f with bounded concurrency; a failure is counted and logged
// (the reconciler retries the event).
func (l *Listener) async(ctx context.Context, f func() error, ev int64) {
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
		if err := f(); err != nil && ctx.Err() == nil {
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
