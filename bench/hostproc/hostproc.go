// Package hostproc runs the real host binary (`ffscan run`) as a child
// process for benchmarks: a generated config file, a free HTTP port, and
// helpers to read /v1/status and /metrics and to stop it.
package hostproc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// Scanner is one scanner entry of the generated config.
type Scanner struct {
	Name     string
	Plugin   string        // binary in the plugin directory
	Interval time.Duration // 0: the plugin's default
	Options  map[string]string
	// NoActionBudget turns the scanner's action budget off: a drain
	// acts on more items a minute than a destructive scanner's default
	// budget (50,000) allows, and the scanner would pause itself.
	NoActionBudget bool
}

// Options describe the host to run.
type Options struct {
	Binary     string // path of the ffscan binary
	PluginDir  string
	ValkeyAddr string // "": no Valkey (Extra names a Postgres database)
	Cluster    bool   // ValkeyAddr seeds a Valkey Cluster
	Scanners   []Scanner
	LogLevel   string // default warn
	// Extra is appended to the generated YAML as is (top-level keys).
	Extra string
	// Log receives the host's stderr (nil: discarded).
	Log io.Writer
}

// Proc is a running host.
type Proc struct {
	cmd    *exec.Cmd
	dir    string
	HTTP   string // host:port of the HTTP listener
	exited chan struct{}
}

// Start writes the config, starts the host and waits until /readyz says
// every scanner is running (or the timeout passes).
func Start(ctx context.Context, o Options, ready time.Duration) (*Proc, error) {
	dir, err := os.MkdirTemp("", "ffbench-host-")
	if err != nil {
		return nil, err
	}
	port, err := testserver.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &Proc{dir: dir, HTTP: fmt.Sprintf("127.0.0.1:%d", port), exited: make(chan struct{})}
	level := o.LogLevel
	if level == "" {
		level = "warn"
	}
	var y strings.Builder
	cluster := "off"
	if o.Cluster {
		cluster = "on"
	}
	if o.ValkeyAddr != "" { // else a host of the Postgres database in Extra alone
		fmt.Fprintf(&y, "valkey:\n  addrs: [%q]\n  cluster: %q\n", o.ValkeyAddr, cluster)
	}
	fmt.Fprintf(&y, "plugin_dir: %q\nplugin_approvals_file: %q\nhttp:\n  listen: %q\n  admin_token_file: %q\nlog:\n  level: %s\nshutdown_timeout: 5s\n",
		o.PluginDir, filepath.Join(dir, "plugin-approvals.json"), p.HTTP, filepath.Join(dir, "admin-token"), level)
	y.WriteString("scanners:\n")
	for _, s := range o.Scanners {
		fmt.Fprintf(&y, "  %s:\n", s.Name)
		if s.Plugin != "" { // else the plugin that declares the scanner
			fmt.Fprintf(&y, "    plugin: %s\n", s.Plugin)
		}
		if s.Interval > 0 {
			fmt.Fprintf(&y, "    interval: %s\n", s.Interval)
		}
		if s.NoActionBudget {
			y.WriteString("    action_budget: off\n")
		}
		if len(s.Options) > 0 {
			y.WriteString("    options:\n")
			for k, v := range s.Options {
				fmt.Fprintf(&y, "      %s: %q\n", k, v)
			}
		}
	}
	y.WriteString(o.Extra)
	cfgPath := filepath.Join(dir, "ffscan.yaml")
	if err := os.WriteFile(cfgPath, []byte(y.String()), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// The host's temporary files (its plugins' socket directories among
	// them) in its own directory, removed with it: a host the bench
	// kills with SIGKILL cannot remove them itself.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.cmd = exec.Command(o.Binary, "run", "--config", cfgPath)
	p.cmd.Env = append(withoutFFScanEnv(os.Environ()), "TMPDIR="+tmp)
	p.cmd.Stdout = o.Log
	p.cmd.Stderr = o.Log
	// Its own process group, killed with us: no host outlives the bench.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	if err := p.waitReady(ctx, ready); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

func withoutFFScanEnv(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "FFSCAN_") {
			out = append(out, e)
		}
	}
	return out
}

// Pid is the host's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

func (p *Proc) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("hostproc: the host exited during start (%v)", p.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if code, _, err := p.get(ctx, "/readyz"); err == nil && code == http.StatusOK {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("hostproc: host not ready after %s", limit)
}

func (p *Proc) get(ctx context.Context, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTP+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Status reads /v1/status.
func (p *Proc) Status(ctx context.Context) (httpapi.StatusDoc, error) {
	var doc httpapi.StatusDoc
	code, b, err := p.get(ctx, "/v1/status")
	if err != nil {
		return doc, err
	}
	if code != http.StatusOK {
		return doc, fmt.Errorf("/v1/status: HTTP %d", code)
	}
	return doc, json.Unmarshal(b, &doc)
}

// Scanner returns one scanner's status.
func (p *Proc) Scanner(ctx context.Context, name string) (httpapi.ScannerStatus, error) {
	doc, err := p.Status(ctx)
	if err != nil {
		return httpapi.ScannerStatus{}, err
	}
	for _, s := range doc.Scanners {
		if s.Name == name {
			return s, nil
		}
	}
	return httpapi.ScannerStatus{}, fmt.Errorf("scanner %s not in /v1/status", name)
}

// Metrics returns /metrics as text.
func (p *Proc) Metrics(ctx context.Context) (string, error) {
	code, b, err := p.get(ctx, "/metrics")
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("/metrics: HTTP %d", code)
	}
	return string(b), nil
}

// Stop sends SIGTERM, waits up to 10 s, then kills the process group, and
// removes the config directory.
func (p *Proc) Stop() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	os.RemoveAll(p.dir)
}
