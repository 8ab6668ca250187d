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
package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/keyless"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Target yields the scanner to call. The supervisor implements it: the
// scanner behind it changes when a plugin restarts, and is unavailable
// while it restarts.
type Target interface {
	Current() (scannerapi.Scanner, scannerapi.Info, error)
}

// Lease is one call's hold on a scanner instance (see Acquirer).
type Lease struct {
	Scanner scannerapi.Scanner
	Info    scannerapi.Info
	// Host is the instance's own Host; nil means the runner's.
	Host scannerapi.Host
	// Release ends the lease once the call returned; nil is allowed.
	Release func()
	// Outcome, when set, hears after each ScanPartition call whether it
	// ended at its own call deadline (the scanner did not answer in
	// call_timeout), so the instance's owner can restart a plugin that
	// hangs in its calls while still answering health checks.
	Outcome func(timedOut bool)
}

// Acquirer is a Target that hands out the scanner per call instead of per
// cycle. The host's supervisors implement it, so that a hot swap switches
// between two partition calls of a cycle and the old plugin only has to
// finish the calls it already has.
type Acquirer interface {
	Target
	Acquire() (Lease, error)
}

// Recorder receives metrics (host/metrics implements it).
type Recorder interface {
	Cycle(scanner string, d time.Duration)
	Items(scanner string, processed, skipped int64)
	Errors(scanner string, class scannerapi.ErrorClass, code string, n int64)
	Partitions(scanner, outcome string, n int)
	Backlog(scanner string, v int64)
	Lag(scanner string, d time.Duration)
	RPC(scanner, method string, d time.Duration)
}

// Defaults of Config and Tuning.
const (
	DefaultConcurrency  = 8
	DefaultCallTimeout  = 5 * time.Second
	DefaultMaxFollowUps = 8
	// MaxNotes bounds the notes kept from one scan call.
	MaxNotes = 64
	// DefaultBatch is the batch of a scanner whose Info names none.
	DefaultBatch = 50
)

// Bounds of the configuration's scheduler and scanner settings.
const (
	// MinInterval is the shortest scanner interval; FlowFabric clamps to
	// the same floor, so a typo cannot turn a scanner into a busy loop.
	MinInterval = 100 * time.Millisecond
	// MaxConcurrency bounds Concurrency (scheduler.concurrency).
	MaxConcurrency = 1024
	// MaxBatch bounds a scanner's batch (scanners.<name>.batch).
	MaxBatch = 10000
)

// Config tunes one scanner's runner and names its collaborators. Zero
// fields take the defaults above.
type Config struct {
	// ActionBudget bounds the items the scanner acts on per window; past
	// it the runner pauses itself (budget.go). Zero: none.
	ActionBudget ActionBudget
	// Name is the scanner name (metric label, request field).
	Name string
	// Client is the host's Valkey (nil: it serves Postgres alone).
	Client valkey.Client
	// Target is the scanner the runner dispatches to.
	Target Target
	// Host is passed to ScanPartition (a linked scanner uses it; a plugin
	// client ignores it and calls back through the broker). Nil: none.
	Host scannerapi.Host
	// Recorder receives the runner's metrics (nil: none).
	Recorder Recorder
	// Logger receives the runner's logs (nil: none).
	Logger hclog.Logger
	// Interval overrides Info.DefaultInterval when non-zero.
	Interval time.Duration
	// Batch overrides Info.DefaultBatch when non-zero.
	Batch int
	// Partitions are the deployment's partition counts.
	Partitions keys.PartitionConfig
	// Lanes expand "{lane}" sources.
	Lanes []string
	// Owns, when set, says which partitions this host may scan now (the
	// partitions shared among hosts); a cycle over all partitions skips
	// the others. Nil: every partition.
	Owns func(keys.Partition) bool
	// LanesFunc, when set, is asked for the lanes at every cycle instead
	// (the host refreshes them from ff:idx:lanes as producers add lanes).
	LanesFunc func() []string
	// Concurrency bounds concurrent ScanPartition calls.
	Concurrency int
	// CallTimeout is the deadline of one plugin call.
	CallTimeout time.Duration
	// CallParent is the parent of every plugin call's context (its values
	// reach the calls). Calls do not derive from Start's context, so that
	// stopping dispatch does not abort scans in flight: Stop cancels them
	// at its own deadline. Nil means context.Background().
	CallParent context.Context
	// MaxFollowUps bounds the prompt rescans of partitions that report
	// More within one cycle, so a scanner that always says More cannot
	// starve the sleep.
	MaxFollowUps int
	// NoJitter starts the first cycle at once instead of after a random
	// delay within the interval (tests, scan-once).
	NoJitter bool
	// Clock is the time source (the system clock).
	Clock clock.Clock
	// Census, when set, says which lane keys exist, so that lane-scoped
	// sources read only those (nil: every lane's key is read).
	Census Census
	// Epoch is the host's store epoch, shared by its runners (nil: not
	// tracked). The runner bumps it on transport failures and topology
	// changes and sends it with every scan request.
	Epoch *StoreEpoch
	// Postgres is the host's FlowFabric Postgres database, which a scanner
	// with Postgres sources reads (nil: none; such a scanner's cycles
	// fail, saying so).
	Postgres *pgxpool.Pool
	// PostgresFilter is the host's namespace / instance-tag filter, which
	// the candidate reads apply (postgres.namespace, postgres.instance_tag).
	PostgresFilter scannerapi.Filter
	// Changes, when set, is told of every change of the status (a cycle
	// ended, a cycle could not run).
	Changes *service.Changes
	// Events is the host's new-key event feed: with it on, partitions read
	// empty are skipped until one of their source keys is created, for at
	// most QuietFor (quiet.go). Nil: every partition is read at every
	// interval.
	Events Events
	// QuietFor is the safety interval of quiet partitions (default
	// DefaultQuietFor).
	QuietFor time.Duration
	// Nodes tells which master serves a partition, so that each node's
	// calls are dispatched apart (dispatch.go); one map serves a host's
	// runners. Nil: the runner makes its own.
	Nodes *NodeMap
	// PollOnly turns due-time wake-ups off: partitions are visited at
	// every interval's sweep and only then, and due-ordered sources are
	// read by score, as before wake-ups existed (the benchmarks run both
	// side by side). See wake.go.
	PollOnly bool
}

func (c Config) withDefaults() Config {
	service.Default(&c.MaxFollowUps, DefaultMaxFollowUps)
	service.Default(&c.QuietFor, DefaultQuietFor)
	if c.CallParent == nil {
		c.CallParent = context.Background()
	}
	c.Clock = clock.Or(c.Clock)
	if c.Recorder == nil {
		c.Recorder = nopRecorder{}
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	t := c.tuning().withDefaults()
	c.Concurrency, c.CallTimeout = t.Concurrency, t.CallTimeout
	return c
}

func (c Config) tuning() Tuning {
	return Tuning{Interval: c.Interval, Batch: c.Batch, Concurrency: c.Concurrency, CallTimeout: c.CallTimeout, PollOnly: c.PollOnly}
}

// Tuning is the part of Config that can change while the runner runs
// (a configuration reload). Interval, Batch and PollOnly apply from the
// next sweep, Concurrency and CallTimeout from the next call. Zero
// Interval and Batch are the scanner's own defaults (its Info); zero
// Concurrency and CallTimeout DefaultConcurrency and DefaultCallTimeout.
type Tuning struct {
	Interval    time.Duration
	Batch       int
	Concurrency int
	CallTimeout time.Duration
	PollOnly    bool
}

func (t Tuning) withDefaults() Tuning {
	service.Default(&t.Concurrency, DefaultConcurrency)
	service.Default(&t.CallTimeout, DefaultCallTimeout)
	return t
}

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
	tunMu  sync.Mutex
	tun    Tuning
	retune chan struct{} // Retune wakes the sweep's sleep
	client valkey.Client
	target Target
	host   scannerapi.Host
	rec    Recorder
	log    hclog.Logger

	cycle uint64 // cycles started; owned by the sweep or Cycle goroutine

	warnMu     sync.Mutex
	warnedKeys map[string]bool // wrong-type source keys already logged

	curMu   sync.Mutex
	cursors map[string]uint64 // per concrete key: rank offset or SSCAN cursor

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
	busyMu  sync.Mutex
	busy    map[uint16]bool

	stMu   sync.Mutex
	status Status

	// TestSignals fire at the runner's events for tests that Init them.
	TestSignals TestSignals
}

// TestSignals are a Runner's events.
type TestSignals struct {
	// Straggling: a dispatch waits for the calls of this many nodes while
	// the others' are done, on a straggler timer (dispatch.go).
	Straggling testsignal.Signal[int]
}

// Status is the runner's view for /v1/status.
type Status struct {
	Cycle        uint64
	LastCycleAt  time.Time
	LastDuration time.Duration
	Processed    int64
	Skipped      int64
	Errors       int64
	Backlog      int64
	BacklogKnown bool
	LastError    string
	// Failed counts partitions whose fetch or call failed, over all
	// cycles.
	Failed int64
	// CycleErrors counts cycles that could not run at all (scanner
	// unavailable, no server time).
	CycleErrors int64
	// InFlight is the ScanPartition calls running now.
	InFlight int
	// Wakeups counts the sweeps of partitions woken at their due time
	// between two interval sweeps; WokenPartitions the partitions they
	// read; LastWakeAt when the latest began.
	Wakeups         uint64
	WokenPartitions int64
	LastWakeAt      time.Time
	// Scheduled is the partitions with a wake-up scheduled now.
	Scheduled int
	// Quiet is the partitions read empty that the sweeps skip until one
	// of their keys is created (new-key events).
	Quiet int
	// Late counts the calls that ended after their dispatch stopped
	// waiting for them (a node whose calls stalled; dispatch.go).
	Late int64
}

// New returns a runner over cfg.Target; Start runs it.
func New(cfg Config) *Runner {
	cfg = cfg.withDefaults()
	r := &Runner{
		cfg: cfg, client: cfg.Client, target: cfg.Target, host: cfg.Host, rec: cfg.Recorder, log: cfg.Logger, clk: cfg.Clock,
		cursors: map[string]uint64{},
		tun:     cfg.tuning(),
		retune:  make(chan struct{}, 1),
	}
	r.calls, r.abortCalls = context.WithCancel(cfg.CallParent)
	r.budget.cfg = cfg.ActionBudget
	r.nodes = cfg.Nodes
	if r.nodes == nil {
		r.nodes = NewNodeMap(cfg.Client, cfg.Clock, cfg.Epoch)
	}
	return r
}

// Retune changes the runner's tuning while it runs. A sleeping runner
// wakes to re-plan its next cycle with the new interval.
func (r *Runner) Retune(t Tuning) {
	t = t.withDefaults()
	r.tunMu.Lock()
	r.tun = t
	r.tunMu.Unlock()
	r.replan()
}

// Tuning returns the current tuning.
func (r *Runner) Tuning() Tuning {
	r.tunMu.Lock()
	defer r.tunMu.Unlock()
	return r.tun
}

// Status returns a snapshot of the runner's counters.
func (r *Runner) Status() Status {
	r.stMu.Lock()
	defer r.stMu.Unlock()
	return r.status
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

func (r *Runner) lanes() []string {
	if r.cfg.LanesFunc != nil {
		return r.cfg.LanesFunc()
	}
	return r.cfg.Lanes
}

func (r *Runner) interval(info scannerapi.Info) time.Duration {
	iv := r.Tuning().Interval
	if iv == 0 {
		iv = info.DefaultInterval
	}
	return max(iv, MinInterval)
}

func (r *Runner) batch(info scannerapi.Info) int {
	if b := r.Tuning().Batch; b > 0 {
		return b
	}
	if info.DefaultBatch > 0 {
		return info.DefaultBatch
	}
	return DefaultBatch
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

func (r *Runner) run(ctx context.Context) {
	if ev := r.cfg.Events; ev != nil {
		stop := ev.Watch(r.onEvent)
		r.watching.Store(true)
		defer func() {
			r.watching.Store(false)
			stop()
		}()
	}
	jittered := r.cfg.NoJitter
	for ctx.Err() == nil {
		if !r.waitWhilePaused(ctx) {
			return
		}
		_, info, err := r.target.Current()
		if err != nil {
			r.log.Debug("scanner unavailable, waiting", "error", err)
			r.sleep(ctx, unavailablePoll)
			continue
		}
		if !jittered {
			// Once, when the scanner first becomes available: plugins of
			// one host come up at about the same moment.
			jittered = true
			if !r.sleep(ctx, rand.N(r.interval(info))) {
				return
			}
		}
		start := r.clk.Now()
		sum, err := r.Cycle(ctx, CycleOptions{})
		if err != nil && ctx.Err() == nil {
			r.log.Warn("scan cycle failed", "error", err)
		} else if sum.Processed > 0 || sum.ErrorTotal() > 0 {
			r.log.Info("scan cycle complete", "cycle", sum.Cycle, "scanned", sum.Scanned, "processed", sum.Processed, "errors", sum.ErrorTotal(), "elapsed", sum.Duration)
		} else {
			r.log.Trace("scan cycle complete", "cycle", sum.Cycle, "elapsed", sum.Duration)
		}
		if !r.sleepUntilNext(ctx, start) {
			return
		}
	}
}

// sleepUntilNext waits until the next cycle is due, one interval after
// start (re-planned when Retune changes the interval meanwhile), and
// meanwhile wakes the partitions whose due time comes first (wake.go).
func (r *Runner) sleepUntilNext(ctx context.Context, start time.Time) bool {
	for {
		iv := r.interval(r.currentInfo())
		now := r.clk.Now()
		next := start.Add(iv)
		if !now.Before(next) {
			return ctx.Err() == nil
		}
		at, waking := r.nextWake(next)
		t := r.clk.NewTimer(at.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
			if !waking {
				return true
			}
			r.wake(ctx)
		case <-r.retune:
			t.Stop()
		}
	}
}

// currentInfo is the scanner's Info for planning, or the zero Info when it
// is unavailable (the interval then falls back to the configured one).
func (r *Runner) currentInfo() scannerapi.Info {
	_, info, err := r.target.Current()
	if err != nil {
		return scannerapi.Info{}
	}
	return info
}

// unavailablePoll is how often the sweep looks again while the scanner is not
// running (starting, restarting): a mutex check, so it can be short and
// the first cycle follows the plugin's start closely.
const unavailablePoll = 200 * time.Millisecond

func (r *Runner) sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, r.clk, d)
}

func (r *Runner) since(t time.Time) time.Duration { return clock.Since(r.clk, t) }

// CycleOptions narrow a cycle (scan-once).
type CycleOptions struct {
	// Partitions limits the cycle to these indexes; nil means all.
	Partitions []uint16
	// DryRun is passed to the scanner in every request.
	DryRun bool
}

// ErrorKey identifies an error count.
type ErrorKey struct {
	Class scannerapi.ErrorClass
	Code  string
}

// Summary is what one cycle did.
type Summary struct {
	Cycle      uint64
	NowMs      int64
	Partitions int // partitions visited
	Scanned    int // ScanPartition calls that succeeded
	Empty      int // partitions skipped with nothing to do
	// Quiet counts partitions not read: read empty before, and none of
	// their keys created since (new-key events).
	Quiet int
	// Busy counts partitions not read because a call of theirs from an
	// earlier sweep is still in flight; Detached the calls this sweep's
	// dispatch left in flight (dispatch.go).
	Busy, Detached int
	Failed         int // partitions whose call failed
	// Deferred counts partitions left for the next cycle because a hot
	// swap switched to a scanner whose sources or family differ from
	// those the cycle fetched with.
	Deferred int
	// Paused counts partitions not called because the scanner paused
	// itself at its action budget (their items stay in the store).
	Paused       int
	FollowUps    int // prompt rescans of partitions that said More
	Processed    int64
	Skipped      int64
	Errors       map[ErrorKey]int64
	Backlog      int64
	BacklogKnown bool // every partition was sampled
	Lag          time.Duration
	Duration     time.Duration
	Notes        []string // scanners' notes, prefixed with the partition
}

// ErrorTotal sums all error counts.
func (s *Summary) ErrorTotal() int64 {
	var n int64
	for _, v := range s.Errors {
		n += v
	}
	return n
}

func (s *Summary) addErr(class scannerapi.ErrorClass, code string, n int64) {
	if n > 0 {
		s.Errors[ErrorKey{class, code}] += n
	}
}

// partState is one partition's fetch result.
type partState struct {
	p         keys.Partition
	cands     []scannerapi.Candidate
	next      map[string]uint64 // cursors to commit once the partition is done
	backlog   int64
	sampled   bool // every host-side backlog read succeeded
	oldestDue float64
	hasDue    bool
	// wakeMs is when the first entry the read saw that is not due yet
	// falls due (the store's clock, ms), with hasWake (wake.go).
	wakeMs  int64
	hasWake bool
	// srcKeys are the source keys the fetch looked at, emptyKeys those
	// it proved empty; censused: the lane census chose the lane keys
	// (quiet.go).
	srcKeys, emptyKeys int
	censused           bool
	// What the scan reported: due entries it knows are settled (left out
	// of the backlog) and, with hasLag, the partition's lag.
	settled    int64
	lag        time.Duration
	hasLag     bool
	fetchError bool
	// Keys of plugin-backlog sources, and how many of them the fetch
	// proved absent: with all absent the partition's backlog is 0 and
	// the plugin is not asked.
	pluginKeys, pluginAbsent int
}

// Cycle runs one sweep and records it in metrics and status. A failure to
// read the clock fails the cycle; failures of single partitions are counted
// in the summary and do not stop the others.
func (r *Runner) Cycle(ctx context.Context, opts CycleOptions) (Summary, error) {
	start := r.clk.Now()
	r.cycle++
	sum := Summary{Cycle: r.cycle, Errors: map[ErrorKey]int64{}}
	scanner, info, err := r.target.Current()
	if err != nil {
		r.cycleError()
		return sum, fmt.Errorf("scanner %s unavailable: %w", r.cfg.Name, err)
	}
	parts, err := r.partitions(info, opts.Partitions)
	if err != nil {
		r.cycleError()
		return sum, err
	}
	if opts.Partitions == nil {
		parts = r.owned(parts)
	}
	batch := r.batch(info)
	lanes := r.lanes()

	sw := &sweep{r: r, scanner: scanner, info: info, lanes: lanes, batch: batch, dryRun: opts.DryRun, sum: &sum,
		hasLaneSource: hasLaneSource(info), rank: r.wakesFor(info)}
	if !opts.DryRun {
		sw.canary = r.canaryNow()
		sw.startCanary()
	}
	var qr *quietRead
	if opts.Partitions == nil && !opts.DryRun && r.watching.Load() {
		parts, qr = sw.skipQuiet(parts)
	}
	parts = r.skipBusy(parts, &sum)
	sum.Partitions = len(parts)
	if !sw.postgres() {
		if r.client == nil {
			r.finish(&sum, start, false)
			r.cycleError()
			return sum, errNoValkey
		}
		r.cfg.Epoch.ObserveNodes(keyless.Nodes(r.client))
	}
	nowMs, err := sw.now(ctx)
	if err != nil {
		r.noteErr(&sum, classify(err), "time", 1)
		r.finish(&sum, start, false)
		r.cycleError()
		return sum, fmt.Errorf("read the store's clock: %w", err)
	}
	sum.NowMs = nowMs
	res := sw.readAndScan(ctx, parts, nowMs, false)
	states := res.states
	sw.learnQuiet(qr, states)

	// Backlog and lag are only meaningful when every partition of the
	// family was read: a partial sum would under-report (P8).
	complete := opts.Partitions == nil && res.complete
	for _, st := range states {
		if !st.sampled {
			complete = false
		}
	}
	more, pluginBacklog := res.more, res.backlog
	// The lag is the longest a due entry still to be handled has waited:
	// the oldest candidate, unless the scan said which are settled.
	var lag time.Duration
	for _, st := range states {
		switch {
		case st.hasLag:
			lag = max(lag, st.lag)
		case st.hasDue:
			lag = max(lag, time.Duration((float64(nowMs)-st.oldestDue)*float64(time.Millisecond)))
		}
	}
	sum.Lag = lag
	if opts.DryRun {
		// A dry run changes nothing, so a rescan would see the same batch.
		more = nil
	}
	if !sw.backlog(ctx, states, pluginBacklog) {
		complete = false
	}
	sum.BacklogKnown = complete && hasBacklog(info)

	sw.followUps(ctx, more)
	sw.endCanary()

	r.finish(&sum, start, opts.Partitions == nil)
	if sum.BacklogKnown {
		r.rec.Backlog(r.cfg.Name, sum.Backlog)
	}
	if complete && hasDueSource(info) {
		r.rec.Lag(r.cfg.Name, sum.Lag)
	}
	return sum, nil
}

// followUps refetches and scans again, now rather than an interval
// later, the partitions that said More, in at most MaxFollowUps passes.
func (sw *sweep) followUps(ctx context.Context, more []keys.Partition) {
	r := sw.r
	for pass := 0; pass < r.cfg.MaxFollowUps && len(more) > 0 && ctx.Err() == nil; pass++ {
		now2, err := sw.now(ctx)
		if err != nil {
			r.noteErr(sw.sum, classify(err), "time", 1)
			break
		}
		sub := sw.readAndScan(ctx, r.owned(more), now2, true)
		sw.sum.FollowUps += len(sub.states)
		more = sub.more
	}
}

// noteErr counts a host-side failure; one that got no reply from the
// store starts a new store epoch.
func (r *Runner) noteErr(sum *Summary, class scannerapi.ErrorClass, code string, n int64) {
	if class == scannerapi.ErrTransport {
		r.cfg.Epoch.Bump()
	}
	sum.addErr(class, code, n)
}

// owned keeps the partitions this host may scan now.
func (r *Runner) owned(parts []keys.Partition) []keys.Partition {
	if r.cfg.Owns == nil {
		return parts
	}
	out := parts[:0:0]
	for _, p := range parts {
		if r.cfg.Owns(p) {
			out = append(out, p)
		}
	}
	return out
}

// scheduled is how many partitions have a wake-up, the schedule of an
// epoch past dropped first (a failure in the sweep just ended may have
// moved the epoch).
func (r *Runner) scheduled() int {
	r.checkWakeEpoch()
	return r.wakeups.Len()
}

// finish records the cycle's metrics and status.
func (r *Runner) finish(sum *Summary, start time.Time, fullCycle bool) {
	sum.Duration = r.since(start)
	if fullCycle {
		r.rec.Cycle(r.cfg.Name, sum.Duration)
	}
	r.recordCounts(sum)
	r.stMu.Lock()
	defer r.stMu.Unlock()
	r.status.Cycle = sum.Cycle
	r.status.LastCycleAt = start
	r.status.LastDuration = sum.Duration
	r.countLocked(sum)
	if sum.BacklogKnown {
		r.status.Backlog, r.status.BacklogKnown = sum.Backlog, true
	}
	r.status.Scheduled = r.scheduled()
	r.status.Quiet = r.quietCount()
	r.cfg.Changes.Notify()
}

// finishWake records a wake-up sweep's metrics and status: its items,
// errors and partitions count as a cycle's, its duration does not.
func (r *Runner) finishWake(sum *Summary, start time.Time) {
	sum.Duration = r.since(start)
	r.recordCounts(sum)
	r.stMu.Lock()
	r.status.Wakeups++
	r.status.WokenPartitions += int64(sum.Partitions)
	r.status.LastWakeAt = start
	r.countLocked(sum)
	r.status.Scheduled = r.scheduled()
	r.stMu.Unlock()
	r.cfg.Changes.Notify()
}

// recordCounts records a sweep's items, errors and partitions.
func (r *Runner) recordCounts(sum *Summary) {
	r.rec.Items(r.cfg.Name, sum.Processed, sum.Skipped)
	for k, n := range sum.Errors {
		r.rec.Errors(r.cfg.Name, k.Class, k.Code, n)
	}
	r.rec.Partitions(r.cfg.Name, "scanned", sum.Scanned)
	r.rec.Partitions(r.cfg.Name, "empty", sum.Empty)
	r.rec.Partitions(r.cfg.Name, "failed", sum.Failed)
}

// countLocked adds a sweep's counts to the status; stMu is held.
func (r *Runner) countLocked(sum *Summary) {
	r.status.Processed += sum.Processed
	r.status.Skipped += sum.Skipped
	r.status.Errors += sum.ErrorTotal()
	r.status.Failed += int64(sum.Failed)
}

// markBusy notes that a call of partition p is in flight (or about to
// be), or no longer.
func (r *Runner) markBusy(p uint16, busy bool) {
	r.busyMu.Lock()
	defer r.busyMu.Unlock()
	if !busy {
		delete(r.busy, p)
		return
	}
	if r.busy == nil {
		r.busy = map[uint16]bool{}
	}
	r.busy[p] = true
}

// skipBusy leaves out (and counts) the partitions whose call from an
// earlier sweep is still in flight: reading them again would hand their
// entries to a second call at once.
func (r *Runner) skipBusy(parts []keys.Partition, sum *Summary) []keys.Partition {
	r.busyMu.Lock()
	defer r.busyMu.Unlock()
	if len(r.busy) == 0 {
		return parts
	}
	kept := parts[:0:0]
	for _, p := range parts {
		if r.busy[p.Index] {
			sum.Busy++
			continue
		}
		kept = append(kept, p)
	}
	return kept
}

// replan wakes the sweep's sleep to plan it again (a retune, a wake-up
// due at once).
func (r *Runner) replan() {
	select {
	case r.retune <- struct{}{}:
	default:
	}
}

func (r *Runner) cycleError() {
	r.stMu.Lock()
	r.status.CycleErrors++
	r.stMu.Unlock()
	r.cfg.Changes.Notify()
}

// inFlight counts a call starting (+1) or ending (-1).
func (r *Runner) inFlight(delta int) {
	r.stMu.Lock()
	r.status.InFlight += delta
	r.stMu.Unlock()
	r.cfg.Changes.Notify()
}

func (r *Runner) setLastError(s string) {
	r.stMu.Lock()
	r.status.LastError = s
	r.stMu.Unlock()
	r.cfg.Changes.Notify()
}

type nopRecorder struct{}

func (nopRecorder) Cycle(string, time.Duration)                         {}
func (nopRecorder) Items(string, int64, int64)                          {}
func (nopRecorder) Errors(string, scannerapi.ErrorClass, string, int64) {}
func (nopRecorder) Partitions(string, string, int)                      {}
func (nopRecorder) Backlog(string, int64)                               {}
func (nopRecorder) Lag(string, time.Duration)                           {}
func (nopRecorder) RPC(string, string, time.Duration)                   {}
