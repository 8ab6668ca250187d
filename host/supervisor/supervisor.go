// Package supervisor keeps one scanner's plugin process alive: launch it,
// ping it on an interval, and when it dies or stops answering, kill what is
// left and launch it again after an exponential backoff (1 s doubling to
// 60 s). A crash loop (by default 5 failures within 2 minutes) trips a
// breaker: the scanner is marked broken and left alone for a long cool-down
// instead of burning CPU and log lines, and the state is visible in status.
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

// Reconfigurer is implemented by launchers that can apply their
// configuration to an instance an earlier launcher started, without a new
// process (e.g. new options for a scanner that takes Configure while it
// runs). applied false with a nil error means it needs a new process.
type Reconfigurer interface {
	Reconfigure(ctx context.Context, inst Instance) (applied bool, err error)
}

// Recorder receives the supervisor's metrics.
type Recorder interface {
	Restart(scanner string)
	PluginUp(scanner string, up bool)
}

// SwapRecorder is implemented by recorders that count swaps by outcome.
type SwapRecorder interface {
	Swap(scanner string, outcome SwapOutcome)
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
	// SwapCheck is how long a new instance must stay up, answering pings,
	// before a swap switches to it (500 ms).
	SwapCheck time.Duration
	// SwapProbation is how long the old instance is kept after a swap; a
	// new instance that dies or fails its pings within it is replaced by
	// the old one again (10 s). Negative: no probation, the old instance
	// is stopped as soon as it has drained.
	SwapProbation time.Duration
	// DrainTimeout bounds the wait for an old instance's calls in flight
	// before it is stopped anyway (30 s).
	DrainTimeout time.Duration
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
	def(&c.SwapCheck, 500*time.Millisecond)
	def(&c.DrainTimeout, 30*time.Second)
	if c.SwapProbation == 0 {
		c.SwapProbation = 10 * time.Second
	}
	if c.FailedPings <= 0 {
		c.FailedPings = 2
	}
	if c.CrashLoopCount <= 0 {
		c.CrashLoopCount = 5
	}
}

// SwapOutcome says how a swap request ended.
type SwapOutcome string

// Swap outcomes (a metric label).
const (
	// SwapDone: the new instance serves; the old one drained.
	SwapDone SwapOutcome = "swapped"
	// SwapUnchanged: the file and configuration are what already runs.
	SwapUnchanged SwapOutcome = "unchanged"
	// SwapReconfigured: the running instance took the new configuration
	// in place.
	SwapReconfigured SwapOutcome = "reconfigured"
	// SwapStarted: nothing was running (restarting or broken); a launch
	// was started at once instead of waiting out the backoff.
	SwapStarted SwapOutcome = "started"
	// SwapFailed: the new instance could not be verified, launched or
	// health-checked; the old one kept serving throughout.
	SwapFailed SwapOutcome = "failed"
	// SwapRolledBack: the new instance served but died or stopped
	// answering during probation; the old one serves again.
	SwapRolledBack SwapOutcome = "rolled_back"
	// SwapKept: probation passed; the old instance was stopped.
	SwapKept SwapOutcome = "kept"
)

// SwapResult reports a swap request.
type SwapResult struct {
	Outcome  SwapOutcome
	From, To Meta
	// Err says why the swap failed or was rolled back.
	Err error
}

// SwapRecord is the last swap, for status.
type SwapRecord struct {
	At      time.Time
	From    Meta
	To      Meta
	Outcome SwapOutcome
	Reason  string
	// Probation is set while the old instance is kept ready for a
	// rollback.
	Probation bool
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

// Lease is one call's hold on the current instance. Release it when the
// call returns: a swapped-out instance is stopped only once its leases are
// released (or DrainTimeout passed).
type Lease struct {
	Scanner scannerapi.Scanner
	Info    scannerapi.Info
	// Host is the instance's own Host (its command policy), nil when the
	// instance has none.
	Host scannerapi.Host
	// Generation changes with every instance switch.
	Generation uint64
	release    func()
}

// Release ends the lease. It is safe to call more than once.
func (l *Lease) Release() {
	if l.release != nil {
		l.release()
		l.release = nil
	}
}

// slot is one instance and its bookkeeping.
type slot struct {
	inst     Instance
	meta     Meta
	info     scannerapi.Info
	host     scannerapi.Host
	launcher Launcher
	started  time.Time
	gen      uint64
	// inflight counts leases; drained is closed once the slot is retired
	// and inflight is zero (both guarded by Supervisor.mu).
	inflight int
	retired  bool
	drained  chan struct{}
}

type reqKind int

const (
	reqSwap reqKind = iota
	reqUpdate
)

type request struct {
	kind     reqKind
	force    bool
	launcher Launcher
	reason   string
	ctx      context.Context
	reply    chan SwapResult // the switch (or why not)
	settled  chan SwapResult // optional: the end of probation
}

// Supervisor supervises one scanner's plugin.
type Supervisor struct {
	cfg  Config
	rec  Recorder
	log  hclog.Logger
	reqs chan *request

	mu       sync.Mutex
	st       Status
	launch   Launcher
	cur      *slot
	prev     *slot // on probation: kept for a rollback
	gen      uint64
	cancel   context.CancelFunc
	done     chan struct{}
	retiring sync.WaitGroup
	retired  map[*slot]bool // slots being stopped, for Stop

	// Owned by the loop goroutine.
	crashes  []time.Time // recent failure times, for the breaker
	streak   int         // failures since the last stable run, for the backoff
	rejected map[string]string
	// probation state
	probeReqs []*request
	probeEnd  time.Time
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
	return &Supervisor{
		cfg: cfg, launch: l, rec: rec, log: log,
		reqs:     make(chan *request),
		st:       Status{State: StateStopped, Since: time.Now()},
		rejected: map[string]string{},
		retired:  map[*slot]bool{},
	}
}

// Start launches the supervision loop.
func (s *Supervisor) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.cancel = cancel
	s.done = make(chan struct{})
	done := s.done
	s.mu.Unlock()
	go func() {
		defer close(done)
		s.loop(ctx)
	}()
}

// Stop ends supervision and stops the plugin: gracefully, killed when ctx
// ends. It returns once the processes are gone.
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
}

// Current implements scheduler.Target.
func (s *Supervisor) Current() (scannerapi.Scanner, scannerapi.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || s.st.State != StateRunning {
		return nil, scannerapi.Info{}, fmt.Errorf("%w (state %s)", ErrUnavailable, s.st.State)
	}
	return s.cur.inst.Scanner(), s.cur.info, nil
}

// Acquire leases the current instance for one call. Calls made under a
// lease finish on the instance they started on, even if a swap switches
// to a new one meanwhile.
func (s *Supervisor) Acquire() (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.cur
	if sl == nil || s.st.State != StateRunning {
		return Lease{}, fmt.Errorf("%w (state %s)", ErrUnavailable, s.st.State)
	}
	sl.inflight++
	var once sync.Once
	return Lease{
		Scanner: sl.inst.Scanner(), Info: sl.info, Host: sl.host, Generation: sl.gen,
		release: func() { once.Do(func() { s.release(sl) }) },
	}, nil
}

func (s *Supervisor) release(sl *slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl.inflight--
	if sl.inflight == 0 && sl.retired && sl.drained != nil {
		close(sl.drained)
		sl.drained = nil
	}
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

// Swap replaces the running instance with a fresh launch of the current
// launcher, if the file on disk differs from the one running (force: in
// any case). It returns once the switch happened or was refused; settled,
// if not nil, receives the final word once probation is over (or at once
// when there is none): give it room for one value, since the supervisor
// does not wait for a reader. A scanner that is not running (restarting, broken)
// is launched at once instead.
func (s *Supervisor) Swap(ctx context.Context, force bool, reason string, settled chan SwapResult) (SwapResult, error) {
	return s.request(ctx, &request{kind: reqSwap, force: force, reason: reason, settled: settled})
}

// Update makes l the launcher of every future launch and applies it to
// the running instance: in place when l is a Reconfigurer that can (new
// options for a scanner that accepts Configure while it runs), else by a
// swap. When the change fails, the old launcher and instance stay.
func (s *Supervisor) Update(ctx context.Context, l Launcher, reason string, settled chan SwapResult) (SwapResult, error) {
	return s.request(ctx, &request{kind: reqUpdate, launcher: l, reason: reason, settled: settled})
}

func (s *Supervisor) request(ctx context.Context, r *request) (SwapResult, error) {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return SwapResult{}, ErrStopped
	}
	r.ctx = ctx
	r.reply = make(chan SwapResult, 1)
	select {
	case s.reqs <- r:
	case <-done:
		return SwapResult{}, ErrStopped
	case <-ctx.Done():
		return SwapResult{}, ctx.Err()
	}
	// The reply channel is buffered: a caller that gives up does not block
	// the loop, which finishes the request anyway.
	select {
	case res := <-r.reply:
		return res, nil
	case <-done:
		return SwapResult{}, ErrStopped
	case <-ctx.Done():
		return SwapResult{}, ctx.Err()
	}
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

func (s *Supervisor) launcher() Launcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launch
}

func (s *Supervisor) loop(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		s.setState(StateStarting, "")
		s.mu.Unlock()

		l := s.launcher()
		sl, err := s.start(ctx, l)
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
		s.mu.Lock()
		s.install(sl)
		s.mu.Unlock()
		s.rec.PluginUp(s.cfg.Name, true)
		s.log.Info("plugin running", "pid", sl.inst.Pid(), "path", sl.meta.Path, "version", sl.meta.Version, "api_version", sl.meta.APIVersion)

		reason := s.watch(ctx)
		if ctx.Err() != nil {
			s.endProbation(nil)
			return // Stop closes the instances
		}
		s.mu.Lock()
		failed := s.cur
		s.cur = nil
		s.st.Pid = 0
		s.mu.Unlock()
		s.rec.PluginUp(s.cfg.Name, false)
		failed.inst.Kill()
		s.log.Error("plugin failed; restarting", "reason", reason, "ran_for", time.Since(failed.started).Round(time.Millisecond))
		if time.Since(failed.started) >= s.cfg.StableAfter {
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

// start launches one instance with l, bounded by StartTimeout.
func (s *Supervisor) start(ctx context.Context, l Launcher) (*slot, error) {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	inst, meta, err := l.Launch(lctx)
	cancel()
	if err != nil {
		return &slot{meta: meta}, err
	}
	if ctx.Err() != nil {
		inst.Kill() // stopped while launching
		return &slot{meta: meta}, ctx.Err()
	}
	sl := &slot{inst: inst, meta: meta, info: inst.Scanner().Info(), launcher: l, started: time.Now()}
	if hi, ok := inst.(HostInstance); ok {
		sl.host = hi.Host()
	}
	return sl, nil
}

// install makes sl the current instance. mu must be held.
func (s *Supervisor) install(sl *slot) {
	s.gen++
	sl.gen = s.gen
	s.cur = sl
	s.st.Meta = sl.meta
	s.st.Pid = sl.inst.Pid()
	s.setState(StateRunning, "")
}

// watch serves requests and health-checks the current instance (and the
// probation of a swap) until the current instance must be replaced; it
// returns why.
func (s *Supervisor) watch(ctx context.Context) string {
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	misses := 0
	var last *slot
	for {
		s.mu.Lock()
		cur, prev := s.cur, s.prev
		s.mu.Unlock()
		if cur != last {
			misses, last = 0, cur
		}
		var prevExited <-chan struct{}
		var probeTick, probeEnd <-chan time.Time
		stopProbe := func() {}
		if prev != nil {
			prevExited = prev.inst.Exited()
			pt := time.NewTicker(min(s.cfg.HealthInterval, time.Second))
			end := time.NewTimer(time.Until(s.probeEnd))
			probeTick, probeEnd = pt.C, end.C
			stopProbe = func() { pt.Stop(); end.Stop() }
		}
		ping := func() string {
			pctx, cancel := context.WithTimeout(ctx, s.cfg.PingTimeout)
			err := cur.inst.Ping(pctx)
			cancel()
			if err == nil || ctx.Err() != nil {
				misses = 0
				return ""
			}
			misses++
			s.log.Warn("plugin ping failed", "error", err, "misses", misses)
			if misses >= s.cfg.FailedPings {
				return fmt.Sprintf("health check failed %d times: %v", misses, err)
			}
			return ""
		}
		// fail handles a failure of the current instance: during
		// probation the old instance takes over again; otherwise the
		// caller restarts.
		fail := func(reason string) (string, bool) {
			if prev != nil {
				s.rollback(reason)
				misses = 0
				return "", false
			}
			return reason, true
		}
		reason, stop := s.watchOnce(ctx, cur, prev, prevExited, probeTick, probeEnd, t.C, ping, fail)
		stopProbe()
		if stop {
			return reason
		}
	}
}

// watchOnce waits for one event of watch.
func (s *Supervisor) watchOnce(ctx context.Context, cur, prev *slot, prevExited <-chan struct{}, probeTick, probeEnd, health <-chan time.Time, ping func() string, fail func(string) (string, bool)) (string, bool) {
	select {
	case <-ctx.Done():
		return "", true
	case <-cur.inst.Exited():
		if r, stop := fail("plugin process exited"); stop {
			return r, true
		}
	case <-prevExited:
		s.log.Warn("the previous plugin process exited during probation; no rollback is possible any more", "pid", prev.inst.Pid())
		s.endProbation(nil)
	case <-probeEnd:
		s.endProbation(nil)
	case <-probeTick:
		if r := ping(); r != "" {
			if r, stop := fail(r); stop {
				return r, true
			}
		}
	case <-health:
		if r := ping(); r != "" {
			if r, stop := fail(r); stop {
				return r, true
			}
		}
	case req := <-s.reqs:
		s.handle(ctx, req)
	}
	return "", false
}

// handle serves a request while an instance runs.
func (s *Supervisor) handle(ctx context.Context, r *request) {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	from := cur.meta
	l := s.launcher()
	if r.kind == reqUpdate {
		l = r.launcher
		if rc, ok := l.(Reconfigurer); ok {
			applied, err := rc.Reconfigure(r.ctx, cur.inst)
			if err != nil {
				s.answer(r, SwapResult{Outcome: SwapFailed, From: from, To: from, Err: err}, true)
				return
			}
			if applied {
				s.mu.Lock()
				s.launch = l
				cur.launcher = l
				s.mu.Unlock()
				s.answer(r, SwapResult{Outcome: SwapReconfigured, From: from, To: from}, true)
				return
			}
		}
	}
	if r.kind == reqSwap && !r.force {
		if ck, ok := l.(Checker); ok {
			m, err := ck.Check()
			if err != nil {
				s.recordSwap(SwapRecord{At: time.Now(), From: from, Outcome: SwapFailed, Reason: err.Error()})
				s.answer(r, SwapResult{Outcome: SwapFailed, From: from, Err: fmt.Errorf("%w; the running plugin (sha256 %s) keeps serving", err, short(from.SHA256))}, true)
				return
			}
			if m.SHA256 == from.SHA256 {
				s.answer(r, SwapResult{Outcome: SwapUnchanged, From: from, To: from}, true)
				return
			}
			if why, bad := s.rejected[m.SHA256]; bad {
				s.answer(r, SwapResult{Outcome: SwapFailed, From: from, To: m, Err: fmt.Errorf("sha256 %s was already tried and rejected (%s); replace the file, or force the reload to try it again", short(m.SHA256), why)}, true)
				return
			}
		}
	}
	s.swap(ctx, r, l)
}

// swap launches l's instance beside the current one, checks it, switches
// and starts the old one's probation.
func (s *Supervisor) swap(ctx context.Context, r *request, l Launcher) {
	// A swap during probation settles the earlier one first: the instance
	// running now is the one to fall back to.
	s.endProbation(nil)
	s.mu.Lock()
	old := s.cur
	s.mu.Unlock()
	from := old.meta
	s.log.Info("hot swap: starting the new plugin beside the running one", "reason", r.reason, "running_pid", old.inst.Pid(), "running_sha256", short(from.SHA256))
	t0 := time.Now()
	sl, err := s.start(ctx, l)
	if err == nil {
		err = s.check(ctx, sl)
		if err != nil {
			sl.inst.Kill()
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			s.answer(r, SwapResult{Outcome: SwapFailed, From: from, To: sl.meta, Err: ctx.Err()}, true)
			return
		}
		if sl.meta.SHA256 != "" && sl.meta.SHA256 != from.SHA256 {
			s.rejected[sl.meta.SHA256] = err.Error()
		}
		s.log.Error("hot swap failed; the running plugin keeps serving", "error", err, "pid", old.inst.Pid(), "sha256", short(from.SHA256))
		s.recordSwap(SwapRecord{At: time.Now(), From: from, To: sl.meta, Outcome: SwapFailed, Reason: err.Error()})
		s.answer(r, SwapResult{Outcome: SwapFailed, From: from, To: sl.meta, Err: fmt.Errorf("%w; the running plugin (pid %d, sha256 %s) keeps serving", err, old.inst.Pid(), short(from.SHA256))}, true)
		return
	}

	// The switch: new leases go to the new instance from here on.
	s.mu.Lock()
	s.install(sl)
	s.launch = l
	s.st.Swaps++
	s.prev = old
	s.probeEnd = time.Now().Add(max(s.cfg.SwapProbation, 0))
	s.mu.Unlock()
	s.log.Info("hot swap: switched", "pid", sl.inst.Pid(), "sha256", short(sl.meta.SHA256), "version", sl.meta.Version, "old_pid", old.inst.Pid(), "prepared_in", time.Since(t0).Round(time.Millisecond))
	// The old instance gets no new calls; it finishes the ones it has.
	s.drain(old)
	s.recordSwap(SwapRecord{At: time.Now(), From: from, To: sl.meta, Outcome: SwapDone, Reason: r.reason, Probation: s.cfg.SwapProbation > 0})
	s.answer(r, SwapResult{Outcome: SwapDone, From: from, To: sl.meta}, false)
	if s.cfg.SwapProbation <= 0 {
		s.endProbation(nil)
	}
}

// check is a new instance's health check before it gets any call: it must
// answer a ping, stay up for SwapCheck and answer again.
func (s *Supervisor) check(ctx context.Context, sl *slot) error {
	ping := func() error {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.PingTimeout)
		defer cancel()
		if err := sl.inst.Ping(pctx); err != nil {
			return fmt.Errorf("new plugin (pid %d) failed its health check: %w", sl.inst.Pid(), err)
		}
		return nil
	}
	if err := ping(); err != nil {
		return err
	}
	t := time.NewTimer(s.cfg.SwapCheck)
	defer t.Stop()
	select {
	case <-sl.inst.Exited():
		return fmt.Errorf("new plugin (pid %d) exited within %s of starting", sl.inst.Pid(), s.cfg.SwapCheck)
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return ping()
}

// drain marks sl as retired: it takes no new leases (it is no longer
// current) and its drained channel closes once its calls are done.
func (s *Supervisor) drain(sl *slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl.retired = true
	sl.drained = make(chan struct{})
	if sl.inflight == 0 {
		close(sl.drained)
		sl.drained = nil
	}
}

// isDrained reports whether a retired slot has no calls in flight.
func (s *Supervisor) waitDrained(sl *slot) bool {
	s.mu.Lock()
	ch := sl.drained
	s.mu.Unlock()
	if ch == nil {
		return true
	}
	t := time.NewTimer(s.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// endProbation ends a swap's probation: the old instance is stopped once
// it has drained, and the requests waiting for the outcome hear that the
// new one was kept (or res, when set).
func (s *Supervisor) endProbation(res *SwapResult) {
	s.mu.Lock()
	old := s.prev
	s.prev = nil
	cur := s.cur
	if old != nil {
		s.retired[old] = true
	}
	if ls := s.st.LastSwap; ls != nil && ls.Probation {
		ls.Probation = false
		if res == nil && old != nil {
			ls.Outcome = SwapKept
		}
	}
	s.mu.Unlock()
	reqs := s.probeReqs
	s.probeReqs = nil
	if old != nil {
		s.retire(old)
		if res == nil && cur != nil {
			s.log.Info("hot swap: probation passed; stopping the old plugin", "old_pid", old.inst.Pid(), "pid", cur.inst.Pid())
			if sr, ok := s.rec.(SwapRecorder); ok {
				sr.Swap(s.cfg.Name, SwapKept)
			}
		}
	}
	for _, r := range reqs {
		out := SwapResult{Outcome: SwapKept}
		if res != nil {
			out = *res
		} else if cur != nil {
			out.To = cur.meta
		}
		settle(r, out)
	}
}

// retire stops a swapped-out instance once its calls are done.
func (s *Supervisor) retire(sl *slot) {
	s.retiring.Add(1)
	go func() {
		defer s.retiring.Done()
		if !s.waitDrained(sl) {
			s.log.Warn("old plugin still busy after the drain timeout; stopping it anyway", "pid", sl.inst.Pid(), "timeout", s.cfg.DrainTimeout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sl.inst.Close(ctx)
		sl.inst.Kill()
		s.mu.Lock()
		delete(s.retired, sl)
		s.mu.Unlock()
	}()
}

// rollback puts the instance on probation back in service after the new
// one failed.
func (s *Supervisor) rollback(reason string) {
	s.mu.Lock()
	bad, good := s.cur, s.prev
	s.prev = nil
	good.retired = false
	if good.drained != nil {
		close(good.drained)
		good.drained = nil
	}
	s.install(good)
	s.launch = good.launcher
	s.mu.Unlock()
	bad.inst.Kill()
	why := fmt.Sprintf("new plugin (pid %d, sha256 %s) %s %s after the switch", bad.inst.Pid(), short(bad.meta.SHA256), reason, time.Since(bad.started).Round(time.Millisecond))
	if bad.meta.SHA256 != good.meta.SHA256 {
		s.rejected[bad.meta.SHA256] = why
	}
	s.log.Error("hot swap rolled back: the old plugin serves again", "reason", why, "pid", good.inst.Pid(), "sha256", short(good.meta.SHA256))
	if sr, ok := s.rec.(SwapRecorder); ok {
		sr.Swap(s.cfg.Name, SwapRolledBack)
	}
	s.mu.Lock()
	s.st.LastError = "hot swap rolled back: " + why
	s.mu.Unlock()
	res := SwapResult{Outcome: SwapRolledBack, From: bad.meta, To: good.meta, Err: errors.New(why)}
	s.recordSwap(SwapRecord{At: time.Now(), From: bad.meta, To: good.meta, Outcome: SwapRolledBack, Reason: why})
	s.endProbation(&res)
}

// answer replies to a request; final says there is no probation to wait
// for (the settled channel gets the same answer at once).
func (s *Supervisor) answer(r *request, res SwapResult, final bool) {
	if sr, ok := s.rec.(SwapRecorder); ok && res.Outcome != SwapUnchanged {
		sr.Swap(s.cfg.Name, res.Outcome)
	}
	r.reply <- res
	if r.settled == nil {
		return
	}
	if final {
		settle(r, res)
		return
	}
	s.probeReqs = append(s.probeReqs, r)
}

// settle delivers the final word without ever blocking the loop.
func settle(r *request, res SwapResult) {
	select {
	case r.settled <- res:
	default:
	}
}

func (s *Supervisor) recordSwap(rec SwapRecord) {
	s.mu.Lock()
	s.st.LastSwap = &rec
	s.mu.Unlock()
}

// failed records a failure and waits before the next attempt: the backoff,
// or the cool-down when the failures form a crash loop. A swap or update
// request during the wait cuts it short (an operator fixed something). It
// returns false when ctx ended during the wait.
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
	case r := <-s.reqs:
		if r.kind == reqUpdate {
			s.mu.Lock()
			s.launch = r.launcher
			s.mu.Unlock()
		}
		// An operator acted: start afresh.
		s.crashes, s.streak = nil, 0
		s.log.Info("plugin not running; launching it now on request", "reason", r.reason)
		s.answer(r, SwapResult{Outcome: SwapStarted}, true)
		return true
	}
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

type nopRecorder struct{}

func (nopRecorder) Restart(string)        {}
func (nopRecorder) PluginUp(string, bool) {}
