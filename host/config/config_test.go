package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/pluginhost"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ffscan.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// noEnv keeps the test independent of the developer's environment.
var noEnv = []string{}

func TestDefaults(t *testing.T) {
	cfg, err := Load(Sources{Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:6379"}, cfg.Valkey.Addrs)
	assert.Equal(t, "auto", cfg.Valkey.Cluster)
	assert.Equal(t, keys.PartitionConfig{Flow: 256, Budget: 32, Quota: 32}, cfg.Partitions)
	assert.Equal(t, []string{"default"}, cfg.Lanes)
	assert.Equal(t, 10*time.Second, cfg.ShutdownTimeout)
	assert.Equal(t, 8, cfg.Scheduler.Concurrency)
	assert.Equal(t, 5*time.Second, cfg.Scheduler.CallTimeout)
	assert.Equal(t, "info", cfg.Log.Level)
	assert.Empty(t, cfg.Scanners)
	// The plugins beside the executable, wherever it is run from.
	exe, err := os.Executable()
	require.NoError(t, err)
	exe, err = filepath.EvalSymlinks(exe)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(filepath.Dir(exe), "plugins"), cfg.PluginDir)
}

func TestFileValues(t *testing.T) {
	p := writeFile(t, `
valkey:
  addrs: [10.0.0.1:6379, 10.0.0.2:6379]
  password: secret
partitions: {flow: 64, budget: 8, quota: 4}
lanes: [default, gpu]
scanners:
  leaseexpiry:
    interval: 1500ms
    batch: 50
    options: {limit: 50, verbose: true}
  other:
    enabled: false
    plugin: other-bin
    sha256: ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789
`)
	cfg, err := Load(Sources{File: p, Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:6379", "10.0.0.2:6379"}, cfg.Valkey.Addrs)
	assert.Equal(t, keys.PartitionConfig{Flow: 64, Budget: 8, Quota: 4}, cfg.Partitions)
	le := cfg.Scanners["leaseexpiry"]
	assert.True(t, le.Enabled, "listing a scanner enables it")
	assert.Empty(t, le.Plugin, "no plugin named: the host finds the binary that declares the scanner")
	assert.Equal(t, 1500*time.Millisecond, le.Interval)
	assert.Equal(t, 50, le.Batch)
	assert.Equal(t, map[string]string{"limit": "50", "verbose": "true"}, le.Options)
	o := cfg.Scanners["other"]
	assert.False(t, o.Enabled)
	assert.Equal(t, "other-bin", o.Plugin)
	assert.Equal(t, "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789", o.SHA256)
	assert.Equal(t, []string{"leaseexpiry"}, cfg.Enabled())
}

func TestUnknownKeyNamed(t *testing.T) {
	p := writeFile(t, `
valkey:
  adress: 1.2.3.4:6379
scanners:
  leaseexpiry:
    intervall: 1s
`)
	_, err := Load(Sources{File: p, Environ: noEnv})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrInvalid))
	assert.Contains(t, err.Error(), "valkey.adress: unknown key")
	assert.Contains(t, err.Error(), "scanners.leaseexpiry.intervall: unknown key")
}

func TestBadValuesNamed(t *testing.T) {
	p := writeFile(t, `
shutdown_timeout: 10
partitions: {flow: 0}
log: {level: loud, json: maybe}
scheduler: {concurrency: lots}
scanners:
  leaseexpiry:
    interval: fast
    sha256: nothex
`)
	_, err := Load(Sources{File: p, Environ: noEnv})
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`scanners.leaseexpiry.interval: "fast" is not a duration`,
		`shutdown_timeout: 10 is not a duration`,
		`partitions.flow: 0 is not a partition count in 1..65535`,
		`log.level: "loud" is not one of`,
		`log.json: "maybe" is not a boolean`,
		`scheduler.concurrency: "lots" is not an integer`,
		`scanners.leaseexpiry.sha256: "nothex" is not 64 lowercase hex digits`,
	} {
		assert.Contains(t, msg, want)
	}
}

func TestEnvOverridesFile(t *testing.T) {
	p := writeFile(t, `
valkey: {addrs: [file:1]}
shutdown_timeout: 20s
scanners:
  leaseexpiry: {interval: 1s}
`)
	cfg, err := Load(Sources{File: p, Environ: []string{
		"FFSCAN_VALKEY_ADDR=env:2",
		"FFSCAN_SHUTDOWN_TIMEOUT=3s",
		"FFSCAN_SCANNERS__LEASEEXPIRY__INTERVAL=2s",
		"FFSCAN_SCANNERS__LEASEEXPIRY__OPTIONS__LIMIT=7",
		"FFSCAN_LANES=a,b",
		"FFSCAN_TEST_SERVER=/usr/bin/redis-server", // harness variable, not config
		"OTHER_VAR=ignored",
	}})
	require.NoError(t, err)
	assert.Equal(t, []string{"env:2"}, cfg.Valkey.Addrs)
	assert.Equal(t, 3*time.Second, cfg.ShutdownTimeout)
	assert.Equal(t, 2*time.Second, cfg.Scanners["leaseexpiry"].Interval)
	assert.Equal(t, "7", cfg.Scanners["leaseexpiry"].Options["limit"])
	assert.Equal(t, []string{"a", "b"}, cfg.Lanes)
}

func TestEnvUnknownKeyIsAnError(t *testing.T) {
	_, err := Load(Sources{Environ: []string{"FFSCAN_SHUTDOWN_TIMOUT=3s"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shutdown_timout: unknown key")
}

func TestFlagsOverrideEnv(t *testing.T) {
	cfg, err := Load(Sources{
		Environ: []string{"FFSCAN_VALKEY_ADDR=env:2", "FFSCAN_LOG__LEVEL=debug"},
		Flags:   map[string]any{"valkey.addrs": "flag:3", "http.listen": ""},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"flag:3"}, cfg.Valkey.Addrs)
	assert.Equal(t, "debug", cfg.Log.Level, "env still applies where no flag was given")
	assert.Equal(t, "", cfg.HTTP.Listen)
}

func TestMissingFileIsInvalid(t *testing.T) {
	_, err := Load(Sources{File: filepath.Join(t.TempDir(), "nope.yaml"), Environ: noEnv})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrInvalid))
}

// The shipped example configs must load: they are documentation that
// would otherwise rot.
func TestShippedConfigsLoad(t *testing.T) {
	for _, name := range []string{"ffscan.yaml", "dev.yaml"} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(Sources{File: filepath.Join("..", "..", "configs", name), Environ: noEnv})
			require.NoError(t, err)
		})
	}
}

func TestReloadRelatedKeys(t *testing.T) {
	cfg, err := Load(Sources{Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, Watch{Config: true, Plugins: true, Interval: time.Second}, cfg.Watch)
	assert.Equal(t, Completions{Enabled: true, Concurrency: 16}, cfg.Completions)
	assert.True(t, cfg.HTTP.Admin)
	assert.Equal(t, 10*time.Second, cfg.Supervisor.SwapProbation)

	p := writeFile(t, `
http: {admin: false}
supervisor: {swap_probation: 0s}
watch: {config: false, plugins: false, interval: 250ms}
completions: {enabled: false, concurrency: 4}
`)
	cfg, err = Load(Sources{File: p, Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, Watch{Interval: 250 * time.Millisecond}, cfg.Watch)
	assert.Equal(t, Completions{Concurrency: 4}, cfg.Completions)
	assert.False(t, cfg.HTTP.Admin)
	assert.Zero(t, cfg.Supervisor.SwapProbation)

	p = writeFile(t, `
supervisor: {swap_probation: 1h}
watch: {interval: 10ms}
completions: {concurrency: 0}
`)
	_, err = Load(Sources{File: p, Environ: noEnv})
	require.ErrorIs(t, err, ErrInvalid)
	for _, want := range []string{
		"supervisor.swap_probation: 1h0m0s is longer than 10m",
		"watch.interval: 10ms is outside 100ms..1h",
		"completions.concurrency: 0 is outside 1..1024",
	} {
		assert.ErrorContains(t, err, want)
	}
}

func TestRestartKeys(t *testing.T) {
	a, b := Defaults(), Defaults()
	assert.Empty(t, a.RestartKeys(&b))
	b.Valkey.Addrs = []string{"10.0.0.1:6379"}
	b.Partitions.Flow = 8
	b.HTTP.Listen = ""
	b.Log.Level = "debug" // live
	b.Scheduler.Concurrency = 3
	b.Scanners = map[string]Scanner{"x": {Enabled: true}}
	assert.Equal(t, []string{"valkey.addrs", "partitions", "http.listen"}, a.RestartKeys(&b))

	s := Scanner{Enabled: true, Plugin: "p", Options: map[string]string{"a": "1"}}
	o := s
	o.Options = map[string]string{"a": "1"}
	assert.True(t, s.Equal(o))
	o.Options = map[string]string{"a": "2"}
	assert.False(t, s.Equal(o))
}

// Admin endpoints on a listener other machines can reach must be chosen
// explicitly: they have no authentication of their own.
func TestRemoteAdminMustBeExplicit(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{"http: {listen: \"127.0.0.1:9464\"}\n", true},
		{"http: {listen: \"localhost:9464\"}\n", true},
		{"http: {listen: \"[::1]:9464\"}\n", true},
		{"http: {listen: \"0.0.0.0:9464\"}\n", false},
		{"http: {listen: \":9464\"}\n", false},
		{"http: {listen: \"10.0.0.7:9464\"}\n", false},
		{"http: {listen: \"0.0.0.0:9464\", admin: false}\n", true},
		{"http: {listen: \"0.0.0.0:9464\", admin_remote: true}\n", true},
	} {
		_, err := Load(Sources{File: writeFile(t, tc.body), Environ: noEnv})
		if tc.ok {
			assert.NoError(t, err, tc.body)
			continue
		}
		assert.ErrorIs(t, err, ErrInvalid, tc.body)
		assert.ErrorContains(t, err, "is reachable from other machines and http.admin is on", tc.body)
	}
}

// A listen address that cannot be bound is a configuration error at load,
// not a failure after boot.
func TestBadListenAddressIsRefusedAtLoad(t *testing.T) {
	for _, l := range []string{"9464", "localhost", "127.0.0.1:http", "127.0.0.1:70000"} {
		_, err := Load(Sources{Environ: noEnv, Flags: map[string]any{"http.listen": l}})
		assert.ErrorIs(t, err, ErrInvalid, l)
		assert.ErrorContains(t, err, "http.listen", l)
	}
	_, err := Load(Sources{Environ: noEnv, Flags: map[string]any{"http.listen": ""}})
	assert.NoError(t, err, "empty disables the listener")
}

func TestPostgresSettings(t *testing.T) {
	cfg, err := Load(Sources{Environ: []string{"FFSCAN_POSTGRES__DSN=postgres://ff@db:5432/ff?sslmode=verify-full", "FFSCAN_POSTGRES__POOL_SIZE=12"}})
	require.NoError(t, err)
	assert.Equal(t, "postgres://ff@db:5432/ff?sslmode=verify-full", cfg.Postgres.DSN)
	assert.Equal(t, 12, cfg.Postgres.PoolSize)
	assert.Empty(t, Defaults().Postgres.DSN, "no database unless configured")

	p := writeFile(t, "postgres: {dsn: \"postgres://u:s3cret@[bad\", pool_size: -1}\n")
	_, err = Load(Sources{File: p, Environ: noEnv})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "postgres.dsn: not a valid connection string")
	assert.Contains(t, err.Error(), "postgres.pool_size: -1 is negative")
	assert.NotContains(t, err.Error(), "s3cret", "the password never reaches a message")

	// The candidate reads' connections: 0 (one per function) up to one
	// per function.
	cfg, err = Load(Sources{Environ: []string{"FFSCAN_POSTGRES__DSN=postgres://ff@db/ff", "FFSCAN_POSTGRES__READ_CONNECTIONS=3"}})
	require.NoError(t, err)
	assert.Equal(t, 3, cfg.Postgres.ReadConnections)
	assert.Zero(t, Defaults().Postgres.ReadConnections, "one per candidate function unless configured")
	for n, want := range map[int]string{-1: "postgres.read_connections: -1 is negative",
		postgres.MaxReaderConnections + 1: fmt.Sprintf("postgres.read_connections: %d is more than the library's %d candidate functions",
			postgres.MaxReaderConnections+1, postgres.MaxReaderConnections)} {
		_, err = Load(Sources{File: writeFile(t, fmt.Sprintf("postgres: {dsn: \"postgres://ff@db/ff\", read_connections: %d}\n", n)), Environ: noEnv})
		require.Error(t, err, n)
		assert.Contains(t, err.Error(), want)
	}

	// The action transactions the sharing hosts divide: 0 (the pool's
	// size) or more.
	cfg, err = Load(Sources{Environ: []string{"FFSCAN_POSTGRES__DSN=postgres://ff@db/ff", "FFSCAN_POSTGRES__SHARED_TRANSACTIONS=6"}})
	require.NoError(t, err)
	assert.Equal(t, 6, cfg.Postgres.SharedTransactions)
	assert.Zero(t, Defaults().Postgres.SharedTransactions, "the pool's size unless configured")
	_, err = Load(Sources{File: writeFile(t, "postgres: {dsn: \"postgres://ff@db/ff\", shared_transactions: -2}\n"), Environ: noEnv})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "postgres.shared_transactions: -2 is negative (0: the pool's size)")

	// The database is a restart key, like Valkey's address.
	a, b := Defaults(), Defaults()
	b.Postgres.DSN = "postgres://ff@db/ff"
	assert.Contains(t, a.RestartKeys(&b), "postgres")
	b = a
	b.Postgres.Namespace = "tenant-a"
	assert.Contains(t, a.RestartKeys(&b), "postgres", "so is its filter")
}

func TestPostgresFilter(t *testing.T) {
	cfg, err := Load(Sources{Environ: []string{"FFSCAN_POSTGRES__DSN=postgres://ff@db/ff", "FFSCAN_POSTGRES__NAMESPACE=tenant-a",
		"FFSCAN_POSTGRES__INSTANCE_TAG=cairn.instance_id=i=1"}})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.Filter{Namespace: "tenant-a", TagKey: "cairn.instance_id", TagValue: "i=1"}, cfg.Postgres.Filter(),
		"the tag splits at the first '='")
	assert.True(t, Defaults().Postgres.Filter().IsNoop())

	p := writeFile(t, "postgres: {dsn: \"postgres://ff@db/ff\", instance_tag: \"=v\"}\n")
	_, err = Load(Sources{File: p, Environ: noEnv})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `postgres.instance_tag: "=v" must be key=value with a non-empty key`)

	p = writeFile(t, "postgres: {namespace: tenant-a}\n")
	_, err = Load(Sources{File: p, Environ: noEnv})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a filter without postgres.dsn filters nothing")
}

// A host given a database and no Valkey address serves the database
// alone, and FlowFabric's reconciler names mean the Postgres scanners
// there.
func TestPostgresOnly(t *testing.T) {
	cfg, err := Load(Sources{Environ: []string{"FFSCAN_POSTGRES__DSN=postgres://ff@db/ff"}})
	require.NoError(t, err)
	assert.False(t, cfg.HasValkey())
	assert.Equal(t, "pg_attempt_timeout", cfg.ScannerName("attempt_timeout"))
	assert.Equal(t, "pg_lease_expiry", cfg.ScannerName("pg_lease_expiry"))
	assert.Equal(t, "retention_trimmer", cfg.ScannerName("retention_trimmer"))

	p := writeFile(t, "postgres: {dsn: \"postgres://ff@db/ff\"}\nscanners:\n  attempt_timeout: {interval: 3s}\n  pg_lease_expiry: {}\n")
	cfg, err = Load(Sources{File: p, Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, []string{"pg_attempt_timeout", "pg_lease_expiry"}, cfg.Enabled())
	assert.Equal(t, 3*time.Second, cfg.Scanners["pg_attempt_timeout"].Interval)

	// Named as well: both.
	cfg, err = Load(Sources{Environ: []string{"FFSCAN_POSTGRES__DSN=postgres://ff@db/ff", "FFSCAN_VALKEY__ADDRS=10.0.0.1:6379"}})
	require.NoError(t, err)
	assert.True(t, cfg.HasValkey())
	assert.Equal(t, "attempt_timeout", cfg.ScannerName("attempt_timeout"), "with Valkey the name is the Valkey scanner's")

	p = writeFile(t, "postgres: {dsn: \"postgres://ff@db/ff\"}\nscanners:\n  attempt_timeout: {}\n  pg_attempt_timeout: {}\n")
	_, err = Load(Sources{File: p, Environ: noEnv})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "scanners.attempt_timeout: on a host without Valkey this is FlowFabric's name of pg_attempt_timeout")

	p = writeFile(t, "valkey: {addrs: []}\n")
	_, err = Load(Sources{File: p, Environ: noEnv})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "valkey.addrs: at least one address is required")
	cfg, err = Load(Sources{Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:6379"}, cfg.Valkey.Addrs, "nothing configured: the local Valkey")
}

// A plugin memory limit is 0 (none) or enough for a Go plugin to start.
func TestPluginMemoryLimit(t *testing.T) {
	cfg, err := Load(Sources{Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, int64(DefaultPluginMemoryLimit), cfg.PluginMemoryLimit)
	cfg, err = Load(Sources{File: writeFile(t, "plugin_memory_limit: 0\n"), Environ: noEnv})
	require.NoError(t, err)
	assert.Zero(t, cfg.PluginMemoryLimit)
	_, err = Load(Sources{File: writeFile(t, "plugin_memory_limit: 1000000\n"), Environ: noEnv})
	require.ErrorContains(t, err, "plugin_memory_limit: 1000000 bytes is too little for a Go plugin to start; at least 67108864 (64 MiB), or 0 for no bound")
}

// The plugins' kernel bounds: host-wide defaults, a scanner's own where
// it sets them, and clear refusals of values a plugin cannot run under.
func TestPluginBounds(t *testing.T) {
	cfg, err := Load(Sources{Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, CgroupsAuto, cfg.PluginCgroups)
	assert.Equal(t, pluginhost.Limits{Memory: DefaultPluginMemoryLimit, CPU: DefaultPluginCPULimit, Pids: DefaultPluginPidsLimit},
		cfg.PluginLimits(Scanner{}))

	cfg, err = Load(Sources{File: writeFile(t, `plugin_cgroups: required
plugin_cpu_limit: 0.5
plugin_pids_limit: 64
scanners:
  lease_expiry:
    cpu_limit: "0.25"
    memory_limit: 134217728
  retention:
    pids_limit: 0
`), Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, CgroupsRequired, cfg.PluginCgroups)
	assert.Equal(t, pluginhost.Limits{Memory: 128 << 20, CPU: 0.25, Pids: 64}, cfg.PluginLimits(cfg.Scanners["lease_expiry"]))
	assert.Equal(t, pluginhost.Limits{Memory: DefaultPluginMemoryLimit, CPU: 0.5, Pids: 0}, cfg.PluginLimits(cfg.Scanners["retention"]))
	assert.False(t, cfg.Scanners["lease_expiry"].Equal(cfg.Scanners["retention"]))

	cfg, err = Load(Sources{File: writeFile(t, "scanners:\n  a:\n    mode: shadow\n  b: {}\n"), Environ: noEnv})
	require.NoError(t, err)
	assert.True(t, cfg.Scanners["a"].Shadow())
	assert.Equal(t, ModeAct, cfg.Scanners["b"].Mode)
	assert.False(t, cfg.Scanners["a"].LaunchEqual(cfg.Scanners["b"]), "a mode change needs a relaunch")
	for file, want := range map[string]string{
		"scanners:\n  x:\n    mode: loud\n":         `scanners.x.mode: "loud" is not one of`,
		"plugin_cgroups: maybe\n":                   "plugin_cgroups",
		"plugin_cgroup_parent: relative/dir\n":      `plugin_cgroup_parent: "relative/dir" is not an absolute path`,
		"plugin_cpu_limit: -1\n":                    "plugin_cpu_limit: -1 is not a number of CPUs",
		"plugin_cpu_limit: lots\n":                  `plugin_cpu_limit: "lots" is not a number`,
		"plugin_pids_limit: 3\n":                    "plugin_pids_limit: 3 tasks are too few for a Go plugin",
		"scanners:\n  x:\n    memory_limit: 1000\n": "scanners.x.memory_limit: 1000 bytes is too little",
		"scanners:\n  x:\n    cpu_limit: 0.001\n":   "scanners.x.cpu_limit: 0.001 is not a number of CPUs",
		"scanners:\n  x:\n    pids_limit: [1]\n":    "scanners.x.pids_limit",
	} {
		_, err := Load(Sources{File: writeFile(t, file), Environ: noEnv})
		require.ErrorContains(t, err, want, file)
	}
}

// Behind a transaction pooler (postgres.pooling: transaction) the
// completion listener needs a session of its own: postgres.listen_dsn is
// required while completions are on, and may not be the pooler's DSN; a
// statement mode that prepares in one round trip and runs in the next is
// refused.
func TestPostgresPooling(t *testing.T) {
	assert.Equal(t, PoolingSession, Defaults().Postgres.Pooling)
	load := func(yaml string) (*Config, error) {
		return Load(Sources{File: writeFile(t, yaml), Environ: noEnv})
	}
	cfg, err := load("postgres: {dsn: \"postgres://ff@bouncer:6432/ff\", pooling: transaction, listen_dsn: \"postgres://ff@db:5432/ff\"}\n")
	require.NoError(t, err)
	assert.Equal(t, PoolingTransaction, cfg.Postgres.Pooling)
	assert.Equal(t, "postgres://ff@db:5432/ff", cfg.Postgres.ListenDSN)

	_, err = load("postgres: {dsn: \"postgres://ff@bouncer:6432/ff\", pooling: transaction}\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "postgres.listen_dsn: is required with postgres.pooling: transaction while completions.enabled is on: LISTEN needs a session")

	_, err = load("postgres: {dsn: \"postgres://ff@bouncer:6432/ff\", pooling: transaction, listen_dsn: \"postgres://ff@bouncer:6432/ff\"}\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "postgres.listen_dsn: is postgres.dsn, which postgres.pooling says goes through a transaction pooler")

	cfg, err = load("postgres: {dsn: \"postgres://ff@bouncer:6432/ff\", pooling: transaction}\ncompletions: {enabled: false}\n")
	require.NoError(t, err, "without the listener no session is needed")
	assert.Empty(t, cfg.Postgres.ListenDSN)

	_, err = load("postgres: {dsn: \"postgres://ff@bouncer:6432/ff?default_query_exec_mode=describe_exec\", pooling: transaction, listen_dsn: \"postgres://ff@db/ff\"}\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "postgres.dsn: default_query_exec_mode=describe_exec prepares a statement in one round trip")

	_, err = load("postgres: {dsn: \"postgres://ff@db/ff\", pooling: statement}\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `postgres.pooling: "statement" is not one of session, transaction`)

	_, err = load("postgres: {listen_dsn: \"postgres://ff@db/ff\"}\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "postgres.listen_dsn: is set without postgres.dsn")

	cfg, err = load("postgres: {dsn: \"postgres://ff@db/ff\", listen_dsn: \"postgres://ff@db-direct/ff\"}\n")
	require.NoError(t, err, "a listener connection of its own is allowed without a pooler too")
	assert.Equal(t, PoolingSession, cfg.Postgres.Pooling)
}

// Action budgets: the destructive scanners have one by default, the
// others none; a scanner's own overrides the default key by key, or
// turns it off; canary settings parse and are checked.
func TestActionBudgetsAndCanarySettings(t *testing.T) {
	t.Parallel()
	cfg, err := Load(Sources{File: writeFile(t, `
decision_records: {shadow: 5, canary: 7}
scanners:
  lease_expiry: {}
  retention_trimmer:
    action_budget: {max: 10, max_fraction: 0.5, min_examined: 100, cool_down: 10m}
    swap: canary
    canary_promote_after: 4
  cancel_reconciler:
    action_budget: off
  flow_projector: {}
`), Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, ActionBudget{Window: time.Minute, Max: 50000}, cfg.Scanners["lease_expiry"].Budget("lease_expiry"))
	assert.Equal(t, ActionBudget{Window: time.Minute, Max: 10, MaxFraction: 0.5, MinExamined: 100, CoolDown: 10 * time.Minute},
		cfg.Scanners["retention_trimmer"].Budget("retention_trimmer"))
	assert.True(t, cfg.Scanners["cancel_reconciler"].Budget("cancel_reconciler").Off())
	assert.True(t, cfg.Scanners["flow_projector"].Budget("flow_projector").Off())
	shadowed := cfg.Scanners["lease_expiry"]
	shadowed.Mode = ModeShadow
	assert.True(t, shadowed.Budget("lease_expiry").Off(), "a scanner in shadow acts on nothing")
	assert.Equal(t, SwapCanary, cfg.Scanners["retention_trimmer"].Swap)
	assert.Equal(t, 4, cfg.Scanners["retention_trimmer"].CanaryPromoteAfter)
	assert.Equal(t, SwapDirect, cfg.Scanners["lease_expiry"].Swap)
	assert.Equal(t, DecisionRecords{Shadow: 5, Canary: 7}, cfg.DecisionRecords)
	b := cfg.Scanners["retention_trimmer"]
	b.CanaryPromoteAfter = 5
	assert.False(t, b.Equal(cfg.Scanners["retention_trimmer"]), "a reload sees the change")
	for file, want := range map[string]string{
		"scanners:\n  x:\n    action_budget: loose\n":                  `scanners.x.action_budget: must be off or a mapping`,
		"scanners:\n  x:\n    action_budget: {max: 5, window: 10ms}\n": "scanners.x.action_budget.window: 10ms is not between 1s and 24h",
		"scanners:\n  x:\n    action_budget: {max_fraction: 2}\n":      "scanners.x.action_budget.max_fraction: 2 is not in 0..1",
		"scanners:\n  x:\n    action_budget: {max: -1}\n":              "scanners.x.action_budget.max",
		"scanners:\n  x:\n    swap: sideways\n":                        `scanners.x.swap: "sideways" is not one of`,
		"scanners:\n  x:\n    canary_promote_after: -2\n":              "scanners.x.canary_promote_after: -2 is negative",
		"decision_records: {shadow: 0}\n":                              "decision_records.shadow: 0 is not in 1..10000",
	} {
		_, err := Load(Sources{File: writeFile(t, file), Environ: noEnv})
		require.ErrorContains(t, err, want, file)
	}
}
