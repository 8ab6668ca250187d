package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix starts every environment variable the host reads.
const EnvPrefix = "FFSCAN_"

// Sources says where configuration comes from. The zero value reads only
// the process environment.
type Sources struct {
	// File is a YAML file; empty means none.
	File string
	// Environ lists KEY=VALUE pairs; nil means os.Environ().
	Environ []string
	// Flags are overrides by dotted key (e.g. "valkey.addrs"), applied
	// last. Only flags the user actually set belong here.
	Flags map[string]any
}

// ErrInvalid marks configuration errors (bad keys or values, unreadable
// file), so callers can exit with a usage status.
var ErrInvalid = errors.New("invalid configuration")

// Load reads the configuration from its sources and validates it. Every
// problem found is reported, each naming its key.
func Load(src Sources) (*Config, error) {
	ko, err := layers(src)
	if err != nil {
		return nil, err
	}
	cfg := Defaults()
	d := &decoder{}
	d.root(&cfg, ko.Raw())
	if cfg.Postgres.DSN != "" && !ko.Exists("valkey.addrs") {
		// A host given a database and no Valkey address serves the
		// database alone, rather than a local Valkey nobody named.
		cfg.Valkey.Addrs = nil
	}
	if !cfg.HasValkey() {
		cfg.Scanners = postgresNames(cfg.Scanners)
	}
	d.errs = append(d.errs, cfg.validate()...)
	if len(d.errs) > 0 {
		sort.Slice(d.errs, func(i, j int) bool { return d.errs[i].Error() < d.errs[j].Error() })
		return nil, fmt.Errorf("%w:\n%w", ErrInvalid, errors.Join(d.errs...))
	}
	return &cfg, nil
}

// layers merges the file, the environment and the flags, later ones
// winning.
func layers(src Sources) (*koanf.Koanf, error) {
	ko := koanf.New(".")
	if src.File != "" {
		if err := ko.Load(file.Provider(src.File), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("%w: read %s: %v", ErrInvalid, src.File, err)
		}
	}
	environ := src.Environ
	if environ == nil {
		environ = os.Environ()
	}
	if err := ko.Load(env.Provider(".", env.Opt{
		Prefix:        EnvPrefix,
		TransformFunc: envKey,
		EnvironFunc:   func() []string { return environ },
	}), nil); err != nil {
		return nil, fmt.Errorf("%w: environment: %v", ErrInvalid, err)
	}
	if len(src.Flags) > 0 {
		if err := ko.Load(confmap.Provider(src.Flags, "."), nil); err != nil {
			return nil, fmt.Errorf("%w: flags: %v", ErrInvalid, err)
		}
	}
	return ko, nil
}

// HTTPListen returns http.listen from the same layers as Load, without
// judging the rest of the configuration: client commands (status, reload)
// need only the address of the running host, and must work exactly when
// the file has a mistake (reload is how the host gets to refuse it and
// say why). Only a file that cannot be read or parsed as YAML, or an
// http.listen that is not a string, is an error.
func HTTPListen(src Sources) (string, error) {
	return stringSetting(src, "http.listen", Defaults().HTTP.Listen)
}

// AdminTokenFile reads http.admin_token_file the same way ("" when not
// set: the default place).
func AdminTokenFile(src Sources) (string, error) {
	return stringSetting(src, "http.admin_token_file", Defaults().HTTP.AdminTokenFile)
}

func stringSetting(src Sources, key, def string) (string, error) {
	ko, err := layers(src)
	if err != nil {
		return "", err
	}
	if v := ko.Get(key); v != nil {
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%w: %s: %s is not a string", ErrInvalid, key, describe(v))
		}
		return s, nil
	}
	return def, nil
}

// envKey maps FFSCAN_SHUTDOWN_TIMEOUT to shutdown_timeout and
// FFSCAN_SCANNERS__LEASEEXPIRY__INTERVAL to scanners.leaseexpiry.interval:
// a double underscore nests, a single one stays part of the name (our key
// names contain underscores). FFSCAN_VALKEY_ADDR is the documented shortcut
// for a single valkey.addrs entry. FFSCAN_TEST_* and FFSCAN_CONFIG belong to
// the test harness and the CLI, not to the configuration.
func envKey(k, v string) (string, any) {
	name := strings.TrimPrefix(k, EnvPrefix)
	if strings.HasPrefix(name, "TEST_") || name == "CONFIG" {
		return "", nil
	}
	key := strings.ReplaceAll(strings.ToLower(name), "__", ".")
	if key == "valkey_addr" {
		key = "valkey.addrs"
	}
	return key, v
}

type decoder struct{ errs []error }

func (d *decoder) bad(key string, format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

// fields walks a section, calling the handler of each known key and
// reporting the others.
func (d *decoder) fields(path string, v any, handlers map[string]func(key string, v any)) {
	m, ok := v.(map[string]any)
	if !ok {
		if v != nil {
			d.bad(path, "must be a mapping, not %s", describe(v))
		}
		return
	}
	for _, k := range sortedKeys(m) {
		key := join(path, k)
		h, ok := handlers[k]
		if !ok {
			d.bad(key, "unknown key")
			continue
		}
		h(key, m[k])
	}
}

// root decodes the whole file: each group of sections has its own table.
func (d *decoder) root(c *Config, raw map[string]any) {
	fields := d.storeFields(c)
	maps.Copy(fields, d.pluginFields(c))
	maps.Copy(fields, d.serviceFields(c))
	d.fields("", raw, fields)
}

// storeFields decodes the sections of the stores: Valkey, PostgreSQL,
// the partitions and lanes, the library.
func (d *decoder) storeFields(c *Config) map[string]func(string, any) {
	return map[string]func(string, any){
		"valkey": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"addrs":    func(k string, v any) { d.strList(k, v, &c.Valkey.Addrs) },
				"username": func(k string, v any) { d.str(k, v, &c.Valkey.Username) },
				"password": func(k string, v any) { d.str(k, v, &c.Valkey.Password) },
				"cluster":  func(k string, v any) { d.str(k, v, &c.Valkey.Cluster) },
				"tls": func(k string, v any) {
					d.fields(k, v, map[string]func(string, any){
						"enabled":     func(k string, v any) { d.boolean(k, v, &c.Valkey.TLS.Enabled) },
						"ca_file":     func(k string, v any) { d.str(k, v, &c.Valkey.TLS.CAFile) },
						"server_name": func(k string, v any) { d.str(k, v, &c.Valkey.TLS.ServerName) },
					})
				},
			})
		},
		"postgres": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"dsn":                 func(k string, v any) { d.str(k, v, &c.Postgres.DSN) },
				"pool_size":           func(k string, v any) { d.integer(k, v, &c.Postgres.PoolSize) },
				"read_connections":    func(k string, v any) { d.integer(k, v, &c.Postgres.ReadConnections) },
				"shared_transactions": func(k string, v any) { d.integer(k, v, &c.Postgres.SharedTransactions) },
				"namespace":           func(k string, v any) { d.str(k, v, &c.Postgres.Namespace) },
				"instance_tag":        func(k string, v any) { d.str(k, v, &c.Postgres.InstanceTag) },
				"pooling":             func(k string, v any) { d.str(k, v, &c.Postgres.Pooling) },
				"listen_dsn":          func(k string, v any) { d.str(k, v, &c.Postgres.ListenDSN) },
			})
		},
		"partitions": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"flow":   func(k string, v any) { d.count(k, v, &c.Partitions.Flow) },
				"budget": func(k string, v any) { d.count(k, v, &c.Partitions.Budget) },
				"quota":  func(k string, v any) { d.count(k, v, &c.Partitions.Quota) },
			})
		},
		"lanes": func(k string, v any) { d.strList(k, v, &c.Lanes) },
		"lua": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"force_replace": func(k string, v any) { d.boolean(k, v, &c.Lua.ForceReplace) },
			})
		},
	}
}

// pluginFields decodes the sections of the plugins: where they are, how
// they are confined and approved, what they may call, their supervision,
// the scanners.
func (d *decoder) pluginFields(c *Config) map[string]func(string, any) {
	return map[string]func(string, any){
		"plugin_dir": func(k string, v any) { d.str(k, v, &c.PluginDir) },
		"plugin_isolation": func(k string, v any) {
			var s string
			d.str(k, v, &s)
			c.PluginIsolation = Isolation(s)
		},
		"plugin_memory_limit": func(k string, v any) {
			if n, ok := d.int64(k, v); ok {
				c.PluginMemoryLimit = n
			}
		},
		"plugin_cgroups":       func(k string, v any) { d.str(k, v, &c.PluginCgroups) },
		"plugin_cgroup_parent": func(k string, v any) { d.str(k, v, &c.PluginCgroupParent) },
		"plugin_cpu_limit":     func(k string, v any) { d.float(k, v, &c.PluginCPULimit) },
		"plugin_pids_limit": func(k string, v any) {
			if n, ok := d.int64(k, v); ok {
				c.PluginPidsLimit = n
			}
		},
		"plugin_approval":       func(k string, v any) { d.str(k, v, &c.PluginApproval) },
		"plugin_approvals_file": func(k string, v any) { d.str(k, v, &c.PluginApprovalsFile) },
		"plugin_signature":      func(k string, v any) { d.str(k, v, &c.PluginSignature) },
		"plugin_lock_file":      func(k string, v any) { d.str(k, v, &c.PluginLockFile) },
		"plugin_trust": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"keys":            func(k string, v any) { d.trustedKeys(k, v, c) },
				"trusted_root":    func(k string, v any) { d.str(k, v, &c.PluginTrust.TrustedRoot) },
				"identities":      func(k string, v any) { d.trustedIdentities(k, v, c) },
				"allow_commands":  func(k string, v any) { d.strList(k, v, &c.PluginTrust.AllowCommands) },
				"allow_functions": func(k string, v any) { d.strList(k, v, &c.PluginTrust.AllowFunctions) },
			})
		},
		"callbacks": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"max_in_flight":       func(k string, v any) { d.integer(k, v, &c.Callbacks.MaxInFlight) },
				"commands_per_second": func(k string, v any) { d.integer(k, v, &c.Callbacks.CommandsPerSecond) },
				"max_reply_bytes":     func(k string, v any) { d.integer(k, v, &c.Callbacks.MaxReplyBytes) },
			})
		},
		"supervisor": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"health_interval": func(k string, v any) { d.duration(k, v, &c.Supervisor.HealthInterval) },
				"start_timeout":   func(k string, v any) { d.duration(k, v, &c.Supervisor.StartTimeout) },
				"swap_probation":  func(k string, v any) { d.duration(k, v, &c.Supervisor.SwapProbation) },
			})
		},
		"scanners": func(key string, v any) { d.scanners(key, v, c.Scanners) },
		"audit": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"enabled": func(k string, v any) { d.boolean(k, v, &c.Audit.Enabled) },
				"max_entries": func(k string, v any) {
					if n, ok := d.int64(k, v); ok {
						c.Audit.MaxEntries = n
					}
				},
				"max_age": func(k string, v any) { d.duration(k, v, &c.Audit.MaxAge) },
				"queue":   func(k string, v any) { d.integer(k, v, &c.Audit.Queue) },
			})
		},
		"decision_records": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"shadow": func(k string, v any) { d.integer(k, v, &c.DecisionRecords.Shadow) },
				"canary": func(k string, v any) { d.integer(k, v, &c.DecisionRecords.Canary) },
			})
		},
	}
}

// serviceFields decodes the sections of the host's own services: HTTP,
// logs, shutdown, scheduling, watching, key events, completions.
func (d *decoder) serviceFields(c *Config) map[string]func(string, any) {
	return map[string]func(string, any){
		"http": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"listen":           func(k string, v any) { d.str(k, v, &c.HTTP.Listen) },
				"admin":            func(k string, v any) { d.boolean(k, v, &c.HTTP.Admin) },
				"admin_remote":     func(k string, v any) { d.boolean(k, v, &c.HTTP.AdminRemote) },
				"admin_token_file": func(k string, v any) { d.str(k, v, &c.HTTP.AdminTokenFile) },
			})
		},
		"log": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"level": func(k string, v any) { d.str(k, v, &c.Log.Level) },
				"json":  func(k string, v any) { d.boolean(k, v, &c.Log.JSON) },
			})
		},
		"shutdown_timeout": func(k string, v any) { d.duration(k, v, &c.ShutdownTimeout) },
		"scheduler": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"concurrency":  func(k string, v any) { d.integer(k, v, &c.Scheduler.Concurrency) },
				"call_timeout": func(k string, v any) { d.duration(k, v, &c.Scheduler.CallTimeout) },
				"lane_census":  func(k string, v any) { d.str(k, v, &c.Scheduler.LaneCensus) },
				"wakeups":      func(k string, v any) { d.boolean(k, v, &c.Scheduler.Wakeups) },
			})
		},
		"watch": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"config":   func(k string, v any) { d.boolean(k, v, &c.Watch.Config) },
				"plugins":  func(k string, v any) { d.boolean(k, v, &c.Watch.Plugins) },
				"interval": func(k string, v any) { d.duration(k, v, &c.Watch.Interval) },
			})
		},
		"key_events": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"mode":            func(k string, v any) { d.str(k, v, &c.KeyEvents.Mode) },
				"configure":       func(k string, v any) { d.boolean(k, v, &c.KeyEvents.Configure) },
				"safety_interval": func(k string, v any) { d.duration(k, v, &c.KeyEvents.SafetyInterval) },
			})
		},
		"completions": func(key string, v any) {
			d.fields(key, v, map[string]func(string, any){
				"enabled":     func(k string, v any) { d.boolean(k, v, &c.Completions.Enabled) },
				"concurrency": func(k string, v any) { d.integer(k, v, &c.Completions.Concurrency) },
			})
		},
	}
}

func (d *decoder) scanners(path string, v any, out map[string]Scanner) {
	m, ok := v.(map[string]any)
	if !ok {
		if v != nil {
			d.bad(path, "must be a mapping of scanner name to settings, not %s", describe(v))
		}
		return
	}
	for _, name := range sortedKeys(m) {
		s := Scanner{Enabled: true, Options: map[string]string{}, Mode: ModeAct, Swap: SwapDirect}
		key := join(path, name)
		d.fields(key, m[name], map[string]func(string, any){
			"enabled":          func(k string, v any) { d.boolean(k, v, &s.Enabled) },
			"plugin":           func(k string, v any) { d.str(k, v, &s.Plugin) },
			"sha256":           func(k string, v any) { d.str(k, v, &s.SHA256) },
			"interval":         func(k string, v any) { d.duration(k, v, &s.Interval) },
			"batch":            func(k string, v any) { d.integer(k, v, &s.Batch) },
			"options":          func(k string, v any) { d.options(k, v, s.Options) },
			"legacy_callbacks": func(k string, v any) { d.boolean(k, v, &s.LegacyCallbacks) },
			"mode":             func(k string, v any) { d.str(k, v, &s.Mode) },
			"swap":             func(k string, v any) { d.str(k, v, &s.Swap) },
			"canary_promote_after": func(k string, v any) {
				d.integer(k, v, &s.CanaryPromoteAfter)
			},
			"action_budget": func(k string, v any) { s.ActionBudget = d.actionBudget(k, v, name) },
			"memory_limit": func(k string, v any) {
				if n, ok := d.int64(k, v); ok {
					s.MemoryLimit = &n
				}
			},
			"cpu_limit": func(k string, v any) {
				var f float64
				if d.float(k, v, &f) {
					s.CPULimit = &f
				}
			},
			"pids_limit": func(k string, v any) {
				if n, ok := d.int64(k, v); ok {
					s.PidsLimit = &n
				}
			},
		})
		s.SHA256 = strings.ToLower(s.SHA256)
		out[name] = s
	}
}

// actionBudget decodes a scanner's action_budget: "off", or a mapping
// whose keys override the scanner's default budget.
func (d *decoder) actionBudget(key string, v any, name string) *ActionBudget {
	if str, ok := v.(string); ok {
		if str != "off" {
			d.bad(key, "must be off or a mapping (window, max, max_fraction, min_examined, cool_down), not %q", str)
		}
		return &ActionBudget{}
	}
	b := DefaultActionBudget(name)
	if b.Window == 0 {
		b.Window = time.Minute
	}
	d.fields(key, v, map[string]func(string, any){
		"window": func(k string, v any) { d.duration(k, v, &b.Window) },
		"max": func(k string, v any) {
			if n, ok := d.int64(k, v); ok {
				b.Max = n
			}
		},
		"max_fraction": func(k string, v any) { d.float(k, v, &b.MaxFraction) },
		"min_examined": func(k string, v any) {
			if n, ok := d.int64(k, v); ok {
				b.MinExamined = n
			}
		},
		"cool_down": func(k string, v any) { d.duration(k, v, &b.CoolDown) },
	})
	return &b
}

func (d *decoder) options(path string, v any, out map[string]string) {
	m, ok := v.(map[string]any)
	if !ok {
		if v != nil {
			d.bad(path, "must be a mapping of option name to value, not %s", describe(v))
		}
		return
	}
	for _, k := range sortedKeys(m) {
		switch x := m[k].(type) {
		case string:
			out[k] = x
		case bool, int, int64, uint64, float64:
			// YAML turns `limit: 50` into a number; options travel as
			// strings and the scanner's schema types them.
			out[k] = fmt.Sprint(x)
		default:
			d.bad(join(path, k), "must be a scalar value, not %s", describe(x))
		}
	}
}

// trustedKeys decodes plugin_trust.keys: name -> {file, not_before,
// not_after}.
func (d *decoder) trustedKeys(path string, v any, c *Config) {
	m, ok := v.(map[string]any)
	if !ok {
		if v != nil {
			d.bad(path, "must be a mapping of key names to {file, not_before, not_after}, not %s", describe(v))
		}
		return
	}
	if c.PluginTrust.Keys == nil {
		c.PluginTrust.Keys = map[string]TrustedKey{}
	}
	for _, name := range sortedKeys(m) {
		var k TrustedKey
		d.fields(join(path, name), m[name], map[string]func(string, any){
			"file":       func(k2 string, v any) { d.str(k2, v, &k.File) },
			"not_before": func(k2 string, v any) { d.timestamp(k2, v, &k.NotBefore) },
			"not_after":  func(k2 string, v any) { d.timestamp(k2, v, &k.NotAfter) },
		})
		c.PluginTrust.Keys[name] = k
	}
}

// trustedIdentities decodes plugin_trust.identities: name -> {issuer,
// subject | subject_regexp}.
func (d *decoder) trustedIdentities(path string, v any, c *Config) {
	m, ok := v.(map[string]any)
	if !ok {
		if v != nil {
			d.bad(path, "must be a mapping of identity names to {issuer, subject | subject_regexp}, not %s", describe(v))
		}
		return
	}
	if c.PluginTrust.Identities == nil {
		c.PluginTrust.Identities = map[string]TrustedIdentity{}
	}
	for _, name := range sortedKeys(m) {
		var id TrustedIdentity
		d.fields(join(path, name), m[name], map[string]func(string, any){
			"issuer":         func(k2 string, v any) { d.str(k2, v, &id.Issuer) },
			"subject":        func(k2 string, v any) { d.str(k2, v, &id.Subject) },
			"subject_regexp": func(k2 string, v any) { d.str(k2, v, &id.SubjectRegexp) },
		})
		c.PluginTrust.Identities[name] = id
	}
}

// timestamp decodes an RFC 3339 time (YAML may have parsed it already).
func (d *decoder) timestamp(key string, v any, dst *time.Time) {
	switch x := v.(type) {
	case time.Time:
		*dst = x
	case string:
		t, err := time.Parse(time.RFC3339, x)
		if err != nil {
			d.bad(key, "%q is not an RFC 3339 time (2027-01-31T00:00:00Z)", x)
			return
		}
		*dst = t
	default:
		d.bad(key, "%s is not an RFC 3339 time", describe(v))
	}
}

func (d *decoder) str(key string, v any, dst *string) {
	s, ok := v.(string)
	if !ok {
		d.bad(key, "%s is not a string", describe(v))
		return
	}
	*dst = s
}

func (d *decoder) strList(key string, v any, dst *[]string) {
	switch x := v.(type) {
	case string:
		// Environment variables and flags carry lists comma-separated.
		var out []string
		for _, p := range strings.Split(x, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		*dst = out
	case []any:
		out := make([]string, 0, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				d.bad(fmt.Sprintf("%s[%d]", key, i), "%s is not a string", describe(e))
				continue
			}
			out = append(out, s)
		}
		*dst = out
	default:
		d.bad(key, "%s is not a list of strings", describe(v))
	}
}

func (d *decoder) boolean(key string, v any, dst *bool) {
	switch x := v.(type) {
	case bool:
		*dst = x
	case string:
		b, err := strconv.ParseBool(x)
		if err != nil {
			d.bad(key, "%q is not a boolean (true or false)", x)
			return
		}
		*dst = b
	default:
		d.bad(key, "%s is not a boolean (true or false)", describe(v))
	}
}

func (d *decoder) int64(key string, v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		if x > 1<<62 {
			break
		}
		return int64(x), true
	case float64:
		if x == float64(int64(x)) {
			return int64(x), true
		}
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err == nil {
			return n, true
		}
		d.bad(key, "%q is not an integer", x)
		return 0, false
	}
	d.bad(key, "%s is not an integer", describe(v))
	return 0, false
}

// float decodes a number (an integer or a decimal, "0.5" as a string
// too), reporting whether it did.
func (d *decoder) float(key string, v any, dst *float64) bool {
	switch x := v.(type) {
	case int:
		*dst = float64(x)
	case int64:
		*dst = float64(x)
	case uint64:
		*dst = float64(x)
	case float64:
		*dst = x
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			d.bad(key, "%q is not a number", x)
			return false
		}
		*dst = f
	default:
		d.bad(key, "%s is not a number", describe(v))
		return false
	}
	return true
}

func (d *decoder) integer(key string, v any, dst *int) {
	if n, ok := d.int64(key, v); ok {
		*dst = int(n)
	}
}

func (d *decoder) count(key string, v any, dst *uint16) {
	n, ok := d.int64(key, v)
	if !ok {
		return
	}
	if n < 1 || n > 65535 {
		d.bad(key, "%d is not a partition count in 1..65535", n)
		return
	}
	*dst = uint16(n)
}

// duration accepts Go duration strings only ("1500ms", "10s"): a bare number
// would leave the unit to guesswork.
func (d *decoder) duration(key string, v any, dst *time.Duration) {
	s, ok := v.(string)
	if !ok {
		d.bad(key, "%s is not a duration (write it with a unit, e.g. \"1500ms\" or \"10s\")", describe(v))
		return
	}
	dur, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		d.bad(key, "%q is not a duration", s)
		return
	}
	if dur < 0 {
		d.bad(key, "%q is negative", s)
		return
	}
	*dst = dur
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "an empty value"
	case string:
		return strconv.Quote(x)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	default:
		return fmt.Sprintf("%v", x)
	}
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortStrings(s []string) { sort.Strings(s) }
