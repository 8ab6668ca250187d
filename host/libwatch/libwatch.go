// Package libwatch keeps the flowfabric library on every primary while the
// host runs. A server restarted without persistence (or a new primary that
// never had it) has lost the library; the host's own FCALLs would load it
// again on "function not found", but producers and workers fail until
// then, and an idle host makes none. So the watch checks every primary
// every Interval and loads the library wherever it went missing.
package libwatch

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/lua"
)

// DefaultInterval is how often the library is checked: a producer sees a
// lost library for at most this long.
const DefaultInterval = 5 * time.Second

// Config configures a Watch. Zero fields take the defaults.
type Config struct {
	Interval time.Duration
	Clock    clock.Clock
	Logger   hclog.Logger
}

func (c Config) withDefaults() Config {
	service.Default(&c.Interval, DefaultInterval)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Watch checks the library on an interval.
type Watch struct {
	loop service.Loop
	lib  *lua.Library
	cfg  Config
	log  hclog.Logger

	mu  sync.Mutex
	err error // the last check's failure; nil when it passed

	// TestSignals fire at the watch's events for tests that Init them.
	TestSignals TestSignals
}

// TestSignals are a Watch's events.
type TestSignals struct {
	// Checked: a check ended; true when it had to load or replace the
	// library somewhere.
	Checked testsignal.Signal[bool]
}

// New returns a watch over lib's primaries; Start runs it.
func New(lib *lua.Library, cfg Config) *Watch {
	cfg = cfg.withDefaults()
	return &Watch{lib: lib, cfg: cfg, log: cfg.Logger}
}

// Start checks every Interval until Stop or until ctx ends.
func (w *Watch) Start(ctx context.Context) error {
	return w.loop.Start(ctx, w.run)
}

// Stop stops checking.
func (w *Watch) Stop(ctx context.Context) error { return w.loop.Stop(ctx) }

// Err is the last check's failure (nil when it passed, or before the
// first): the host is not ready while the library cannot be made sure of.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Verify is Err, except that a failure is checked again first: a check
// that failed during a failover (a dead seed's ROLE, a master not yet
// replaced) says nothing about the cluster once the failover is over, and
// readiness must not depend on when the last check ran. A passing check
// is trusted until the next one.
func (w *Watch) Verify(ctx context.Context) error {
	if w.Err() == nil {
		return nil
	}
	return w.Check(ctx)
}

func (w *Watch) run(ctx context.Context) {
	t := w.cfg.Clock.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := w.Check(ctx); err != nil && ctx.Err() == nil {
			w.log.Error("flowfabric library check failed; checking again", "error", err, "in", w.cfg.Interval)
		}
	}
}

// Check makes every primary serve the library (lua.Library.Ensure) and
// logs every node where it had to load or replace it: at run time that
// means the server lost it.
func (w *Watch) Check(ctx context.Context) error {
	results, err := w.lib.Ensure(ctx)
	reloaded := false
	for _, r := range results {
		if r.Action == lua.ActionKept || r.Action == lua.ActionFlowFabric {
			continue
		}
		reloaded = true
		w.log.Warn("flowfabric library reloaded at run time (the server had lost it: restarted without persistence, or a new primary)",
			"node", r.Node, "action", string(r.Action), "found", r.Found, "version", lua.Version())
	}
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
	w.TestSignals.Checked.Signal(reloaded)
	return err
}
