// Command ffscan is the scanner host and its operator tools.
//
//	ffscan run                      run the host until SIGTERM/SIGINT
//	ffscan plugins list             launch each plugin briefly and show its scanners
//	ffscan plugins verify           check pins, permissions and handshakes
//	ffscan scan-once --scanner N    one cycle of one scanner, then a summary
//	ffscan status                   the /v1/status of a running host
//	ffscan version
//
// Every command accepts --config FILE (default $FFSCAN_CONFIG) and
// --valkey-addr host:port. Exit status: 0 ok, 1 runtime failure, 2 bad
// usage or configuration.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
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
  run                          run the host until SIGTERM or SIGINT
  plugins list                 show each plugin's scanners (name, version, API version, sha256)
  plugins verify               check sha256 pins, file permissions and handshakes
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
		if len(rest) == 0 || (rest[0] != "list" && rest[0] != "verify") {
			fmt.Fprint(stderr, "ffscan plugins: want list or verify\n\n"+usage)
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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	return nil
}

// load reads the configuration; only flags the user set override it.
func (c *common) load(fs *flag.FlagSet) (*config.Config, error) {
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
	return config.Load(config.Sources{File: c.configFile, Flags: over})
}

func cmdRun(args []string, stderr io.Writer) error {
	fs, c := newFlags("run", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := c.load(fs)
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

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("status", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	raw := fs.Bool("json", false, "print the raw JSON document")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *addr == "" {
		cfg, err := c.load(fs)
		if err != nil {
			return err
		}
		*addr = cfg.HTTP.Listen
	}
	if *addr == "" {
		return usageError{errors.New("no address: http.listen is empty; pass --addr")}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + *addr + "/v1/status")
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
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("decode status: %w", err)
	}
	fmt.Fprintf(stdout, "ffscan %s, up since %s, valkey %s, lanes %s\n", doc.Version, doc.StartedAt.Format(time.RFC3339), strings.Join(doc.Valkey, ","), strings.Join(doc.Lanes, ","))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCANNER\tENABLED\tSTATE\tPID\tVERSION\tRESTARTS\tCYCLE\tLAST CYCLE\tPROCESSED\tERRORS\tBACKLOG\tLAST ERROR")
	for _, s := range doc.Scanners {
		last, backlog := "-", "-"
		if s.LastCycleAt != nil {
			last = s.LastCycleAt.Format("15:04:05") + " (" + s.LastCycleDuration + ")"
		}
		if s.Backlog != nil {
			backlog = fmt.Sprint(*s.Backlog)
		}
		lastErr := s.LastError
		if lastErr == "" {
			lastErr = s.LastScanError
		}
		fmt.Fprintf(tw, "%s\t%t\t%s\t%d\t%s\t%d\t%d\t%s\t%d\t%d\t%s\t%s\n",
			s.Name, s.Enabled, s.State, s.Pid, s.Version, s.Restarts, s.Cycle, last, s.Processed, s.Errors, backlog, lastErr)
	}
	return tw.Flush()
}
