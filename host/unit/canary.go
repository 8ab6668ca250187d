package unit

// This file is a unit's canary: a new binary of its scanner started in
// shadow beside the running version (host/canary), compared decision by
// decision, then promoted (a hot swap to exactly the bytes compared) or
// aborted (the running version never changed).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/host/supervisor"
)

// Errors of canary requests.
var (
	// ErrNoScanner: no enabled scanner of that name.
	ErrNoScanner = errors.New("no such scanner running")
	// ErrNoCanary: the scanner has no canary running.
	ErrNoCanary = errors.New("no canary is running")
	// ErrCanaryConflict: the request does not fit the canary's state (one
	// already runs, nothing new to compare, a promotion under way).
	ErrCanaryConflict = errors.New("canary request refused")
)

// canaryRun is a canary in progress: its own supervisor (its plugin runs
// in shadow, its writes held back into its own log) and the comparison.
type canaryRun struct {
	sup    *supervisor.Supervisor
	cmp    *canary.Comparison
	log    *shadow.Log
	sha256 string
}

// canaryTarget is the runner's view of a canary (scheduler.Canary).
type canaryTarget struct {
	c       *canaryRun
	promote func()
	changes *service.Changes
}

func (t canaryTarget) Acquire() (scheduler.Lease, error) { return supTarget{t.c.sup}.Acquire() }
func (t canaryTarget) Failed()                           { t.c.cmp.CanaryFailed() }
func (t canaryTarget) StartCycle()                       { t.c.cmp.StartCycle() }
func (t canaryTarget) EndCycle(cycle uint64) {
	if t.c.cmp.EndCycle(cycle) {
		// Not on the runner's goroutine: the promotion waits for the
		// swap, which waits for the runner's calls.
		go t.promote()
	}
	t.changes.Notify()
}

// CanaryStatus is scanner name's canary: the running one, else the
// latest that ended (ok false: none).
func (s *Set) CanaryStatus(name string, latest int) (canary.Status, bool) {
	s.mu.Lock()
	u := s.units[name]
	var cmp *canary.Comparison
	if u != nil {
		cmp = u.last
		if u.canary != nil {
			cmp = u.canary.cmp
		}
	}
	s.mu.Unlock()
	if cmp == nil {
		return canary.Status{}, false
	}
	return cmp.Status(latest), true
}

// CanaryLog is the running canary's log of held-back writes.
func (s *Set) CanaryLog(name string) (*shadow.Log, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.units[name]; u != nil && u.canary != nil {
		return u.canary.log, true
	}
	return nil, false
}

// held is the launcher config of u's running version held at the bytes
// it runs (sha256), from the supervisor's launcher.
func (s *Set) held(u *Unit, sha string) (*launcher.Launcher, error) {
	l, ok := u.sup.Launcher().(*launcher.Launcher)
	if !ok {
		return nil, fmt.Errorf("%w: scanner %s's launcher cannot be held at its bytes", ErrCanaryConflict, u.name)
	}
	cfg := l.Config()
	cfg.Exact = sha
	return l.With(cfg), nil
}

// StartCanary starts the binary now in scanner name's plugin file as its
// canary, in shadow beside the running version, which from now on is
// held at the bytes it runs (its restarts start them again, not the new
// file). It returns once the canary runs (or failed to start: then
// nothing changed but the hold).
func (s *Set) StartCanary(ctx context.Context, st Settings, name, reason string) (canary.Status, error) {
	s.mu.Lock()
	u := s.units[name]
	var busy *canaryRun
	if u != nil {
		busy = u.canary
	}
	sc := config.Scanner{}
	if u != nil {
		sc = u.sc
	}
	s.mu.Unlock()
	switch {
	case u == nil || !s.Running():
		return canary.Status{}, fmt.Errorf("scanner %s: %w", name, ErrNoScanner)
	case s.cfg.Taps == nil:
		return canary.Status{}, fmt.Errorf("%w: this host runs no canaries", ErrCanaryConflict)
	case busy != nil:
		return busy.cmp.Status(0), fmt.Errorf("%w: scanner %s already has a canary (sha256 %.12s); promote or abort it first", ErrCanaryConflict, name, busy.sha256)
	}
	cur := u.sup.Status()
	if cur.State != supervisor.StateRunning {
		return canary.Status{}, fmt.Errorf("%w: scanner %s is %s; a canary is compared with a running version", ErrCanaryConflict, name, cur.State)
	}
	// The canary runs the file as it is now: its digest, exactly, at
	// every launch (catalog.StageExact).
	cfg := s.cfg.LaunchConfig(st, name, sc, false)
	probe := s.cfg.NewLauncher(name, cfg)
	file, err := probe.Check()
	if err != nil {
		return canary.Status{}, fmt.Errorf("scanner %s: the new binary cannot be used: %w", name, err)
	}
	if file.SHA256 == cur.Meta.SHA256 {
		return canary.Status{}, fmt.Errorf("%w: %s holds the bytes that run now (sha256 %.12s): put the new binary in place first", ErrCanaryConflict, file.Path, file.SHA256)
	}
	hold, err := s.held(u, cur.Meta.SHA256)
	if err != nil {
		return canary.Status{}, err
	}
	if res, err := u.sup.Update(ctx, hold, "canary started: held at the running bytes", nil); err != nil || res.Outcome != supervisor.SwapReconfigured {
		return canary.Status{}, fmt.Errorf("scanner %s: the running version could not be held at its bytes (%v %v); no canary started", name, res.Outcome, errors.Join(err, res.Err))
	}
	log := shadow.New(s.cfg.Clock, s.cfg.CanaryRecords)
	cfg.Shadow, cfg.Exact = log, file.SHA256
	tap := s.cfg.Taps.For(name)
	cfg.Tap = tap.Canary
	run := &canaryRun{log: log, sha256: file.SHA256,
		cmp: canary.New(s.cfg.Clock, canary.Version{SHA256: cur.Meta.SHA256, Version: cur.Meta.Version}, canary.Version{SHA256: file.SHA256}, s.cfg.CanaryRecords, sc.CanaryPromoteAfter)}
	changes := &service.Changes{}
	run.sup = supervisor.New(supervisor.Config{
		Name:           name,
		HealthInterval: st.Supervisor.HealthInterval,
		StartTimeout:   st.Supervisor.StartTimeout,
		Launches:       s.cfg.Launches,
		DrainTimeout:   st.Scheduler.CallTimeout + drainMargin,
		Clock:          s.cfg.Clock,
		Changes:        changes,
		Launcher:       s.cfg.NewLauncher(name, cfg),
		Logger:         s.cfg.Log(name).Named("canary"),
	})
	if err := run.sup.Start(context.WithoutCancel(ctx)); err != nil {
		return canary.Status{}, err
	}
	startWait := 2*st.Supervisor.StartTimeout + drainMargin
	wctx, cancel := context.WithTimeout(ctx, startWait)
	defer cancel()
	// Running, or its first launch failed (a restart's backoff, or
	// broken): the canary is not retried the way a scanner is.
	_ = changes.WaitFor(wctx, func() bool {
		switch run.sup.Status().State {
		case supervisor.StateRunning, supervisor.StateRestarting, supervisor.StateBroken:
			return true
		}
		return false
	})
	if cs := run.sup.Status(); cs.State != supervisor.StateRunning {
		why := cs.LastError
		if why == "" {
			why = fmt.Sprintf("still %s after %s", cs.State, startWait)
		}
		s.stopCanary(run)
		run.cmp.End(canary.Failed, "the canary did not start: "+why)
		s.mu.Lock()
		u.last = run.cmp
		s.mu.Unlock()
		s.cfg.Changes.Notify()
		return run.cmp.Status(0), fmt.Errorf("scanner %s: the canary (sha256 %.12s) did not start: %s; the running version keeps serving", name, file.SHA256, why)
	}
	run.cmp.SetTo(canary.Version{SHA256: file.SHA256, Version: run.sup.Status().Meta.Version})
	s.mu.Lock()
	if u.canary != nil || s.units[name] != u {
		s.mu.Unlock()
		s.stopCanary(run)
		return canary.Status{}, fmt.Errorf("%w: scanner %s changed while its canary started", ErrCanaryConflict, name)
	}
	u.canary = run
	s.mu.Unlock()
	tap.Set(run.cmp)
	u.run.SetCanary(canaryTarget{c: run, changes: s.cfg.Changes, promote: func() { s.autoPromote(st, name, run) }})
	s.cfg.Logger.Info("canary started beside the running version", "scanner", name, "reason", reason, "running_sha256", short(cur.Meta.SHA256), "canary_sha256", short(file.SHA256), "promote_after", sc.CanaryPromoteAfter)
	s.cfg.Changes.Notify()
	return run.cmp.Status(0), nil
}

// autoPromote promotes run once it earned it (canary_promote_after).
func (s *Set) autoPromote(st Settings, name string, run *canaryRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*st.Supervisor.StartTimeout+st.Supervisor.SwapProbation+time.Minute)
	defer cancel()
	if _, err := s.promote(ctx, st, name, run, run.cmp.Status(0).Reason); err != nil {
		s.cfg.Logger.Error("automatic canary promotion failed; the running version keeps serving", "scanner", name, "error", err)
	}
}

// PromoteCanary swaps scanner name's canary in: a hot swap (health check
// and probation as usual) to exactly the bytes that were compared.
func (s *Set) PromoteCanary(ctx context.Context, st Settings, name, reason string) (canary.Status, error) {
	s.mu.Lock()
	u := s.units[name]
	var run *canaryRun
	if u != nil {
		run = u.canary
	}
	s.mu.Unlock()
	if run == nil {
		return canary.Status{}, fmt.Errorf("scanner %s: %w", name, ErrNoCanary)
	}
	if !run.cmp.Begin(reason) {
		return run.cmp.Status(0), fmt.Errorf("%w: the canary is %s", ErrCanaryConflict, run.cmp.Status(0).State)
	}
	return s.promote(ctx, st, name, run, reason)
}

func (s *Set) promote(ctx context.Context, st Settings, name string, run *canaryRun, reason string) (canary.Status, error) {
	s.mu.Lock()
	u := s.units[name]
	if u == nil || u.canary != run {
		s.mu.Unlock()
		return run.cmp.Status(0), fmt.Errorf("scanner %s: %w", name, ErrNoCanary)
	}
	sc := u.sc
	s.mu.Unlock()
	l := s.cfg.Launcher(st, name, sc, false)
	cfg := l.Config()
	cfg.Exact = run.sha256
	res, err := u.sup.Update(ctx, l.With(cfg), "canary promoted: "+reason, nil)
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err == nil && res.To.SHA256 != run.sha256 {
		err = fmt.Errorf("the swap started sha256 %.12s, not the canary's %.12s", res.To.SHA256, run.sha256)
	}
	if err != nil {
		run.cmp.Resume("promotion failed: " + err.Error())
		s.cfg.Changes.Notify()
		return run.cmp.Status(0), fmt.Errorf("scanner %s: the canary's promotion failed; the running version keeps serving and the canary keeps running: %w", name, err)
	}
	s.endCanary(u, run, canary.Promoted, reason)
	s.cfg.Logger.Info("canary promoted: it serves now", "scanner", name, "sha256", short(run.sha256), "reason", reason)
	return run.cmp.Status(0), nil
}

// AbortCanary stops scanner name's canary. The running version was never
// touched; it stays held at its bytes, and the aborted digest is not
// started as a canary again by the file watch (replace the file, or
// start one by hand).
func (s *Set) AbortCanary(name, reason string) (canary.Status, error) {
	s.mu.Lock()
	u := s.units[name]
	var run *canaryRun
	if u != nil {
		run = u.canary
	}
	s.mu.Unlock()
	if run == nil {
		return canary.Status{}, fmt.Errorf("scanner %s: %w", name, ErrNoCanary)
	}
	if st := run.cmp.Status(0).State; st == canary.Promoting {
		return run.cmp.Status(0), fmt.Errorf("%w: the canary is being promoted", ErrCanaryConflict)
	}
	s.endCanary(u, run, canary.Aborted, reason)
	s.mu.Lock()
	u.rejected[run.sha256] = reason
	s.mu.Unlock()
	s.cfg.Logger.Info("canary aborted; the running version serves on, unchanged", "scanner", name, "canary_sha256", short(run.sha256), "reason", reason)
	return run.cmp.Status(0), nil
}

// CanaryRejected says why digest sha was aborted as scanner name's
// canary, if it was.
func (s *Set) CanaryRejected(name, sha string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.units[name]; u != nil {
		why, ok := u.rejected[sha]
		return why, ok
	}
	return "", false
}

// endCanary detaches run from u (the next sweep runs without it), stops
// its plugin and records how it ended.
func (s *Set) endCanary(u *Unit, run *canaryRun, state, reason string) {
	u.run.SetCanary(nil)
	if s.cfg.Taps != nil {
		s.cfg.Taps.For(u.name).Set(nil)
	}
	s.mu.Lock()
	if u.canary == run {
		u.canary = nil
	}
	u.last = run.cmp
	s.mu.Unlock()
	run.cmp.End(state, reason)
	s.stopCanary(run)
	s.cfg.Changes.Notify()
}

// stopCanary stops a canary's plugin in the background of its calls:
// the sweep under way may still hold a lease, which Stop waits for.
func (s *Set) stopCanary(run *canaryRun) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StopTimeout)
	defer cancel()
	_ = run.sup.Stop(ctx)
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
