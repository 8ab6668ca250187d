// Package launcher turns a scanner's configuration into a running plugin:
// verify the binary (catalog checks and sha256 pin, every time), start it
// through pluginhost.Launch, pick the configured scanner out of what the
// binary serves, check its Info, bind the callback service to the command
// policy of that Info (per instance: during a hot swap two instances of a
// scanner may run side by side), and Configure it with the operator's
// options. It also answers the supervisor's questions for hot swaps: what a
// launch would start now (Check) and whether a configuration change can be
// applied to a running instance in place (Reconfigure).
package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/internal/plaintext"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Config is what one scanner's launches need.
type Config struct {
	// Scanner is the scanner name (Info.Name) to use from the binary.
	Scanner string
	// Binary is the file name in the catalog.
	Binary string
	// Pin is the optional sha256 pin (hex).
	Pin string
	// LegacyCallbacks lets the confined plugin connect() to the host's
	// broker (config.Scanner.LegacyCallbacks).
	LegacyCallbacks bool
	// Options are the operator's scanner options.
	Options map[string]string
	// ReadOnly registers a policy that refuses writes and FCALLs (dry
	// runs).
	ReadOnly bool
	// StartTimeout bounds the launch handshake and Info.
	StartTimeout time.Duration
	// Isolation confines the plugin process (plugin_isolation).
	Isolation pluginhost.Isolation
	// MemoryLimit bounds the plugin process's memory, in bytes
	// (plugin_memory_limit; 0: none).
	MemoryLimit int64
	// Cgroups puts the plugin in a control group of its own bounded by
	// MemoryLimit, CPULimit and PidsLimit (nil: rlimits alone).
	Cgroups   *pluginhost.Cgroups
	CPULimit  float64
	PidsLimit int64
	// NoCgroups says why Cgroups is nil, for status.
	NoCgroups string
	// Shadow, when set, runs the scanner in shadow mode: its writes are
	// held back and recorded there (callbacks.Policy.WithShadow).
	Shadow *shadow.Log
	// Tap, when set, hears of every write the scanner decides on (a
	// canary comparison's side, host/canary).
	Tap func(shadow.Decision)
	// Exact, when set, is the sha256 every launch must start: the
	// private copy of those bytes, or the file if it still holds them
	// (catalog.StageExact). It holds a scanner at the version it runs
	// while a canary of the file in plugin_dir runs beside it.
	Exact string
	// Locked, when set, must accept the binary's name and sha256 before
	// every launch (and every swap's check): plugin_signature: required,
	// the binary locked by `ffscan plugins install`.
	Locked func(binary, sha256 string) error
	// Audit, when set, records every write the scanner runs (not in
	// shadow or read-only), with the plugin's digest.
	Audit *audit.Recorder
	// Approvals admits the scanner's declared policy (nil: no approval
	// is needed, for test kits that build their own plugins).
	Approvals *policy.Store
	// CallbackPath picks how the plugin's callback batches reach the
	// host; the zero value is the production path, the others are the
	// paths of older plugins, for benchmarks that compare them in one run.
	CallbackPath pluginhost.CallbackPath
	// Postgres says the host has a FlowFabric Postgres database; a scanner
	// with Postgres sources is refused at launch without one.
	Postgres bool
	// NoValkey says the host serves a Postgres database alone; a scanner
	// of a Valkey deployment is refused at launch.
	NoValkey bool
}

// Launcher implements supervisor.Launcher for one scanner.
type Launcher struct {
	cfg     Config
	catalog *catalog.Catalog
	svc     *callbacks.Service
	log     hclog.Logger
	observe func([]scannerapi.Command, []scannerapi.Reply)
}

// Observe makes every batch the launched scanners run through the
// callback service visible to fn, with its replies (test kits).
func (l *Launcher) Observe(fn func([]scannerapi.Command, []scannerapi.Reply)) { l.observe = fn }

// New returns a launcher. log should already carry the scanner name.
func New(cfg Config, cat *catalog.Catalog, svc *callbacks.Service, log hclog.Logger) *Launcher {
	return &Launcher{cfg: cfg, catalog: cat, svc: svc, log: log}
}

// Launch starts a fresh plugin process. Any failure after the process
// started kills it before returning; the Meta returned with an error
// carries the verified file's sha256 when the catalog checks passed.
func (l *Launcher) Launch(ctx context.Context) (supervisor.Instance, supervisor.Meta, error) {
	// The process runs a private copy of exactly the bytes that were
	// checked (and pinned), so replacing the file in plugin_dir between
	// the check and the exec cannot slip other code in.
	stage := l.catalog.Stage
	if l.cfg.Exact != "" {
		stage = func(name, pin string) (catalog.Entry, error) { return l.catalog.StageExact(name, pin, l.cfg.Exact) }
	}
	entry, err := stage(l.cfg.Binary, l.cfg.Pin)
	if err != nil {
		return nil, supervisor.Meta{}, err
	}
	meta := supervisor.Meta{Path: entry.Path, SHA256: entry.SHA256}
	if l.cfg.Locked != nil {
		if err := l.cfg.Locked(entry.Name, entry.SHA256); err != nil {
			return nil, meta, err
		}
	}
	// The plugin's callbacks run under the policy of this instance's own
	// Info, known only once it answered; until then they are refused.
	cb := &lateCallbacks{}
	p, err := pluginhost.Launch(ctx, pluginhost.LaunchConfig{
		Path: entry.ExecPath,
		// The plugin's stderr reaches the host's log through this
		// logger: one bounded line per line or field it writes.
		Logger:       plaintext.Logger(l.log, plaintext.Max),
		Callbacks:    cb,
		StartTimeout: l.cfg.StartTimeout,
		Isolation:    l.cfg.Isolation,
		MemoryLimit:  l.cfg.MemoryLimit,
		Cgroups:      l.cfg.Cgroups,
		CPULimit:     l.cfg.CPULimit,
		PidsLimit:    l.cfg.PidsLimit,
		CallbackPath: l.cfg.CallbackPath,
		AllowConnect: l.cfg.LegacyCallbacks,
	})
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			// The private copy lives under TMPDIR; a noexec mount there
			// makes every launch fail this way.
			err = fmt.Errorf("%w (the plugin runs from a private copy at %s: if the temporary directory is mounted noexec, point TMPDIR at one that allows exec)", err, entry.ExecPath)
		}
		return nil, meta, err
	}
	meta.APIVersion = p.APIVersion()
	meta.Isolation = p.Isolation()
	meta.Bounds = p.Bounds()
	if l.cfg.Cgroups == nil && l.cfg.NoCgroups != "" {
		meta.Bounds += "; " + l.cfg.NoCgroups
	}
	if strings.HasPrefix(meta.Isolation, "none") {
		// Degraded, never silently.
		l.log.Warn("plugin runs unconfined: it can read what the host's user can read and reach the network", "isolation", meta.Isolation)
	}
	inst, err := l.prepare(ctx, p, &meta, cb)
	if err != nil {
		p.Kill()
		return nil, meta, err
	}
	return inst, meta, nil
}

// Check implements supervisor.Checker: the catalog checks and the sha256
// of the file a launch would start now.
func (l *Launcher) Check() (supervisor.Meta, error) {
	entry, err := l.catalog.Verify(l.cfg.Binary, l.cfg.Pin)
	if err != nil {
		return supervisor.Meta{}, err
	}
	meta := supervisor.Meta{Path: entry.Path, SHA256: entry.SHA256}
	if l.cfg.Locked != nil {
		if err := l.cfg.Locked(entry.Name, entry.SHA256); err != nil {
			return meta, err
		}
	}
	return meta, nil
}

// Config returns the launcher's configuration.
func (l *Launcher) Config() Config { return l.cfg }

// With returns a launcher like l with configuration cfg (same catalog,
// callbacks, log and observer).
func (l *Launcher) With(cfg Config) *Launcher {
	n := *l
	n.cfg = cfg
	return &n
}

// Fresh implements supervisor.Freshener: a swap takes the file in
// plugin_dir, not the bytes a launcher was held at.
func (l *Launcher) Fresh() supervisor.Launcher {
	if l.cfg.Exact == "" {
		return l
	}
	cfg := l.cfg
	cfg.Exact = ""
	return l.With(cfg)
}

// Reconfigure implements supervisor.Reconfigurer. A running instance takes
// new options in place when only the options changed and its scanner
// accepts Configure while it runs (API version 2 and later): they are
// checked against its schema and applied; a scanner that rejects them
// keeps the old ones (and the error says so). Anything else (another
// binary or pin, a version 1 scanner) needs a new process.
func (l *Launcher) Reconfigure(ctx context.Context, si supervisor.Instance) (bool, error) {
	inst, ok := si.(*Instance)
	if !ok {
		return false, nil
	}
	inst.mu.Lock()
	old := inst.cfg
	inst.mu.Unlock()
	if old.Scanner != l.cfg.Scanner || old.Binary != l.cfg.Binary || old.Pin != l.cfg.Pin || old.ReadOnly != l.cfg.ReadOnly ||
		old.LegacyCallbacks != l.cfg.LegacyCallbacks || old.Shadow != l.cfg.Shadow || old.MemoryLimit != l.cfg.MemoryLimit ||
		old.CPULimit != l.cfg.CPULimit || old.PidsLimit != l.cfg.PidsLimit || (l.cfg.Exact != "" && l.cfg.Exact != inst.sha256) {
		return false, nil
	}
	if maps.Equal(old.Options, l.cfg.Options) {
		return true, nil
	}
	if !pluginhost.LiveConfigure(inst.apiVersion) {
		return false, nil
	}
	opts, err := ResolveOptions(l.cfg.Scanner, inst.info.Options, l.cfg.Options)
	if err != nil {
		return false, err
	}
	if err := inst.sc.Configure(ctx, opts); err != nil {
		return false, fmt.Errorf("scanner %s rejected the new options (the old ones stay in force): %w", l.cfg.Scanner, plaintext.Error(err, plaintext.Max))
	}
	inst.mu.Lock()
	inst.cfg = l.cfg
	inst.mu.Unlock()
	return true, nil
}

func (l *Launcher) prepare(ctx context.Context, p *pluginhost.Plugin, meta *supervisor.Meta, cb *lateCallbacks) (*Instance, error) {
	sc, ok := p.Scanner(l.cfg.Scanner)
	if !ok {
		var names []string
		for _, s := range p.Scanners() {
			names = append(names, s.Info().Name)
		}
		return nil, fmt.Errorf("plugin %s serves scanners [%s], not %q (set scanners.%s.plugin to the binary that does)", meta.Path, strings.Join(names, ", "), l.cfg.Scanner, l.cfg.Scanner)
	}
	info := sc.Info()
	meta.Version = plaintext.Line(info.Version, 64)
	if err := scheduler.CheckInfo(info); err != nil {
		return nil, err
	}
	if info.UsesPostgres() && !l.cfg.Postgres {
		return nil, fmt.Errorf("scanner %s works on a FlowFabric Postgres database and this host has none: set postgres.dsn (or --postgres-dsn)", l.cfg.Scanner)
	}
	if !info.UsesPostgres() && l.cfg.NoValkey {
		return nil, fmt.Errorf("scanner %s works on Valkey and this host has none (it serves its Postgres database alone): set valkey.addrs, or run the Postgres reconcilers (pg_*)", l.cfg.Scanner)
	}
	opts, err := ResolveOptions(l.cfg.Scanner, info.Options, l.cfg.Options)
	if err != nil {
		return nil, err
	}
	if err := CheckCommands(l.cfg.Scanner, info); err != nil {
		return nil, err
	}
	if a := l.cfg.Approvals; a != nil {
		// Before the plugin can run a single command: a binary that
		// declares more than the operator approved never gets a policy.
		dec, err := a.Admit(l.cfg.Scanner, meta.SHA256, policy.FromInfo(info))
		if err != nil {
			return nil, err
		}
		meta.Policy = dec.Record.Digest
		if dec.FirstUse {
			pol := policy.FromInfo(info)
			l.log.Info("plugin policy approved on first use", "policy", pol.Digest()[:12], "grants", strings.Join(pol.Lines(), "; "), "approvals", a.Path())
			if w := pol.UnscopedWrites(); len(w) > 0 {
				l.log.Warn("the plugin may write any ff: key with these commands (they have no key scope)", "commands", strings.Join(w, " "))
			}
		}
	}
	pol, _ := callbacks.PolicyFromInfo(info, l.cfg.ReadOnly)
	if l.cfg.Shadow != nil {
		pol = pol.WithShadow(l.cfg.Shadow)
	}
	if l.cfg.Tap != nil {
		pol = pol.WithTap(l.cfg.Tap)
	}
	if rec := l.cfg.Audit; rec != nil && l.cfg.Shadow == nil && !l.cfg.ReadOnly {
		scanner, digest := l.cfg.Scanner, meta.SHA256
		pol = pol.WithAudit(func(d shadow.Decision, outcome string) {
			rec.RecordWrite(scanner, digest, d, outcome)
		})
	}
	bound := l.svc.Bind(l.cfg.Scanner, pol).Callbacks()
	if obs := l.observe; obs != nil {
		inner := bound
		bound = pluginhost.CallbacksFunc(func(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
			replies, err := inner.Exec(ctx, scanner, cmds)
			if err == nil {
				obs(cmds, replies)
			}
			return replies, err
		})
	}
	cb.set(bound)
	if err := sc.Configure(ctx, opts); err != nil {
		return nil, fmt.Errorf("scanner %s rejected its options: %w", l.cfg.Scanner, plaintext.Error(err, plaintext.Max))
	}
	return &Instance{p: p, sc: sc, info: info, host: pluginhost.BindHost(bound, l.cfg.Scanner), apiVersion: p.APIVersion(), cfg: l.cfg, sha256: meta.SHA256}, nil
}

// lateCallbacks forwards to callbacks set once the policy is known.
type lateCallbacks struct {
	cb atomic.Pointer[pluginhost.Callbacks]
}

func (c *lateCallbacks) set(cb pluginhost.Callbacks) { c.cb.Store(&cb) }

func (c *lateCallbacks) Exec(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	cb := c.cb.Load()
	if cb == nil {
		return nil, fmt.Errorf("callbacks: scanner %q is not ready for commands yet", scanner)
	}
	return (*cb).Exec(ctx, scanner, cmds)
}

// Instance is a launched plugin serving one scanner.
type Instance struct {
	p          *pluginhost.Plugin
	sc         scannerapi.Scanner
	info       scannerapi.Info
	host       scannerapi.Host
	apiVersion int
	// sha256 is the digest of the bytes it runs.
	sha256 string

	mu  sync.Mutex
	cfg Config // the configuration it runs with
}

// Scanner implements supervisor.Instance.
func (i *Instance) Scanner() scannerapi.Scanner { return i.sc }

// Host implements supervisor.HostInstance: the callback service under
// this instance's own command policy.
func (i *Instance) Host() scannerapi.Host { return i.host }

// APIVersion is the contract version negotiated with the plugin.
func (i *Instance) APIVersion() int { return i.apiVersion }

// Ping implements supervisor.Instance.
func (i *Instance) Ping(ctx context.Context) error { return i.p.Ping(ctx) }

// Exited implements supervisor.Instance.
func (i *Instance) Exited() <-chan struct{} { return i.p.Exited() }

// ExitError is the process's exit status once it exited (nil for a
// clean exit; a *pluginhost.MemoryLimitError past its memory limit).
func (i *Instance) ExitError() error { return i.p.ExitError() }

// Pid implements supervisor.Instance.
func (i *Instance) Pid() int { return i.p.Pid() }

// Usage is the process's control group usage (ok false without one).
func (i *Instance) Usage() (pluginhost.Usage, bool) { return i.p.Usage() }

// Close implements supervisor.Instance.
func (i *Instance) Close(ctx context.Context) error { return i.p.Close(ctx) }

// Kill implements supervisor.Instance.
func (i *Instance) Kill() { i.p.Kill() }

// ResolveOptions checks the operator's options against the scanner's schema
// and fills in declared defaults, so the scanner always sees every option it
// declared. Errors name the config key.
func ResolveOptions(scanner string, specs []scannerapi.OptionSpec, given map[string]string) (map[string]string, error) {
	byName := map[string]scannerapi.OptionSpec{}
	var names []string
	for _, s := range specs {
		byName[s.Name] = s
		names = append(names, s.Name)
	}
	sort.Strings(names)
	out := map[string]string{}
	for _, s := range specs {
		if s.Default != "" {
			out[s.Name] = s.Default
		}
	}
	var keys []string
	for k := range given {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []string
	for _, k := range keys {
		v := given[k]
		key := "scanners." + scanner + ".options." + k
		spec, ok := byName[k]
		if !ok {
			accepted := "none"
			if len(names) > 0 {
				accepted = strings.Join(names, ", ")
			}
			errs = append(errs, fmt.Sprintf("%s: unknown option (the scanner accepts: %s)", key, accepted))
			continue
		}
		if err := checkType(spec.Type, v); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q %v", key, v, err))
			continue
		}
		out[k] = v
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

func checkType(t scannerapi.OptionType, v string) error {
	switch t {
	case scannerapi.OptionInt:
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("is not an integer")
		}
	case scannerapi.OptionBool:
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("is not a boolean")
		}
	case scannerapi.OptionDuration:
		if _, err := time.ParseDuration(v); err != nil {
			return fmt.Errorf("is not a duration")
		}
	}
	return nil
}

// CheckCommands refuses a scanner that declares commands the host never
// runs for a plugin (administrative, scripting, multi-slot: anything
// outside the callback service's table). Such a plugin is refused
// outright rather than started with a warning nobody reads.
func CheckCommands(scanner string, info scannerapi.Info) error {
	if _, unsupported := callbacks.PolicyFromInfo(info, false); len(unsupported) > 0 {
		return fmt.Errorf("scanner %s declares commands no plugin may run: %s (the host runs: %s)",
			scanner, strings.Join(unsupported, ", "), strings.Join(callbacks.SupportedCommands(), " "))
	}
	return nil
}
