package supervisor

// This file is the supervision loop: start an instance, watch it (exit,
// health checks, probation), restart it with backoff, trip the crash-loop
// breaker.

import (
	"context"
	"fmt"
	"strings"
	"time"
)

func (s *Supervisor) supervise(ctx context.Context) {
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
			s.rec.Restart(s.cfg.Name, RestartLaunchFailed)
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
		s.log.Error("plugin failed; restarting", "reason", reason, "ran_for", s.since(failed.started).Round(time.Millisecond))
		if s.since(failed.started) >= s.cfg.StableAfter {
			s.streak = 0
		}
		s.rec.Restart(s.cfg.Name, RestartClass(reason))
		s.mu.Lock()
		s.st.Restarts++
		s.mu.Unlock()
		if !s.failed(ctx, reason) {
			return
		}
	}
}

// start launches one instance with l once the launch gate admits it,
// bounded by StartTimeout from then on.
func (s *Supervisor) start(ctx context.Context, l Launcher) (*slot, error) {
	release, err := s.cfg.Launches.acquire(ctx)
	if err != nil {
		return &slot{}, err
	}
	t0 := s.clk.Now()
	lctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	inst, meta, err := l.Launch(lctx)
	cancel()
	release()
	if err != nil {
		return &slot{meta: meta}, err
	}
	if lr, ok := s.rec.(LaunchRecorder); ok {
		lr.Launched(s.cfg.Name, s.since(t0))
	}
	if ctx.Err() != nil {
		inst.Kill() // stopped while launching
		return &slot{meta: meta}, ctx.Err()
	}
	sl := &slot{inst: inst, meta: meta, info: inst.Scanner().Info(), launcher: l, started: s.clk.Now()}
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
	t := s.clk.NewTicker(s.cfg.HealthInterval)
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
			pt := s.clk.NewTicker(min(s.cfg.HealthInterval, time.Second))
			end := s.clk.NewTimer(s.probeEnd.Sub(s.clk.Now()))
			probeTick, probeEnd = pt.C(), end.C()
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
			select {
			case <-cur.inst.Exited():
				// A dead process does not come back: no point in
				// waiting for more misses, and the reason is the same
				// as when the exit is observed first.
				return exitReason(cur.inst)
			default:
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
		reason, stop := s.watchOnce(ctx, cur, prev, prevExited, probeTick, probeEnd, t.C(), ping, fail)
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
		if r, stop := fail(exitReason(cur.inst)); stop {
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
	case sl := <-s.hung:
		if sl == cur {
			s.mu.Lock()
			n := sl.timeouts
			s.mu.Unlock()
			if r, stop := fail(fmt.Sprintf("%d calls in a row ran into their deadline (the plugin answers health checks but not calls)", n)); stop {
				return r, true
			}
		}
	case req := <-s.reqs:
		s.handle(ctx, req)
	}
	return "", false
}

// failed records a failure and waits before the next attempt: the backoff,
// or the cool-down when the failures form a crash loop. A swap or update
// request during the wait cuts it short (an operator fixed something). It
// returns false when ctx ended during the wait.
func (s *Supervisor) failed(ctx context.Context, reason string) bool {
	now := s.clk.Now()
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
	t := s.clk.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	case r := <-s.reqs:
		s.mu.Lock()
		if r.kind == reqUpdate {
			s.launch = r.launcher
		} else if f, ok := s.launch.(Freshener); ok {
			s.launch = f.Fresh()
		}
		s.mu.Unlock()
		// An operator acted: start afresh.
		s.crashes, s.streak = nil, 0
		s.log.Info("plugin not running; launching it now on request", "reason", r.reason)
		s.answer(r, SwapResult{Outcome: SwapStarted}, true)
		return true
	}
}

// exitReason says why an instance's process exited, with its exit status
// where the instance knows it (a plugin past its memory limit says so).
func exitReason(inst Instance) string {
	if e, ok := inst.(interface{ ExitError() error }); ok {
		if err := e.ExitError(); err != nil {
			return "plugin process exited: " + err.Error()
		}
	}
	return "plugin process exited"
}

// Restart classes: why a plugin was started again, a label of its
// restart metric.
const (
	RestartExited       = "exited"
	RestartMemoryLimit  = "memory_limit"
	RestartHealthCheck  = "health_check"
	RestartHungCalls    = "hung_calls"
	RestartLaunchFailed = "launch_failed"
	RestartOther        = "other"
)

// RestartClass is the class of a failure reason watch returned.
func RestartClass(reason string) string {
	switch {
	case strings.Contains(reason, "passed its memory limit"):
		return RestartMemoryLimit
	case strings.HasPrefix(reason, "plugin process exited"):
		return RestartExited
	case strings.HasPrefix(reason, "health check failed"):
		return RestartHealthCheck
	case strings.Contains(reason, "ran into their deadline"):
		return RestartHungCalls
	}
	return RestartOther
}
