// Package completions is the host's completion listener: the push path of
// DAG promotion (scanners.md 11). The library PUBLISHes a JSON message on
// ff:dag:completions whenever a flow member reaches a terminal state; the
// listener receives it and resolves the member's outgoing edges at once
// through sdk/depresolve's Cascade (the same mechanism the
// dependency_reconciler plugin uses for the pushes that get lost), so a
// child is released, or skipped, milliseconds after its parent finished
// instead of a reconciler interval later.
//
// # How it runs
//
//   - One receiver goroutine holds a dedicated connection (taken from the
//     host's valkey-go client with Dedicate, named "ffscan-completions" in
//     CLIENT LIST) subscribed to the channel. When the connection breaks
//     (server restart, CLIENT KILL, network) it reconnects and
//     resubscribes with exponential backoff (100 ms doubling to 5 s, reset
//     once subscribed). Messages published while it is not subscribed are
//     lost; the dependency_reconciler resolves those edges later.
//   - Every message is parsed strictly: a JSON object whose execution_id is
//     a canonical execution id (keys.ParseExecutionID) and whose flow_id is
//     a flow uuid; with the partition counts known, the execution must live
//     in its flow's partition. Anything else is counted as malformed and
//     dropped.
//   - Parsed completions go through a bounded queue (Config.QueueSize) to
//     Config.Concurrency workers. A full queue makes the receiver wait
//     (backpressure on the connection, as FlowFabric does) rather than
//     drop. Each dispatch is one Cascade with its own deadline; a panic in
//     it is recovered and counted, and the worker goes on.
//   - Stop stops receiving, lets the workers drain the queue until its
//     context ends, then cancels what is left and waits for the workers.
//
// Differences from FlowFabric's dispatch loop (11.2), deliberate: bounded
// concurrency instead of one unbounded, untracked task per message;
// dispatches are tracked by Stop; the loop is supervised (panics
// recovered, receive loop restarted); backoff instead of a fixed 1 s retry;
// a stricter parse (partition check); the cascade itself follows
// depresolve (server clock, status-classified replies, level-by-level
// batching).
//
// Metrics go through the Metrics interface; NewPrometheusMetrics returns
// an implementation whose collectors the host registers on its registry.
package completions

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/depexec"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Defaults of Config.
const (
	DefaultConcurrency     = 16
	DefaultQueueSize       = 1024
	DefaultDispatchTimeout = 30 * time.Second
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = 5 * time.Second
)

// MaxConcurrency bounds Concurrency (completions.concurrency): each
// cascade in flight holds a batch of the library's calls.
const MaxConcurrency = 1024

// malformedWarnEvery is how often a malformed message is logged at warn
// level; the others between go to debug.
const malformedWarnEvery = 10 * time.Second

// ConnectionName is the name the subscriber connection gives itself
// (CLIENT SETNAME), so operators can find it in CLIENT LIST.
const ConnectionName = "ffscan-completions"

// Config configures the listener.
type Config struct {
	// Enabled turns the listener on. When false, Start does nothing and
	// dependency resolution relies on the dependency_reconciler alone (run
	// it with a short interval then).
	Enabled bool
	// Concurrency bounds the cascades in flight. Default 16.
	Concurrency int
	// QueueSize bounds the parsed messages waiting for a worker. Default
	// 1024.
	QueueSize int
	// DispatchTimeout bounds one cascade. Default 30 s.
	DispatchTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts (MaxBackoff at least MinBackoff). Defaults 100 ms and 5 s.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Clock is the time source of the backoff, the dispatch timings and
	// the log throttle (the system clock).
	Clock clock.Clock

	// Library runs the cascades (its client is the host's) and its client
	// gives the subscription its dedicated connection. Required.
	Library *lua.Library
	// Logger receives the listener's logs. Default: none.
	Logger hclog.Logger
	// Metrics receives counters and latencies. Default: none.
	Metrics Metrics
	// Partitions, when set, lets the parser check that a message's
	// execution lives in its flow's partition.
	Partitions keys.PartitionConfig
	// Resolver tunes the cascade (depth limit, batch bound, logger: the
	// listener's by default).
	Resolver depresolve.Options
	// Owns, when set, says which flow partitions this host handles (hosts
	// sharing a keyspace): a completion of another host's partition is
	// left to that host (counted "elsewhere"). Nil: every partition.
	Owns func(keys.Partition) bool
	// Changes, when set, is told of every change of the Stats.
	Changes *service.Changes
}

func (c Config) withDefaults() Config {
	service.Default(&c.Concurrency, DefaultConcurrency)
	service.Default(&c.QueueSize, DefaultQueueSize)
	service.Default(&c.DispatchTimeout, DefaultDispatchTimeout)
	service.Default(&c.MinBackoff, DefaultMinBackoff)
	service.Default(&c.MaxBackoff, DefaultMaxBackoff)
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Metrics == nil {
		c.Metrics = nopMetrics{}
	}
	if c.Resolver.Logger == nil {
		c.Resolver.Logger = c.Logger
	}
	return c
}

// Message outcomes (the "outcome" label of the messages counter).
const (
	OutcomeAccepted  = "accepted"  // parsed and queued for a dispatch
	OutcomeMalformed = "malformed" // not a valid completion: dropped
	OutcomeDropped   = "dropped"   // valid, but the listener was stopping
	OutcomeElsewhere = "elsewhere" // valid, for a partition another host owns
)

// Error classes specific to the listener, on top of depresolve's.
const (
	// ErrPanic: a dispatch panicked (recovered).
	ErrPanic scannerapi.ErrorClass = "panic"
)

// Stats is a snapshot of the listener's counters since New.
type Stats struct {
	Messages   int64 // messages received on the channel
	Accepted   int64
	Malformed  int64
	Dropped    int64
	Dispatched int64 // cascades finished (with or without errors)
	Failed     int64 // cascades that returned an error (a batch could not run)
	Panics     int64
	Resolved   int64 // edges resolved by all cascades
	Reconnects int64 // subscriptions after the first
	Subscribed bool
}

// Listener is the completion listener. Create it with New, then Start and
// Stop it once.
type Listener struct {
	cfg     Config
	clk     clock.Clock
	client  valkey.Client
	log     hclog.Logger
	met     Metrics
	parts   keys.PartitionConfig
	owns    func(keys.Partition) bool
	changes *service.Changes
	cascade func(context.Context, depresolve.Completion) (depresolve.Result, error)

	queue chan depresolve.Completion

	// loop runs the receiver, then drains the queue through the workers.
	loop service.Loop
	// abort cancels the dispatches (their parent, dispatch, does not end
	// with Start's context: Stop cuts them at its deadline). Set by the
	// loop; nil before.
	mu       sync.Mutex
	abort    context.CancelFunc
	dispatch context.Context
	stopErr  error // a Stop's cut drain, returned by every later Stop
	workers  sync.WaitGroup

	subscribed atomic.Bool
	subs       atomic.Int64 // successful subscriptions
	lastWarn   atomic.Int64 // unix nanos of the last malformed-message warning

	messages, accepted, malformed, dropped atomic.Int64
	dispatched, failed, panics, resolved   atomic.Int64
}

// New returns a listener that runs cascades through cfg.Library and
// subscribes on a dedicated connection of its client.
func New(cfg Config) *Listener {
	cfg = cfg.withDefaults()
	l := &Listener{
		cfg:     cfg,
		clk:     cfg.Clock,
		client:  cfg.Library.Client(),
		log:     cfg.Logger,
		met:     cfg.Metrics,
		parts:   cfg.Partitions,
		owns:    cfg.Owns,
		changes: cfg.Changes,
	}
	r := depresolve.New(depexec.LibraryExecutor(cfg.Library), cfg.Resolver)
	l.cascade = r.Cascade
	l.queue = make(chan depresolve.Completion, l.cfg.QueueSize)
	return l
}

// Enabled reports whether Start will run the listener.
func (l *Listener) Enabled() bool { return l.cfg.Enabled }

// Subscribed reports whether the subscription is live right now.
func (l *Listener) Subscribed() bool { return l.subscribed.Load() }

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	subs := l.subs.Load()
	return Stats{
		Messages: l.messages.Load(), Accepted: l.accepted.Load(), Malformed: l.malformed.Load(),
		Dropped: l.dropped.Load(), Dispatched: l.dispatched.Load(), Failed: l.failed.Load(),
		Panics: l.panics.Load(), Resolved: l.resolved.Load(), Reconnects: max(0, subs-1),
		Subscribed: l.subscribed.Load(),
	}
}

// Start starts the receiver and the workers and returns at once. The
// listener runs until Stop (or until ctx ends, which stops receiving; call
// Stop anyway to drain and wait). It does nothing when the listener is
// disabled; a second Start returns service.ErrStarted.
func (l *Listener) Start(ctx context.Context) error {
	if !l.cfg.Enabled {
		l.log.Info("completion listener disabled; dependency_reconciler alone resolves dependencies")
		return nil
	}
	// The dispatches outlive ctx (Stop cuts them at its deadline).
	dispatch, abort := context.WithCancel(context.WithoutCancel(ctx))
	err := l.loop.Start(ctx, func(ctx context.Context) {
		l.mu.Lock()
		l.dispatch, l.abort = dispatch, abort
		l.mu.Unlock()
		l.listen(ctx)
	})
	if err != nil {
		abort()
		return err
	}
	l.log.Info("completion listener started", "channel", keys.DagCompletionsChannel,
		"concurrency", l.cfg.Concurrency, "queue", l.cfg.QueueSize)
	return nil
}

// listen receives until ctx ends, then lets the workers drain the queue.
func (l *Listener) listen(ctx context.Context) {
	for range l.cfg.Concurrency {
		l.workers.Add(1)
		go l.work()
	}
	// The receiver returns promptly once ctx ends: its blocking calls (the
	// subscription, a send on a full queue) all watch it.
	l.receive(ctx)
	// Nothing sends any more: close the queue so the workers drain it and
	// return.
	close(l.queue)
	l.workers.Wait()
	l.cancelDispatches()
	l.log.Info("completion listener stopped", "stats", fmt.Sprintf("%+v", l.Stats()))
}

func (l *Listener) cancelDispatches() {
	l.mu.Lock()
	abort := l.abort
	l.mu.Unlock()
	if abort != nil {
		abort()
	}
}

// Stop stops receiving, lets queued and in-flight dispatches finish until
// ctx ends, then cancels the rest (saying so in the log) and waits for the
// workers to return. It returns ctx's error if the drain was cut short.
// Stop is safe to call more than once and before Start.
func (l *Listener) Stop(ctx context.Context) error {
	if err := l.loop.Stop(ctx); err != nil {
		l.log.Warn("completion listener: cascades still running at the deadline were cancelled; the dependency_reconciler resolves what they left", "error", err)
		l.cancelDispatches()
		<-l.loop.Done()
		l.mu.Lock()
		if l.stopErr == nil {
			l.stopErr = fmt.Errorf("completions: stop: %w", err)
		}
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopErr
}

// receive keeps a subscription alive until ctx ends.
func (l *Listener) receive(ctx context.Context) {
	backoff := l.cfg.MinBackoff
	for ctx.Err() == nil {
		subscribedOnce := l.receiveOnce(ctx)
		l.setSubscribed(false)
		if ctx.Err() != nil {
			return
		}
		if subscribedOnce {
			backoff = l.cfg.MinBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		l.log.Debug("completion subscription lost; reconnecting", "in", wait)
		if !clock.Sleep(ctx, l.clk, wait) {
			return
		}
		backoff = min(2*backoff, l.cfg.MaxBackoff)
	}
}

// receiveOnce subscribes on a fresh dedicated connection and handles
// messages until the connection breaks or ctx ends. It reports whether the
// subscription was confirmed. A panic is recovered (and the connection
// dropped) so the loop goes on.
func (l *Listener) receiveOnce(ctx context.Context) (subscribed bool) {
	var confirmed atomic.Bool
	defer func() {
		if r := recover(); r != nil {
			l.panics.Add(1)
			l.met.Error(ErrPanic, "receive", 1)
			l.log.Error("completion receiver panicked; reconnecting", "panic", r, "stack", string(debug.Stack()))
		}
		subscribed = confirmed.Load()
	}()
	dc, release := l.client.Dedicate()
	defer func() {
		dc.Close()
		release()
	}()
	if err := dc.Do(ctx, dc.B().ClientSetname().ConnectionName(ConnectionName).Build()).Error(); err != nil && ctx.Err() == nil {
		l.log.Debug("CLIENT SETNAME on the subscriber connection failed", "error", err)
	}
	hooked := valkey.WithOnSubscriptionHook(ctx, func(s valkey.PubSubSubscription) {
		if s.Kind == "subscribe" && s.Channel == keys.DagCompletionsChannel {
			confirmed.Store(true)
			l.setSubscribed(true)
		}
	})
	err := dc.Receive(hooked, dc.B().Subscribe().Channel(keys.DagCompletionsChannel).Build(), func(m valkey.PubSubMessage) {
		l.handle(ctx, m)
	})
	if ctx.Err() == nil {
		l.met.Error(scannerapi.ErrTransport, "subscribe", 1)
		l.log.Warn("completion subscription ended; messages published meanwhile are left to the dependency_reconciler", "error", err)
	}
	return
}

func (l *Listener) setSubscribed(up bool) {
	defer l.changes.Notify()
	if up {
		if l.subs.Add(1) > 1 {
			l.met.Reconnect()
			l.log.Info("completion listener resubscribed", "channel", keys.DagCompletionsChannel)
		}
	}
	if l.subscribed.Swap(up) != up {
		l.met.Subscribed(up)
	}
}

// handle parses one message and queues it, waiting while the queue is
// full.
func (l *Listener) handle(ctx context.Context, m valkey.PubSubMessage) {
	defer l.changes.Notify()
	l.messages.Add(1)
	c, err := l.parse(m)
	if err != nil {
		l.malformed.Add(1)
		l.met.Message(OutcomeMalformed)
		l.warnMalformed(m, err)
		return
	}
	if l.owns != nil && !l.owns(c.Execution.Partition()) {
		// Another host owns the flow's partition and handles it; should
		// no host own it at this instant (a hand-over), the dependency
		// reconciler resolves it.
		l.met.Message(OutcomeElsewhere)
		return
	}
	select {
	case l.queue <- c:
		l.accepted.Add(1)
		l.met.Message(OutcomeAccepted)
	case <-ctx.Done():
		l.dropped.Add(1)
		l.met.Message(OutcomeDropped)
	}
}

// parse reads a message strictly (see the package doc).
func (l *Listener) parse(m valkey.PubSubMessage) (depresolve.Completion, error) {
	if m.Channel != keys.DagCompletionsChannel {
		return depresolve.Completion{}, fmt.Errorf("message on channel %q", m.Channel)
	}
	c, err := depresolve.ParseCompletion([]byte(m.Message))
	if err != nil {
		return depresolve.Completion{}, err
	}
	if l.parts != (keys.PartitionConfig{}) {
		if want := l.parts.FlowPartition(c.Flow); c.Execution.Partition() != want {
			return depresolve.Completion{}, fmt.Errorf("execution %s is not in flow %s's partition %s", c.Execution, c.Flow, want)
		}
	}
	return c, nil
}

// warnMalformed logs a malformed message, at most once every
// malformedWarnEvery at warn level (debug otherwise), so a flood of
// garbage does not flood the log.
func (l *Listener) warnMalformed(m valkey.PubSubMessage, err error) {
	payload := m.Message
	if len(payload) > 200 {
		payload = payload[:200] + "..."
	}
	now := l.clk.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last >= int64(malformedWarnEvery) && l.lastWarn.CompareAndSwap(last, now) {
		l.log.Warn("dropping a malformed completion message", "error", err, "payload", payload,
			"malformed_total", l.malformed.Load())
		return
	}
	l.log.Debug("dropping a malformed completion message", "error", err, "payload", payload)
}

// work dispatches queued completions until the queue is closed.
func (l *Listener) work() {
	defer l.workers.Done()
	l.mu.Lock()
	dispatch := l.dispatch
	l.mu.Unlock()
	for c := range l.queue {
		if dispatch.Err() != nil {
			// Stop's deadline passed: leave the rest to the reconciler.
			l.dropped.Add(1)
			l.met.Message(OutcomeDropped)
			l.changes.Notify()
			continue
		}
		l.run(dispatch, c)
	}
}

// run performs one cascade, supervised: a panic is recovered and counted.
func (l *Listener) run(dispatch context.Context, c depresolve.Completion) {
	defer l.changes.Notify() // after the panic's count, if any
	ctx, cancel := context.WithTimeout(dispatch, l.cfg.DispatchTimeout)
	defer cancel()
	start := l.clk.Now()
	defer func() {
		if r := recover(); r != nil {
			l.panics.Add(1)
			l.met.Error(ErrPanic, "dispatch", 1)
			l.log.Error("completion dispatch panicked", "execution_id", c.Execution.String(), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	res, err := l.cascade(ctx, c)
	l.dispatched.Add(1)
	l.resolved.Add(res.Resolved)
	l.met.Dispatched(clock.Since(l.clk, start), res)
	for _, e := range res.Errors {
		l.met.Error(e.Class, e.Code, e.Count)
	}
	if err != nil {
		l.failed.Add(1)
		l.met.Error(scannerapi.ErrTransport, "exec", 1)
		l.log.Warn("completion cascade failed; the dependency_reconciler will retry", "execution_id", c.Execution.String(),
			"flow_id", c.Flow.String(), "error", err)
		return
	}
	if n := res.ErrorTotal(); n > 0 {
		l.log.Warn("completion cascade had errors; the dependency_reconciler will retry them", "execution_id", c.Execution.String(),
			"errors", fmt.Sprintf("%v", res.Errors))
	}
	l.log.Trace("completion dispatched", "execution_id", c.Execution.String(), "resolved", res.Resolved,
		"skipped", res.Skipped, "took", clock.Since(l.clk, start))
}
