// Command ffscan is the scanner host and its operator tools.
//
//	ffscan run                      run the host until SIGTERM/SIGINT (SIGHUP reloads the config)
//	ffscan reload                   make a running host reload its configuration
//	ffscan plugins list             launch each plugin briefly and show its scanners
//	ffscan plugins verify           check pins, permissions and handshakes
//	ffscan plugins approve NAME...  approve the policy a scanner's binary declares
//	ffscan plugins pin NAME         print (or --write) the sha256 pin of a scanner's binary
//	ffscan plugins reload NAME      hot-swap a scanner's plugin in a running host
//	ffscan plugins canary NAME      run the new binary in shadow beside the running one; promote or abort it
//	ffscan plugins install REF      install a signed plugin from a registry or OCI layout
//	ffscan plugins upgrade NAME     install the newer artifact of an installed plugin
//	ffscan plugins lock REF         record a signed plugin in the lock without placing it
//	ffscan plugins publish REF      push a plugin's binaries, declaration and signatures
//	ffscan plugins keygen           make a publisher's signing key pair
//	ffscan scanners resume NAME     resume a scanner paused at its action budget
//	ffscan scanners shadow|act NAME switch a scanner to shadow mode or back to act
//	ffscan scanners enable|disable NAME  enable or disable a scanner of a running host
//	ffscan scan-once --scanner N    one cycle of one scanner, then a summary
//	ffscan status                   the /v1/status of a running host
//	ffscan explain ID               what each scanner does with one execution, and why
//	ffscan audit                    what scanners and operators did (the audit trail)
//	ffscan version
//
// Every command accepts --config FILE (default $FFSCAN_CONFIG) and
// --valkey-addr host:port. Exit status: 0 ok, 1 runtime failure, 2 bad
// usage or configuration.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
)

// Exit statuses.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: ffscan <command> [flags]

commands:
  run                          run the host until SIGTERM or SIGINT; SIGHUP (or a
                               change of the config file) reloads the configuration
  reload [--addr host:port]    make a running host reload its configuration now
  plugins list [--verbose]     show each plugin's scanners (name, version, API version, sha256;
                               --verbose: sources, declared commands and functions, options)
  plugins verify               check sha256 pins, file permissions, handshakes and
                               each scanner's policy (commands, key scopes, functions)
                               against its approval
  plugins approve NAME... | --all
                               approve the policy each scanner's binary declares now
  plugins pin NAME [--write]   print the sha256 pin line of scanner NAME's binary
                               (after checking it), or write it into --config
  plugins reload NAME          hot-swap scanner NAME's plugin in a running host
            [--addr host:port] [--force] [--no-wait]
  plugins canary NAME          start the binary now in scanner NAME's plugin file as a
            [--promote | --abort | --status]
                               canary: it runs in shadow beside the running version and
                               their decisions are compared item by item; --promote
                               swaps it in, --abort stops it (the running version is
                               untouched), --status shows it and its differences
  plugins install REF          install a signed plugin from a registry (host:port/repo:tag)
            [--dry-run]        or an OCI layout (oci:DIR:tag): verify its signature by a
            [--allow-downgrade] key in plugin_trust.keys, check what it declares against
            [--plain-http]     this host, record it in the plugin lock, place this
                               platform's binary in plugin_dir (hot-swapped by a running host)
  plugins upgrade NAME         install again from the tag plugin (or scanner) NAME was
            [--to TAG|DIGEST]  installed from, or from --to; never older unless
            [--dry-run]        --allow-downgrade
  plugins lock REF             verify REF and record every platform in the plugin lock;
                               place nothing
  plugins publish REF          push one binary per platform, the declaration (read from
            --binary GOOS/GOARCH=PATH... --key FILE [--version V] [--name N] [--declared FILE]
                               this platform's binary) and the signatures
  plugins keygen --out PREFIX  write a publisher's key pair: PREFIX.key and PREFIX.pub
  scanners resume NAME         resume scanner NAME, paused at its action budget, in a
            [--addr host:port] running host (it acts again from its next cycle)
  scanners shadow|act NAME     switch scanner NAME of a running host to shadow mode (its
            [--addr host:port] writes held back and recorded) or back to act, until the
                               host restarts (scanners.NAME.mode makes it last)
  scanners enable|disable NAME enable or disable scanner NAME of a running host, until
            [--addr host:port] it restarts (scanners.NAME.enabled makes it last)
  scan-once --scanner NAME     run one cycle of one scanner and print a summary
            [--partition N] [--dry-run]
  status [--addr host:port] [--json | --watch 3s]
                               show the status of a running host (--watch: a
                               compact view with rates, refreshed until Ctrl-C)
  explain ID [--addr host:port] [--json]
                               what every scanner of a running host does with
                               execution ID on its next cycle, and why, beside what
                               was done to it (its latest audit entries)
  audit [--execution ID] [--scanner NAME] [--kind scanner|operator]
        [--since 1h] [--limit 100] [--json] [--addr host:port]
                               what scanners and operators did, newest first (the
                               audit trail a running host keeps in Valkey)
  postgres create-schema       create FlowFabric's Postgres tables in an empty database
                               (postgres.dsn), recorded as ffscan's; for tests, the demo
                               and users without FlowFabric
  version                      print the version

flags accepted by every command:
  --config FILE        YAML configuration (default $FFSCAN_CONFIG)
  --valkey-addr ADDR   Valkey host:port (overrides valkey.addrs)
  --postgres-dsn DSN   FlowFabric Postgres database (overrides postgres.dsn); with no
                       Valkey address configured the host serves it alone
  --plugin-dir DIR     overrides plugin_dir
  --http-listen ADDR   overrides http.listen
  --log-level LEVEL    overrides log.level
  --log-json           overrides log.json

exit status: 0 ok, 1 runtime failure, 2 bad usage or configuration
`

// usageError marks errors that exit with status 2.
type usageError struct{ error }

// reported marks an error the command has printed itself; it still sets
// the exit status.
type reported struct{ error }

func (r reported) Unwrap() error { return r.error }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, rest := args[0], args[1:]
	if cmd == "plugins" {
		if len(rest) == 0 || !slices.Contains([]string{"list", "verify", "approve", "pin", "reload", "canary", "install", "upgrade", "lock", "publish", "keygen"}, rest[0]) {
			fmt.Fprint(stderr, "ffscan plugins: want list, verify, approve, pin, reload, canary, install, upgrade, lock, publish or keygen\n\n"+usage)
			return exitUsage
		}
		cmd, rest = "plugins "+rest[0], rest[1:]
	}
	if cmd == "scanners" {
		if len(rest) == 0 || !slices.Contains([]string{"resume", "shadow", "act", "enable", "disable"}, rest[0]) {
			fmt.Fprint(stderr, "ffscan scanners: want resume, shadow, act, enable or disable\n\n"+usage)
			return exitUsage
		}
		cmd, rest = "scanners "+rest[0], rest[1:]
	}
	if cmd == "postgres" {
		if len(rest) == 0 || rest[0] != "create-schema" {
			fmt.Fprint(stderr, "ffscan postgres: want create-schema\n\n"+usage)
			return exitUsage
		}
		cmd, rest = "postgres "+rest[0], rest[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = cmdRun(rest, stderr)
	case "plugins list":
		err = cmdPluginsList(rest, stdout, stderr)
	case "plugins verify":
		err = cmdPluginsVerify(rest, stdout, stderr)
	case "plugins approve":
		err = cmdPluginsApprove(rest, stdout, stderr)
	case "plugins pin":
		err = cmdPluginsPin(rest, stdout, stderr)
	case "plugins reload":
		err = cmdPluginsReload(rest, stdout, stderr)
	case "plugins canary":
		err = cmdPluginsCanary(rest, stdout, stderr)
	case "plugins install":
		err = cmdPluginsInstall(rest, stdout, stderr)
	case "plugins upgrade":
		err = cmdPluginsUpgrade(rest, stdout, stderr)
	case "plugins lock":
		err = cmdPluginsLock(rest, stdout, stderr)
	case "plugins publish":
		err = cmdPluginsPublish(rest, stdout, stderr)
	case "plugins keygen":
		err = cmdPluginsKeygen(rest, stdout, stderr)
	case "scanners resume":
		err = cmdScannersResume(rest, stdout, stderr)
	case "scanners shadow", "scanners act", "scanners enable", "scanners disable":
		err = cmdScannersSwitch(strings.TrimPrefix(cmd, "scanners "), rest, stdout, stderr)
	case "reload":
		err = cmdReload(rest, stdout, stderr)
	case "scan-once":
		err = cmdScanOnce(rest, stdout, stderr)
	case "status":
		err = cmdStatus(rest, stdout, stderr)
	case "audit":
		err = cmdAudit(rest, stdout, stderr)
	case "explain":
		err = cmdExplain(rest, stdout, stderr)
	case "version":
		err = cmdVersion(rest, stdout, stderr)
	case "postgres create-schema":
		err = cmdPostgresCreateSchema(rest, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "ffscan: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var rep reported
	if !errors.As(err, &rep) {
		fmt.Fprintf(stderr, "ffscan %s: %v\n", cmd, err)
	}
	var ue usageError
	var mm *keys.PartitionMismatchError
	if errors.As(err, &ue) || errors.Is(err, config.ErrInvalid) || errors.As(err, &mm) {
		return exitUsage
	}
	return exitRuntime
}

// common holds the flags every command takes.
type common struct {
	configFile  string
	valkeyAddr  string
	postgresDSN string
	pluginDir   string
	httpListen  string
	logLevel    string
	logJSON     bool
}

func newFlags(name string, stderr io.Writer) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet("ffscan "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &common{}
	fs.StringVar(&c.configFile, "config", os.Getenv("FFSCAN_CONFIG"), "YAML configuration file")
	fs.StringVar(&c.valkeyAddr, "valkey-addr", "", "Valkey host:port (overrides valkey.addrs)")
	fs.StringVar(&c.postgresDSN, "postgres-dsn", "", "FlowFabric Postgres connection string (overrides postgres.dsn)")
	fs.StringVar(&c.pluginDir, "plugin-dir", "", "plugin directory (overrides plugin_dir)")
	fs.StringVar(&c.httpListen, "http-listen", "", "HTTP listen address (overrides http.listen)")
	fs.StringVar(&c.logLevel, "log-level", "", "trace, debug, info, warn or error (overrides log.level)")
	fs.BoolVar(&c.logJSON, "log-json", false, "JSON log lines (overrides log.json)")
	return fs, c
}

func parse(fs *flag.FlagSet, args []string) error {
	_, err := parseArgs(fs, args, 0)
	return err
}

// parseArgs parses flags and exactly n positional arguments (any number
// when n < 0), which may come before or after the flags (ffscan plugins
// pin NAME --write).
func parseArgs(fs *flag.FlagSet, args []string, n int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if n < 0 {
		return pos, nil
	}
	if len(pos) != n {
		if n == 0 {
			return nil, usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(pos, " "))}
		}
		return nil, usageError{fmt.Errorf("want %d argument(s), got %d", n, len(pos))}
	}
	return pos, nil
}

// load reads the configuration; only flags the user set override it.
func (c *common) load(fs *flag.FlagSet) (*config.Config, error) {
	return config.Load(c.sources(fs))
}

// sources says where the configuration comes from, for the first load and
// every reload.
func (c *common) sources(fs *flag.FlagSet) config.Sources {
	over := map[string]any{}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "valkey-addr":
			over["valkey.addrs"] = c.valkeyAddr
		case "postgres-dsn":
			over["postgres.dsn"] = c.postgresDSN
		case "plugin-dir":
			over["plugin_dir"] = c.pluginDir
		case "http-listen":
			over["http.listen"] = c.httpListen
		case "log-level":
			over["log.level"] = c.logLevel
		case "log-json":
			over["log.json"] = c.logJSON
		}
	})
	return config.Sources{File: c.configFile, Flags: over}
}
