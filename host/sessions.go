package host

// Sessions: a scanner run on demand (scan-once, the test kits) through the
// same path as Run.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/explain"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/plugindir"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/host/unit"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// ScanOnce runs one cycle of a scanner over all partitions (partition < 0)
// or one, with a plugin process of its own, and returns what it did. In a
// dry run the scanner is asked not to mutate, and the callback service
// refuses its writes and FCALLs should it try.
func (h *Host) ScanOnce(ctx context.Context, name string, partition int, dryRun bool) (scheduler.Summary, error) {
	s, err := h.OpenSession(ctx, name, SessionOptions{DryRun: dryRun})
	if err != nil {
		return scheduler.Summary{}, err
	}
	defer s.Close()
	return s.Cycle(ctx, partition)
}

// SessionOptions say how OpenSession runs a scanner.
type SessionOptions struct {
	// Linked, when set, is the scanner itself, run in this process
	// instead of a plugin process (wrapped with pluginhost.Linked, so it
	// behaves as a plugin would).
	Linked scannerapi.Scanner
	// DryRun asks for dry-run cycles and refuses writes and FCALLs.
	DryRun bool
	// Observe, when set, sees every batch the scanner runs through the
	// callback service, with its replies (refusals included).
	Observe func(cmds []scannerapi.Command, replies []scannerapi.Reply)
}

// Session runs cycles of one scanner on demand through the same path as
// Run: the configured options checked against the scanner's schema, its
// command policy enforced by the callback service, candidates fetched by
// the scheduler. Test kits and scan-once use it.
type Session struct {
	h       *Host
	name    string
	scanner scannerapi.Scanner
	host    scannerapi.Host
	run     *scheduler.Runner
	dryRun  bool
	close   func()
}

// OpenSession prepares a scanner configured as scanners.<name> (or with
// defaults when it is not configured): a plugin process launched from the
// plugin directory, or opts.Linked.
func (h *Host) OpenSession(ctx context.Context, name string, opts SessionOptions) (*Session, error) {
	if h.readOnly && !opts.DryRun {
		return nil, errors.New("this host was booted read only; it opens dry-run sessions only")
	}
	cfg := h.config()
	sc, ok := cfg.Scanners[name]
	if !ok {
		sc = config.Scanner{Enabled: true, Options: map[string]string{}}
	}
	var scanner scannerapi.Scanner
	var host scannerapi.Host
	closeFn := func() {}
	var err error
	if opts.Linked != nil {
		scanner, host, err = h.linkScanner(ctx, name, sc, opts)
	} else {
		if sc, err = h.scannerConfig(ctx, cfg, name); err != nil {
			return nil, err
		}
		scanner, host, closeFn, err = h.launchScanner(ctx, cfg, name, sc, opts)
	}
	if err != nil {
		return nil, err
	}
	rc := h.sessionRunner(cfg, name, sc)
	rc.Target, rc.Host = staticTarget{scanner}, host
	run := scheduler.New(rc)
	return &Session{h: h, name: name, scanner: scanner, host: host, run: run, dryRun: opts.DryRun, close: closeFn}, nil
}

// linkScanner runs opts.Linked in this process as a plugin would run:
// its Info checked, its options resolved against its schema, its
// callbacks under its declared policy.
func (h *Host) linkScanner(ctx context.Context, name string, sc config.Scanner, opts SessionOptions) (scannerapi.Scanner, scannerapi.Host, error) {
	info := opts.Linked.Info()
	if info.Name != name {
		return nil, nil, fmt.Errorf("the linked scanner is named %q, not %q", info.Name, name)
	}
	if err := scannerapi.ValidateInfo(info); err != nil {
		return nil, nil, err
	}
	if err := scheduler.CheckInfo(info); err != nil {
		return nil, nil, err
	}
	if info.UsesPostgres() && h.pg == nil {
		return nil, nil, fmt.Errorf("scanner %s works on a FlowFabric Postgres database and this host has none: set postgres.dsn (or --postgres-dsn)", name)
	}
	if !info.UsesPostgres() && h.client == nil {
		return nil, nil, fmt.Errorf("scanner %s works on Valkey and this host has none (it serves its Postgres database alone): set valkey.addrs", name)
	}
	resolved, err := launcher.ResolveOptions(name, info.Options, sc.Options)
	if err != nil {
		return nil, nil, err
	}
	pol, _ := callbacks.PolicyFromInfo(info, opts.DryRun)
	// In shadow mode as a plugin of the scanner would be.
	if l := h.units.Deps().ShadowLog(name, sc, opts.DryRun); l != nil {
		pol = pol.WithShadow(l)
	}
	cb := observed(h.svc.Bind(name, pol).Callbacks(), opts.Observe)
	scanner := pluginhost.Linked(opts.Linked, cb)
	if err := scanner.Configure(ctx, resolved); err != nil {
		return nil, nil, fmt.Errorf("scanner %s rejected its options: %w", name, err)
	}
	return scanner, pluginhost.BindHost(cb, name), nil
}

// launchScanner launches scanner name's plugin process for a session; the
// returned function stops it.
func (h *Host) launchScanner(ctx context.Context, cfg *config.Config, name string, sc config.Scanner, opts SessionOptions) (scannerapi.Scanner, scannerapi.Host, func(), error) {
	l := h.units.Deps().Launcher(unit.SettingsOf(cfg), name, sc, opts.DryRun)
	l.Observe(opts.Observe)
	inst, _, err := l.Launch(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	closeFn := func() {
		cctx, cancel := context.WithTimeout(context.Background(), sessionCloseTimeout)
		defer cancel()
		_ = inst.Close(cctx)
		inst.Kill()
	}
	return inst.Scanner(), instanceHost(inst), closeFn, nil
}

// sessionCloseTimeout bounds a session plugin's graceful stop.
const sessionCloseTimeout = 5 * time.Second

// observed wraps callbacks so obs sees every batch and its replies.
func observed(cb pluginhost.Callbacks, obs func([]scannerapi.Command, []scannerapi.Reply)) pluginhost.Callbacks {
	if obs == nil {
		return cb
	}
	return pluginhost.CallbacksFunc(func(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		replies, err := cb.Exec(ctx, scanner, cmds)
		if err == nil {
			obs(cmds, replies)
		}
		return replies, err
	})
}

// Cycle runs one cycle over every partition (partition < 0) or one.
func (s *Session) Cycle(ctx context.Context, partition int) (scheduler.Summary, error) {
	// A cycle on demand sees every lane in use now, not as of the last
	// discovery step.
	s.h.lanes.Discover(ctx)
	opts := scheduler.CycleOptions{DryRun: s.dryRun}
	if partition >= 0 {
		if partition > 65535 {
			return scheduler.Summary{}, fmt.Errorf("partition %d is out of range", partition)
		}
		opts.Partitions = []uint16{uint16(partition)}
	}
	return s.run.Cycle(ctx, opts)
}

// LastScanError is why the last failed scan call of the session's cycles
// failed, as status shows a scanner's (empty when none failed).
func (s *Session) LastScanError() string { return s.run.Status().LastError }

// Explain is what the session's scanner does with the execution on its
// next Cycle, and why (Host.Explain, for this one scanner): the same
// plugin process, with the memory and backoff its cycles built.
func (s *Session) Explain(ctx context.Context, id string) (*explain.Report, error) {
	s.h.lanes.Discover(ctx)
	env := s.h.explainEnv()
	// A session scans every partition whatever the owners (scan-once).
	env.Owner = nil
	info := s.scanner.Info()
	st := s.run.Status()
	t := explain.Target{Name: s.name, Enabled: true, State: string(supervisor.StateRunning), Cycle: st.Cycle,
		LastCycleAt: st.LastCycleAt, Interval: info.DefaultInterval, Batch: info.DefaultBatch}
	if tun := s.run.Tuning(); tun.Batch > 0 {
		t.Batch = tun.Batch
	}
	t.Acquire = func() (explain.Instance, error) {
		return explain.Instance{Scanner: s.scanner, Info: info, Host: s.host}, nil
	}
	env.Targets = []explain.Target{t}
	return explain.Explain(ctx, env, id)
}

// Close stops the session's plugin process, if any.
func (s *Session) Close() { s.close() }

type staticTarget struct{ s scannerapi.Scanner }

func (t staticTarget) Current() (scannerapi.Scanner, scannerapi.Info, error) {
	return t.s, t.s.Info(), nil
}

// instanceHost is the Host an instance's calls run on: its own (its
// command policy) when it has one.
func instanceHost(inst supervisor.Instance) scannerapi.Host {
	if hi, ok := inst.(supervisor.HostInstance); ok {
		return hi.Host()
	}
	return nil
}

// scannerConfig is the configuration of scanner name (defaults when it is
// not configured), with the binary that serves it resolved.
func (h *Host) scannerConfig(ctx context.Context, cfg *config.Config, name string) (config.Scanner, error) {
	sc, ok := cfg.Scanners[name]
	if !ok {
		sc = config.Scanner{Enabled: true, Options: map[string]string{}}
	}
	bin, err := h.res.PluginFor(ctx, h.cat, name, sc, plugindir.ProbeOf(cfg), h.log)
	if err != nil {
		return sc, err
	}
	sc.Plugin = bin
	return sc, nil
}
