// Package supervisor keeps one scanner's plugin process alive: launch it,
// ping it on an interval, and when it dies, stops answering, or keeps
// running its calls into their deadline (a plugin can hang in its calls and
// still answer pings), kill what is left and launch it again after an
// exponential backoff (1 s doubling to 60 s). A crash loop (by default 5
// failures within 2 minutes) trips a breaker: the scanner is marked broken
// and retried after a cool-down of a minute (the backoff's cap) instead of
// burning CPU and log lines, and the state is visible in status.
//
// It also hot-swaps the plugin (Swap, Update): the new process is started
// and health-checked while the old one keeps serving; callers hold a Lease
// per call, so the switch falls between two calls and the old process only
// has to finish the calls it already has (it drains). The old process is
// then kept, idle, for a probation period: if the new one dies or stops
// answering within it, the old one takes over again at once (the binary on
// disk may already be gone, so a living process is the only reliable way
// back). A new binary that fails its handshake or its first health check
// never serves at all. Binaries that failed are remembered by sha256, so a
// file watch does not retry the same broken file every second.
//
// Each scanner has its own supervisor and its own process, so one plugin's
// crash never touches another scanner or the host.
package supervisor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// State is where a supervised scanner is in its life.
type State string

// States.
const (
	StateStarting   State = "starting"
	StateRunning    State = "running"
	StateRestarting State = "restarting" // waiting out a backoff
	StateBroken     State = "broken"     // crash loop; cooling down
	StateStopped    State = "stopped"
)

// Instance is one running plugin process serving the scanner.
type Instance interface {
	Scanner() scannerapi.Scanner
	Ping(ctx context.Context) error
	Exited() <-chan struct{}
	Pid() int
	// Close stops the process gracefully, killing it when ctx ends.
	Close(ctx context.Context) error
	// Kill kills the process group at once.
	Kill()
}

// HostInstance is an Instance whose scanner must be called with a Host of
// its own (its command policy); leases carry it.
type HostInstance interface {
	Instance
	Host() scannerapi.Host
}

// Meta describes what was launched, for status.
type Meta struct {
	Path       string
	SHA256     string
	Version    string
	APIVersion int
	// Isolation describes the process's confinement
	// (pluginhost.Plugin.Isolation).
	Isolation string
	// Bounds describes the kernel's bounds on its resources: its control
	// group's, or its rlimits (pluginhost.Plugin.Bounds).
	Bounds string
	// Policy is the digest of the approved policy the instance runs
	// under (host/policy), empty when approvals are off.
	Policy string
}

// Launcher starts an instance. It is called for every (re)start and must
// verify the binary each time.
type Launcher interface {
	Launch(ctx context.Context) (Instance, Meta, error)
}

// Checker is implemented by launchers that can say, without starting
// anything, which file they would launch (path and sha256, after the
// catalog checks). A swap to the bytes already running is skipped unless
// forced.
type Checker interface {
	Check() (Meta, error)
}

// Freshener is implemented by launchers held at the bytes they first
// launched (a scanner held while a canary runs): a swap, which takes the
// file as it is now, uses Fresh's launcher instead, and keeps it.
type Freshener interface {
	Fresh() Launcher
}

// Reconfigurer is implemented by launchers that can apply their
// configuration to an instance an earlier launcher started, without a new
// process (e.g. new options for a scanner that takes Configure while it
// runs). applied false with a nil error means it needs a new process.
type Reconfigurer interface {
	Reconfigure(ctx context.Context, inst Instance) (applied bool, err error)
}

// Recorder receives the supervisor's metrics.
type Recorder interface {
	// Restart counts a restart after a failure, by its class
	// (RestartClass).
	Restart(scanner, class string)
	PluginUp(scanner string, up bool)
}

// LaunchRecorder is implemented by recorders that observe how long each
// successful launch took (from its slot in the launch gate).
type LaunchRecorder interface {
	Launched(scanner string, d time.Duration)
}

// SwapRecorder is implemented by recorders that count swaps by outcome.
type SwapRecorder interface {
	Swap(scanner string, outcome SwapOutcome)
}

// Defaults of Config.
const (
	DefaultHealthInterval = 5 * time.Second
	// DefaultPingTimeout caps PingTimeout's default.
	DefaultPingTimeout     = 5 * time.Second
	DefaultFailedPings     = 2
	DefaultStartTimeout    = 10 * time.Second
	DefaultBackoffMin      = time.Second
	DefaultBackoffMax      = 60 * time.Second
	DefaultCrashLoopCount  = 5
	DefaultCrashLoopWindow = 2 * time.Minute
	DefaultHungCalls       = 3
	DefaultBrokenCooldown  = time.Minute
	DefaultSwapCheck       = 500 * time.Millisecond
	DefaultSwapProbation   = 10 * time.Second
	DefaultDrainTimeout    = 30 * time.Second
)

// MaxSwapProbation bounds SwapProbation (supervisor.swap_probation): an
// old process kept longer holds memory and a process slot for little.
const MaxSwapProbation = 10 * time.Minute

// Config tunes a supervisor and names its collaborators. Zero fields take
// the defaults above, except SwapProbation, whose zero means none (the
// operator's convention; the host's configuration defaults it to
// DefaultSwapProbation).
type Config struct {
	Name string
	// Launcher launches the plugin's instances.
	Launcher Launcher
	// Recorder receives the supervisor's metrics (nil: none).
	Recorder Recorder
	// Logger receives the supervisor's logs (nil: none).
	Logger hclog.Logger
	// HealthInterval between pings.
	HealthInterval time.Duration
	// PingTimeout per ping (min(HealthInterval, DefaultPingTimeout)).
	PingTimeout time.Duration
	// FailedPings in a row that count as a crash: one slow answer under
	// load should not cost a restart.
	FailedPings int
	// StartTimeout bounds one launch, from the moment it holds a slot of
	// Launches.
	StartTimeout time.Duration
	// Launches, when set, is shared by the supervisors of one host and
	// bounds how many of their launches run at once (LaunchGate). Nil:
	// no bound.
	Launches *LaunchGate
	// BackoffMin and BackoffMax bound the restart delay.
	BackoffMin, BackoffMax time.Duration
	// CrashLoopCount failures within CrashLoopWindow trip the breaker.
	CrashLoopCount  int
	CrashLoopWindow time.Duration
	// HungCalls is how many ScanPartition calls in a row may run into
	// their deadline on one instance before it is restarted: a plugin
	// stuck in its calls may still answer health checks.
	HungCalls int
	// BrokenCooldown is how long a broken scanner waits before one more
	// try (a minute, the backoff's cap: a crash-looping plugin keeps being
	// retried, visibly broken in between, rather than parked for long).
	BrokenCooldown time.Duration
	// StableAfter is how long an instance must run before the backoff
	// resets (CrashLoopWindow).
	StableAfter time.Duration
	// SwapCheck is how long a new instance must stay up, answering pings,
	// before a swap switches to it.
	SwapCheck time.Duration
	// SwapProbation is how long the old instance is kept after a swap; a
	// new instance that dies or fails its pings within it is replaced by
	// the old one again. Zero: no probation, the old instance is stopped
	// as soon as it has drained.
	SwapProbation time.Duration
	// DrainTimeout bounds the wait for an old instance's calls in flight
	// before it is stopped anyway.
	DrainTimeout time.Duration
	// Clock is the time source (the system clock); tests pass a
	// clock.Manual to drive backoffs and probation without waiting.
	Clock clock.Clock
	// Changes, when set, is told of every change of the status.
	Changes *service.Changes
}

func (c Config) withDefaults() Config {
	def := service.Default[time.Duration]
	def(&c.HealthInterval, DefaultHealthInterval)
	def(&c.PingTimeout, min(c.HealthInterval, DefaultPingTimeout))
	service.Default(&c.FailedPings, DefaultFailedPings)
	def(&c.StartTimeout, DefaultStartTimeout)
	def(&c.BackoffMin, DefaultBackoffMin)
	def(&c.BackoffMax, DefaultBackoffMax)
	service.Default(&c.CrashLoopCount, DefaultCrashLoopCount)
	def(&c.CrashLoopWindow, DefaultCrashLoopWindow)
	service.Default(&c.HungCalls, DefaultHungCalls)
	def(&c.BrokenCooldown, DefaultBrokenCooldown)
	def(&c.StableAfter, c.CrashLoopWindow)
	def(&c.SwapCheck, DefaultSwapCheck)
	c.SwapProbation = max(c.SwapProbation, 0)
	def(&c.DrainTimeout, DefaultDrainTimeout)
	c.Clock = clock.Or(c.Clock)
	if c.Recorder == nil {
		c.Recorder = nopRecorder{}
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Status is a snapshot for /v1/status.
type Status struct {
	State       State
	Meta        Meta
	Pid         int
	Restarts    int
	LastError   string
	Since       time.Time // when State was entered
	NextAttempt time.Time // when restarting or broken
	Swaps       int       // swaps that switched to a new instance
	LastSwap    *SwapRecord
}

// ErrUnavailable is returned by Current and Acquire while no instance is
// running.
var ErrUnavailable = errors.New("plugin is not running")

// ErrStopped is returned by requests to a supervisor that is not running.
var ErrStopped = errors.New("supervisor is stopped")

// Supervisor supervises one scanner's plugin.
type Supervisor struct {
	loop service.Loop
	clk  clock.Clock
	cfg  Config
	rec  Recorder
	log  hclog.Logger
	reqs chan *request
	hung chan *slot // an instance whose calls keep timing out

	mu       sync.Mutex
	st       Status
	launch   Launcher
	cur      *slot
	prev     *slot // on probation: kept for a rollback
	gen      uint64
	retiring sync.WaitGroup
	retired  map[*slot]bool // slots being stopped, for Stop

	// Owned by the loop goroutine.
	crashes  []time.Time // recent failure times, for the breaker
	streak   int         // failures since the last stable run, for the backoff
	rejected map[string]string
	// probation state
	probeReqs []*request
	probeEnd  time.Time

	// TestSignals fire at the supervisor's events for tests that Init
	// them.
	TestSignals TestSignals
}

// TestSignals are a Supervisor's events.
type TestSignals struct {
	// Draining: a swapped-out instance (its pid) waits for its calls in
	// flight before it is stopped.
	Draining testsignal.Signal[int]
}

// New returns a supervisor of cfg.Launcher's plugin; call Start.
func New(cfg Config) *Supervisor {
	cfg = cfg.withDefaults()
	clk := cfg.Clock
	return &Supervisor{
		cfg: cfg, launch: cfg.Launcher, rec: cfg.Recorder, log: cfg.Logger, clk: clk,
		reqs:     make(chan *request),
		hung:     make(chan *slot, 1),
		st:       Status{State: StateStopped, Since: clk.Now()},
		rejected: map[string]string{},
		retired:  map[*slot]bool{},
	}
}

func (s *Supervisor) since(t time.Time) time.Duration { return clock.Since(s.clk, t) }

// Start launches the plugin and supervises it until Stop. Supervision
// ends with ctx too (no more restarts); the plugin still serves the calls
// in flight until Stop closes it.
func (s *Supervisor) Start(ctx context.Context) error {
	return s.loop.Start(ctx, s.supervise)
}

// Stop ends supervision and stops the plugin: gracefully, killed when ctx
// ends (then it returns ctx's error). It returns once the processes are
// gone.
func (s *Supervisor) Stop(ctx context.Context) error {
	// The loop may be inside a launch that does not honour cancellation
	// (go-plugin's handshake has its own timeout); do not wait past ctx.
	_ = s.loop.Stop(ctx)
	s.mu.Lock()
	var slots []*slot
	for _, sl := range []*slot{s.cur, s.prev} {
		if sl != nil {
			slots = append(slots, sl)
		}
	}
	for sl := range s.retired {
		slots = append(slots, sl)
	}
	s.cur, s.prev = nil, nil
	s.st.Pid = 0
	s.setState(StateStopped, "")
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, sl := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sl.inst.Close(ctx); err != nil {
				s.log.Warn("plugin did not stop in time; killed", "pid", sl.inst.Pid(), "error", err)
			}
			sl.inst.Kill() // sweep the group whatever Close did
		}()
	}
	wg.Wait()
	s.retiring.Wait()
	s.rec.PluginUp(s.cfg.Name, false)
	return ctx.Err()
}

// Status returns a snapshot.
func (s *Supervisor) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if st.LastSwap != nil {
		ls := *st.LastSwap
		st.LastSwap = &ls
	}
	return st
}

// setState must be called with mu held.
func (s *Supervisor) setState(st State, lastErr string) {
	s.st.State = st
	s.st.Since = s.clk.Now()
	if lastErr != "" {
		s.st.LastError = lastErr
	}
	if st != StateRestarting && st != StateBroken {
		s.st.NextAttempt = time.Time{}
	}
	s.cfg.Changes.Notify()
}

// Launcher is the launcher of the next launch (the one the running
// instance was started by, unless a swap or update is under way).
func (s *Supervisor) Launcher() Launcher { return s.launcher() }

func (s *Supervisor) launcher() Launcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launch
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

type nopRecorder struct{}

func (nopRecorder) Restart(string, string) {}
func (nopRecorder) PluginUp(string, bool)  {}
