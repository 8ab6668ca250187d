package host

// The shutdown: every service stops, phase by phase, within the
// configured shutdown_timeout.

import (
	"context"
	"errors"
	"time"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
)

// errStillStopping says a stop ran past its phase's end.
var errStillStopping = errors.New("still stopping at the end of its phase")

// shutdown stops the services within shutdown_timeout (the budget), in
// the phases of shutdownPhases; a reload in progress finishes after the
// first, and none starts after it.
func (h *Host) shutdown() {
	start := h.clk.Now()
	budget := h.config().ShutdownTimeout
	at := func(percent int) time.Time { return start.Add(budget * time.Duration(percent) / 100) }
	h.log.Info("shutting down", "timeout", budget)

	stop := func(ph phase) {
		err := h.within(at(ph.end), at(ph.hard), func(ctx context.Context) error { return service.StopAll(ctx, ph.svcs...) })
		if err != nil && ph.cut != "" {
			h.log.Warn(ph.cut, "error", err)
		}
	}
	phases := h.shutdownPhases()
	stop(phases[0])
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	for _, ph := range phases[1:] {
		stop(ph)
	}
	h.log.Info("shutdown complete", "took", clock.Since(h.clk, start).Round(time.Millisecond))
}

// phase is a step of the shutdown: its services stop at once, with a
// context that ends at end percent of the budget, waited for until hard
// percent (never past 100: the whole shutdown stays within its budget).
type phase struct {
	end, hard int
	svcs      []service.Service
	// cut is logged when the phase's stops were cut short ("" for none).
	cut string
}

// shutdownPhases are the shutdown's phases, in order:
//
//  0. What keeps the host's view current stops (it follows the run
//     context already).
//  1. Dispatching has stopped (the runners follow the run context) and the
//     completion listeners stop receiving; scans and cascades in flight
//     get up to half the budget, then they are cancelled.
//  2. The plugins are closed gracefully, all at once, and killed at 90%
//     of the budget.
//  3. HTTP last, so /readyz reports the shutdown until the end; the
//     audit trail with it, once the scanners' last actions are queued.
//  4. This host gives up its share of the partitions, for the others to
//     take at once, in what is left of the budget (the entries lapse on
//     their own when it runs out).
func (h *Host) shutdownPhases() []phase {
	// A nil pointer in an interface would be called.
	var endpoints, share []service.Service
	if h.http != nil {
		endpoints = append(endpoints, h.http)
	}
	if h.audit != nil {
		// After the scanners: their last actions are written.
		endpoints = append(endpoints, h.audit)
	}
	if h.share != nil {
		share = append(share, h.share)
	}
	return []phase{
		{end: 50, hard: 50, svcs: h.background()},
		{end: 50, hard: 60, svcs: []service.Service{service.StopFunc(h.units.StopDispatch), h.listeners},
			cut: "scans or cascades still in flight at half the shutdown budget were cancelled"},
		{end: 90, hard: 90, svcs: []service.Service{h.units}},
		{end: 95, hard: 95, svcs: endpoints},
		{end: 100, hard: 100, svcs: share},
	}
}

// within runs stop with a context that ends at deadline and waits for it
// until hard at the latest: a stop that overruns its context is left
// behind (the process is about to exit), and within returns
// errStillStopping.
func (h *Host) within(deadline, hard time.Time, stop func(context.Context) error) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- stop(ctx) }()
	t := h.clk.NewTimer(hard.Sub(h.clk.Now()))
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C():
		return errStillStopping
	}
}
