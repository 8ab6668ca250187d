package client

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/hashicorp/go-hclog"
)

// Worker defaults.
const (
	DefaultLeaseTTL        = 30 * time.Second
	DefaultGrantTTL        = 5 * time.Second
	DefaultRenewGrace      = 5 * time.Second
	DefaultPollInterval    = 100 * time.Millisecond
	DefaultMaxPollInterval = 2 * time.Second
	// MinLeaseTTL keeps the renewal schedule (2/3 of the TTL, then retries)
	// meaningful against round-trip and scheduling jitter.
	MinLeaseTTL = 100 * time.Millisecond
)

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	// WorkerID is the logical worker (e.g. a deployment name); grants are
	// issued to it. Required.
	WorkerID string
	// InstanceID identifies this process. Two live processes must never
	// share one: NewWorker refuses a duplicate. Default: a fresh
	// "<WorkerID>-<host>-<pid>-<random>" so restarts never wait for the
	// previous process's guard to expire.
	InstanceID string
	// Namespace of the worker registry keys. Default: the client's.
	Namespace string
	// Lanes the worker claims from, round-robin. At least one.
	Lanes []string
	// Capabilities the worker advertises and claims with.
	Capabilities []string

	LeaseTTL           time.Duration // default DefaultLeaseTTL
	MaxConcurrentTasks int           // default 1
	GrantTTL           time.Duration // claim grant lifetime; default DefaultGrantTTL
	RenewGrace         time.Duration // lease:current outlives the lease by this; default DefaultRenewGrace
	PollInterval       time.Duration // Run's first idle sleep; default DefaultPollInterval
	MaxPollInterval    time.Duration // Run's longest idle sleep; default DefaultMaxPollInterval
}

// Worker claims and runs executions of its lanes. Create it with
// Client.NewWorker and Close it when done. It is safe for concurrent use.
type Worker struct {
	c       *Client
	opts    WorkerOptions
	ns      string
	capsCSV string
	lanes   map[string]bool
	log     hclog.Logger

	aliveTTL time.Duration
	permits  chan struct{} // one token per free task slot

	laneIdx atomic.Uint64
	// cursors holds one scan cursor per lane. A single cursor shared by
	// all lanes would, with an even lane count and chunk count, only ever
	// show each lane half the partitions.
	cursors map[string]*atomic.Uint64

	mu      sync.Mutex
	tasks   map[*Task]struct{} // live tasks, for Close
	fatal   error              // a runtime duplicate instance, sticky
	closing chan struct{}
	closed  bool

	bg sync.WaitGroup // registry refresher
}

// NewWorker connects a worker: PING, re-check ff:config:partitions against
// the client's layout, refuse a duplicate instance id (SET NX PX on its
// alive key), and advertise lanes and capabilities in the worker registry.
// Invalid options are refused before anything is written.
func (c *Client) NewWorker(ctx context.Context, opts WorkerOptions) (*Worker, error) {
	w, err := c.newWorker(opts)
	if err != nil {
		return nil, err
	}
	if err := c.vk.Do(ctx, c.vk.B().Ping().Build()).Error(); err != nil {
		return nil, fmt.Errorf("worker: PING: %w", err)
	}
	if _, err := resolvePartitions(ctx, c.vk, c.parts, false, c.log); err != nil {
		return nil, fmt.Errorf("worker %s: %w", w.opts.InstanceID, err)
	}
	if err := w.register(ctx); err != nil {
		return nil, err
	}
	w.bg.Add(1)
	go w.refreshLoop()
	w.log.Info("worker connected", "lanes", opts.Lanes, "capabilities", w.capsCSV,
		"lease_ttl", w.opts.LeaseTTL, "max_tasks", w.opts.MaxConcurrentTasks)
	return w, nil
}

// newWorker validates and defaults the options; it does no I/O.
func (c *Client) newWorker(opts WorkerOptions) (*Worker, error) {
	if err := validateText("WorkerID", opts.WorkerID, true, 256); err != nil {
		return nil, err
	}
	if opts.InstanceID == "" {
		host, _ := os.Hostname()
		opts.InstanceID = fmt.Sprintf("%s-%s-%d-%s", opts.WorkerID, host, os.Getpid(), keys.NewUUID().String()[:8])
	}
	if err := validateText("InstanceID", opts.InstanceID, true, 256); err != nil {
		return nil, err
	}
	if len(opts.Lanes) == 0 {
		return nil, invalid("Lanes", "at least one lane is required")
	}
	lanes := map[string]bool{}
	for i, l := range opts.Lanes {
		if err := validateLane(fmt.Sprintf("Lanes[%d]", i), l); err != nil {
			return nil, err
		}
		lanes[l] = true
	}
	csv, err := capabilityCSV("Capabilities", opts.Capabilities)
	if err != nil {
		return nil, err
	}
	if opts.Namespace == "" {
		opts.Namespace = c.ns
	}
	if err := validateText("Namespace", opts.Namespace, true, 256); err != nil {
		return nil, err
	}
	if err := defaultDurations(&opts); err != nil {
		return nil, err
	}
	if opts.MaxConcurrentTasks == 0 {
		opts.MaxConcurrentTasks = 1
	}
	if opts.MaxConcurrentTasks < 0 {
		return nil, invalid("MaxConcurrentTasks", "%d is negative", opts.MaxConcurrentTasks)
	}
	w := &Worker{
		c: c, opts: opts, ns: opts.Namespace, capsCSV: csv, lanes: lanes,
		log:      c.log.Named("worker").With("worker_id", opts.WorkerID, "instance", opts.InstanceID),
		aliveTTL: max(2*opts.LeaseTTL, time.Second),
		permits:  make(chan struct{}, opts.MaxConcurrentTasks),
		tasks:    map[*Task]struct{}{},
		closing:  make(chan struct{}),
	}
	for i := 0; i < opts.MaxConcurrentTasks; i++ {
		w.permits <- struct{}{}
	}
	// Seed the scan cursors per instance so idle workers start on
	// different partition windows (FlowFabric: FNV-1a of the instance id).
	w.cursors = make(map[string]*atomic.Uint64, len(lanes))
	seed := fnv1a64(opts.InstanceID) % uint64(c.parts.Flow)
	for l := range lanes {
		w.cursors[l] = new(atomic.Uint64)
		w.cursors[l].Store(seed)
	}
	return w, nil
}

func defaultDurations(o *WorkerOptions) error {
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"LeaseTTL", &o.LeaseTTL, DefaultLeaseTTL},
		{"GrantTTL", &o.GrantTTL, DefaultGrantTTL},
		{"RenewGrace", &o.RenewGrace, DefaultRenewGrace},
		{"PollInterval", &o.PollInterval, DefaultPollInterval},
		{"MaxPollInterval", &o.MaxPollInterval, DefaultMaxPollInterval},
	} {
		if *d.v < 0 {
			return invalid(d.name, "%v is negative", *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.LeaseTTL < MinLeaseTTL {
		return invalid("LeaseTTL", "%v is below %v", o.LeaseTTL, MinLeaseTTL)
	}
	if o.GrantTTL < time.Millisecond {
		return invalid("GrantTTL", "%v is below 1ms", o.GrantTTL)
	}
	if o.MaxPollInterval < o.PollInterval {
		o.MaxPollInterval = o.PollInterval
	}
	return nil
}

// fnv1a64 is FNV-1a 64-bit of s, FlowFabric's hash for per-worker scan
// jitter.
func fnv1a64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s)) // a hash.Hash never fails to write
	return h.Sum64()
}

// InstanceID is this worker process's instance id.
func (w *Worker) InstanceID() string { return w.opts.InstanceID }

// WorkerID is the logical worker id.
func (w *Worker) WorkerID() string { return w.opts.WorkerID }

// Lanes are the lanes the worker claims from, in round-robin order.
func (w *Worker) Lanes() []string { return append([]string(nil), w.opts.Lanes...) }

// Capabilities is the advertised capability list, sorted and de-duplicated.
func (w *Worker) Capabilities() []string { return splitCSV(w.capsCSV) }

// InFlight is the number of claimed tasks not yet finished or abandoned.
func (w *Worker) InFlight() int { return w.opts.MaxConcurrentTasks - len(w.permits) }

// ErrWorkerClosed is returned by claims on a closed (or closing) worker.
var ErrWorkerClosed = errors.New("worker is closed")

// ErrWorkerAtCapacity is returned by the non-blocking claims when all
// MaxConcurrentTasks permits are held. A grant passed to ClaimFromGrant is
// left untouched.
var ErrWorkerAtCapacity = errors.New("worker at capacity")

// tryAcquire takes a task permit without waiting.
func (w *Worker) tryAcquire() error {
	if err := w.usable(); err != nil {
		return err
	}
	select {
	case <-w.permits:
		return nil
	default:
		return ErrWorkerAtCapacity
	}
}

// acquire waits for a task permit.
func (w *Worker) acquire(ctx context.Context) error {
	select {
	case <-w.permits:
		return nil
	case <-w.closing:
		return ErrWorkerClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Worker) release() { w.permits <- struct{}{} }

// usable says why the worker may not claim, if it may not.
func (w *Worker) usable() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrWorkerClosed
	}
	return w.fatal
}

func (w *Worker) track(t *Task) {
	w.mu.Lock()
	w.tasks[t] = struct{}{}
	w.mu.Unlock()
}

func (w *Worker) untrack(t *Task) {
	w.mu.Lock()
	delete(w.tasks, t)
	w.mu.Unlock()
}

// Close stops claiming, waits until in-flight tasks finish or ctx ends
// (then abandons the rest: their leases lapse and another worker reclaims
// them), and removes the worker from the registry (alive guard,
// capabilities, workers index) so the instance id is free at once.
func (w *Worker) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.closing)
	w.mu.Unlock()

	w.waitIdle(ctx)
	w.mu.Lock()
	left := make([]*Task, 0, len(w.tasks))
	for t := range w.tasks {
		left = append(left, t)
	}
	w.mu.Unlock()
	sort.Slice(left, func(i, j int) bool { return left[i].id.String() < left[j].id.String() })
	for _, t := range left {
		w.log.Warn("abandoning unfinished task at close", "execution_id", t.id)
		t.Abandon()
	}
	w.bg.Wait()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return w.unregister(cctx)
}

// waitIdle polls until every permit is back or ctx ends. Polling keeps
// Close simple: permits are a channel, and tasks finish rarely.
func (w *Worker) waitIdle(ctx context.Context) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for w.InFlight() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
