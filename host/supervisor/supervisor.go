// Package supervisor keeps one scanner's plugin process alive: launch it,
// ping it on an interval, and when it dies or stops answering, kill what is
// left and launch it again after an exponential backoff (1 s doubling to
// 60 s). A crash loop (by default 5 failures within 2 minutes) trips a
// breaker: the scanner is marked broken and left alone for a long cool-down
// instead of burning CPU and log lines, and the state is visible in status.
//
// Each scanner has its own supervisor and its own process, so one plugin's
// crash never touches another scanner or the host.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

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

// Meta describes what was launched, for status.
type Meta struct {
	Path    string
	SHA256  string
	Version string
}

// Launcher starts an instance. It is called for every (re)start and must
// verify the binary each time.
type Launcher interface {
	Launch(ctx context.Context) (Instance, Meta, error)
}

// Recorder receives the supervisor's metrics.
type Recorder interface {
	Restart(scanner string)
	PluginUp(scanner string, up bool)
}

// Config tunes a supervisor. Zero fields take the defaults shown.
type Config struct {
	Name string
	// HealthInterval between pings (5 s).
	HealthInterval time.Duration
	// PingTimeout per ping (min(HealthInterval, 5 s)).
	PingTimeout time.Duration
	// FailedPings in a row that count as a crash (2): one slow answer
	// under load should not cost a restart.
	FailedPings int
	// StartTimeout bounds one launch (10 s).
	StartTimeout time.Duration
	// BackoffMin and BackoffMax bound the restart delay (1 s, 60 s).
	BackoffMin, BackoffMax time.Duration
	// CrashLoopCount failures within CrashLoopWindow trip the breaker
	// (5 within 2 min).
	CrashLoopCount  int
	CrashLoopWindow time.Duration
	// BrokenCooldown is how long a broken scanner waits before one more
	// try (10 min).
	BrokenCooldown time.Duration
	// StableAfter is how long an instance must run before the backoff
	// resets (CrashLoopWindow).
	StableAfter time.Duration
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HealthInterval, 5*time.Second)
	def(&c.PingTimeout, min(c.HealthInterval, 5*time.Second))
	def(&c.StartTimeout, 10*time.Second)
	def(&c.BackoffMin, time.Second)
	def(&c.BackoffMax, 60*time.Second)
	def(&c.CrashLoopWindow, 2*time.Minute)
	def(&c.BrokenCooldown, 10*time.Minute)
	def(&c.StableAfter, c.CrashLoopWindow)
	if c.FailedPings <= 0 {
		c.FailedPings = 2
	}
	if c.CrashLoopCount <= 0 {
		c.CrashLoopCount = 5
	}
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
}

// ErrUnavailable is returned by Current while no instance is running.
var ErrUnavailable = errors.New("plugin is not running")

// Supervisor supervises one scanner's plugin.
type Supervisor struct {
	cfg    Config
	launch Launcher
	rec    Recorder
	log    hclog.Logger

	mu     sync.Mutex
	st     Status
	inst   Instance
	cancel context.CancelFunc
	done   chan struct{}

	// crashes are recent failure times, for the breaker.
	crashes []time.Time
	// streak counts failures since the last stable run, for the backoff.
	streak int
}

// New returns a supervisor; call Start.
func New(cfg Config, l Launcher, rec Recorder, log hclog.Logger) *Supervisor {
	cfg.defaults()
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if rec == nil {
		rec = nopRecorder{}
	}
	return &Supervisor{cfg: cfg, launch: l, rec: rec, log: log, st: Status{State: StateStopped, Since: time.Now()}}
}

// Start launches the supervision loop.
func (s *Supervisor) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.cancel = cancel
	s.done = make(chan struct{})
	s.mu.Unlock()
	go func() {
		defer close(s.done)
		s.loop(ctx)
	}()
}

// Stop ends supervision and stops the plugin: gracefully, killed when ctx
// ends. It returns once the process is gone.
func (s *Supervisor) Stop(ctx context.Context) {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	// The loop may be inside a launch that does not honour cancellation
	// (go-plugin's handshake has its own timeout); do not wait past ctx.
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.mu.Lock()
	inst := s.inst
	s.inst = nil
	s.setState(StateStopped, "")
	s.mu.Unlock()
	if inst != nil {
		if err := inst.Close(ctx); err != nil {
			s.log.Warn("plugin did not stop in time; killed", "error", err)
		}
		inst.Kill() // sweep the group whatever Close did
	}
	s.rec.PluginUp(s.cfg.Name, false)
}

// Current implements scheduler.Target.
func (s *Supervisor) Current() (scannerapi.Scanner, scannerapi.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil || s.st.State != StateRunning {
		return nil, scannerapi.Info{}, fmt.Errorf("%w (state %s)", ErrUnavailable, s.st.State)
	}
	sc := s.inst.Scanner()
	return sc, sc.Info(), nil
}

// Status returns a snapshot.
func (s *Supervisor) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// setState must be called with mu held.
func (s *Supervisor) setState(st State, lastErr string) {
	s.st.State = st
	s.st.Since = time.Now()
	if lastErr != "" {
		s.st.LastError = lastErr
	}
	if st != StateRestarting && st != StateBroken {
		s.st.NextAttempt = time.Time{}
	}
}

func (s *Supervisor) loop(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		s.setState(StateStarting, "")
		s.mu.Unlock()

		lctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
		inst, meta, err := s.launch.Launch(lctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error("plugin launch failed", "error", err)
			if !s.failed(ctx, "launch: "+err.Error()) {
				return
			}
			continue
		}
		if ctx.Err() != nil {
			inst.Kill() // stopped while launching
			return
		}
		started := time.Now()
		s.mu.Lock()
		s.inst = inst
		s.st.Meta = meta
		s.st.Pid = inst.Pid()
		s.setState(StateRunning, "")
		s.mu.Unlock()
		s.rec.PluginUp(s.cfg.Name, true)
		s.log.Info("plugin running", "pid", inst.Pid(), "path", meta.Path, "version", meta.Version)

		reason := s.watch(ctx, inst)
		if ctx.Err() != nil {
			return // Stop closes the instance
		}
		s.mu.Lock()
		s.inst = nil
		s.st.Pid = 0
		s.mu.Unlock()
		s.rec.PluginUp(s.cfg.Name, false)
		inst.Kill()
		s.log.Error("plugin failed; restarting", "reason", reason, "ran_for", time.Since(started).Round(time.Millisecond))
		if time.Since(started) >= s.cfg.StableAfter {
			s.streak = 0
		}
		s.rec.Restart(s.cfg.Name)
		s.mu.Lock()
		s.st.Restarts++
		s.mu.Unlock()
		if !s.failed(ctx, reason) {
			return
		}
	}
}

// watch returns why a running instance must be replaced: it exited, or
// stopped answering pings.
func (s *Supervisor) watch(ctx context.Context, inst Instance) string {
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-inst.Exited():
			return "plugin process exited"
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, s.cfg.PingTimeout)
			err := inst.Ping(pctx)
			cancel()
			if err == nil {
				misses = 0
				continue
			}
			if ctx.Err() != nil {
				return ""
			}
			misses++
			s.log.Warn("plugin ping failed", "error", err, "misses", misses)
			if misses >= s.cfg.FailedPings {
				return fmt.Sprintf("health check failed %d times: %v", misses, err)
			}
		}
	}
}

// failed records a failure and waits before the next attempt: the backoff,
// or the cool-down when the failures form a crash loop. It returns false
// when ctx ended during the wait.
func (s *Supervisor) failed(ctx context.Context, reason string) bool {
	now := time.Now()
	s.crashes = append(s.crashes, now)
	keep := s.crashes[:0]
	for _, c := range s.crashes {
		if now.Sub(c) <= s.cfg.CrashLoopWindow {
			keep = append(keep, c)
		}
	}
	s.crashes = keep
	s.streak++

	var wait time.Duration
	state := StateRestarting
	if len(s.crashes) >= s.cfg.CrashLoopCount {
		state = StateBroken
		wait = s.cfg.BrokenCooldown
		// After the cool-down it gets one fresh series of attempts.
		s.crashes = nil
		s.streak = 0
		s.log.Error("plugin is crash-looping; marked broken", "failures", s.cfg.CrashLoopCount, "window", s.cfg.CrashLoopWindow, "retry_in", wait)
	} else {
		wait = s.cfg.BackoffMin << min(s.streak-1, 30)
		if wait > s.cfg.BackoffMax || wait <= 0 {
			wait = s.cfg.BackoffMax
		}
	}
	s.mu.Lock()
	s.setState(state, reason)
	s.st.NextAttempt = now.Add(wait)
	s.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

type nopRecorder struct{}

func (nopRecorder) Restart(string)        {}
func (nopRecorder) PluginUp(string, bool) {}
