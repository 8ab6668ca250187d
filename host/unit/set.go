package unit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/census"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/supervisor"
)

// DefaultStopTimeout bounds the graceful stop of a plugin a reload
// disabled.
const DefaultStopTimeout = 10 * time.Second

// ErrNotRunning is returned for a request to a Set that is not running
// (not started yet, or stopping).
var ErrNotRunning = errors.New("the host's scanners are not running")

// Config configures a Set: what its units are built from (Deps, with the
// clock, logger and Changes of the set itself) and its own bounds. Zero
// fields take the defaults.
type Config struct {
	Deps
	// StopTimeout bounds the graceful stop of a plugin a reload disabled
	// (DefaultStopTimeout).
	StopTimeout time.Duration
}

func (c Config) withDefaults() Config {
	service.Default(&c.StopTimeout, DefaultStopTimeout)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Set is the running units. Start runs it; units added later run under
// the context Start was given, which only the set's loop holds.
type Set struct {
	cfg  Config
	loop service.Loop
	// reqs are run by the loop, under Start's context (Add).
	reqs chan func(ctx context.Context)

	mu    sync.Mutex
	units map[string]*Unit
	// removing are the units a reload removed, still stopping.
	removing sync.WaitGroup
}

// NewSet returns an empty set.
func NewSet(cfg Config) *Set {
	return &Set{cfg: cfg.withDefaults(), reqs: make(chan func(context.Context)), units: map[string]*Unit{}}
}

// Deps are what the set's units are built from.
func (s *Set) Deps() Deps { return s.cfg.Deps }

// Start runs the set: Add starts units from now on, under ctx (their
// dispatch stops when it ends; their plugins serve until Stop). A second
// Start returns service.ErrStarted.
func (s *Set) Start(ctx context.Context) error {
	return s.loop.Start(ctx, s.serve)
}

// serve runs the requests that need Start's context until it ends (or
// until Stop).
func (s *Set) serve(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-s.reqs:
			f(ctx)
		}
	}
}

// under runs f in the loop, with Start's context; ErrNotRunning when the
// set does not run.
func (s *Set) under(f func(ctx context.Context) error) error {
	done := make(chan error, 1)
	select {
	case s.reqs <- func(ctx context.Context) { done <- f(ctx) }:
		return <-done
	case <-s.loop.Done():
		return ErrNotRunning
	}
}

// Running reports whether the set runs: started, and neither its context
// ended nor Stop called.
func (s *Set) Running() bool {
	select {
	case <-s.loop.Done():
		return false
	default:
		return true
	}
}

// Add starts scanner name's unit. The set must be running.
func (s *Set) Add(st Settings, name string, sc config.Scanner) error {
	return s.under(func(ctx context.Context) error {
		u := s.cfg.newUnit(st, name, sc)
		// The plugin outlives the run context: it serves the calls in
		// flight until Stop closes it.
		if err := u.sup.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		if err := u.run.Start(ctx); err != nil {
			return err
		}
		s.mu.Lock()
		s.units[name] = u
		s.mu.Unlock()
		s.cfg.Changes.Notify()
		return nil
	})
}

// Remove stops a unit a reload disabled, in the background: dispatch
// stops now, its calls in flight finish (bounded by callTimeout), then
// the plugin is closed. Stop waits for it.
func (s *Set) Remove(name string, callTimeout time.Duration) {
	s.mu.Lock()
	u := s.units[name]
	delete(s.units, name)
	if u != nil {
		s.removing.Add(1)
	}
	s.mu.Unlock()
	s.cfg.Changes.Notify()
	if u == nil {
		return
	}
	go func() {
		defer s.removing.Done()
		s.mu.Lock()
		run := u.canary
		s.mu.Unlock()
		if run != nil {
			s.endCanary(u, run, canary.Aborted, "the scanner was disabled")
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout+drainMargin)
		if err := u.run.Stop(ctx); err != nil {
			s.cfg.Logger.Warn("scanner still busy after its call timeout; its calls were cancelled, stopping its plugin", "scanner", name)
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), s.cfg.StopTimeout)
		defer cancel()
		_ = u.sup.Stop(ctx)
		s.cfg.Logger.Info("scanner stopped", "scanner", name)
	}()
}

// Get returns the unit of scanner name, or nil.
func (s *Set) Get(name string) *Unit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.units[name]
}

// View is a unit as it stands.
type View struct {
	Unit *Unit
	// Scanner is the configuration that runs.
	Scanner    config.Scanner
	NotApplied string
}

// Views returns every unit as it stands, by scanner name.
func (s *Set) Views() map[string]View {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]View, len(s.units))
	for name, u := range s.units {
		out[name] = View{Unit: u, Scanner: u.sc, NotApplied: u.notApplied}
	}
	return out
}

// Names returns the running scanners' names, sorted.
func (s *Set) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.units))
}

// SetScanner records that a unit now runs as sc (a retune that needs no
// relaunch).
func (s *Set) SetScanner(name string, sc config.Scanner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.units[name]; u != nil {
		u.sc = sc
	}
}

// Update relaunches scanner name's plugin as sc says (new binary, pin or
// options): in place when the scanner takes new options while it runs,
// else by a hot swap. The running plugin keeps serving if the update
// fails; then the unit keeps running as before, and says in NotApplied
// that sc is not what runs (so the next reload tries it again). A stop of
// the set cuts the update short.
func (s *Set) Update(ctx context.Context, st Settings, name string, sc config.Scanner) (supervisor.SwapResult, error) {
	u := s.Get(name)
	if u == nil || !s.Running() {
		return supervisor.SwapResult{}, fmt.Errorf("scanner %s: %w", name, ErrNotRunning)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.loop.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	l := s.cfg.Launcher(st, name, sc, false)
	s.mu.Lock()
	run, was := u.canary, u.sc
	s.mu.Unlock()
	if run != nil {
		// The canary was started from the configuration that changed.
		s.endCanary(u, run, canary.Aborted, "a configuration reload relaunched the scanner")
	}
	if held, ok := u.sup.Launcher().(*launcher.Launcher); ok && held.Config().Exact != "" && was.Plugin == sc.Plugin && was.SHA256 == sc.SHA256 {
		// The running version stays held at its bytes (the file holds a
		// canary that was not promoted): only a swap takes the file.
		cfg := l.Config()
		cfg.Exact = held.Config().Exact
		l = l.With(cfg)
	}
	r, err := u.sup.Update(ctx, l, "configuration reload", nil)
	failure := ""
	switch {
	case err != nil:
		failure = err.Error()
	case r.Err != nil:
		failure = r.Err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if failure == "" {
		u.sc, u.notApplied = sc, ""
	} else {
		u.notApplied = fmt.Sprintf("%s: the configuration's plugin, pin or options are not running: %s", s.cfg.Clock.Now().UTC().Format(time.RFC3339), failure)
	}
	s.cfg.Changes.Notify()
	return r, err
}

// LaneLoad sums the running scanners' lane-scoped reads per second and
// returns the shortest interval among them (host/census weighs it).
func (s *Set) LaneLoad() census.Load {
	var l census.Load
	for _, v := range s.Views() {
		rate, iv := v.Unit.run.LaneLoad()
		if rate == 0 {
			continue
		}
		l.KeysPerSecond += rate
		if l.Interval == 0 || iv < l.Interval {
			l.Interval = iv
		}
	}
	return l
}

// Ready says which scanner is not running, if one is not.
func (s *Set) Ready() error {
	for _, name := range s.Names() {
		if u := s.Get(name); u != nil {
			if st := u.sup.Status(); st.State != supervisor.StateRunning {
				return fmt.Errorf("scanner %s is %s", name, st.State)
			}
		}
	}
	return nil
}

// StopDispatch stops every runner's dispatch at once and waits for their
// calls in flight until ctx ends; then they are cancelled (the first part
// of a shutdown: the plugins still run).
func (s *Set) StopDispatch(ctx context.Context) error {
	var runners []service.Service
	for _, v := range s.Views() {
		runners = append(runners, v.Unit.run)
	}
	return service.StopAll(ctx, runners...)
}

// Stop stops every unit: dispatch first (StopDispatch), then every plugin
// gracefully, all at once, killed when ctx ends; units a reload was
// removing stop under the same deadline.
func (s *Set) Stop(ctx context.Context) error {
	// No unit is added from now on.
	err := s.loop.Stop(ctx)
	err = errors.Join(err, s.StopDispatch(ctx))
	var sups []service.Service
	s.mu.Lock()
	for _, u := range s.units {
		sups = append(sups, u.sup)
		if u.canary != nil {
			sups = append(sups, u.canary.sup)
		}
	}
	s.mu.Unlock()
	err = errors.Join(err, service.StopAll(ctx, sups...))
	return errors.Join(err, service.Wait(ctx, service.Drained(&s.removing)))
}
