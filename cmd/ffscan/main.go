// Command ffscan is the scanner host and its operator tools.
//
//	ffscan run                      run the host until SIGTERM/SIGINT (SIGHUP reloads the config)
//	ffscan reload                   make a running host reload its configuration
//	ffscan plugins list             launch each plugin briefly and show its scanners
//	ffscan plugins verify           check pins, permissions and handshakes
//	ffscan plugins pin NAME         print (or --write) the sha256 pin of a scanner's binary
//	ffscan plugins reload NAME      hot-swap a scanner's plugin in a running host
//	ffscan scan-once --scanner N    one cycle of one scanner, then a summary
//	ffscan status                   the /v1/status of a running host
//	ffscan version
//
// Every command accepts --config FILE (default $FFSCAN_CONFIG) and
// --valkey-addr host:port. Exit status: 0 ok, 1 runtime failure, 2 bad
// usage or configuration.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/scannerapi"
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
  plugins verify               check sha256 pins, file permissions and handshakes
  plugins pin NAME [--write]   print the sha256 pin line of scanner NAME's binary
                               (after checking it), or write it into --config
  plugins reload NAME          hot-swap scanner NAME's plugin in a running host
            [--addr host:port] [--force] [--no-wait]
  scan-once --scanner NAME     run one cycle of one scanner and print a summary
            [--partition N] [--dry-run]
  status [--addr host:port] [--json]
                               show the status of a running host
  version                      print the version

flags accepted by every command:
  --config FILE        YAML configuration (default $FFSCAN_CONFIG)
  --valkey-addr ADDR   Valkey host:port (overrides valkey.addrs)
  --plugin-dir DIR     overrides plugin_dir
  --http-listen ADDR   overrides http.listen
  --log-level LEVEL    overrides log.level
  --log-json           overrides log.json

exit status: 0 ok, 1 runtime failure, 2 bad usage or configuration
`

// usageError marks errors that exit with status 2.
type usageError struct{ error }

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
		if len(rest) == 0 || !slices.Contains([]string{"list", "verify", "pin", "reload"}, rest[0]) {
			fmt.Fprint(stderr, "ffscan plugins: want list, verify, pin or reload\n\n"+usage)
			return exitUsage
		}
		cmd, rest = "plugins "+rest[0], rest[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = cmdRun(rest, stderr)
	case "plugins list":
		err = cmdPluginsList(rest, stdout, stderr)
	case "plugins verify":
		err = cmdPluginsVerify(rest, stdout, stderr)
	case "plugins pin":
		err = cmdPluginsPin(rest, stdout, stderr)
	case "plugins reload":
		err = cmdPluginsReload(rest, stdout, stderr)
	case "reload":
		err = cmdReload(rest, stdout, stderr)
	case "scan-once":
		err = cmdScanOnce(rest, stdout, stderr)
	case "status":
		err = cmdStatus(rest, stdout, stderr)
	case "version":
		err = cmdVersion(rest, stdout, stderr)
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
	fmt.Fprintf(stderr, "ffscan %s: %v\n", cmd, err)
	var ue usageError
	var mm *keys.PartitionMismatchError
	if errors.As(err, &ue) || errors.Is(err, config.ErrInvalid) || errors.As(err, &mm) {
		return exitUsage
	}
	return exitRuntime
}

// common holds the flags every command takes.
type common struct {
	configFile string
	valkeyAddr string
	pluginDir  string
	httpListen string
	logLevel   string
	logJSON    bool
}

func newFlags(name string, stderr io.Writer) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet("ffscan "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &common{}
	fs.StringVar(&c.configFile, "config", os.Getenv("FFSCAN_CONFIG"), "YAML configuration file")
	fs.StringVar(&c.valkeyAddr, "valkey-addr", "", "Valkey host:port (overrides valkey.addrs)")
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

// parseArgs parses flags and exactly n positional arguments, which may
// come before or after the flags (ffscan plugins pin NAME --write).
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

func cmdRun(args []string, stderr io.Writer) error {
	fs, c := newFlags("run", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	src := c.sources(fs)
	cfg, err := config.Load(src)
	if err != nil {
		return err
	}
	log := host.NewLogger(cfg.Log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	h, err := host.Boot(bctx, cfg, log)
	cancel()
	if err != nil {
		return err
	}
	defer h.Close()
	// Every reload builds the configuration afresh from the same layers:
	// the file as it is now, the environment, the same flags.
	h.SetConfigSource(host.ConfigSource{Load: func() (*config.Config, error) { return config.Load(src) }, File: src.File})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the configuration")
				if _, err := h.ReloadConfig(ctx, "SIGHUP"); err != nil {
					log.Error("configuration reload failed", "error", err)
				}
			}
		}
	}()

	// The exit deadline holds even if something below ignores it: a
	// watchdog exits the process at shutdown_timeout after the signal
	// (plugins die with us through Pdeathsig and their parent watch), and
	// a second signal exits at once.
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second signal kills us
		time.AfterFunc(cfg.ShutdownTimeout, func() {
			log.Error("shutdown timeout exceeded; exiting now")
			os.Exit(exitRuntime)
		})
	}()
	return h.Run(ctx)
}

func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs, _ := newFlags("version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ffscan %s (scanner API %d, lua library %s, FlowFabric contract %s)\n", host.Version, scannerapi.APIVersion, lua.Version(), lua.ContractVersion)
	return nil
}

// quietLogger keeps one-shot commands' output to their result unless the
// operator asked for debug logs.
func quietLogger(cfg *config.Config, c *common) hclog.Logger {
	lc := cfg.Log
	if c.logLevel == "" {
		lc.Level = "warn"
	}
	return host.NewLogger(lc)
}

func cmdPluginsList(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins list", stderr)
	verbose := fs.Bool("verbose", false, "also show each scanner's sources, declared commands and functions, and options")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	infos, err := host.ListPlugins(context.Background(), cfg, quietLogger(cfg, c))
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BINARY\tSCANNER\tVERSION\tAPI\tFAMILY\tSHA256")
	failed := 0
	for _, pi := range infos {
		if pi.Err != nil {
			failed++
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\tERROR: %v\n", pi.Binary, pi.Err)
			continue
		}
		for _, in := range pi.Scanners {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", pi.Binary, in.Name, in.Version, in.APIVersion, in.Family, pi.SHA256)
		}
	}
	_ = tw.Flush()
	if *verbose {
		for _, pi := range infos {
			for _, in := range pi.Scanners {
				fmt.Fprintf(stdout, "\n%s (%s): every %s, batch %d\n", in.Name, pi.Binary, in.DefaultInterval, in.DefaultBatch)
				for _, src := range in.Sources {
					fmt.Fprintf(stdout, "  source %s: %s %s", src.Name, src.Kind, src.Key)
					if src.Backlog != "" {
						fmt.Fprintf(stdout, " (backlog: %s)", src.Backlog)
					}
					fmt.Fprintln(stdout)
				}
				fmt.Fprintf(stdout, "  commands: %s\n", orNone(in.Commands))
				fmt.Fprintf(stdout, "  functions: %s\n", orNone(in.Functions))
				for _, o := range in.Options {
					fmt.Fprintf(stdout, "  option %s (%s, default %q): %s\n", o.Name, o.Type, o.Default, o.Description)
				}
			}
		}
	}
	if len(infos) == 0 {
		fmt.Fprintf(stdout, "no plugins in %s\n", cfg.PluginDir)
	}
	if failed > 0 {
		return fmt.Errorf("%d plugin(s) could not be read", failed)
	}
	return nil
}

func cmdPluginsVerify(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins verify", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	res, err := host.VerifyPlugins(context.Background(), cfg, quietLogger(cfg, c))
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range res {
		who := "scanner " + r.Scanner + " (" + r.Binary + ")"
		if r.Scanner == "" {
			who = "binary " + r.Binary + " (not configured)"
		}
		if r.Err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL %s: %v\n", who, r.Err)
			continue
		}
		fmt.Fprintf(stdout, "ok   %s sha256 %s\n", who, r.SHA256)
	}
	if len(res) == 0 {
		fmt.Fprintln(stdout, "nothing to verify: no scanners configured and no plugins found")
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d failed verification", failed, len(res))
	}
	return nil
}

func cmdScanOnce(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("scan-once", stderr)
	name := fs.String("scanner", "", "scanner name (required)")
	partition := fs.Int("partition", -1, "scan only this partition index (default: all)")
	dryRun := fs.Bool("dry-run", false, "ask the scanner to decide without mutating; writes are refused")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *name == "" {
		return usageError{errors.New("--scanner is required")}
	}
	if *partition < -1 || *partition > 65535 {
		return usageError{fmt.Errorf("--partition %d is out of range", *partition)}
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	log := quietLogger(cfg, c)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	h, err := host.Boot(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer h.Close()
	sum, err := h.ScanOnce(ctx, *name, *partition, *dryRun)
	printSummary(stdout, *name, *dryRun, sum)
	if err != nil {
		return err
	}
	if sum.Failed > 0 {
		return fmt.Errorf("%d partition(s) failed", sum.Failed)
	}
	return nil
}

func printSummary(w io.Writer, name string, dryRun bool, s scheduler.Summary) {
	mode := ""
	if dryRun {
		mode = " (dry run)"
	}
	fmt.Fprintf(w, "scanner %s%s\n", name, mode)
	fmt.Fprintf(w, "partitions: %d visited, %d scanned, %d skipped (empty), %d failed, %d follow-up rescans\n",
		s.Partitions, s.Scanned, s.Empty, s.Failed, s.FollowUps)
	fmt.Fprintf(w, "items:      %d processed, %d skipped\n", s.Processed, s.Skipped)
	if len(s.Errors) == 0 {
		fmt.Fprintln(w, "errors:     none")
	} else {
		var parts []string
		for k, n := range s.Errors {
			code := k.Code
			if code == "" {
				code = "-"
			}
			parts = append(parts, fmt.Sprintf("%s/%s=%d", k.Class, code, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "errors:     %s\n", strings.Join(parts, " "))
	}
	if s.BacklogKnown {
		fmt.Fprintf(w, "backlog:    %d\n", s.Backlog)
	}
	if s.Lag > 0 {
		fmt.Fprintf(w, "oldest due: %s ago\n", s.Lag.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "duration:   %s\n", s.Duration.Round(time.Microsecond))
	for _, n := range s.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// hostAddr is the HTTP address of the running host: --addr, else the
// configuration's http.listen.
func hostAddr(fs *flag.FlagSet, c *common, addr string) (string, error) {
	if addr == "" {
		cfg, err := c.load(fs)
		if err != nil {
			return "", err
		}
		addr = cfg.HTTP.Listen
	}
	if addr == "" {
		return "", usageError{errors.New("no address: http.listen is empty; pass --addr")}
	}
	return addr, nil
}

// adminPost sends an admin request to a running host and decodes the JSON
// answer into out. It returns the HTTP status.
func adminPost(addr, path string, timeout time.Duration, out any) (int, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(httpapi.AdminHeader, "ffscan-cli")
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode == http.StatusForbidden {
		return resp.StatusCode, fmt.Errorf("the host refused: %s", strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return resp.StatusCode, fmt.Errorf("POST %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return resp.StatusCode, nil
}

func cmdReload(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("reload", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	if err := parse(fs, args); err != nil {
		return err
	}
	a, err := hostAddr(fs, c, *addr)
	if err != nil {
		return err
	}
	var res httpapi.ReloadResult
	if _, err := adminPost(a, "/v1/reload", 2*time.Minute, &res); err != nil {
		return err
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	fmt.Fprintln(stdout, "configuration reloaded")
	for _, l := range []struct {
		what  string
		names []string
	}{{"started", res.Started}, {"stopped", res.Stopped}, {"retuned", res.Retuned}} {
		if len(l.names) > 0 {
			fmt.Fprintf(stdout, "  %s: %s\n", l.what, strings.Join(l.names, ", "))
		}
	}
	failed := 0
	for _, p := range res.Plugins {
		fmt.Fprintf(stdout, "  %s: %s\n", p.Scanner, describeSwap(p))
		if p.Error != "" {
			failed++
		}
	}
	for _, n := range res.Notes {
		fmt.Fprintf(stdout, "  note: %s\n", n)
	}
	if failed > 0 {
		return fmt.Errorf("%d scanner(s) kept their running plugin", failed)
	}
	return nil
}

func describeSwap(p httpapi.PluginSwapResult) string {
	sha := func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	}
	switch p.Outcome {
	case "swapped", "kept":
		return fmt.Sprintf("%s: now version %s, sha256 %s (was %s, %s), pid %d", p.Outcome, p.ToVersion, sha(p.ToSHA256), p.FromVersion, sha(p.FromSHA256), p.Pid)
	case "rolled_back":
		return fmt.Sprintf("rolled back to version %s, sha256 %s, pid %d: %s", p.ToVersion, sha(p.ToSHA256), p.Pid, p.Error)
	case "unchanged":
		return fmt.Sprintf("unchanged: the file is what runs (sha256 %s); --force swaps anyway", sha(p.FromSHA256))
	case "reconfigured":
		return "options applied in place"
	case "started":
		return "was not running; launching it now"
	}
	return fmt.Sprintf("%s: %s", p.Outcome, p.Error)
}

func cmdPluginsReload(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins reload", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	force := fs.Bool("force", false, "swap even if the file is what runs, or was tried and rejected before")
	noWait := fs.Bool("no-wait", false, "return at the switch instead of after the probation")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	a, err := hostAddr(fs, c, *addr)
	if err != nil {
		return err
	}
	q := "?force=0"
	if *force {
		q = "?force=1"
	}
	if *noWait {
		q += "&wait=0"
	}
	var res httpapi.PluginSwapResult
	if _, err := adminPost(a, "/v1/scanners/"+pos[0]+"/reload"+q, 3*time.Minute, &res); err != nil {
		return err
	}
	if res.Outcome == "" && res.Error != "" {
		return errors.New(res.Error)
	}
	fmt.Fprintf(stdout, "scanner %s: %s\n", pos[0], describeSwap(res))
	switch res.Outcome {
	case "failed", "rolled_back":
		return fmt.Errorf("the previous plugin keeps serving")
	}
	return nil
}

func cmdPluginsPin(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins pin", stderr)
	write := fs.Bool("write", false, "write the pin into the --config file instead of printing it")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	if *write && c.configFile == "" {
		return usageError{errors.New("--write needs --config (or $FFSCAN_CONFIG)")}
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	pi, err := host.PinScanner(context.Background(), cfg, name, quietLogger(cfg, c))
	if err != nil {
		return fmt.Errorf("not pinning %s: %w", name, err)
	}
	if !*write {
		fmt.Fprintf(stdout, "# %s: %s, version %s, scanner API %d\n", name, pi.Path, pi.Version, pi.APIVersion)
		fmt.Fprintf(stdout, "scanners:\n  %s:\n    sha256: \"%s\"\n", name, pi.SHA256)
		return nil
	}
	if err := writePin(c.configFile, name, pi.SHA256); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pinned scanners.%s.sha256 to %s in %s (version %s); a running host picks it up on reload\n", name, pi.SHA256, c.configFile, pi.Version)
	return nil
}

// writePin sets scanners.NAME.sha256 in a YAML file by a targeted text
// edit, so comments and layout stay; the result is loaded and checked
// before it replaces the file (atomically, same mode).
func writePin(path, name, sha string) error {
	body, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := setPin(body, name, sha)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".pin-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), fi.Mode().Perm()); err != nil {
		return err
	}
	cfg, err := config.Load(config.Sources{File: tmp.Name(), Environ: []string{}})
	if err != nil {
		return fmt.Errorf("the edited file would not load, left %s unchanged: %w", path, err)
	}
	if got := cfg.Scanners[name].SHA256; got != sha {
		return fmt.Errorf("the edit did not take (scanners.%s.sha256 reads %q), left %s unchanged", name, got, path)
	}
	return os.Rename(tmp.Name(), path)
}

// setPin edits the YAML text: scanners.NAME in block style gets its
// sha256 line replaced or added; in flow style ({...}) the key is replaced
// or added inside the braces. A scanner that is not in the file is an
// error: adding it would enable it.
func setPin(body []byte, name, sha string) ([]byte, error) {
	lines := strings.Split(string(body), "\n")
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	blank := func(l string) bool { t := strings.TrimSpace(l); return t == "" || strings.HasPrefix(t, "#") }
	key := func(l, k string) (rest string, ok bool) {
		t := strings.TrimLeft(l, " ")
		for _, q := range []string{k, `"` + k + `"`, "'" + k + "'"} {
			if strings.HasPrefix(t, q+":") {
				return strings.TrimSpace(t[len(q)+1:]), true
			}
		}
		return "", false
	}
	scanners := -1
	for i, l := range lines {
		if indent(l) == 0 && !blank(l) {
			if rest, ok := key(l, "scanners"); ok && (rest == "" || strings.HasPrefix(rest, "#")) {
				scanners = i
				break
			}
		}
	}
	if scanners < 0 {
		return nil, fmt.Errorf("no block-style scanners: section; add scanners.%s.sha256: %q yourself", name, sha)
	}
	pinLine := "sha256: \"" + sha + "\""
	for i := scanners + 1; i < len(lines); i++ {
		l := lines[i]
		if blank(l) {
			continue
		}
		if indent(l) == 0 {
			break
		}
		rest, ok := key(l, name)
		if !ok {
			continue
		}
		ni := indent(l)
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndex(l, "}")
			if end < 0 {
				return nil, fmt.Errorf("scanners.%s spans several lines in flow style; add sha256: %q yourself", name, sha)
			}
			open := strings.Index(l, "{")
			inner := l[open+1 : end]
			parts := splitFlow(inner)
			replaced := false
			for j, p := range parts {
				if k, _, _ := strings.Cut(strings.TrimSpace(p), ":"); strings.Trim(k, `"'`) == "sha256" {
					parts[j] = " " + pinLine
					replaced = true
				}
			}
			if !replaced {
				parts = append([]string{pinLine}, parts...)
				if strings.TrimSpace(inner) == "" {
					parts = parts[:1]
				}
			}
			for j := range parts {
				parts[j] = strings.TrimSpace(parts[j])
			}
			lines[i] = l[:open+1] + strings.Join(parts, ", ") + l[end:]
			return []byte(strings.Join(lines, "\n")), nil
		}
		if rest != "" && !strings.HasPrefix(rest, "#") {
			return nil, fmt.Errorf("scanners.%s is not a mapping this tool can edit; add sha256: %q yourself", name, sha)
		}
		child := ni + 2
		for j := i + 1; j < len(lines); j++ {
			c := lines[j]
			if blank(c) {
				continue
			}
			if indent(c) <= ni {
				break
			}
			child = indent(c)
			if _, ok := key(c, "sha256"); ok && indent(c) == child {
				lines[j] = strings.Repeat(" ", child) + pinLine
				return []byte(strings.Join(lines, "\n")), nil
			}
		}
		out := append([]string{}, lines[:i+1]...)
		out = append(out, strings.Repeat(" ", child)+pinLine)
		out = append(out, lines[i+1:]...)
		return []byte(strings.Join(out, "\n")), nil
	}
	return nil, fmt.Errorf("scanners.%s is not in the file (adding it would enable it); add it, then pin", name)
}

// splitFlow splits a flow mapping's inside at top-level commas.
func splitFlow(s string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '"' || ch == '\'':
			quote = ch
		case ch == '{' || ch == '[':
			depth++
		case ch == '}' || ch == ']':
			depth--
		case ch == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if strings.TrimSpace(s[start:]) != "" || len(out) > 0 {
		out = append(out, s[start:])
	}
	return out
}

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("status", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	raw := fs.Bool("json", false, "print the raw JSON document")
	if err := parse(fs, args); err != nil {
		return err
	}
	a, err := hostAddr(fs, c, *addr)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + a + "/v1/status")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /v1/status: %s", resp.Status)
	}
	if *raw {
		_, err := stdout.Write(body)
		return err
	}
	var doc httpapi.StatusDoc
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&doc); err != nil {
		return fmt.Errorf("decode status: %w", err)
	}
	printStatus(stdout, doc)
	return nil
}

func printStatus(w io.Writer, doc httpapi.StatusDoc) {
	fmt.Fprintf(w, "ffscan %s (scanner API %s), up since %s, valkey %s, lanes %s\n", doc.Version, doc.ScannerAPI, doc.StartedAt.Format(time.RFC3339), strings.Join(doc.Valkey, ","), strings.Join(doc.Lanes, ","))
	cfgLine := "config: loaded " + doc.Config.LoadedAt.Format(time.RFC3339)
	if doc.Config.File != "" {
		cfgLine = "config: " + doc.Config.File + ", loaded " + doc.Config.LoadedAt.Format(time.RFC3339)
	}
	cfgLine += fmt.Sprintf(", %d reload(s), %d refused", doc.Config.Reloads, doc.Config.Refused)
	if doc.Config.LastError != "" {
		cfgLine += "; last refusal: " + oneLine(doc.Config.LastError)
	}
	fmt.Fprintln(w, cfgLine)
	if cs := doc.Completions; cs != nil {
		sub := "subscribed"
		if !cs.Subscribed {
			sub = "NOT subscribed"
		}
		fmt.Fprintf(w, "completions: %s, concurrency %d, %d messages (%d malformed, %d dropped), %d cascades (%d failed), %d edges resolved, %d reconnects\n",
			sub, cs.Concurrency, cs.Messages, cs.Malformed, cs.Dropped, cs.Dispatched, cs.Failed, cs.Resolved, cs.Reconnects)
	} else {
		fmt.Fprintln(w, "completions: disabled")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCANNER\tENABLED\tSTATE\tPID\tVERSION\tAPI\tSHA256\tRESTARTS\tSWAPS\tCYCLE\tLAST CYCLE\tPROCESSED\tERRORS\tBACKLOG")
	for _, s := range doc.Scanners {
		last, backlog, api, sha := "-", "-", "-", "-"
		if s.LastCycleAt != nil {
			last = s.LastCycleAt.Format("15:04:05") + " (" + s.LastCycleDuration + ")"
		}
		if s.Backlog != nil {
			backlog = fmt.Sprint(*s.Backlog)
		}
		if s.APIVersion > 0 {
			api = fmt.Sprint(s.APIVersion)
		}
		if len(s.SHA256) >= 12 {
			sha = s.SHA256[:12]
		}
		version := s.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(tw, "%s\t%t\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n",
			s.Name, s.Enabled, s.State, s.Pid, version, api, sha, s.Restarts, s.Swaps, s.Cycle, last, s.Processed, s.Errors, backlog)
	}
	_ = tw.Flush()
	for _, s := range doc.Scanners {
		var notes []string
		if s.Path != "" {
			notes = append(notes, "plugin "+s.Path)
		} else {
			notes = append(notes, "plugin "+s.Plugin)
		}
		if s.Interval != "" {
			notes = append(notes, fmt.Sprintf("interval %s, batch %d", s.Interval, s.Batch))
		}
		if ls := s.LastSwap; ls != nil {
			notes = append(notes, fmt.Sprintf("last swap %s %s", ls.At.Format("15:04:05"), ls.Outcome))
		}
		if s.LastError != "" {
			notes = append(notes, "last error: "+oneLine(s.LastError))
		}
		if s.LastScanError != "" {
			notes = append(notes, "last scan error: "+oneLine(s.LastScanError))
		}
		fmt.Fprintf(w, "%s: %s\n", s.Name, strings.Join(notes, "; "))
	}
}

// oneLine folds a multi-line message (a configuration error lists every
// problem on its own line) into one line for the status table.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, ":\n", ": ")), " ")
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, " ")
}
