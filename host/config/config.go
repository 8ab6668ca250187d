// Package config loads the host configuration: defaults, then a YAML file,
// then FFSCAN_ environment variables, then command-line flags, each layer
// overriding the one before (koanf does the merging).
//
// Decoding is done by hand against a fixed schema instead of with
// mapstructure, so that every unknown key and every bad value is reported
// with its full dotted path and a plain reason, for example
//
//	scanners.lease_expiry.interval: "fast" is not a duration
//
// and all problems are reported at once rather than one per restart.
package config

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sigstore/sigstore-go/pkg/root"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/census"
	"github.com/ffscan/ffscan/host/completions"
	"github.com/ffscan/ffscan/host/filewatch"
	"github.com/ffscan/ffscan/host/keyevents"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Config is the complete host configuration.
type Config struct {
	Valkey Valkey
	// Postgres is a FlowFabric Postgres database the host also serves
	// (empty DSN: none). The host owns the pool; plugins hold no
	// credentials.
	Postgres   Postgres
	Partitions keys.PartitionConfig
	// Lanes the host knows of at boot; merged with ff:idx:lanes.
	Lanes []string
	// PluginDir is where plugin binaries live (see host/catalog).
	// Default: DefaultPluginDir.
	PluginDir string
	// PluginIsolation confines plugin processes: auto (what the kernel
	// offers, a warning when it offers nothing), required (refuse to
	// launch without it) or off.
	PluginIsolation Isolation
	// PluginMemoryLimit bounds each plugin process's memory (its data
	// segment: the Go runtime's heap and stacks), in bytes; a plugin
	// that passes it dies and its supervisor restarts it, saying why. 0:
	// no bound. Default: DefaultPluginMemoryLimit.
	PluginMemoryLimit int64
	// PluginCgroups puts each plugin process in a control group of its
	// own, bounded by PluginMemoryLimit (everything it holds in memory),
	// PluginCPULimit and PluginPidsLimit: auto where the host can make
	// groups (rlimits alone elsewhere, which status says), required
	// (refuse to start without them) or off.
	PluginCgroups string
	// PluginCgroupParent is a delegated cgroup v2 directory for the
	// plugins' groups (empty: found from the host's own group).
	PluginCgroupParent string
	// PluginCPULimit bounds each plugin's CPU time, in CPUs (0: none);
	// in a control group only. Default: DefaultPluginCPULimit.
	PluginCPULimit float64
	// PluginPidsLimit bounds each plugin's tasks, threads included (0:
	// none); in a control group only. Default: DefaultPluginPidsLimit.
	PluginPidsLimit int64
	// PluginApproval is what a launch does for a scanner whose policy
	// (declared commands, key scopes, functions) was never approved:
	// first_use records it as approved, required refuses the launch. A
	// policy wider than the approved one is refused either way.
	PluginApproval string
	// PluginApprovalsFile records the approved policies (host/policy).
	// Empty: ffscan/plugin-approvals.json in the user's configuration
	// directory.
	PluginApprovalsFile string
	// PluginSignature is off (the default) or required: every launch
	// and hot swap of a plugin then needs its binary to be the one the
	// plugin lock records for this platform, which only `ffscan plugins
	// install` (a signature by a trusted key verified) writes.
	PluginSignature string
	// PluginLockFile is the plugin lock (host/distribution). Empty:
	// .ffscan-plugins.lock in PluginDir (LockFile).
	PluginLockFile string
	// PluginTrust is who may sign the plugins `ffscan plugins install`
	// installs, and what they may declare.
	PluginTrust PluginTrust
	Lua         Lua
	HTTP        HTTP
	Log         Log
	// ShutdownTimeout bounds the whole shutdown: stop dispatching, let
	// in-flight scans finish, close and kill plugins.
	ShutdownTimeout time.Duration
	Scheduler       Scheduler
	Callbacks       Callbacks
	// DecisionRecords sizes the shadow and canary rings.
	DecisionRecords DecisionRecords
	// Audit keeps the trail of what scanners and operators did.
	Audit       Audit
	Supervisor  Supervisor
	Watch       Watch
	Completions Completions
	KeyEvents   KeyEvents
	// Scanners is keyed by scanner name (Info.Name).
	Scanners map[string]Scanner
}

// PluginTrust is the operator's trust in plugin publishers.
type PluginTrust struct {
	// Keys are the trusted signing keys by name: PEM ECDSA P-256 public
	// keys (cosign.pub's format).
	Keys map[string]TrustedKey
	// TrustedRoot is a Sigstore trusted root JSON file (the Fulcio CAs,
	// Rekor logs and timestamp authorities keyless signatures are
	// checked against), pinned on disk so that an air-gapped host never
	// fetches it. Identities are the keyless signers it certifies that
	// are trusted, by name; each needs TrustedRoot, and TrustedRoot
	// without an identity trusts nobody, which is refused.
	TrustedRoot string
	Identities  map[string]TrustedIdentity
	// AllowCommands and AllowFunctions bound what an installed plugin's
	// scanners may declare (empty: no bound beyond the approvals).
	AllowCommands  []string
	AllowFunctions []string
}

// TrustedKey is one trusted signing key.
type TrustedKey struct {
	// File is the PEM public key.
	File string
	// NotBefore and NotAfter bound when it verifies (zero: unbounded).
	NotBefore, NotAfter time.Time
}

// TrustedIdentity is one trusted keyless signer: the OIDC issuer and
// the subject (SAN) of its Fulcio certificates, exactly or by a regular
// expression matched against the whole subject.
type TrustedIdentity struct {
	Issuer        string
	Subject       string
	SubjectRegexp string
}

// LockFile is the plugin lock's path (plugin_lock_file or its default).
func (c *Config) LockFile() string {
	if c.PluginLockFile != "" {
		return c.PluginLockFile
	}
	return filepath.Join(c.PluginDir, ".ffscan-plugins.lock")
}

// Signature values of plugin_signature.
const (
	SignatureOff      = "off"
	SignatureRequired = "required"
)

// KeyEvents configures the use of the servers' new-key events
// (host/keyevents): with them, partitions read empty are not read again
// until one of their keys is created.
type KeyEvents struct {
	// Mode: auto uses them where every master publishes them
	// (notify-keyspace-events with "E" and "n"); off never.
	Mode string
	// Configure lets the host add "E" and "n" to a node's
	// notify-keyspace-events where they are missing (CONFIG SET).
	Configure bool
	// SafetyInterval bounds how long a partition read empty is skipped
	// without an event: the longest a lost event can hide work.
	SafetyInterval time.Duration
}

// Watch configures the polling of files a running host reacts to.
type Watch struct {
	// Config reloads the configuration when its file changes (SIGHUP
	// always does).
	Config bool
	// Plugins hot-swaps a scanner whose plugin binary changed.
	Plugins bool
	// Interval between polls (stat; sha256 only after a change).
	Interval time.Duration
}

// Completions configures the completion listener (push-path dependency
// resolution on ff:dag:completions, see host/completions).
type Completions struct {
	Enabled bool
	// Concurrency bounds the cascades in flight.
	Concurrency int
}

// Valkey is how to reach the server or cluster. Credentials stay in the host:
// plugins reach Valkey only through the host's callback service.
type Valkey struct {
	// Addrs are the seed addresses. None: the host serves its Postgres
	// database alone (Load leaves them empty when postgres.dsn is set and
	// no source names a Valkey address).
	Addrs    []string
	Username string
	Password string
	TLS      TLS
	// Cluster is "auto" (let the client detect it), "on" (require a
	// cluster) or "off" (talk to the first address as a single node).
	Cluster string
}

// Postgres is how to reach a FlowFabric Postgres database.
type Postgres struct {
	// DSN is a libpq connection string or URL; TLS goes through its
	// sslmode, sslrootcert, ... parameters. Keep the password out of the
	// file: PGPASSWORD or a ~/.pgpass entry work, as with psql.
	DSN string
	// PoolSize bounds the host's connections (0: pgx's default, the
	// larger of 4 and the number of CPUs) for everything but the
	// candidate reads.
	PoolSize int
	// ReadConnections are the host's connections for its scanners'
	// candidate reads (0: one per candidate function of the library,
	// postgres.MaxReaderConnections), each function always read on the
	// same one (postgres.Readers: an ANALYZE then costs one new plan per
	// function and host, not one per pooled connection). Fewer share
	// connections among the functions, whose reads then wait for each
	// other. A read-only host reads on its pool instead.
	ReadConnections int
	// SharedTransactions are the action transactions (PGCALLs, completion
	// dispatches) the hosts sharing the database run at once, together:
	// each host runs its part, in proportion to the partitions it owns,
	// at least one (postgres.ActionSlots). 0: the host's pool size, so
	// that several hosts put about the load of one on the server.
	SharedTransactions int
	// Namespace and InstanceTag ("key=value") restrict every Postgres
	// reconciler and the completion push path to the executions of one
	// namespace and/or instance tag, read from the execution's raw_fields
	// (empty: all). One filter for the whole database, so that no
	// reconciler can act outside it (FlowFabric's applies to half of them).
	Namespace   string
	InstanceTag string
	// Pooling says what DSN reaches: "session" (PostgreSQL itself, or a
	// pooler that gives each client a server connection for its whole
	// session) or "transaction" (a pooler such as PgBouncer in transaction
	// mode, which may give each transaction another server connection).
	// Behind a transaction pooler the host prepares no statement it keeps
	// (pgx's exec mode, unless DSN names one), and the completion listener
	// needs ListenDSN.
	Pooling string
	// ListenDSN is the completion listener's connection (LISTEN needs a
	// session): empty for DSN itself; required with Pooling "transaction"
	// while completions are enabled, to PostgreSQL directly or through a
	// session pooler.
	ListenDSN string
}

// Pooling modes of postgres.pooling.
const (
	PoolingSession     = "session"
	PoolingTransaction = "transaction"
)

// Filter is the namespace / instance-tag filter the Postgres settings
// name. Validate has checked it parses.
func (p Postgres) Filter() scannerapi.Filter {
	f, err := scannerapi.ParseFilter(map[string]string{scannerapi.OptionNamespace: p.Namespace, scannerapi.OptionInstanceTag: p.InstanceTag})
	if err != nil {
		return scannerapi.Filter{}
	}
	return f
}

// TLS configures the Valkey connection's TLS.
type TLS struct {
	Enabled    bool
	CAFile     string
	ServerName string
}

// Lua configures the library loader.
type Lua struct {
	// ForceReplace replaces an incompatible flowfabric library.
	ForceReplace bool
}

// HTTP configures the metrics/health/admin listener.
type HTTP struct {
	// Listen is host:port; empty disables the listener.
	Listen string
	// Admin allows the POST endpoints (config reload, plugin reload) on
	// the listener.
	Admin bool
	// AdminRemote accepts Admin on a listener reachable from other
	// machines (any address but loopback). The listener has no TLS, so
	// the admin token would cross the network in the clear: this must be
	// chosen explicitly.
	AdminRemote bool
	// AdminTokenFile holds the token admin requests must present
	// (Authorization: Bearer); created 0600 by the host when missing.
	// Empty: ffscan/admin-token in the user's configuration directory.
	AdminTokenFile string
}

// Log configures hclog.
type Log struct {
	Level string
	JSON  bool
}

// Scheduler tunes how scanners are driven.
type Scheduler struct {
	// Concurrency bounds concurrent ScanPartition calls per scanner.
	Concurrency int
	// CallTimeout is the deadline of one ScanPartition call.
	CallTimeout time.Duration
	// LaneCensus: auto reads only the lane keys that exist (host/census)
	// when that is cheaper than reading every lane's key; on always, off
	// never.
	LaneCensus string
	// Wakeups: a partition whose read showed an entry not due yet is
	// read and scanned again at that entry's due time, between two
	// interval sweeps (host/scheduler, wake.go). false: every interval
	// and only then.
	Wakeups bool
}

// Callbacks is the budget of each scanner's callbacks (callbacks.Budget):
// over it, commands are refused and counted. 0 lifts a bound.
type Callbacks struct {
	MaxInFlight       int
	CommandsPerSecond int
	MaxReplyBytes     int
}

// Supervisor tunes plugin process supervision.
type Supervisor struct {
	// HealthInterval is how often a running plugin is pinged.
	HealthInterval time.Duration
	// StartTimeout bounds launch + handshake + Info + Configure.
	StartTimeout time.Duration
	// SwapProbation is how long the old plugin process is kept after a
	// hot swap, ready to take over again if the new one dies or stops
	// answering. Zero: stopped as soon as it has drained.
	SwapProbation time.Duration
}

// Scanner is the configuration of one scanner.
type Scanner struct {
	// Enabled defaults to true once the scanner is listed.
	Enabled bool
	// Plugin is the binary in PluginDir that serves the scanner. Empty:
	// the binary whose plugin declares a scanner of this name (the host
	// finds it; see host.resolver).
	Plugin string
	// SHA256 pins the binary (hex); checked before every launch.
	SHA256 string
	// Interval overrides Info.DefaultInterval when non-zero.
	Interval time.Duration
	// Batch overrides Info.DefaultBatch when non-zero.
	Batch int
	// Options are passed to Scanner.Configure after checking them against
	// Info.Options.
	Options map[string]string
	// LegacyCallbacks lets the scanner's confined plugin connect() to the
	// host's go-plugin broker, which a plugin built with an SDK older
	// than the callback socket pair's "no dial" needs for its commands.
	// Off by default: a confined plugin may connect to no socket at all
	// (a pathname unix socket is beyond Landlock's reach), so this is
	// the operator's choice for a plugin they know to be old.
	LegacyCallbacks bool
	// MemoryLimit, CPULimit and PidsLimit override plugin_memory_limit,
	// plugin_cpu_limit and plugin_pids_limit for this scanner's plugin
	// when set.
	MemoryLimit *int64
	CPULimit    *float64
	PidsLimit   *int64
	// Mode is act (the default) or shadow: the scanner runs every cycle
	// as usual, but every command of its that would write is held back
	// and recorded (host/shadow), for an operator to see what it would
	// do before it acts.
	Mode string
	// Swap is direct (the default: a changed binary is hot-swapped in
	// after its health check) or canary: a changed binary first runs in
	// shadow beside the running one, its decisions compared item by item
	// (host/canary), until an operator promotes or aborts it, or it is
	// promoted after CanaryPromoteAfter cycles without a difference.
	Swap string
	// CanaryPromoteAfter is how many cycles in a row without a
	// difference promote a canary on their own; 0: only an operator
	// promotes.
	CanaryPromoteAfter int
	// ActionBudget bounds the items the scanner acts on per window;
	// past it the scanner pauses itself until an operator resumes it.
	// nil: the default for the scanner's name (DefaultActionBudget).
	ActionBudget *ActionBudget
}

// ActionBudget is a scanner's action budget (host/scheduler).
type ActionBudget = scheduler.ActionBudget

// destructive are the scanners whose actions end or delete work: each
// has an action budget unless its configuration says otherwise.
var destructive = map[string]bool{
	"lease_expiry": true, "retention_trimmer": true, "cancel_reconciler": true, "attempt_timeout": true, "execution_deadline": true,
	"pg_lease_expiry": true, "pg_retention_trimmer": true, "pg_cancel_reconciler": true, "pg_attempt_timeout": true, "pg_execution_deadline": true,
}

// DefaultActionBudget is scanner name's budget when its configuration
// sets none: for the destructive ones 50,000 items a minute (far above
// what a healthy deployment ends or deletes in a minute, far below what
// a clock step or a wrong partition count would make them act on), for
// the others none. The fraction of items examined stays off by default:
// these scanners read due items only, so nearly all they examine they act
// on.
func DefaultActionBudget(name string) ActionBudget {
	if destructive[name] {
		return ActionBudget{Window: time.Minute, Max: 50000}
	}
	return ActionBudget{}
}

// Budget is the action budget of scanner name configured as s. A
// scanner in shadow mode acts on nothing, so it has none (what it
// reports processed there is what it would have done).
func (s Scanner) Budget(name string) ActionBudget {
	if s.Shadow() {
		return ActionBudget{}
	}
	if s.ActionBudget != nil {
		return *s.ActionBudget
	}
	return DefaultActionBudget(name)
}

// The swap modes.
const (
	SwapDirect = "direct"
	SwapCanary = "canary"
)

// Audit configures the audit trail (host/audit): kept in Valkey (a
// stream per partition) on a host with Valkey, else in Postgres (the
// table ffscan.audit_entry), bounded by entries and by age.
type Audit struct {
	Enabled bool
	// MaxEntries bounds each partition's stream on Valkey, the whole
	// table on Postgres; MaxAge every entry's age; Queue the entries
	// waiting to be written (past it they are dropped and counted).
	MaxEntries int64
	MaxAge     time.Duration
	Queue      int
}

// DecisionRecords sizes the rings of decision records the host keeps
// per scanner: a shadow scanner's held-back writes, a canary's
// differences.
type DecisionRecords struct {
	Shadow int
	Canary int
}

// MaxDecisionRecords bounds each ring (host/shadow.MaxKeep).
const MaxDecisionRecords = 10000

// The scanner modes.
const (
	ModeAct    = "act"
	ModeShadow = "shadow"
)

// LaunchEqual reports whether s and o launch the same plugin process
// the same way: binary, pin, options, callbacks, mode and bounds (a
// difference needs a relaunch; the rest is tuning).
func (s Scanner) LaunchEqual(o Scanner) bool {
	return s.Plugin == o.Plugin && s.SHA256 == o.SHA256 && maps.Equal(s.Options, o.Options) && s.LegacyCallbacks == o.LegacyCallbacks &&
		s.Mode == o.Mode && eqPtr(s.MemoryLimit, o.MemoryLimit) && eqPtr(s.CPULimit, o.CPULimit) && eqPtr(s.PidsLimit, o.PidsLimit)
}

// LaunchedAs is s with the launch settings of what runs (until a
// relaunch as s succeeds).
func (s Scanner) LaunchedAs(running Scanner) Scanner {
	s.Plugin, s.SHA256, s.Options, s.LegacyCallbacks = running.Plugin, running.SHA256, running.Options, running.LegacyCallbacks
	s.Mode, s.MemoryLimit, s.CPULimit, s.PidsLimit = running.Mode, running.MemoryLimit, running.CPULimit, running.PidsLimit
	return s
}

// Shadow reports whether the scanner runs in shadow mode.
func (s Scanner) Shadow() bool { return s.Mode == ModeShadow }

// PluginLimits are the bounds on scanner s's plugin process: its own
// where it sets them, else the host's.
func (c *Config) PluginLimits(s Scanner) pluginhost.Limits {
	return s.Limits(pluginhost.Limits{Memory: c.PluginMemoryLimit, CPU: c.PluginCPULimit, Pids: c.PluginPidsLimit})
}

// Limits are host's bounds l with the scanner's own where it sets them.
func (s Scanner) Limits(l pluginhost.Limits) pluginhost.Limits {
	if s.MemoryLimit != nil {
		l.Memory = *s.MemoryLimit
	}
	if s.CPULimit != nil {
		l.CPU = *s.CPULimit
	}
	if s.PidsLimit != nil {
		l.Pids = *s.PidsLimit
	}
	return l
}

// DefaultPluginCPULimit bounds a plugin's CPU by default: one CPU, so a
// plugin spinning on every core leaves the host the others.
const DefaultPluginCPULimit = 1.0

// DefaultPluginPidsLimit bounds a plugin's tasks by default: a Go
// plugin runs a few tens of threads.
const DefaultPluginPidsLimit = 512

// The plugin_cgroups values.
const (
	CgroupsAuto     = "auto"
	CgroupsRequired = "required"
	CgroupsOff      = "off"
)

// DefaultShutdownTimeout bounds the whole shutdown by default.
const DefaultShutdownTimeout = 10 * time.Second

// DefaultPluginMemoryLimit bounds a plugin process's memory by default:
// ffscan's own use a few tens of MiB.
const DefaultPluginMemoryLimit = 2 << 30

// MinPluginMemoryLimit is the least plugin_memory_limit: below it the Go
// runtime of a plugin cannot start.
const MinPluginMemoryLimit = 64 << 20

// Defaults returns the configuration used when nothing overrides it. The
// services' settings are their own defaults (each service's Default*
// constants), so that a default is written once.
func Defaults() Config {
	budget := callbacks.DefaultBudget
	return Config{
		Valkey:            Valkey{Addrs: []string{"127.0.0.1:6379"}, Cluster: "auto"},
		Partitions:        keys.DefaultPartitionConfig(),
		Lanes:             []string{"default"},
		PluginDir:         DefaultPluginDir(),
		PluginIsolation:   IsolationAuto,
		PluginMemoryLimit: DefaultPluginMemoryLimit,
		PluginCgroups:     CgroupsAuto,
		PluginCPULimit:    DefaultPluginCPULimit,
		PluginPidsLimit:   DefaultPluginPidsLimit,
		PluginApproval:    "first_use",
		PluginSignature:   SignatureOff,
		DecisionRecords:   DecisionRecords{Shadow: 100, Canary: 100},
		Audit:             Audit{Enabled: true, MaxEntries: 100_000, MaxAge: 7 * 24 * time.Hour, Queue: 65_536},
		HTTP:              HTTP{Listen: "127.0.0.1:9464", Admin: true},
		Log:               Log{Level: "info"},
		ShutdownTimeout:   DefaultShutdownTimeout,
		Scheduler: Scheduler{Concurrency: scheduler.DefaultConcurrency, CallTimeout: scheduler.DefaultCallTimeout,
			LaneCensus: string(census.DefaultMode), Wakeups: true},
		Callbacks: Callbacks{MaxInFlight: budget.MaxInFlight, CommandsPerSecond: int(budget.CommandsPerSecond),
			MaxReplyBytes: int(budget.MaxReplyBytes)},
		Supervisor: Supervisor{HealthInterval: supervisor.DefaultHealthInterval, StartTimeout: supervisor.DefaultStartTimeout,
			SwapProbation: supervisor.DefaultSwapProbation},
		Watch:       Watch{Config: true, Plugins: true, Interval: filewatch.DefaultInterval},
		Completions: Completions{Enabled: true, Concurrency: completions.DefaultConcurrency},
		KeyEvents:   KeyEvents{Mode: string(keyevents.DefaultMode), SafetyInterval: scheduler.DefaultQuietFor},
		Postgres:    Postgres{Pooling: PoolingSession},
		Scanners:    map[string]Scanner{},
	}
}

// DefaultPluginDir is the directory "plugins" beside the running executable
// (symlinks resolved): bin/plugins for bin/ffscan, where `make build` puts
// them, and the layout an install keeps (…/bin/ffscan, …/bin/plugins/). A
// default relative to the working directory would find whatever folder
// happens to be called plugins there (in the repository: the plugins'
// source). Empty when the executable's path cannot be read.
func DefaultPluginDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Join(filepath.Dir(exe), "plugins")
}

// MinInterval is the shortest allowed scanner interval (the scheduler's
// floor).
const MinInterval = scheduler.MinInterval

var (
	scannerNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	sha256RE      = regexp.MustCompile(`^[0-9a-f]{64}$`)
	pluginNameRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
)

// problems collects what validate finds, each naming its key.
type problems []error

func (p *problems) bad(key, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

// oneOf checks that v is one of the allowed values.
func (p *problems) oneOf(key, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		p.bad(key, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

// validate checks cross-field rules and ranges that the decoder cannot see
// one value at a time. The bounds of the services' settings are their
// own (each service's Min*/Max* constants): this is the one place they
// are checked.
func (c *Config) validate() []error {
	var p problems
	c.validateValkey(&p)
	c.validatePostgres(&p)
	c.validateHost(&p)
	c.validateServices(&p)
	for name, s := range c.Scanners {
		c.validateScanner(&p, name, s)
	}
	return p
}

func (c *Config) validateValkey(p *problems) {
	if len(c.Valkey.Addrs) == 0 && c.Postgres.DSN == "" {
		p.bad("valkey.addrs", "at least one address is required (a host without Valkey serves a Postgres database: set postgres.dsn)")
	}
	for i, a := range c.Valkey.Addrs {
		if !strings.Contains(a, ":") {
			p.bad(fmt.Sprintf("valkey.addrs[%d]", i), "%q is not host:port", a)
		}
	}
	p.oneOf("valkey.cluster", c.Valkey.Cluster, "auto", "on", "off")
	if c.Valkey.TLS.CAFile != "" && !c.Valkey.TLS.Enabled {
		p.bad("valkey.tls.ca_file", "is set but valkey.tls.enabled is false")
	}
	if len(c.Lanes) == 0 {
		p.bad("lanes", "at least one lane is required")
	}
	for i, l := range c.Lanes {
		if err := keys.ValidateLane(l); err != nil {
			p.bad(fmt.Sprintf("lanes[%d]", i), "%v", err)
		}
	}
}

func (c *Config) validatePostgres(p *problems) {
	if c.Postgres.DSN != "" {
		if _, err := pgx.ParseConfig(c.Postgres.DSN); err != nil {
			// pgx's message may quote the DSN, password included.
			p.bad("postgres.dsn", "not a valid connection string (a URL postgres://user@host:port/db?sslmode=... or key=value pairs)")
		}
	}
	if c.Postgres.PoolSize < 0 {
		p.bad("postgres.pool_size", "%d is negative", c.Postgres.PoolSize)
	}
	switch n := c.Postgres.ReadConnections; {
	case n < 0:
		p.bad("postgres.read_connections", "%d is negative (0: one per candidate function, %d)", n, postgres.MaxReaderConnections)
	case n > postgres.MaxReaderConnections:
		p.bad("postgres.read_connections", "%d is more than the library's %d candidate functions, one connection each at most", n, postgres.MaxReaderConnections)
	}
	if n := c.Postgres.SharedTransactions; n < 0 {
		p.bad("postgres.shared_transactions", "%d is negative (0: the pool's size)", n)
	}
	if _, err := scannerapi.ParseFilter(map[string]string{scannerapi.OptionInstanceTag: c.Postgres.InstanceTag}); err != nil {
		p.bad("postgres.instance_tag", "%q must be key=value with a non-empty key (a key of the execution's tags)", c.Postgres.InstanceTag)
	}
	if (c.Postgres.Namespace != "" || c.Postgres.InstanceTag != "") && c.Postgres.DSN == "" {
		p.bad("postgres.namespace", "a filter without postgres.dsn filters nothing: set the database or remove the filter")
	}
	p.oneOf("postgres.pooling", c.Postgres.Pooling, PoolingSession, PoolingTransaction)
	if c.Postgres.ListenDSN != "" {
		if c.Postgres.DSN == "" {
			p.bad("postgres.listen_dsn", "is set without postgres.dsn: set the database or remove it")
		}
		if _, err := pgx.ParseConfig(c.Postgres.ListenDSN); err != nil {
			p.bad("postgres.listen_dsn", "not a valid connection string (a URL postgres://user@host:port/db?sslmode=... or key=value pairs)")
		}
	}
	if c.Postgres.DSN == "" || c.Postgres.Pooling != PoolingTransaction {
		return
	}
	// Behind a transaction pooler: LISTEN needs a session of its own,
	// and a statement prepared on one server connection is unknown to
	// the next.
	if c.Completions.Enabled {
		switch c.Postgres.ListenDSN {
		case "":
			p.bad("postgres.listen_dsn", "is required with postgres.pooling: transaction while completions.enabled is on: "+
				"LISTEN needs a session, which a transaction pooler does not keep (it drops LISTEN silently); give a connection "+
				"to PostgreSQL itself or through a session pooler, or set completions.enabled: false (the dependency reconciler "+
				"then dispatches every completion, 15 s late)")
		case c.Postgres.DSN:
			p.bad("postgres.listen_dsn", "is postgres.dsn, which postgres.pooling says goes through a transaction pooler: "+
				"LISTEN needs a connection to PostgreSQL itself or through a session pooler")
		}
	}
	if cfg, err := pgconn.ParseConfig(c.Postgres.DSN); err == nil && cfg.RuntimeParams["default_query_exec_mode"] == "describe_exec" {
		p.bad("postgres.dsn", "default_query_exec_mode=describe_exec prepares a statement in one round trip and runs it in the next, "+
			"which a transaction pooler may send to another server connection: use exec or simple_protocol (or leave it out: "+
			"the host then uses exec)")
	}
}

// validateHost checks the plugins' place and confinement, the HTTP
// listener and the log.
func (c *Config) validateHost(p *problems) {
	p.oneOf("plugin_isolation", string(c.PluginIsolation), string(IsolationAuto), string(IsolationRequired), string(IsolationOff))
	p.oneOf("plugin_approval", c.PluginApproval, "first_use", "required")
	p.oneOf("plugin_cgroups", c.PluginCgroups, CgroupsAuto, CgroupsRequired, CgroupsOff)
	c.validateTrust(p)
	if c.PluginCgroupParent != "" && !filepath.IsAbs(c.PluginCgroupParent) {
		p.bad("plugin_cgroup_parent", "%q is not an absolute path (a cgroup v2 directory, e.g. /sys/fs/cgroup/ffscan.service)", c.PluginCgroupParent)
	}
	checkLimits(p, "plugin_", pluginhost.Limits{Memory: c.PluginMemoryLimit, CPU: c.PluginCPULimit, Pids: c.PluginPidsLimit})
	if c.Audit.MaxEntries < 100 || c.Audit.MaxEntries > 100_000_000 {
		p.bad("audit.max_entries", "%d is not in 100..100000000", c.Audit.MaxEntries)
	}
	if c.Audit.MaxAge < time.Minute {
		p.bad("audit.max_age", "%s is shorter than a minute", c.Audit.MaxAge)
	}
	if c.Audit.Queue < 1 || c.Audit.Queue > 10_000_000 {
		p.bad("audit.queue", "%d is not in 1..10000000", c.Audit.Queue)
	}
	for _, r := range []struct {
		key string
		n   int
	}{{"decision_records.shadow", c.DecisionRecords.Shadow}, {"decision_records.canary", c.DecisionRecords.Canary}} {
		if r.n < 1 || r.n > MaxDecisionRecords {
			p.bad(r.key, "%d is not in 1..%d", r.n, MaxDecisionRecords)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Scanners)) {
		sc := c.Scanners[name]
		p.oneOf("scanners."+name+".mode", sc.Mode, "", ModeAct, ModeShadow)
		p.oneOf("scanners."+name+".swap", sc.Swap, "", SwapDirect, SwapCanary)
		if b := sc.ActionBudget; b != nil {
			checkBudget(p, "scanners."+name+".action_budget.", *b)
		}
		if sc.CanaryPromoteAfter < 0 {
			p.bad("scanners."+name+".canary_promote_after", "%d is negative (0: only an operator promotes a canary)", sc.CanaryPromoteAfter)
		}
		if sc.MemoryLimit != nil || sc.CPULimit != nil || sc.PidsLimit != nil {
			checkLimits(p, "scanners."+name+".", c.PluginLimits(sc))
		}
	}
	if c.PluginDir == "" {
		p.bad("plugin_dir", "must not be empty (and the default, the plugins directory beside the ffscan executable, is unknown: the executable's path could not be read)")
	}
	if c.HTTP.Listen != "" {
		if _, port, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
			p.bad("http.listen", "%q is not host:port (e.g. \"127.0.0.1:9464\"; empty disables the listener)", c.HTTP.Listen)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			p.bad("http.listen", "%q: port %q is not a number in 0..65535", c.HTTP.Listen, port)
		}
	}
	if c.HTTP.Admin && !c.HTTP.AdminRemote && c.HTTP.Listen != "" && !loopbackListen(c.HTTP.Listen) {
		p.bad("http.listen", "%q is reachable from other machines and http.admin is on: the listener has no TLS, so the admin token would cross the network in the clear; bind to 127.0.0.1, set http.admin: false, or accept it with http.admin_remote: true", c.HTTP.Listen)
	}
	p.oneOf("log.level", c.Log.Level, "trace", "debug", "info", "warn", "error")
	if c.ShutdownTimeout < time.Second {
		p.bad("shutdown_timeout", "%s is shorter than 1s", c.ShutdownTimeout)
	}
}

// validateTrust checks plugin_signature, plugin_lock_file and
// plugin_trust (the keys' files are read when an install uses them).
func (c *Config) validateTrust(p *problems) {
	p.oneOf("plugin_signature", c.PluginSignature, SignatureOff, SignatureRequired)
	if c.PluginLockFile != "" && !filepath.IsAbs(c.PluginLockFile) {
		p.bad("plugin_lock_file", "%q is not an absolute path", c.PluginLockFile)
	}
	if c.PluginSignature == SignatureRequired && len(c.PluginTrust.Keys) == 0 && len(c.PluginTrust.Identities) == 0 {
		p.bad("plugin_signature", "required, but plugin_trust.keys lists no key and plugin_trust.identities no identity: nothing could be installed (add the publishers' public keys or keyless identities)")
	}
	c.validateIdentities(p)
	for _, name := range slices.Sorted(maps.Keys(c.PluginTrust.Keys)) {
		k := c.PluginTrust.Keys[name]
		key := "plugin_trust.keys." + name
		if !pluginNameRE.MatchString(name) {
			p.bad(key, "key name %q must be 1-128 of A-Z, a-z, 0-9, '.', '_' and '-'", name)
		}
		if k.File == "" {
			p.bad(key+".file", "must name the key's PEM public key file")
		} else if !filepath.IsAbs(k.File) {
			p.bad(key+".file", "%q is not an absolute path", k.File)
		}
		if !k.NotBefore.IsZero() && !k.NotAfter.IsZero() && !k.NotAfter.After(k.NotBefore) {
			p.bad(key+".not_after", "%s is not after not_before (%s)", k.NotAfter.Format(time.RFC3339), k.NotBefore.Format(time.RFC3339))
		}
	}
	for i, cmd := range c.PluginTrust.AllowCommands {
		if cmd == "" || strings.ContainsAny(cmd, " \t") {
			p.bad(fmt.Sprintf("plugin_trust.allow_commands[%d]", i), "%q is not a command name", cmd)
		}
	}
}

// validateIdentities checks plugin_trust.trusted_root (read now: a
// root that cannot be used is found at load, not at an install) and
// plugin_trust.identities.
func (c *Config) validateIdentities(p *problems) {
	t := c.PluginTrust
	switch {
	case t.TrustedRoot == "" && len(t.Identities) > 0:
		p.bad("plugin_trust.identities", "keyless identities need plugin_trust.trusted_root (the Sigstore trusted root JSON their certificates are checked against)")
	case t.TrustedRoot != "" && len(t.Identities) == 0:
		p.bad("plugin_trust.trusted_root", "set, but plugin_trust.identities names no identity: a trusted root alone trusts nobody (add the issuer and subject of each keyless publisher)")
	}
	if t.TrustedRoot != "" {
		if !filepath.IsAbs(t.TrustedRoot) {
			p.bad("plugin_trust.trusted_root", "%q is not an absolute path", t.TrustedRoot)
		} else if _, err := root.NewTrustedRootFromPath(t.TrustedRoot); err != nil {
			p.bad("plugin_trust.trusted_root", "%s is not a usable Sigstore trusted root: %v", t.TrustedRoot, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.Identities)) {
		id := t.Identities[name]
		key := "plugin_trust.identities." + name
		if !pluginNameRE.MatchString(name) {
			p.bad(key, "identity name %q must be 1-128 of A-Z, a-z, 0-9, '.', '_' and '-'", name)
		}
		if id.Issuer == "" {
			p.bad(key+".issuer", "must name the OIDC issuer (https://token.actions.githubusercontent.com, https://accounts.google.com, ...)")
		}
		switch {
		case id.Subject == "" && id.SubjectRegexp == "":
			p.bad(key, "needs subject (the certificate's exact SAN) or subject_regexp")
		case id.Subject != "" && id.SubjectRegexp != "":
			p.bad(key, "has both subject and subject_regexp: choose one")
		case id.SubjectRegexp != "":
			if _, err := regexp.Compile(id.SubjectRegexp); err != nil {
				p.bad(key+".subject_regexp", "%q: %v", id.SubjectRegexp, err)
			}
		}
	}
}

// validateServices checks the services' settings against their bounds.
func (c *Config) validateServices(p *problems) {
	for _, f := range []struct {
		key string
		v   int
	}{{"callbacks.max_in_flight", c.Callbacks.MaxInFlight}, {"callbacks.commands_per_second", c.Callbacks.CommandsPerSecond}, {"callbacks.max_reply_bytes", c.Callbacks.MaxReplyBytes}} {
		if f.v < 0 {
			p.bad(f.key, "%d is negative (0 lifts the bound)", f.v)
		}
	}
	if c.Scheduler.Concurrency < 1 || c.Scheduler.Concurrency > scheduler.MaxConcurrency {
		p.bad("scheduler.concurrency", "%d is outside 1..%d", c.Scheduler.Concurrency, scheduler.MaxConcurrency)
	}
	if c.Scheduler.CallTimeout <= 0 {
		p.bad("scheduler.call_timeout", "must be positive")
	}
	p.oneOf("scheduler.lane_census", c.Scheduler.LaneCensus, string(census.ModeAuto), string(census.ModeOn), string(census.ModeOff))
	p.oneOf("key_events.mode", c.KeyEvents.Mode, string(keyevents.ModeAuto), string(keyevents.ModeOff))
	if c.KeyEvents.SafetyInterval < scheduler.MinInterval {
		p.bad("key_events.safety_interval", "%s is shorter than %s", c.KeyEvents.SafetyInterval, scheduler.MinInterval)
	}
	if c.Supervisor.HealthInterval <= 0 {
		p.bad("supervisor.health_interval", "must be positive")
	}
	if c.Supervisor.StartTimeout <= 0 {
		p.bad("supervisor.start_timeout", "must be positive")
	}
	if c.Supervisor.SwapProbation > supervisor.MaxSwapProbation {
		p.bad("supervisor.swap_probation", "%s is longer than %s", c.Supervisor.SwapProbation, shortDuration(supervisor.MaxSwapProbation))
	}
	if c.Watch.Interval < filewatch.MinInterval || c.Watch.Interval > filewatch.MaxInterval {
		p.bad("watch.interval", "%s is outside %s..%s", c.Watch.Interval, shortDuration(filewatch.MinInterval), shortDuration(filewatch.MaxInterval))
	}
	if c.Completions.Concurrency < 1 || c.Completions.Concurrency > completions.MaxConcurrency {
		p.bad("completions.concurrency", "%d is outside 1..%d", c.Completions.Concurrency, completions.MaxConcurrency)
	}
}

func (c *Config) validateScanner(p *problems, name string, s Scanner) {
	key := "scanners." + name
	if !scannerNameRE.MatchString(name) {
		p.bad(key, "scanner name %q must be 1-64 of a-z, 0-9, '_' and '-'", name)
	}
	if s.Plugin != "" && !pluginNameRE.MatchString(s.Plugin) {
		p.bad(key+".plugin", "%q is not a plain file name", s.Plugin)
	}
	if s.SHA256 != "" && !sha256RE.MatchString(s.SHA256) {
		p.bad(key+".sha256", "%q is not 64 lowercase hex digits", s.SHA256)
	}
	if s.Interval != 0 && s.Interval < MinInterval {
		p.bad(key+".interval", "%s is shorter than %s", s.Interval, MinInterval)
	}
	if s.Batch < 0 || s.Batch > scheduler.MaxBatch {
		p.bad(key+".batch", "%d is outside 0..%d (0 means the plugin's default)", s.Batch, scheduler.MaxBatch)
	}
	if pg := c.ScannerName(name); pg != name {
		p.bad(key, "on a host without Valkey this is FlowFabric's name of %s, which is configured too: keep one of the two", pg)
	}
}

// shortDuration writes d the way operators write it: 10m, 1h, 100ms.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Enabled returns the names of enabled scanners, sorted.
func (c *Config) Enabled() []string {
	var out []string
	for name, s := range c.Scanners {
		if s.Enabled {
			out = append(out, name)
		}
	}
	sortStrings(out)
	return out
}

// RestartKeys lists the settings that differ between c and n but take
// effect only when the host restarts: the connection to Valkey, the
// partition counts, the plugin directory, the library loader, the HTTP
// listener and the log format. A reload that changes any of them is
// refused, so that what runs never silently differs from the file.
func (c *Config) RestartKeys(n *Config) []string {
	var out []string
	diff := func(key string, changed bool) {
		if changed {
			out = append(out, key)
		}
	}
	diff("valkey.addrs", !slices.Equal(c.Valkey.Addrs, n.Valkey.Addrs))
	diff("valkey.username", c.Valkey.Username != n.Valkey.Username)
	diff("valkey.password", c.Valkey.Password != n.Valkey.Password)
	diff("valkey.cluster", c.Valkey.Cluster != n.Valkey.Cluster)
	diff("valkey.tls", c.Valkey.TLS != n.Valkey.TLS)
	diff("postgres", c.Postgres != n.Postgres)
	diff("partitions", c.Partitions != n.Partitions)
	diff("plugin_dir", c.PluginDir != n.PluginDir)
	diff("plugin_isolation", c.PluginIsolation != n.PluginIsolation)
	diff("plugin_memory_limit", c.PluginMemoryLimit != n.PluginMemoryLimit)
	diff("plugin_cgroups", c.PluginCgroups != n.PluginCgroups || c.PluginCgroupParent != n.PluginCgroupParent)
	diff("plugin_cpu_limit", c.PluginCPULimit != n.PluginCPULimit)
	diff("plugin_pids_limit", c.PluginPidsLimit != n.PluginPidsLimit)
	diff("plugin_approval", c.PluginApproval != n.PluginApproval)
	diff("plugin_approvals_file", c.PluginApprovalsFile != n.PluginApprovalsFile)
	diff("plugin_signature", c.PluginSignature != n.PluginSignature)
	diff("plugin_lock_file", c.LockFile() != n.LockFile())
	diff("lua.force_replace", c.Lua != n.Lua)
	diff("http.listen", c.HTTP.Listen != n.HTTP.Listen)
	diff("http.admin_token_file", c.HTTP.AdminTokenFile != n.HTTP.AdminTokenFile)
	diff("log.json", c.Log.JSON != n.Log.JSON)
	diff("key_events", c.KeyEvents != n.KeyEvents)
	diff("decision_records", c.DecisionRecords != n.DecisionRecords)
	diff("audit", c.Audit != n.Audit)
	return out
}

// checkBudget checks an action budget (prefix names its keys).
func checkBudget(p *problems, prefix string, b ActionBudget) {
	if !b.Off() && (b.Window < time.Second || b.Window > 24*time.Hour) {
		p.bad(prefix+"window", "%s is not between 1s and 24h", b.Window)
	}
	if b.Max < 0 {
		p.bad(prefix+"max", "%d is negative (0: no absolute bound)", b.Max)
	}
	if b.MaxFraction < 0 || b.MaxFraction > 1 {
		p.bad(prefix+"max_fraction", "%g is not in 0..1 (0: no bound)", b.MaxFraction)
	}
	if b.MinExamined < 0 {
		p.bad(prefix+"min_examined", "%d is negative", b.MinExamined)
	}
	if b.CoolDown < 0 {
		p.bad(prefix+"cool_down", "%s is negative (0: only an operator resumes)", b.CoolDown)
	}
}

// checkLimits checks a plugin's bounds (prefix names their keys).
func checkLimits(p *problems, prefix string, l pluginhost.Limits) {
	if l.Memory < 0 || (l.Memory != 0 && l.Memory < MinPluginMemoryLimit) {
		p.bad(prefix+"memory_limit", "%d bytes is too little for a Go plugin to start; at least %d (64 MiB), or 0 for no bound", l.Memory, MinPluginMemoryLimit)
	}
	if l.CPU < 0 || (l.CPU != 0 && l.CPU < 0.01) || l.CPU > 4096 {
		p.bad(prefix+"cpu_limit", "%g is not a number of CPUs (at least 0.01, e.g. 0.5 for half of one), or 0 for no bound", l.CPU)
	}
	if l.Pids < 0 || (l.Pids != 0 && l.Pids < 16) {
		p.bad(prefix+"pids_limit", "%d tasks are too few for a Go plugin (its runtime starts several threads); at least 16, or 0 for no bound", l.Pids)
	}
}

// Equal reports whether two scanner configurations are the same.
func (s Scanner) Equal(o Scanner) bool {
	return s.Enabled == o.Enabled && s.Interval == o.Interval && s.Batch == o.Batch && s.LaunchEqual(o) &&
		s.Swap == o.Swap && s.CanaryPromoteAfter == o.CanaryPromoteAfter && eqPtr(s.ActionBudget, o.ActionBudget)
}

func eqPtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// loopbackListen reports whether a listen address (host:port) accepts
// connections from this machine only: a loopback IP or "localhost". An
// empty host, 0.0.0.0 or :: listen everywhere.
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Isolation is plugin_isolation.
type Isolation string

// The plugin_isolation values.
const (
	IsolationAuto     Isolation = "auto"
	IsolationRequired Isolation = "required"
	IsolationOff      Isolation = "off"
)

// Mode is the launch setting for i.
func (i Isolation) Mode() pluginhost.Isolation {
	switch i {
	case IsolationRequired:
		return pluginhost.IsolationRequired
	case IsolationOff:
		return pluginhost.IsolationOff
	}
	return pluginhost.IsolationAuto
}

// HasValkey reports whether the host serves a Valkey deployment; without
// one it serves its Postgres database alone.
func (c *Config) HasValkey() bool { return len(c.Valkey.Addrs) > 0 }

// flowFabricPostgres maps the names of FlowFabric's Postgres reconcilers
// to the scanners that run them here. Their own names go to the Valkey
// scanners, which are different programs; on a host without Valkey they
// can only mean these.
var flowFabricPostgres = map[string]string{
	"attempt_timeout":           "pg_attempt_timeout",
	"lease_expiry":              "pg_lease_expiry",
	"suspension_timeout":        "pg_suspension_timeout",
	"execution_deadline":        "pg_execution_deadline",
	"delayed_promoter":          "pg_delayed_promoter",
	"pending_wp_expiry":         "pg_pending_wp_expiry",
	"budget_reset":              "pg_budget_reset",
	"dependency":                "pg_dependency",
	"edge_cancel_dispatcher":    "pg_edge_cancel_dispatcher",
	"edge_cancel_reconciler":    "pg_edge_cancel_reconciler",
	"worker_registry_ttl_sweep": "pg_worker_registry_ttl_sweep",
}

// ScannerName is the scanner a name given by an operator (a flag, a
// configuration key) means on this host: on a host without Valkey,
// FlowFabric's name of a Postgres reconciler ("attempt_timeout") means
// ffscan's scanner for it ("pg_attempt_timeout"); every other name is
// itself.
func (c *Config) ScannerName(name string) string {
	if pg, ok := flowFabricPostgres[name]; ok && !c.HasValkey() {
		return pg
	}
	return name
}

// postgresNames renames the scanners configured under FlowFabric's
// Postgres names to ffscan's; a name configured both ways keeps both, and
// validate reports the clash.
func postgresNames(in map[string]Scanner) map[string]Scanner {
	out := make(map[string]Scanner, len(in))
	for name, sc := range in {
		out[name] = sc
	}
	for ff, pg := range flowFabricPostgres {
		sc, ok := in[ff]
		if !ok {
			continue
		}
		if _, both := in[pg]; both {
			continue
		}
		delete(out, ff)
		out[pg] = sc
	}
	return out
}
