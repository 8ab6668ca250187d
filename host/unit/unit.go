// Package unit runs the scanners a host has enabled. A unit is one
// scanner: its plugin's supervisor (host/supervisor) and its scheduler's
// runner (host/scheduler), built from the host's shared parts (Deps) and
// the configuration, started and stopped together. A Set holds the
// running units; a reload adds, removes, retunes and relaunches them.
package unit

import (
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// drainMargin is how much longer than a call's timeout an old plugin's
// calls in flight are waited for (a swap's drain, a disabled scanner's
// stop): the call has its own deadline; the margin covers its return.
const drainMargin = 5 * time.Second

// Deps are what every unit (and every session of the host) is built
// from; they are fixed for the host's life.
type Deps struct {
	Catalog   *catalog.Catalog
	Callbacks *callbacks.Service
	// Approvals admits each launch's declared policy.
	Approvals *policy.Store
	// Locked, when set, accepts only the binaries the plugin lock
	// records (plugin_signature: required).
	Locked func(binary, sha256 string) error
	// Client is the host's Valkey (nil: it serves Postgres alone).
	Client valkey.Client
	// Postgres is the host's FlowFabric database (nil: none).
	Postgres *pgxpool.Pool
	// PostgresReads are the connections of the candidate reads (nil:
	// Postgres's).
	PostgresReads *postgres.Readers
	Partitions    keys.PartitionConfig
	// Lanes are the lanes known now (host/lanes).
	Lanes func() []string
	// Owns is this host's share of the partitions (nil: every one).
	Owns  func(keys.Partition) bool
	Epoch *scheduler.StoreEpoch
	// Census says which lane keys exist (nil: every lane key is read).
	Census scheduler.Census
	// Events is the new-key event feed (nil: none; partitions read empty
	// are read at every interval).
	Events scheduler.Events
	// Nodes tells which master serves a partition (each node's calls are
	// dispatched apart).
	Nodes   *scheduler.NodeMap
	Metrics *metrics.Metrics
	Clock   clock.Clock
	// Logger is the host's; each scanner's lines carry its name.
	Logger hclog.Logger
	// Changes, when set, is told of every change of a unit's status.
	Changes *service.Changes
	// Launches bounds the launches of all the host's scanners at once
	// (nil: no bound).
	Launches *supervisor.LaunchGate
	// Cgroups makes each plugin's control group (nil: rlimits alone).
	Cgroups *pluginhost.Cgroups
	// NoCgroups says why there are none, when Cgroups is nil.
	NoCgroups string
	// Shadows are the scanners' shadow logs (scanners in mode shadow).
	Shadows *shadow.Logs
	// Taps link each scanner's launches to its canary comparison (nil:
	// no canary can be started).
	Taps *canary.Taps
	// CanaryRecords is how many differences a canary keeps.
	CanaryRecords int
	// Audit records every write a scanner runs (nil: no trail).
	Audit *audit.Recorder
}

// Settings are the host-wide settings a unit is built with: the
// configuration's sections that apply to every scanner.
type Settings struct {
	Scheduler  config.Scheduler
	KeyEvents  config.KeyEvents
	Supervisor config.Supervisor
	Isolation  pluginhost.Isolation
	// Limits are the host's bounds on a plugin process (a scanner may
	// set its own).
	Limits         pluginhost.Limits
	PostgresFilter scannerapi.Filter
}

// SettingsOf are cfg's settings for units.
func SettingsOf(cfg *config.Config) Settings {
	return Settings{Scheduler: cfg.Scheduler, KeyEvents: cfg.KeyEvents, Supervisor: cfg.Supervisor, Isolation: cfg.PluginIsolation.Mode(),
		Limits: cfg.PluginLimits(config.Scanner{}), PostgresFilter: cfg.Postgres.Filter()}
}

// Log tags every line about a scanner (the plugin's own included) with
// its name.
func (d Deps) Log(name string) hclog.Logger {
	return d.Logger.Named(name).With("scanner", name)
}

// ShadowLog is where scanner name, configured as sc, records the writes
// it holds back in shadow mode: nil when it acts, or when readOnly
// refuses its writes anyway (dry runs). Every way of running a scanner
// (a unit's plugin, a session's plugin or linked scanner) takes its
// callback policy's shadow from here.
func (d Deps) ShadowLog(name string, sc config.Scanner, readOnly bool) *shadow.Log {
	if !sc.Shadow() || readOnly {
		return nil
	}
	if d.Shadows == nil {
		// Never acting by default: without the host's logs, a log of
		// its own.
		return shadow.New(d.Clock, 0)
	}
	return d.Shadows.For(name)
}

// Launcher launches scanner name's plugin as configured in sc; readOnly
// refuses its writes (dry runs).
func (d Deps) Launcher(s Settings, name string, sc config.Scanner, readOnly bool) *launcher.Launcher {
	cfg := d.LaunchConfig(s, name, sc, readOnly)
	cfg.Shadow = d.ShadowLog(name, sc, readOnly)
	if !readOnly && d.Taps != nil {
		// Every launch of the scanner tells its decisions to the tap, so
		// that a canary started later is compared with a process
		// launched before it.
		cfg.Tap = d.Taps.For(name).Running
	}
	return d.NewLauncher(name, cfg)
}

// NewLauncher is a launcher of scanner name's plugin with cfg.
func (d Deps) NewLauncher(name string, cfg launcher.Config) *launcher.Launcher {
	return launcher.New(cfg, d.Catalog, d.Callbacks, d.Log(name))
}

// LaunchConfig is how scanner name's plugin is launched as configured
// in sc, before its shadow log and tap are chosen.
func (d Deps) LaunchConfig(s Settings, name string, sc config.Scanner, readOnly bool) launcher.Config {
	lim := sc.Limits(s.Limits)
	return launcher.Config{
		Scanner:         name,
		Binary:          sc.Plugin,
		Pin:             sc.SHA256,
		LegacyCallbacks: sc.LegacyCallbacks,
		Options:         sc.Options,
		ReadOnly:        readOnly,
		StartTimeout:    s.Supervisor.StartTimeout,
		Isolation:       s.Isolation,
		MemoryLimit:     lim.Memory,
		CPULimit:        lim.CPU,
		PidsLimit:       lim.Pids,
		Cgroups:         d.Cgroups,
		NoCgroups:       d.NoCgroups,
		Approvals:       d.Approvals,
		Locked:          d.Locked,
		Audit:           d.Audit,
		Postgres:        d.Postgres != nil,
		NoValkey:        d.Client == nil,
	}
}

// RunnerConfig is the scheduler configuration of scanner name (its
// Target left to the caller): a unit's (shared partitions, the lane
// census); a session's takes neither and starts its cycles when asked.
func (d Deps) RunnerConfig(s Settings, name string, sc config.Scanner) scheduler.Config {
	return scheduler.Config{
		ActionBudget:   sc.Budget(name),
		Name:           name,
		Client:         d.Client,
		Recorder:       d.Metrics,
		Logger:         d.Log(name),
		Interval:       sc.Interval,
		Batch:          sc.Batch,
		Partitions:     d.Partitions,
		LanesFunc:      d.Lanes,
		Owns:           d.Owns,
		Concurrency:    s.Scheduler.Concurrency,
		CallTimeout:    s.Scheduler.CallTimeout,
		PollOnly:       !s.Scheduler.Wakeups,
		Events:         d.Events,
		Nodes:          d.Nodes,
		QuietFor:       s.KeyEvents.SafetyInterval,
		Clock:          d.Clock,
		Census:         d.Census,
		Epoch:          d.Epoch,
		Postgres:       d.Postgres,
		PostgresReads:  d.PostgresReads,
		PostgresFilter: s.PostgresFilter,
		Changes:        d.Changes,
	}
}

// Unit is one enabled scanner.
type Unit struct {
	name string
	sup  *supervisor.Supervisor
	run  *scheduler.Runner
	// sc is what runs (guarded by the Set's mu).
	sc config.Scanner
	// notApplied says why the configuration's plugin, pin or options for
	// this scanner are not what runs (a reload's update failed); empty
	// when they are. Guarded by the Set's mu.
	notApplied string
	// canary is the new version running beside this one, if any; last
	// the latest canary that ended; rejected the digests of aborted
	// canaries, which a file watch does not start again (all guarded by
	// the Set's mu).
	canary   *canaryRun
	last     *canary.Comparison
	rejected map[string]string
}

func (d Deps) newUnit(s Settings, name string, sc config.Scanner) *Unit {
	log := d.Log(name)
	sup := supervisor.New(supervisor.Config{
		Name:           name,
		HealthInterval: s.Supervisor.HealthInterval,
		StartTimeout:   s.Supervisor.StartTimeout,
		Launches:       d.Launches,
		SwapProbation:  s.Supervisor.SwapProbation,
		DrainTimeout:   s.Scheduler.CallTimeout + drainMargin,
		Clock:          d.Clock,
		Changes:        d.Changes,
		Launcher:       d.Launcher(s, name, sc, false),
		Recorder:       d.Metrics,
		Logger:         log,
	})
	rc := d.RunnerConfig(s, name, sc)
	rc.Target = supTarget{sup}
	run := scheduler.New(rc)
	return &Unit{name: name, sup: sup, run: run, sc: sc, rejected: map[string]string{}}
}

// Supervisor is the unit's plugin supervisor.
func (u *Unit) Supervisor() *supervisor.Supervisor { return u.sup }

// Runner is the unit's scheduler runner.
func (u *Unit) Runner() *scheduler.Runner { return u.run }

// supTarget lets a scheduler lease the supervisor's current instance per
// call, so that hot swaps switch between calls.
type supTarget struct{ s *supervisor.Supervisor }

func (t supTarget) Current() (scannerapi.Scanner, scannerapi.Info, error) { return t.s.Current() }

func (t supTarget) Acquire() (scheduler.Lease, error) {
	l, err := t.s.Acquire()
	if err != nil {
		return scheduler.Lease{}, err
	}
	return scheduler.Lease{Scanner: l.Scanner, Info: l.Info, Host: l.Host, Release: l.Release, Outcome: l.Outcome}, nil
}
