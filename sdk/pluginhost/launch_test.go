package pluginhost_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/testscanners"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

const helperEnv = "FFSCAN_SCANNERAPI_TEST_HELPER"

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		runHelper(mode)
		return
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// testPlugin builds internal/testplugin once per test binary.
func testPlugin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "scannerapi-test-")
		if buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "testplugin")
		out, err := exec.Command("go", "build", "-o", buildPath, "github.com/ffscan/ffscan/sdk/internal/testplugin").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build testplugin: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return buildPath
}

// echoCallbacks answers ECHO with its argument and refuses anything else,
// like the host refuses undeclared commands.
type echoCallbacks struct {
	mu      sync.Mutex
	batches int
	scanner string
}

func (c *echoCallbacks) Exec(_ context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	c.mu.Lock()
	c.batches++
	c.scanner = scanner
	c.mu.Unlock()
	out := make([]scannerapi.Reply, len(cmds))
	for i, cmd := range cmds {
		if cmd[0] == "ECHO" && len(cmd) == 2 {
			out[i] = scannerapi.Reply{Kind: scannerapi.KindString, Str: cmd[1]}
			continue
		}
		out[i] = scannerapi.Reply{Kind: scannerapi.KindError, Err: "command not allowed", ErrClass: scannerapi.ErrRefused}
	}
	return out, nil
}

func launch(t *testing.T, cb pluginhost.Callbacks) *pluginhost.Plugin {
	t.Helper()
	return launchWith(t, pluginhost.LaunchConfig{Callbacks: cb})
}

func launchWith(t *testing.T, cfg pluginhost.LaunchConfig) *pluginhost.Plugin {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg.Path = testPlugin(t)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Warn, Output: os.Stderr})
	p, err := pluginhost.Launch(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		p.Kill()
		waitGone(t, p.Pid(), 5*time.Second)
	})
	return p
}

func scannerByName(t *testing.T, p *pluginhost.Plugin, name string) pluginhost.HostScanner {
	t.Helper()
	s, ok := p.Scanner(name)
	require.True(t, ok, "plugin serves %s", name)
	return s
}

func sampleRequest() *scannerapi.ScanRequest {
	return &scannerapi.ScanRequest{
		Scanner:   "echo",
		Partition: keys.Partition{Family: keys.FamilyFlow, Index: 7},
		NowMs:     1_700_000_000_123,
		Cycle:     42,
		Batch:     3,
		Lanes:     []string{"default", "bin\x00lane"},
		Candidates: []scannerapi.Candidate{
			{Source: "due", Key: "ff:idx:{fp:7}:test", Member: "a", Score: 1.5},
			{Source: "due", Key: "ff:idx:{fp:7}:test", Member: "b\xffbinary", Score: 2},
			{Source: "due", Key: "ff:idx:{fp:7}:test", Member: "", Score: 3},
		},
	}
}

func TestLaunchedScannerMatchesLinked(t *testing.T) {
	cb := &echoCallbacks{}
	p := launch(t, cb)
	ctx := context.Background()

	var names []string
	for _, s := range p.Scanners() {
		names = append(names, s.Info().Name)
	}
	assert.Equal(t, []string{"echo", "sleeper", "panicker", "spawner", "prober"}, names)
	assert.Equal(t, scannerapi.APIVersion, p.APIVersion())
	assert.Greater(t, p.Pid(), 0)
	require.NoError(t, p.Ping(ctx))

	remote := scannerByName(t, p, "echo")
	linked := pluginhost.Linked(&testscanners.Echo{}, cb)
	assert.Equal(t, linked.Info(), remote.Info())

	for _, s := range []scannerapi.Scanner{remote, linked} {
		require.NoError(t, s.Configure(ctx, map[string]string{"prefix": "p:"}))
	}
	want, err := linked.ScanPartition(ctx, nil, sampleRequest())
	require.NoError(t, err)
	got, err := remote.ScanPartition(ctx, nil, sampleRequest())
	require.NoError(t, err)
	assert.Equal(t, want, got)
	// Notes are text: invalid UTF-8 is replaced, in both modes alike.
	assert.Equal(t, []string{"p:a", "p:b\uFFFDbinary", "p:",
		"echo {fp:7} now=1700000000123 cycle=42 dry=false lanes=[default bin\x00lane]"}, got.Notes)
	assert.True(t, got.More)
	assert.Equal(t, int64(2), got.Settled)
	assert.Equal(t, 1500*time.Millisecond, got.Lag)
	assert.True(t, got.HasLag)
	cb.mu.Lock()
	assert.Equal(t, "echo", cb.scanner)
	cb.mu.Unlock()

	parts := []keys.Partition{{Family: keys.FamilyFlow, Index: 1}, {Family: keys.FamilyFlow, Index: 5}}
	wantB, err := linked.SampleBacklog(ctx, nil, parts)
	require.NoError(t, err)
	gotB, err := remote.SampleBacklog(ctx, nil, parts)
	require.NoError(t, err)
	assert.Equal(t, []int64{10, 50}, gotB)
	assert.Equal(t, wantB, gotB)

	// nil and empty backlogs survive the wire.
	b, err := scannerByName(t, p, "sleeper").SampleBacklog(ctx, nil, parts)
	require.NoError(t, err)
	assert.Nil(t, b)
	b, err = scannerByName(t, p, "panicker").SampleBacklog(ctx, nil, parts)
	require.NoError(t, err)
	assert.Equal(t, []int64{}, b)
	// A scanner that is not a BacklogSampler answers "not measured",
	// launched or linked.
	b, err = scannerByName(t, p, "spawner").SampleBacklog(ctx, nil, parts)
	require.NoError(t, err)
	assert.Nil(t, b)
	b, err = pluginhost.Linked(testscanners.Spawner{}, cb).SampleBacklog(ctx, nil, parts)
	require.NoError(t, err)
	assert.Nil(t, b)
}

// Every callback path a plugin may use gives the same results: the
// socket pair (the default), the gRPC batch stream, and the unary Exec
// with a protobuf message per command that older plugins send.
func TestEveryCallbackPathServed(t *testing.T) {
	for _, path := range []struct {
		name string
		p    pluginhost.CallbackPath
	}{{"socket", pluginhost.CallbackSocket}, {"stream", pluginhost.CallbackStream}, {"unary", pluginhost.CallbackUnary}} {
		t.Run(path.name, func(t *testing.T) {
			cb := &echoCallbacks{}
			remote := scannerByName(t, launchWith(t, pluginhost.LaunchConfig{Callbacks: cb, CallbackPath: path.p}), "echo")
			linked := pluginhost.Linked(&testscanners.Echo{}, cb)
			ctx := context.Background()
			want, err := linked.ScanPartition(ctx, nil, sampleRequest())
			require.NoError(t, err)
			got, err := remote.ScanPartition(ctx, nil, sampleRequest())
			require.NoError(t, err)
			assert.Equal(t, want, got)
			cb.mu.Lock()
			assert.Equal(t, 2, cb.batches, "one batch each")
			cb.mu.Unlock()
		})
	}
}

func TestExplicitHostOverridesCallbacks(t *testing.T) {
	p := launch(t, nil)
	ctx := context.Background()
	remote := scannerByName(t, p, "echo")

	_, err := remote.ScanPartition(ctx, nil, sampleRequest())
	require.Error(t, err, "no Host and no Callbacks")

	var seen [][]string
	host := scannerapi.HostFunc(func(_ context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		out := make([]scannerapi.Reply, len(cmds))
		for i, c := range cmds {
			seen = append(seen, c)
			out[i] = scannerapi.Reply{Kind: scannerapi.KindError, Err: "nope", ErrClass: scannerapi.ErrRefused}
		}
		return out, nil
	})
	res, err := remote.ScanPartition(ctx, host, sampleRequest())
	require.NoError(t, err)
	assert.Len(t, seen, 3)
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrRefused, Code: "echo", Count: 3}}, res.Errors)

	// A whole-batch failure of the host reaches the scanner as an error.
	failing := scannerapi.HostFunc(func(context.Context, []scannerapi.Command) ([]scannerapi.Reply, error) {
		return nil, errors.New("host is shutting down")
	})
	_, err = remote.ScanPartition(ctx, failing, sampleRequest())
	var re *pluginhost.RemoteError
	require.ErrorAs(t, err, &re)
	assert.Contains(t, re.Message, "host is shutting down")
}

func TestScannerErrorsAndPanics(t *testing.T) {
	p := launch(t, &echoCallbacks{})
	ctx := context.Background()

	err := scannerByName(t, p, "echo").Configure(ctx, map[string]string{"reject": "1"})
	var re *pluginhost.RemoteError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "echo", re.Scanner)
	assert.Contains(t, re.Message, "reject is not allowed")

	req := sampleRequest()
	req.Candidates[0].Member = "error"
	_, err = scannerByName(t, p, "echo").ScanPartition(ctx, nil, req)
	require.ErrorAs(t, err, &re)
	assert.Contains(t, re.Message, "candidate says error")

	_, err = scannerByName(t, p, "panicker").ScanPartition(ctx, nil, sampleRequest())
	require.ErrorAs(t, err, &re)
	assert.Contains(t, re.Message, "panicked: boom")
	require.NoError(t, p.Ping(ctx), "a panicking scan does not take the plugin down")

	// The same panic linked in does not take the host down either.
	_, err = pluginhost.Linked(testscanners.Panicker{}, &echoCallbacks{}).ScanPartition(ctx, nil, sampleRequest())
	require.ErrorContains(t, err, "panicked: boom")
}

func TestCloseIsGraceful(t *testing.T) {
	p := launch(t, &echoCallbacks{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, p.Close(ctx))
	t.Logf("closed in %s", time.Since(start))
	// Exit status 0: it exited on request; go-plugin's kill fallback
	// (after 2 s) would have left a signal as the exit status.
	require.NoError(t, p.ExitError(), "an idle plugin exits on request, without the kill fallback")
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Close")
	}
	waitGone(t, p.Pid(), time.Second)
	_, err := scannerByName(t, p, "echo").ScanPartition(context.Background(), nil, sampleRequest())
	require.ErrorIs(t, err, pluginhost.ErrPluginExited)
}

// kill -9 of the plugin in the middle of a call: the call fails promptly
// with ErrPluginExited, Exited closes, and the process is gone.
func TestKillNineMidCall(t *testing.T) {
	p := launch(t, &echoCallbacks{})
	pidFile := filepath.Join(t.TempDir(), "pid")
	errc := make(chan error, 1)
	go func() {
		req := sampleRequest()
		req.Candidates[0].Member = pidFile
		_, err := scannerByName(t, p, "sleeper").ScanPartition(context.Background(), nil, req)
		errc <- err
	}()
	waitFile(t, pidFile, 5*time.Second)
	require.NoError(t, syscall.Kill(p.Pid(), syscall.SIGKILL))
	killed := time.Now()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, pluginhost.ErrPluginExited)
		t.Logf("the call failed %s after the kill", time.Since(killed))
	case <-time.After(10 * time.Second):
		t.Fatal("call still blocked 5 s after kill -9")
	}
	select {
	case <-p.Exited():
	case <-time.After(2 * time.Second):
		t.Fatal("Exited not closed")
	}
	require.Error(t, p.ExitError())
	waitGone(t, p.Pid(), 2*time.Second)
	require.ErrorIs(t, p.Ping(context.Background()), pluginhost.ErrPluginExited)
}

// Kill during a call kills the group at once and unblocks the call.
func TestKillDuringCall(t *testing.T) {
	p := launch(t, &echoCallbacks{})
	pidFile := filepath.Join(t.TempDir(), "pid")
	errc := make(chan error, 1)
	go func() {
		req := sampleRequest()
		req.Candidates[0].Member = pidFile
		_, err := scannerByName(t, p, "sleeper").ScanPartition(context.Background(), nil, req)
		errc <- err
	}()
	waitFile(t, pidFile, 5*time.Second)
	start := time.Now()
	p.Kill()
	// The alternative is a call that never returns (the sleeper waits for
	// its context); the bounds leave room for a busy machine.
	assert.Less(t, time.Since(start), 10*time.Second)
	select {
	case err := <-errc:
		require.ErrorIs(t, err, pluginhost.ErrPluginExited)
	case <-time.After(10 * time.Second):
		t.Fatal("call still blocked after Kill")
	}
	waitGone(t, p.Pid(), time.Second)
}

// A call's context deadline cancels the plugin side too.
func TestCallDeadline(t *testing.T) {
	p := launch(t, &echoCallbacks{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	req := sampleRequest()
	req.Candidates[0].Member = filepath.Join(t.TempDir(), "pid")
	_, err := scannerByName(t, p, "sleeper").ScanPartition(ctx, nil, req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, pluginhost.ErrPluginExited)
	// The sleeper never returns by itself: returning at all is the
	// deadline's doing; the bound leaves room for a busy machine.
	assert.Less(t, time.Since(start), 10*time.Second)

	// A cancelled call returns at once too.
	ctx, cancel = context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	start = time.Now()
	_, err = scannerByName(t, p, "sleeper").ScanPartition(ctx, nil, req)
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 10*time.Second)
	require.NoError(t, p.Ping(context.Background()))
}

// Kill and Close take down what the plugin started, not only the plugin.
func TestProcessGroupIsKilled(t *testing.T) {
	for _, how := range []string{"kill", "close"} {
		t.Run(how, func(t *testing.T) {
			p := launch(t, &echoCallbacks{})
			pidFile := filepath.Join(t.TempDir(), "child")
			req := sampleRequest()
			req.Candidates[0].Member = pidFile
			_, err := scannerByName(t, p, "spawner").ScanPartition(context.Background(), nil, req)
			require.NoError(t, err)
			b, err := os.ReadFile(pidFile)
			require.NoError(t, err)
			child, err := strconv.Atoi(string(b))
			require.NoError(t, err)
			require.False(t, gone(child))
			if how == "kill" {
				p.Kill()
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, p.Close(ctx))
			}
			waitGone(t, p.Pid(), 2*time.Second)
			waitGone(t, child, 2*time.Second)
		})
	}
}

func TestLaunchFailures(t *testing.T) {
	ctx := context.Background()
	_, err := pluginhost.Launch(ctx, pluginhost.LaunchConfig{Path: "/nonexistent/plugin"})
	require.Error(t, err)

	// A binary that is not a plugin fails the handshake quickly.
	_, err = pluginhost.Launch(ctx, pluginhost.LaunchConfig{Path: "/bin/true", StartTimeout: 5 * time.Second, Logger: hclog.NewNullLogger()})
	require.Error(t, err)

	_, err = pluginhost.Launch(ctx, pluginhost.LaunchConfig{Path: testPlugin(t), Checksum: make([]byte, 32), Logger: hclog.NewNullLogger()})
	require.ErrorContains(t, err, "checksum")
}

// The host is SIGKILLed: its plugin is gone within 5 s. Two variants: the
// real launcher (Pdeathsig and the SDK's parent watch) and a bare exec
// without Pdeathsig (the SDK's parent watch alone).
func TestPluginDiesWithParent(t *testing.T) {
	for _, mode := range []string{"launch", "exec"} {
		t.Run(mode, func(t *testing.T) {
			plugin := testPlugin(t)
			helper := exec.Command(os.Args[0], "-test.run=^$")
			// The helper dies without cleaning up: its temporary files
			// (go-plugin's socket directory) go in a directory the test
			// removes.
			helper.Env = append(os.Environ(), helperEnv+"="+mode, "FFSCAN_TEST_PLUGIN="+plugin, "TMPDIR="+t.TempDir())
			helper.Stderr = os.Stderr
			helper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := helper.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, helper.Start())
			t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })

			lines := bufio.NewScanner(out)
			pid := 0
			deadline := time.After(20 * time.Second)
			got := make(chan int, 1)
			go func() {
				for lines.Scan() {
					if s, ok := strings.CutPrefix(lines.Text(), "plugin-pid "); ok {
						n, _ := strconv.Atoi(s)
						got <- n
						return
					}
				}
				close(got)
			}()
			select {
			case pid = <-got:
			case <-deadline:
				t.Fatal("helper did not report the plugin pid")
			}
			require.Greater(t, pid, 0)
			require.False(t, gone(pid))

			require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
			_ = helper.Wait()
			killed := time.Now()
			waitGone(t, pid, 5*time.Second)
			t.Logf("plugin gone %s after its parent was killed", time.Since(killed).Round(time.Millisecond))
		})
	}
}

// runHelper is the body of the helper process of TestPluginDiesWithParent.
func runHelper(mode string) {
	plugin := os.Getenv("FFSCAN_TEST_PLUGIN")
	switch mode {
	case "launch":
		p, err := pluginhost.Launch(context.Background(), pluginhost.LaunchConfig{Path: plugin, Logger: hclog.NewNullLogger()})
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		fmt.Printf("plugin-pid %d\n", p.Pid())
	case "exec":
		cmd := exec.Command(plugin)
		cmd.Env = []string{
			pluginhost.Handshake().MagicCookieKey + "=" + pluginhost.Handshake().MagicCookieValue,
			"PLUGIN_PROTOCOL_VERSIONS=" + strconv.Itoa(scannerapi.APIVersion),
			"PLUGIN_MIN_PORT=10000", "PLUGIN_MAX_PORT=25000",
			"TMPDIR=" + os.Getenv("TMPDIR"), // its socket goes where the test cleans
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		// Wait for the handshake line: the plugin is serving.
		if !bufio.NewScanner(out).Scan() {
			fmt.Fprintln(os.Stderr, "helper: no handshake line")
			os.Exit(1)
		}
		fmt.Printf("plugin-pid %d\n", cmd.Process.Pid)
	}
	select {} // until killed
}

func waitFile(t *testing.T, path string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s not written within %s", path, limit)
}

// gone reports a process that no longer exists or is a zombie (killed,
// waiting for a reaper that may be slow in a container).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return true
		}
		return syscall.Kill(pid, 0) != nil
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

func waitGone(t testing.TB, pid int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if gone(pid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d still running %s later", pid, limit)
}
