package supervisor

// This file is the call leases: how a caller borrows the current
// instance for one RPC, and how an instance is drained before it goes.

import (
	"fmt"
	"sync"
	"time"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

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
	outcome    func(timedOut bool)
}

// Outcome reports how the call made under the lease ended: timedOut when
// it ran into its own deadline. Config.HungCalls such calls in a row on
// one instance (none answered in between) restart it.
func (l *Lease) Outcome(timedOut bool) {
	if l.outcome != nil {
		l.outcome(timedOut)
	}
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
	// timeouts counts calls in a row that ran into their deadline
	// (guarded by Supervisor.mu).
	timeouts int
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

// UsageReporter is an Instance whose process reports its control
// group's usage.
type UsageReporter interface {
	Usage() (pluginhost.Usage, bool)
}

// Usage is the running instance's resource usage; ok is false when none
// runs or it has no control group.
func (s *Supervisor) Usage() (pluginhost.Usage, bool) {
	s.mu.Lock()
	var inst Instance
	if s.cur != nil && s.st.State == StateRunning {
		inst = s.cur.inst
	}
	s.mu.Unlock()
	if r, ok := inst.(UsageReporter); ok {
		return r.Usage()
	}
	return pluginhost.Usage{}, false
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
		outcome: func(timedOut bool) { s.callOutcome(sl, timedOut) },
	}, nil
}

// callOutcome counts a call's end on sl; the HungCalls-th timeout in a row
// on the current instance asks the loop to restart it.
func (s *Supervisor) callOutcome(sl *slot, timedOut bool) {
	s.mu.Lock()
	if !timedOut {
		sl.timeouts = 0
		s.mu.Unlock()
		return
	}
	sl.timeouts++
	trip := sl.timeouts == s.cfg.HungCalls && sl == s.cur
	s.mu.Unlock()
	if trip {
		select {
		case s.hung <- sl:
		default: // one restart request pending is enough
		}
	}
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
	t := s.clk.NewTimer(s.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C():
		return false
	}
}
