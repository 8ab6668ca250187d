// Package pgcompletions is the push path of DAG dispatch on a FlowFabric
// Postgres database: a listener on the ff_completion notifications that
// FlowFabric's completion outbox sends at every commit, which dispatches
// the events at once through ffscan.dispatch_completions (a partition's
// events in one transaction). FlowFabric's Postgres server has no such
// path, so each DAG hop waits 15-30 s for its dependency reconciler
// (PG11); here a hop takes milliseconds, and the
// reconciler (pg_dependency) stays as the safety net for what the
// listener cannot reach (a host restart, the database unreachable).
//
// A notification is a wake-up, not the work: the work is the events that
// are not dispatched yet, which the database keeps. Each notification
// (and each (re)connect, and each time this host gains partitions) asks
// for a drain: one read of the pending events of every flow partition
// (ffscan.completions_pending, on the pending-dispatch index), then their
// dispatches. Drains do not overlap, and one asked for while another runs
// follows it, so every event committed before a notification is read by
// a drain that starts after it. Nothing is decided from a notification
// alone, so nothing is lost when a decision would have been wrong, and a
// drain that failed is run again, with backoff, until one succeeds.
//
// One listener per share: among hosts that share the partitions, the
// owner of flow partition ListenPartition listens and drains every
// partition; the others neither listen nor drain (they are on standby).
// PostgreSQL delivers each notification to each listening session in a
// transaction of that session's, and a notification cannot be heard for
// some partitions only: with a listener on every host, each completion
// cost every host a transaction and a drain, and three hosts ran 1.6-1.8
// times one host's transactions per item. The role moves with the
// partition's ownership, so it is fenced as the partition is (a host
// acts as the listener only while its view of the partition is valid)
// and taken over with it when its host leaves, dies or stalls: the host
// that gains the partition listens, then drains every partition, which
// reads the events committed while no host listened. A host that loses
// the role stops dispatching at once and closes its session at its next
// check (Config.LeadCheck). Two hosts never dispatch one event but around
// a hand-over, and the dispatch re-checks the event under its row lock:
// a duplicate, or the reconciler racing the listener, dispatches an event
// exactly once.
//
// LISTEN needs a session: the listener keeps a connection of its own
// (Config.Listen; the pool's settings by default), never one of the pool,
// which may sit behind a transaction pooler.
package pgcompletions

import (
	"context"
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

// ListenPartition is the flow partition whose owner is the share's
// listener.
const ListenPartition uint16 = 0

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
	// DefaultLeadCheck is how often a host checks that it still holds
	// the listener's role (the share's tick, by default): a listener that
	// lost it dispatches nothing more at once, and closes its session at
	// the next check.
	DefaultLeadCheck = time.Second
)

// Config configures a Listener. Zero fields take the defaults above.
type Config struct {
	// Pool runs the drains' reads and the dispatches (it may reach the
	// database through a transaction pooler).
	Pool *pgxpool.Pool
	// Reads are the connections the drains' reads run on (nil: Pool).
	Reads *postgres.Readers
	// Slots are the host's action slots (shared with its scanners'
	// PGCALLs): each dispatch holds one (nil: Concurrency alone bounds
	// them).
	Slots *postgres.ActionSlots
	// Listen is the listening connection's settings (nil: the pool's). It
	// must reach a session of its own: PostgreSQL itself, or a session
	// pooler (a transaction pooler drops LISTEN, and the listener's check
	// says so).
	Listen *pgx.ConnConfig
	// Partitions is the flow partition count (0: FlowFabric's default,
	// 256): a drain reads all of them.
	Partitions uint16
	// Concurrency bounds dispatches in flight, one per partition at a
	// time (the configuration's completions.concurrency, shared with the
	// Valkey listener).
	Concurrency int
	// Owns says whether this host may act on a partition now (nil: all):
	// the host that owns flow partition ListenPartition is the share's
	// listener.
	Owns func(keys.Partition) bool
	// Gains, with Owns, counts the times this host came to own partitions
	// it could not act on before (sharing.Coordinator.Gains); next is
	// closed at the next one. A gain of the listener's role starts the
	// session, and each gain asks for a drain, which reads the events left
	// while Owns was false. Nil: Owns never changes.
	Gains func() (n uint64, next <-chan struct{})
	// Filter is the host's namespace / instance-tag filter: events of
	// executions it does not keep are left to their own hosts.
	Filter scannerapi.Filter
	// MinBackoff and MaxBackoff bound the wait between reconnections, and
	// between a failed drain and the next (MaxBackoff at least
	// MinBackoff).
	MinBackoff, MaxBackoff time.Duration
	StableAfter            time.Duration
	CheckTimeout           time.Duration
	// LeadCheck is how often the role is checked (DefaultLeadCheck): the
	// listener closes its session within it after losing the role, and a
	// standby that gains it without a gain reported starts listening
	// within it.
	LeadCheck time.Duration
	// Clock is the time source of the backoff (the system clock).
	Clock  clock.Clock
	Logger hclog.Logger
	// Changes, when set, is told of every change of the Stats (a
	// dispatch's end follows its commit).
	Changes *service.Changes
}

func (c Config) withDefaults() Config {
	if c.Partitions == 0 {
		c.Partitions = keys.DefaultFlowPartitions
	}
	service.Default(&c.Concurrency, DefaultConcurrency)
	service.Default(&c.MinBackoff, DefaultMinBackoff)
	service.Default(&c.MaxBackoff, DefaultMaxBackoff)
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	service.Default(&c.StableAfter, DefaultStableAfter)
	service.Default(&c.CheckTimeout, DefaultCheckTimeout)
	service.Default(&c.LeadCheck, DefaultLeadCheck)
	c.Clock = clock.Or(c.Clock)
	if c.Reads == nil && c.Pool != nil {
		c.Reads = postgres.SharedReaders(c.Pool)
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Stats counts what the listener did: the notifications received, the
// drains that ran to their end (each one read of every partition's
// pending events and their dispatches), the events dispatched, found
// dispatched already, left to another tenant's host, the failures (a
// failed drain is run again), and the reconnections.
type Stats struct {
	Notifications, Drains, Dispatched, AlreadyDone, Filtered, Errors, Reconnects int64
	// Listening is true while a connection listens (checked, its catch-up
	// drain asked for): an event committed meanwhile is read by a drain
	// that a notification asks for.
	Listening bool
	// Standby is true while this host does not hold the listener's role
	// (another host of the share does, or will once it takes the
	// partition): it neither listens nor drains.
	Standby bool
}

// Listener dispatches completion events as they are committed.
type Listener struct {
	loop service.Loop
	o    Config
	clk  clock.Clock
	log  hclog.Logger
	work sync.WaitGroup
	sem  chan struct{}
	// wake asks for a drain (one pending request at most: a drain that
	// starts after a request reads everything committed before it).
	wake chan struct{}
	// listening is closed once the first LISTEN is in place and checked.
	listening chan struct{}
	// id tells this listener's check notification from other listeners'.
	id   string
	once sync.Once

	notifications, drains, dispatched, alreadyDone, filtered, errs, reconnects atomic.Int64
	live                                                                       atomic.Bool // Stats.Listening
	standby                                                                    atomic.Bool // Stats.Standby
}

// New returns a listener; Start runs it.
func New(cfg Config) *Listener {
	cfg = cfg.withDefaults()
	return &Listener{o: cfg, clk: cfg.Clock, log: cfg.Logger, sem: make(chan struct{}, cfg.Concurrency), wake: make(chan struct{}, 1),
		listening: make(chan struct{}), id: keys.NewUUID().String()}
}

// Start runs the listener until Stop (or until ctx ends). It returns at
// once: the connection is made in the background, and Listening says when
// it listens.
func (l *Listener) Start(ctx context.Context) error {
	return l.loop.Start(ctx, l.run)
}

// Listening is closed once the listener's first connection listens, has
// seen its own check notification, and has asked for the drain that
// catches up on the events committed before (an event committed after
// that is read by a drain its notification asks for).
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
	return Stats{Notifications: l.notifications.Load(), Drains: l.drains.Load(), Dispatched: l.dispatched.Load(), AlreadyDone: l.alreadyDone.Load(),
		Filtered: l.filtered.Load(), Errors: l.errs.Load(), Reconnects: l.reconnects.Load(), Listening: l.live.Load(),
		Standby: l.standby.Load()}
}

// errLostRole ends a session whose host no longer holds the listener's
// role.
var errLostRole = errors.New("this host no longer owns the listener's partition")

// leads reports whether this host holds the listener's role now: it owns
// flow partition ListenPartition, by a view that is still valid.
func (l *Listener) leads() bool {
	return l.o.Owns == nil || l.o.Owns(keys.Partition{Family: keys.FamilyFlow, Index: ListenPartition})
}

// run keeps a listening connection while this host holds the listener's
// role, reconnecting with backoff (MinBackoff doubling to MaxBackoff) when
// it drops, and runs the drains beside it. On standby it waits for the
// role.
func (l *Listener) run(ctx context.Context) {
	l.work.Add(1)
	go func() {
		defer l.work.Done()
		l.drainLoop(ctx)
	}()
	backoff := l.o.MinBackoff
	for ctx.Err() == nil {
		if !l.leads() {
			l.standby.Store(true)
			l.o.Changes.Notify()
			if !l.awaitRole(ctx) {
				return
			}
			l.log.Info("completion listener: this host owns the listener's partition; listening for the share", "partition", ListenPartition)
			backoff = l.o.MinBackoff
		}
		l.standby.Store(false)
		start := l.clk.Now()
		err := l.leadSession(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errLostRole) {
			l.log.Info("completion listener: this host no longer owns the listener's partition; on standby", "partition", ListenPartition)
			continue
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

// awaitRole waits until this host holds the listener's role (false: ctx
// ended first), looking at each gain of partitions and every LeadCheck.
func (l *Listener) awaitRole(ctx context.Context) bool {
	for !l.leads() {
		var gained <-chan struct{}
		if l.o.Gains != nil {
			_, gained = l.o.Gains()
			if l.leads() {
				break // gained between the check and the subscription
			}
		}
		t := l.clk.NewTimer(l.o.LeadCheck)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-gained:
		case <-t.C():
		}
		t.Stop()
	}
	return true
}

// leadSession runs a session until it fails, ctx ends, or a check finds
// the role lost (errLostRole).
func (l *Listener) leadSession(ctx context.Context) error {
	if l.o.Owns == nil {
		return l.session(ctx)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for clock.Sleep(sctx, l.clk, l.o.LeadCheck) {
			if !l.leads() {
				cancel(errLostRole)
				return
			}
		}
	}()
	err := l.session(sctx)
	lost := errors.Is(context.Cause(sctx), errLostRole)
	cancel(nil)
	<-watched
	if lost && ctx.Err() == nil {
		return errLostRole
	}
	return err
}

// session is one connection's life: LISTEN, the self-check, a drain asked
// for (the catch-up of what was committed while nothing listened), then a
// drain asked for at each notification, until the connection fails.
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
	if err := l.check(ctx, conn); err != nil {
		return err
	}
	l.request()
	l.live.Store(true)
	defer l.live.Store(false)
	l.once.Do(func() { close(l.listening) })
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.notified(n)
	}
}

// notified asks for a drain at each completion notification (not at the
// listeners' own checks).
func (l *Listener) notified(n *pgconn.Notification) {
	if n.Channel != Channel || strings.HasPrefix(n.Payload, checkPayload) {
		return // a listener's check (this one's or another's)
	}
	l.notifications.Add(1)
	l.request()
	l.o.Changes.Notify()
}

// request asks for a drain: the next one starts after this call.
func (l *Listener) request() {
	select {
	case l.wake <- struct{}{}:
	default: // one is asked for already, and has not started
	}
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
		// A real event arrived first: it asks for a drain.
		l.notified(n)
	}
}

// drainPerPartition bounds the events one drain reads per partition; a
// partition that filled it is drained again at once.
const drainPerPartition = 100

// drainLoop runs a drain whenever one is asked for (a notification, a
// (re)connect, a gain of partitions), one at a time. A drain that failed
// is asked for again after a backoff (MinBackoff doubling to MaxBackoff),
// so the events it did not dispatch are read again however long the
// failure lasts; one that read a full batch somewhere is asked for again
// at once.
func (l *Listener) drainLoop(ctx context.Context) {
	backoff := l.o.MinBackoff
	var seen uint64
	for {
		var gained <-chan struct{}
		if l.o.Gains != nil {
			var n uint64
			n, gained = l.o.Gains()
			if n != seen {
				seen = n
				l.request()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-gained:
			continue // counted above, on the next turn
		case <-l.wake:
		}
		more, err := l.drain(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			l.errs.Add(1)
			l.o.Changes.Notify()
			l.log.Warn("completion drain failed; running it again", "error", err, "in", backoff)
			l.request()
			if !clock.Sleep(ctx, l.clk, backoff) {
				return
			}
			backoff = min(2*backoff, l.o.MaxBackoff)
			continue
		}
		backoff = l.o.MinBackoff
		if more {
			l.request()
		}
	}
}

// drain reads the pending events of every flow partition (the oldest
// first, with the host's filter: ffscan.completions_pending) and
// dispatches them, returning once every dispatch returned; on standby it
// reads nothing. Each partition's events are dispatched in one
// transaction, one after the other (ffscan.dispatch_completions), the
// partitions side by side (at most Concurrency at once): a dispatch
// touches its own partition's rows only, so no two of them wait on each
// other (under SERIALIZABLE, two dispatches of one partition side by side
// failed on each other and were retried), and one listener drains at a
// time. more says a partition had more pending events than one read
// takes; an error, that an event read may not be dispatched.
func (l *Listener) drain(ctx context.Context) (more bool, err error) {
	if !l.leads() {
		return false, nil
	}
	parts := make([]uint16, l.o.Partitions)
	for i := range parts {
		parts[i] = uint16(i)
	}
	evs, err := postgres.ReadCandidates(ctx, l.o.Reads.For("completions_pending"), "completions_pending", parts, nil, l.o.Partitions, drainPerPartition, l.o.Filter)
	if err != nil {
		return false, fmt.Errorf("read the pending events: %w", err)
	}
	var order []uint16
	per := map[uint16][]int64{}
	for _, e := range evs {
		id, err := strconv.ParseInt(e.Member, 10, 64)
		if err != nil {
			continue
		}
		if per[e.Partition] == nil {
			order = append(order, e.Partition)
		}
		per[e.Partition] = append(per[e.Partition], id)
		if len(per[e.Partition]) >= drainPerPartition {
			more = true
		}
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	var first atomic.Value
	for _, pk := range order {
		select {
		case l.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return more, ctx.Err()
		}
		wg.Add(1)
		go func(pk uint16, ids []int64) {
			defer wg.Done()
			defer func() { <-l.sem }()
			if err := l.dispatch(ctx, pk, ids); err != nil && ctx.Err() == nil {
				failed.Add(1)
				first.CompareAndSwap(nil, err)
				l.log.Warn("completion dispatch failed; the drain runs again", "partition", pk, "events", len(ids), "error", err)
			}
		}(pk, per[pk])
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return more, fmt.Errorf("%d dispatches failed, the first: %w", n, first.Load().(error))
	}
	l.drains.Add(1)
	l.o.Changes.Notify()
	return more, nil
}

// dispatch dispatches events evs of partition pk, in their order, in one
// transaction (postgres.DispatchCompletions), unless this host no longer
// holds the listener's role (the next listener's first drain, or this
// host's at its next gain, reads them).
func (l *Listener) dispatch(ctx context.Context, pk uint16, evs []int64) error {
	if !l.leads() {
		return nil
	}
	release, err := l.o.Slots.Acquire(ctx)
	if err != nil {
		return err
	}
	out, err := postgres.DispatchCompletions(ctx, l.o.Pool, pk, evs, l.o.Filter)
	release()
	if err != nil {
		return err
	}
	defer l.o.Changes.Notify()
	for _, d := range out {
		r := d.Reply
		if len(r) < 2 || r[0] == nil || *r[0] != "1" || r[1] == nil {
			return fmt.Errorf("dispatch_completion of event %d answered %v", d.Event, r)
		}
		switch *r[1] {
		case "dispatched":
			l.dispatched.Add(1)
		case "filtered":
			l.filtered.Add(1)
		default:
			l.alreadyDone.Add(1)
		}
	}
	return nil
}
