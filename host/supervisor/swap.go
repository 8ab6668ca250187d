package supervisor

// This file is hot swap and live update: requests, the health check of a
// new instance, the switch, probation, rollback and their records.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

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
	done := s.loop.Done()
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
				s.recordSwap(SwapRecord{At: s.clk.Now(), From: from, To: from, Outcome: SwapFailed, Reason: "options not applied in place: " + err.Error()})
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
	if f, ok := l.(Freshener); ok && r.kind == reqSwap {
		l = f.Fresh()
	}
	if r.kind == reqSwap && !r.force {
		if ck, ok := l.(Checker); ok {
			m, err := ck.Check()
			if err != nil {
				s.recordSwap(SwapRecord{At: s.clk.Now(), From: from, Outcome: SwapFailed, Reason: err.Error()})
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
	t0 := s.clk.Now()
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
		s.recordSwap(SwapRecord{At: s.clk.Now(), From: from, To: sl.meta, Outcome: SwapFailed, Reason: err.Error()})
		s.answer(r, SwapResult{Outcome: SwapFailed, From: from, To: sl.meta, Err: fmt.Errorf("%w; the running plugin (pid %d, sha256 %s) keeps serving", err, old.inst.Pid(), short(from.SHA256))}, true)
		return
	}

	// The switch: new leases go to the new instance from here on.
	s.mu.Lock()
	s.install(sl)
	s.launch = l
	s.st.Swaps++
	s.prev = old
	s.probeEnd = s.clk.Now().Add(max(s.cfg.SwapProbation, 0))
	s.mu.Unlock()
	s.log.Info("hot swap: switched", "pid", sl.inst.Pid(), "sha256", short(sl.meta.SHA256), "version", sl.meta.Version, "old_pid", old.inst.Pid(), "prepared_in", s.since(t0).Round(time.Millisecond))
	// The old instance gets no new calls; it finishes the ones it has.
	s.drain(old)
	s.recordSwap(SwapRecord{At: s.clk.Now(), From: from, To: sl.meta, Outcome: SwapDone, Reason: r.reason, Probation: s.cfg.SwapProbation > 0})
	s.answer(r, SwapResult{Outcome: SwapDone, From: from, To: sl.meta}, false)
	if s.cfg.SwapProbation <= 0 {
		s.endProbation(nil)
	}
}

// check is a new instance's health check before it gets any call: it must
// answer a ping, stay up for SwapCheck and answer again. A ping is missed
// only after FailedPings tries in a row, as a running instance's are: one
// slow answer from a process that has just started, on a busy machine,
// must not fail a swap (nor the reload that asked for it) any more than
// it restarts a running plugin.
func (s *Supervisor) check(ctx context.Context, sl *slot) error {
	ping := func() error {
		tries := max(s.cfg.FailedPings, 1)
		var err error
		for range tries {
			pctx, cancel := context.WithTimeout(ctx, s.cfg.PingTimeout)
			err = sl.inst.Ping(pctx)
			cancel()
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			select {
			case <-sl.inst.Exited():
				return fmt.Errorf("new plugin (pid %d) exited during its health check: %w", sl.inst.Pid(), err)
			default:
			}
		}
		return fmt.Errorf("new plugin (pid %d) failed its health check (%d pings in a row): %w", sl.inst.Pid(), tries, err)
	}
	if err := ping(); err != nil {
		return err
	}
	t := s.clk.NewTimer(s.cfg.SwapCheck)
	defer t.Stop()
	select {
	case <-sl.inst.Exited():
		return fmt.Errorf("new plugin (pid %d) exited within %s of starting", sl.inst.Pid(), s.cfg.SwapCheck)
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
	}
	return ping()
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
		s.cfg.Changes.Notify()
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
		s.TestSignals.Draining.Signal(sl.inst.Pid())
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
	why := fmt.Sprintf("new plugin (pid %d, sha256 %s) %s %s after the switch", bad.inst.Pid(), short(bad.meta.SHA256), reason, s.since(bad.started).Round(time.Millisecond))
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
	s.recordSwap(SwapRecord{At: s.clk.Now(), From: bad.meta, To: good.meta, Outcome: SwapRolledBack, Reason: why})
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
	s.cfg.Changes.Notify()
	s.mu.Unlock()
}
