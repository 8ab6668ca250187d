package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// Built once for the package: the ffscan binary and the host's test plugin.
var (
	ffscanBin string
	pluginDir string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ffscan-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = os.Chmod(dir, 0o755)
	tokenFile = filepath.Join(dir, "admin-token")
	approvalsFile = filepath.Join(dir, "plugin-approvals.json")
	pluginDir = filepath.Join(dir, "plugins")
	_ = os.Mkdir(pluginDir, 0o755)
	ffscanBin = filepath.Join(dir, "ffscan")
	for _, b := range [][2]string{
		{ffscanBin, "github.com/ffscan/ffscan/cmd/ffscan"},
		{filepath.Join(pluginDir, "hostwork"), "github.com/ffscan/ffscan/host/internal/testplugin"},
	} {
		cmd := exec.Command("go", "build", "-o", b[0], b[1])
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		err := cmd.Run()
		if err == nil {
			err = os.Chmod(b[0], 0o755) // as the catalog wants it whatever the umask
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "build", b[1], err)
			os.Exit(1)
		}
	}
	code := m.Run()
	pgShareSchema.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ffscan.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// ffscan runs the binary to completion.
func ffscan(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return ffscanEnv(t, nil, args...)
}

// ffscanEnv runs the binary to completion with env added to a clean
// environment.
func ffscanEnv(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	// A guard against a command that hangs, not a bound on how long one
	// may take: on a loaded machine create-schema's 6,656 partitions have
	// taken over a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ffscanBin, args...)
	cmd.Env = append(cleanEnv(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, out.String()
}

// tokenFile is the admin token every host and CLI command of the tests
// shares, in the test directory rather than the user's configuration
// directory.
var tokenFile, approvalsFile string

// cleanEnv keeps FFSCAN_ variables of the developer's shell out of the
// child (FFSCAN_TEST_SERVER is harmless: the config ignores it) and points
// it at the tests' admin token.
func cleanEnv() []string {
	env := []string{"FFSCAN_HTTP__ADMIN_TOKEN_FILE=" + tokenFile, "FFSCAN_PLUGIN_APPROVALS_FILE=" + approvalsFile}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "FFSCAN_") && !strings.HasPrefix(kv, "FFSCAN_TEST_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// hostProc is a background `ffscan run`.
type hostProc struct {
	cmd    *exec.Cmd
	addr   string // HTTP listen address
	logs   *syncBuffer
	exited chan struct{}
}

// syncBuffer collects a child's output while tests read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startHost runs `ffscan run` in the background and returns once its
// status shows the scanner running.
func startHost(t *testing.T, cfgBody string, extra ...string) *hostProc {
	t.Helper()
	return startHostWith(t, writeConfig(t, cfgBody), nil, append([]string{"--plugin-dir", pluginDir}, extra...)...)
}

// startHostWith is startHost with the configuration file cfg and env
// added to the clean environment.
func startHostWith(t *testing.T, cfg string, env []string, extra ...string) *hostProc {
	t.Helper()
	hp := &hostProc{addr: proctest.FreeAddr(t), logs: &syncBuffer{}, exited: make(chan struct{})}
	args := append([]string{"run", "--config", cfg, "--http-listen", hp.addr}, extra...)
	hp.cmd = exec.Command(ffscanBin, args...)
	// The host is killed at the end, so nothing it made in the temporary
	// directory (go-plugin's socket directories) is cleaned by it: give
	// it one the test removes.
	hp.cmd.Env = append(append(cleanEnv(), env...), "TMPDIR="+t.TempDir())
	hp.cmd.Stdout, hp.cmd.Stderr = hp.logs, hp.logs
	require.NoError(t, hp.cmd.Start())
	go func() { _ = hp.cmd.Wait(); close(hp.exited) }()
	t.Cleanup(func() {
		_ = hp.cmd.Process.Kill()
		<-hp.exited
	})
	require.Eventually(t, func() bool {
		select {
		case <-hp.exited:
			t.Fatalf("ffscan run exited early: %s", hp.logs.String())
		default:
		}
		st, err := getStatus(hp.addr)
		return err == nil && len(st.Scanners) > 0 && st.Scanners[0].State == "running"
	}, 60*time.Second, 50*time.Millisecond)
	return hp
}

func getStatus(addr string) (httpapi.StatusDoc, error) {
	var doc httpapi.StatusDoc
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/v1/status")
	if err != nil {
		return doc, err
	}
	defer resp.Body.Close()
	return doc, json.NewDecoder(resp.Body).Decode(&doc)
}

func redisCLI(t *testing.T, addr string, args ...string) {
	t.Helper()
	c := testenvClient(t, addr)
	require.NoError(t, c(args...))
}

// testenvClient returns a tiny command runner on a fresh connection.
func testenvClient(t *testing.T, addr string) func(args ...string) error {
	t.Helper()
	return func(args ...string) error {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write([]byte(b.String())); err != nil {
			return err
		}
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		if err != nil {
			return err
		}
		if n > 0 && buf[0] == '-' {
			return fmt.Errorf("%s", strings.TrimSpace(string(buf[:n])))
		}
		return nil
	}
}

const slowConfig = `
partitions: {flow: 16}
shutdown_timeout: 3s
scheduler: {call_timeout: 60s}
scanners:
  hostwork:
    interval: 100ms
    options: {delay: 30s}
`

// SIGTERM while a scan is in flight: the process exits within
// shutdown_timeout and its plugin is gone with it.
func TestSIGTERMDuringScanExitsWithinTimeout(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	hp := startHost(t, slowConfig, "--valkey-addr", srv.Addr)
	st, err := getStatus(hp.addr)
	require.NoError(t, err)
	pid := st.Scanners[0].Pid
	require.True(t, proctest.Alive(pid))
	redisCLI(t, srv.Addr, "ZADD", "ff:idx:{fp:4}:hostwork", "1", "x")
	time.Sleep(time.Second) // picked up, now inside its 30 s delay

	t0 := time.Now()
	require.NoError(t, hp.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-hp.exited:
	case <-time.After(3*time.Second + 8*time.Second):
		t.Fatalf("ffscan did not exit within the shutdown timeout: %s", hp.logs.String())
	}
	took := time.Since(t0)
	// The alternative is the plugin's 30 s delay; the margin is for a busy
	// machine (the watchdog itself exits at the shutdown timeout).
	assert.Less(t, took, 3*time.Second+5*time.Second)
	assert.Equal(t, 0, hp.cmd.ProcessState.ExitCode(), hp.logs.String())
	assert.Contains(t, hp.logs.String(), "shutdown complete")
	proctest.WaitGone(t, pid, 5*time.Second, "no orphan plugin")
}

// SIGKILL of the host: nothing can clean up, yet the plugin is gone within
// 5 s (Pdeathsig, and the SDK's parent watch).
func TestSIGKILLHostLeavesNoPlugin(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	hp := startHost(t, slowConfig, "--valkey-addr", srv.Addr)
	st, err := getStatus(hp.addr)
	require.NoError(t, err)
	pid := st.Scanners[0].Pid
	require.True(t, proctest.Alive(pid))
	redisCLI(t, srv.Addr, "ZADD", "ff:idx:{fp:4}:hostwork", "1", "x")
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, hp.cmd.Process.Signal(syscall.SIGKILL))
	<-hp.exited
	proctest.WaitGone(t, pid, 5*time.Second, "plugin %d still alive 5 s after the host was SIGKILLed", pid)
}

func TestStatusCommand(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	hp := startHost(t, "partitions: {flow: 16}\nscanners:\n  hostwork: {interval: 100ms}\n", "--valkey-addr", srv.Addr)
	code, out := ffscan(t, "status", "--addr", hp.addr)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "hostwork")
	assert.Contains(t, out, "running")
	code, out = ffscan(t, "status", "--addr", hp.addr, "--json")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `"state": "running"`)
}

// --valkey-addr works without any configuration file.
func TestScanOnceWithoutConfigFile(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	redisCLI(t, srv.Addr, "ZADD", "ff:idx:{fp:7}:hostwork", "1", "a", "2", "b")
	redisCLI(t, srv.Addr, "ZADD", "ff:idx:{fp:200}:hostwork", "1", "c")
	common := []string{"--valkey-addr", srv.Addr, "--plugin-dir", pluginDir, "--scanner", "hostwork"}

	code, out := ffscan(t, append([]string{"scan-once", "--dry-run"}, common...)...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "scanner hostwork (dry run)")
	assert.Contains(t, out, "partitions: 256 visited, 2 scanned, 254 skipped (empty), 0 failed")
	assert.Contains(t, out, "items:      0 processed, 3 skipped")
	assert.Contains(t, out, "errors:     none")

	code, out = ffscan(t, append([]string{"scan-once", "--partition", "7"}, common...)...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "partitions: 1 visited, 1 scanned, 0 skipped (empty)")
	assert.Contains(t, out, "items:      2 processed")

	code, out = ffscan(t, append([]string{"scan-once"}, common...)...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "1 scanned, 255 skipped (empty)")
	assert.Contains(t, out, "items:      1 processed")
}

func TestPluginsListAndVerify(t *testing.T) {
	t.Parallel()
	code, out := ffscan(t, "plugins", "list", "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "hostwork")
	assert.Contains(t, out, "1.0.0")
	assert.Regexp(t, `[0-9a-f]{64}`, out)
	code, out = ffscan(t, "plugins", "list", "--verbose", "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "source work: zset_due ff:idx:{p}:hostwork (backlog: due)")
	assert.Contains(t, out, "commands: ZREM SADD")
	assert.Contains(t, out, "key scope of ZREM: ff:idx:{*}:hostwork")
	assert.Contains(t, out, `option delay (duration, default "0s"): sleep before each partition`)

	good := writeConfig(t, "scanners:\n  hostwork: {options: {delay: 1ms}}\n")
	code, out = ffscan(t, "plugins", "verify", "--config", good, "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   scanner hostwork")

	pinned := writeConfig(t, "scanners:\n  hostwork: {sha256: \""+strings.Repeat("ab", 32)+"\"}\n")
	code, out = ffscan(t, "plugins", "verify", "--config", pinned, "--plugin-dir", pluginDir)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "FAIL scanner hostwork")
	assert.Contains(t, out, "sha256 mismatch")

	badOpt := writeConfig(t, "scanners:\n  hostwork: {options: {delay: soon, colour: red}}\n")
	code, out = ffscan(t, "plugins", "verify", "--config", badOpt, "--plugin-dir", pluginDir)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, `scanners.hostwork.options.delay: "soon" is not a duration`)
	assert.Contains(t, out, `scanners.hostwork.options.colour: unknown option`)
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	code, _ := ffscan(t, "version")
	assert.Equal(t, 0, code)
	code, _ = ffscan(t)
	assert.Equal(t, 2, code, "no command")
	code, _ = ffscan(t, "frobnicate")
	assert.Equal(t, 2, code, "unknown command")
	code, _ = ffscan(t, "scan-once", "--valkey-addr", "127.0.0.1:1")
	assert.Equal(t, 2, code, "--scanner missing")
	bad := writeConfig(t, "scanners:\n  leaseexpiry:\n    interval: fast\n")
	code, out := ffscan(t, "run", "--config", bad)
	assert.Equal(t, 2, code)
	assert.Contains(t, out, `scanners.leaseexpiry.interval: "fast" is not a duration`)
	// Valkey unreachable is a runtime failure, not a usage error.
	code, _ = ffscan(t, "scan-once", "--scanner", "hostwork", "--valkey-addr", proctest.FreeAddr(t), "--plugin-dir", pluginDir)
	assert.Equal(t, 1, code)

	// A partition mismatch is a configuration error.
	srv := testserver.New(t)
	redisCLI(t, srv.Addr, "HSET", "ff:config:partitions", "num_flow_partitions", "8", "num_budget_partitions", "32", "num_quota_partitions", "32")
	code, out = ffscan(t, "scan-once", "--scanner", "hostwork", "--valkey-addr", srv.Addr, "--plugin-dir", pluginDir)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "num_flow_partitions: configured 256, stored 8")
}

// verify shows each scanner's policy and whether it is approved; with
// plugin_approval: required an unapproved one fails until `plugins
// approve` records it.
func TestPluginsApproveAndVerifyPolicy(t *testing.T) {
	t.Parallel()
	own := []string{"FFSCAN_PLUGIN_APPROVALS_FILE=" + filepath.Join(t.TempDir(), "approvals.json")}
	cfg := writeConfig(t, "plugin_approval: required\nscanners:\n  hostwork: {}\n")
	code, out := ffscanEnv(t, own, "plugins", "verify", "--config", cfg, "--plugin-dir", pluginDir)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "FAIL scanner hostwork")
	assert.Contains(t, out, "its policy is not approved")
	assert.Contains(t, out, "ZREM ff:idx:{*}:hostwork")

	code, out = ffscanEnv(t, own, "plugins", "approve", "--config", cfg, "--plugin-dir", pluginDir)
	assert.Equal(t, 2, code, "neither names nor --all: %s", out)

	code, out = ffscanEnv(t, own, "plugins", "approve", "hostwork", "--config", cfg, "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "approved scanner hostwork")
	assert.Contains(t, out, "new in this approval: + SADD ff:test:{*}:done; + ZREM ff:idx:{*}:hostwork")

	code, out = ffscanEnv(t, own, "plugins", "verify", "--config", cfg, "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   scanner hostwork")
	assert.Contains(t, out, "policy: approved (")
	assert.Contains(t, out, "by operator on")
	assert.Contains(t, out, "SADD ff:test:{*}:done")
}
