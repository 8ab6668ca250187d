// Package scheduler drives one scanner: each interval it reads Valkey's
// clock once, fetches the candidates of every partition of the scanner's
// family in pipelined batches (with the backlog counts in the same
// pipeline), calls ScanPartition only for partitions that have candidates,
// with bounded concurrency and a deadline per call, rescans promptly the
// partitions that report more work, and records what happened.
//
// Compared with FlowFabric's runner (one TIME and one range read per
// partition, sequential, no jitter), an idle sweep of 256 partitions costs
// one TIME and a couple of pipelines instead of 512 round trips, and zero
// plugin calls.
//
// Its files, by job:
//
//   - scheduler.go: the Runner, and its lifecycle as a service.
//   - config.go: what a runner is given (Config, Target, Recorder) and
//     the defaults; tuning.go: what a reload changes while it runs.
//   - loop.go: the sweep's loop, a cycle every interval and the wait
//     between cycles.
//   - cycle.go: one cycle, step by step, and its Summary; the steps are
//     fetch.go (or pgfetch.go, for Postgres sources) with sources.go
//     (an Info checked, each source's keys and read), nodes.go (each
//     master's partitions apart), dispatch.go (the calls), backlog.go;
//     canary.go and budget.go are what a canary and the action budget
//     add to them.
//   - wake.go and wakeups.go: partitions woken between sweeps at their
//     due time; quiet.go: partitions spared while no key of theirs was
//     created; busy.go: partitions with a call still in flight.
//   - status.go: the status and metrics each sweep adds to; epoch.go:
//     the store epoch.
package scheduler

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Runner runs one scanner. Its methods are safe for concurrent use; Run
// and Cycle must not overlap.
type Runner struct {
	loop service.Loop
	// canary is a new version compared with the running one (canary.go).
	canary atomic.Pointer[canaryBox]
	// budget is the action budget and its pause (budget.go).
	budget budget
	// calls is the parent of every call's context: Stop cancels it
	// (abortCalls) when its deadline passes with calls still in flight.
	calls      context.Context
	abortCalls context.CancelFunc

	clk    clock.Clock
	cfg    Config
	tun    liveTuning
	retune chan struct{} // Retune wakes the sweep's sleep
	client valkey.Client
	target Target
	host   scannerapi.Host
	rec    Recorder
	log    hclog.Logger

	cycle uint64 // cycles started; owned by the sweep or Cycle goroutine

	warned  onceKeys // wrong-type source keys already logged
	cursors cursors  // per concrete key: rank offset or SSCAN cursor

	// noExistsCheck is set once multi-key EXISTS was refused (a cluster):
	// the fetch then reads every source key (see skipEmpty).
	noExistsCheck atomic.Bool

	// wakeups are the partitions' next due instants as their reads
	// revealed them (wake.go); lastWake when the last wake-up sweep
	// began (the sweep goroutine's).
	wakeups  Wakeups
	lastWake time.Time

	// quiet are the partitions read empty while the event feed covered
	// the store (quiet.go); watching is set while the sweep receives the
	// feed's events (only then may it skip them).
	quiet    quietSet
	watching atomic.Bool

	// nodes groups the calls by master (dispatch.go); calling counts the
	// goroutines of calls, detached ones included, which Stop waits for;
	// busy are the partitions with a call in flight (or about to be),
	// which no sweep reads until it ended.
	nodes   *NodeMap
	calling sync.WaitGroup
	busy    busySet

	status statusBook

	// TestSignals fire at the runner's events for tests that Init them.
	TestSignals TestSignals
}

// TestSignals are a Runner's events.
type TestSignals struct {
	// Straggling: a dispatch waits for the calls of this many nodes while
	// the others' are done, on a straggler timer (dispatch.go).
	Straggling testsignal.Signal[int]
}

// New returns a runner over cfg.Target; Start runs it.
func New(cfg Config) *Runner {
	cfg = cfg.withDefaults()
	r := &Runner{
		cfg: cfg, client: cfg.Client, target: cfg.Target, host: cfg.Host, rec: cfg.Recorder, log: cfg.Logger, clk: cfg.Clock,
		tun:    liveTuning{t: cfg.tuning()},
		retune: make(chan struct{}, 1),
	}
	r.calls, r.abortCalls = context.WithCancel(cfg.CallParent)
	r.budget.cfg = cfg.ActionBudget
	r.nodes = cfg.Nodes
	if r.nodes == nil {
		r.nodes = NewNodeMap(cfg.Client, cfg.Clock, cfg.Epoch)
	}
	return r
}

// LaneLoad says what the runner's lane-scoped sources cost when every
// lane's key is read: the keys read per second (partitions x lanes x
// lane-scoped sources / interval), and its interval. Zero when the scanner
// has no lane-scoped source or is unavailable.
func (r *Runner) LaneLoad() (keysPerSecond float64, interval time.Duration) {
	_, info, err := r.target.Current()
	if err != nil {
		return 0, 0
	}
	n := 0
	for _, s := range info.Sources {
		if strings.Contains(s.Key, "{lane}") {
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	iv := r.interval(info)
	parts := len(r.cfg.Partitions.Partitions(info.Family))
	return float64(parts*len(r.lanes())*n) / iv.Seconds(), iv
}

// Start sweeps in the background until Stop or until ctx ends (which
// stops dispatching; calls in flight go on until Stop): a random start
// delay within the interval (so scanners started together do not hit
// partition 0 in step), then one cycle, then sleep for the rest of the
// interval (none if the sweep overran). While the plugin is unavailable it
// polls every 200 ms instead. The sweep and Cycle must not overlap.
func (r *Runner) Start(ctx context.Context) error {
	return r.loop.Start(ctx, r.run)
}

// Stop stops dispatching and waits for the calls in flight until ctx
// ends; then it cancels them, waits for the sweep to return and returns
// ctx's error.
func (r *Runner) Stop(ctx context.Context) error {
	err := r.loop.Stop(ctx)
	if err == nil {
		// Calls a dispatch left running detached.
		err = service.Wait(ctx, service.Drained(&r.calling))
	}
	if err != nil {
		r.abortCalls()
		<-r.loop.Done()
		r.calling.Wait()
	}
	return err
}

// Done is closed once the sweep Start began has returned (at once when it
// never started).
func (r *Runner) Done() <-chan struct{} { return r.loop.Done() }
