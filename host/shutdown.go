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

// shutdown stops the services within shutdown_timeout (the budget):
//
//  0. What keeps the host's view current stops (it follows the run
//     context already); a reload in progress finishes, and none starts
//     after it.
//  1. Dispatching has stopped (the runners follow the run context) and the
//     completion listeners stop receiving; scans and cascades in flight
//     get up to half the budget, then they are cancelled.
//  2. The plugins are closed gracefully, all at once, and killed at 90%
//     of the budget.
//  3. HTTP last, so /readyz reports the shutdown until the end; then this
//     host gives up its share of the partitions, for the others to take
//     at once.
func (h *Host) shutdown() {
	start := h.clk.Now()
	budget := h.config().ShutdownTimeout
	at := func(percent int) time.Time { return start.Add(budget * time.Duration(percent) / 100) }
	h.log.Info("shutting down", "timeout", budget)

	_ = h.within(at(50), at(50), func(ctx context.Context) error { return service.StopAll(ctx, h.background()...) })
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()

	err := h.within(at(50), at(60), func(ctx context.Context) error {
		return service.StopAll(ctx, service.StopFunc(h.units.StopDispatch), h.listeners)
	})
	if err != nil {
		h.log.Warn("scans or cascades still in flight at half the shutdown budget were cancelled", "error", err)
	}
	_ = h.within(at(90), at(90), h.units.Stop)
	var endpoints []service.Service
	if h.http != nil {
		endpoints = append(endpoints, h.http)
	}
	_ = h.within(at(95), at(95), func(ctx context.Context) error { return service.StopAll(ctx, endpoints...) })
	if h.share != nil {
		_ = h.share.Stop(context.Background())
	}
	h.log.Info("shutdown complete", "took", clock.Since(h.clk, start).Round(time.Millisecond))
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
