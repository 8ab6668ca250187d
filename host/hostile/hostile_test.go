// Package hostile runs a hostile plugin (host/internal/hostileplugin)
// through a real host and checks that each way out it tries is closed.
// Each test is one escape a plugin author found: it failed before the
// host closed it.
package hostile

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
	"golang.org/x/sys/unix"

	"github.com/ffscan/ffscan/host"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	hostilescanner "github.com/ffscan/ffscan/host/internal/hostile"
	"github.com/ffscan/ffscan/host/plugindir"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/testserver"
)

const pluginPkg = "github.com/ffscan/ffscan/host/internal/hostileplugin"

// binDir holds the hostile plugin's builds, one per mode, each alone in
// a plugin directory of its own (binDir/<mode>/hostile).
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ffscan-hostile-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		for _, mode := range []string{"plain", "longpattern", "startup", "shifty", "bigbatch", "moresource"} {
			if err := build(mode); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		// The host itself, for the tests that measure its process.
		if b, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "ffscan"), "github.com/ffscan/ffscan/cmd/ffscan").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build ffscan: %v\n%s", err, b)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func build(mode string) error {
	out := filepath.Join(binDir, mode, "hostile")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.Chmod(binDir, 0o755); err != nil {
		return err
	}
	b, err := exec.Command("go", "build", "-ldflags", "-X main.mode="+mode, "-o", out, pluginPkg).CombinedOutput()
	if err != nil {
		return fmt.Errorf("build %s (mode %s): %v\n%s", pluginPkg, mode, err, b)
	}
	return os.Chmod(out, 0o755) // as the catalog wants it whatever the umask
}

// hostConfig is a host on addr with the hostile plugin of mode enabled.
func hostConfig(t *testing.T, addr, mode string) *config.Config {
	t.Helper()
	cfg := config.Defaults()
	cfg.Valkey.Addrs = []string{addr}
	cfg.Valkey.Cluster = "off"
	cfg.Partitions = keys.PartitionConfig{Flow: 4, Budget: 2, Quota: 2}
	cfg.PluginDir = filepath.Join(binDir, mode)
	cfg.HTTP.Listen = ""
	cfg.Completions.Enabled = false
	cfg.HTTP.AdminTokenFile = filepath.Join(t.TempDir(), "admin-token")
	cfg.PluginApprovalsFile = filepath.Join(t.TempDir(), "plugin-approvals.json")
	cfg.Scanners = map[string]config.Scanner{"hostile": {Enabled: true, Plugin: "hostile", Options: map[string]string{}}}
	// What an attack's outcome is, not how fast the host answers it, is
	// under test: a batch of 60 MB of refused keys takes the race-built
	// host seconds on a busy machine, past the 5 s default, and then no
	// outcome was reported at all.
	cfg.Scheduler.CallTimeout = 2 * time.Minute
	return &cfg
}

// attacker is the hostile plugin served through a real host.
type attacker struct {
	t    *testing.T
	srv  *testserver.Server
	c    valkey.Client
	sess *host.Session
}

func newAttacker(t *testing.T, mode string) *attacker {
	t.Helper()
	return newLoggedAttacker(t, mode, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
}

// newLoggedAttacker is newAttacker with the host logging to log.
func newLoggedAttacker(t *testing.T, mode string, log hclog.Logger) *attacker {
	t.Helper()
	srv := testserver.New(t)
	cfg := hostConfig(t, srv.Addr, mode)
	h, err := host.Boot(context.Background(), cfg, log)
	require.NoError(t, err)
	t.Cleanup(h.Close)
	sess, err := h.OpenSession(context.Background(), "hostile", host.SessionOptions{})
	require.NoError(t, err)
	t.Cleanup(sess.Close)
	return &attacker{t: t, srv: srv, c: srv.Client(t), sess: sess}
}

// run has the plugin try each attack in one scan of partition 0 and
// returns the outcomes by attack.
func (a *attacker) run(attacks ...string) map[string]string {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	zadd := a.c.B().Zadd().Key("ff:idx:{fp:0}:hostile").ScoreMember()
	for _, at := range attacks {
		zadd = zadd.ScoreMember(0, at)
	}
	require.NoError(a.t, a.c.Do(ctx, zadd.Build()).Error())
	sum, err := a.sess.Cycle(ctx, 0)
	require.NoError(a.t, err)
	out := map[string]string{}
	for _, n := range sum.Notes {
		// The host prefixes each note with its partition.
		_, n, _ = strings.Cut(n, "{fp:0}: ")
		at, outcome, ok := strings.Cut(n, ": ")
		if ok {
			out[at] = outcome
		}
	}
	byAttack := map[string]string{}
	for _, at := range attacks {
		outcome, ok := out[hostilescanner.Label(at)]
		require.True(a.t, ok, "the plugin reported no outcome for %.200q (notes: %.2000q)", at, sum.Notes)
		byAttack[at] = outcome
	}
	return byAttack
}

// permissionDenied reports whether an outcome is a refusal by the
// kernel's permission checks (EPERM from seccomp, EACCES from Landlock).
func permissionDenied(outcome string) bool {
	return strings.Contains(outcome, "operation not permitted") || strings.Contains(outcome, "permission denied")
}

func requireConfinement(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("the socket filter is installed on Linux amd64 and arm64 only, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
}

// A confined plugin gets no socket but the unix ones the host hands it:
// a multipath TCP connection to the host's own Valkey (which Landlock's
// TCP rules let through), a TCP listener (Go listens with MPTCP) and a
// UDP datagram to a local listener all fail with a permission error.
func TestPluginOpensNoNetworkSocket(t *testing.T) {
	requireConfinement(t)
	a := newAttacker(t, "plain")
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer udp.Close()

	mptcp := "mptcp " + a.srv.Addr
	toUDP := "udp " + udp.LocalAddr().String()
	got := a.run(mptcp, "listen", toUDP)
	for _, at := range []string{mptcp, "listen", toUDP} {
		assert.True(t, permissionDenied(got[at]), "%s: want a permission error, got %q", at, got[at])
	}
}

// A host run as root hands its plugins no capability: the confined
// plugin runs as uid 0 with empty capability sets (bounding set
// included), and cannot take another user's id. Before, it kept every
// capability and could change its ids at will.
func TestPluginHasNoCapabilities(t *testing.T) {
	requireConfinement(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: the capabilities dropped are root's")
	}
	a := newAttacker(t, "plain")
	got := a.run("caps", "setuid 65534")
	assert.Equal(t, "no capabilities: uid 0, effective 0x0, permitted 0x0, inheritable 0x0, 0 in the bounding set", got["caps"])
	assert.True(t, permissionDenied(got["setuid 65534"]), "setuid: want a permission error, got %q", got["setuid 65534"])

	// `ffscan plugins verify` says what is denied.
	res, err := plugindir.Verify(context.Background(), hostConfig(t, a.srv.Addr, "plain"), hclog.NewNullLogger())
	require.NoError(t, err)
	require.NotEmpty(t, res)
	for _, r := range res {
		require.NoError(t, r.Err)
		assert.Contains(t, r.Isolation, "TCP bind and connect denied", r.Binary)
		assert.Contains(t, r.Isolation, "confined in its own process", r.Binary)
		assert.Contains(t, r.Isolation, "no capabilities; seccomp allow-list: no new processes, no sockets but unix ones", r.Binary)
	}
}

// otherApp is a library of another application loaded on the same
// server: its function writes a key outside ff:.
const otherApp = "#!lua name=otherapp\nredis.register_function('otherapp_write', function(keys, args) redis.call('SET', 'otherapp:owned', 'by a plugin') return 1 end)\n"

// FCALL keys obey the rules of command keys, and only the flowfabric
// library's functions run: a declared function called with
// ff:config:partitions among its KEYS (in both argument orders: one
// rewrote the hash, the other made it a string, and the next host start
// failed with WRONGTYPE), with keys outside the function's declared
// scope, and a function of another library loaded on the same server are
// each refused with a clear reason, and nothing is written.
func TestPluginFCallFollowsTheKeyRules(t *testing.T) {
	a := newAttacker(t, "plain")
	ctx := context.Background()
	require.NoError(t, a.c.Do(ctx, a.c.B().FunctionLoad().FunctionCode(otherApp).Build()).Error())
	config := func() map[string]string {
		m, err := a.c.Do(ctx, a.c.B().Hgetall().Key(keys.ConfigPartitions).Build()).AsStrMap()
		require.NoError(t, err)
		return m
	}
	before := config()
	require.NotEmpty(t, before, "the host recorded its partitions")

	// Keys whose hash tag is the protected key's name share its slot.
	tagged := "ff:worker:{ff:config:partitions}"
	args := " w1 worker-1 default x 30000 1700000000000"
	rewrite := "fcall ff_register_worker 3 " + tagged + ":alive ff:config:partitions " + tagged + ":idx" + args
	retype := "fcall ff_register_worker 3 ff:config:partitions ff:config:partitions ff:config:partitions" + args
	outside := "fcall ff_register_worker 3 ff:evil:{x}:alive ff:evil:{x}:caps ff:evil:{x}:workers" + args
	foreign := "fcall otherapp_write 1 ff:x"
	got := a.run(rewrite, retype, outside, foreign)

	assert.Contains(t, got[rewrite], `refused: protected_key: FCALL ff_register_worker with key "ff:config:partitions"`)
	assert.Contains(t, got[retype], "refused: protected_key:")
	assert.Contains(t, got[outside], `refused: key_scope: FCALL ff_register_worker with key "ff:evil:{x}:alive": the scanner declared ff_register_worker only for keys matching ff:worker:*:alive`)
	assert.Contains(t, got[foreign], `refused: unknown_function: function "otherapp_write" is not a function of the flowfabric library`)

	assert.Equal(t, before, config(), "ff:config:partitions unchanged")
	typ, err := a.c.Do(ctx, a.c.B().Type().Key(keys.ConfigPartitions).Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "hash", typ)
	for _, pattern := range []string{"otherapp:*", "ff:evil:*", "ff:worker:*", "ff:idx:*:workers"} {
		left, err := a.c.Do(ctx, a.c.B().Keys().Pattern(pattern).Build()).AsStrSlice()
		require.NoError(t, err)
		assert.Empty(t, left, "keys %s written", pattern)
	}
	// And the next host starts.
	h, err := host.Boot(ctx, hostConfig(t, a.srv.Addr, "plain"), hclog.NewNullLogger())
	require.NoError(t, err)
	h.Close()
}

// hostProcess is `ffscan run` with the hostile plugin, as a process of its
// own, so that its memory is its alone.
type hostProcess struct {
	t    *testing.T
	cmd  *exec.Cmd
	logs string // the file of what it logged
}

// startHost runs the host on addr with the given reply budget, the
// hostile plugin reporting its outcomes on a list. Its data segment is
// limited to dataLimit: a host that does not bound what a batch makes it
// hold dies of it here, rather than taking the machine's memory.
func startHost(t *testing.T, addr string, budget int, dataLimit uint64, extra string) *hostProcess {
	t.Helper()
	return startHostOf(t, "plain", addr, budget, dataLimit, extra)
}

// startHostOf is startHost with the hostile plugin of mode.
func startHostOf(t *testing.T, mode, addr string, budget int, dataLimit uint64, extra string) *hostProcess {
	t.Helper()
	return startHostEnv(t, mode, addr, budget, dataLimit, extra, nil)
}

// startHostEnv is startHostOf with env added to the host's environment.
func startHostEnv(t *testing.T, mode, addr string, budget int, dataLimit uint64, extra string, env []string) *hostProcess {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`valkey:
  addrs: [%q]
  cluster: "off"
partitions: {flow: 4, budget: 2, quota: 2}
plugin_dir: %q
plugin_approvals_file: %q
http:
  listen: ""
  admin_token_file: %q
completions: {enabled: false}
log: {level: warn}
callbacks:
  max_reply_bytes: %d
scanners:
  hostile:
    plugin: hostile
    interval: 100ms
    options: {report: list}
`, addr, filepath.Join(binDir, mode), filepath.Join(dir, "approvals.json"), filepath.Join(dir, "admin-token"), budget) + extra
	path := filepath.Join(dir, "ffscan.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	cmd := exec.Command(filepath.Join(binDir, "ffscan"), "run", "--config", path)
	cmd.Env = append(os.Environ(), env...)
	// A file, not a pipe: what the host logged before an event the test
	// saw is in it.
	logs := filepath.Join(dir, "host.log")
	logf, err := os.Create(logs)
	require.NoError(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	lim := unix.Rlimit{Cur: dataLimit, Max: dataLimit}
	require.NoError(t, unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_DATA, &lim, nil))
	h := &hostProcess{t: t, cmd: cmd, logs: logs}
	t.Cleanup(func() {
		// A host a plugin stopped (SIGSTOP) would never see the SIGTERM.
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the host logged:\n%s", h.log())
		}
	})
	return h
}

// log is what the host logged so far.
func (h *hostProcess) log() string {
	b, err := os.ReadFile(h.logs)
	require.NoError(h.t, err)
	return string(b)
}

// peak is the process's peak resident set (VmHWM), in bytes.
func (h *hostProcess) peak() int64 {
	h.t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.cmd.Process.Pid))
	require.NoError(h.t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(h.t, err)
			return kb << 10
		}
	}
	h.t.Fatalf("no VmHWM in /proc/%d/status", h.cmd.Process.Pid)
	return 0
}

// attack has the plugin of a host process run one attack and returns its
// outcome, waiting for it on the list the plugin pushes it to.
func attackThrough(t *testing.T, c valkey.Client, attack string) string {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, c.B().Zadd().Key("ff:idx:{fp:0}:hostile").ScoreMember().ScoreMember(0, attack).Build()).Error())
	got, err := c.Do(ctx, c.B().Blpop().Key("ff:test:hostile:outcomes").Timeout(60).Build()).AsStrSlice()
	require.NoError(t, err, "no outcome of %q within a minute", attack)
	require.Len(t, got, 2)
	at, outcome, _ := strings.Cut(got[1], ": ")
	require.Equal(t, attack, at)
	return outcome
}

// One batch of 64 GETs of a 60 MB value made a host read 3.8 GB (it was
// OOM-killed under a 3 GB limit): the replies were measured after they
// were read. Now each read is sized first, a value larger than the reply
// budget is refused without being read, and the host's peak RSS stays
// under the budget plus a small constant (what an idle host holds: about
// 75 MiB measured) and grows by less than the budget over the batch.
func TestPluginCannotMakeTheHostHoldABatchOfBigValues(t *testing.T) {
	requireConfinement(t)
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	const budget, idleHost = 16 << 20, 128 << 20
	value := strings.Repeat("v", 60<<20)
	require.NoError(t, c.Do(ctx, c.B().Set().Key("ff:evil:big").Value(value).Build()).Error())
	value = ""

	h := startHost(t, srv.Addr, budget, 2<<30, "")
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the host runs the plugin")
	before := h.peak()
	outcome := attackThrough(t, c, "getmany ff:evil:big 64")
	after := h.peak()
	t.Logf("host peak RSS %d MiB before the batch, %d MiB after; %s", before>>20, after>>20, outcome)
	assert.Contains(t, outcome, "0 values read (0 bytes), 64 refused (")
	assert.Contains(t, outcome, "budget_reply_bytes: not read: its reply would take 62914576 bytes")
	assert.Less(t, after-before, int64(budget)+8<<20, "the batch grew the host's peak RSS by %d MiB", (after-before)>>20)
	assert.Less(t, after, int64(budget+idleHost), "the host's peak RSS is %d MiB", after>>20)

	// Values that fit are read until the budget is reached; the rest
	// are refused unread. The host holds the ones it read up to three
	// times on their way to the plugin (as read, encoded, framed), and
	// its garbage collector lets the heap grow to twice what is live
	// before it collects: the bound is eight times the budget (52 MiB
	// seen at most), where reading all 64 would be 384 MiB, times the
	// same.
	require.NoError(t, c.Do(ctx, c.B().Set().Key("ff:evil:mid").Value(strings.Repeat("m", 6<<20)).Build()).Error())
	before = h.peak()
	outcome = attackThrough(t, c, "getmany ff:evil:mid 64")
	after = h.peak()
	t.Logf("host peak RSS %d MiB before the batch, %d MiB after; %s", before>>20, after>>20, outcome)
	assert.Contains(t, outcome, "2 values read (12582912 bytes), 62 refused (")
	assert.Less(t, after-before, int64(8*budget), "the batch grew the host's peak RSS by %d MiB", (after-before)>>20)
	assert.Less(t, after, int64(8*budget+idleHost), "the host's peak RSS is %d MiB", after>>20)
}

// One command can repeat what it reads, and the server answers each
// time: an MGET of the same 1 MB key 600 times took a host past 3 GB RSS
// against a 64 MiB budget (it was killed), and an HMGET of one field 600
// times and SRANDMEMBER key -600 on a one-member set were estimated the
// same way, as one value or the whole collection. Now each is bounded
// before it is read, counting what it repeats (600 times the value, 600
// times the set), and refused: the host's peak RSS stays under the
// budget plus what an idle host holds, and grows by less than the budget
// over the three. The same commands within the budget are read.
func TestPluginCannotMultiplyAReplyInOneCommand(t *testing.T) {
	requireConfinement(t)
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	const budget, idleHost = 16 << 20, 128 << 20
	value := strings.Repeat("v", 1<<20)
	for _, cmd := range [][]string{
		{"SET", "ff:evil:big", value},
		{"HSET", "ff:evil:hash", "f", value},
		{"SADD", "ff:evil:set", value},
	} {
		require.NoError(t, c.Do(ctx, c.B().Arbitrary(cmd...).Build()).Error())
	}
	value = ""

	h := startHost(t, srv.Addr, budget, 2<<30, "")
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the host runs the plugin")
	before := h.peak()
	// 600 values and their reply nodes; 600 times the set as the server
	// measures it (its allocation of the member, rounded up).
	const refusal = "refused: budget_reply_bytes: not read: its reply would take "
	for attack, want := range map[string]string{
		"mget ff:evil:big 600":         refusal + "629155216 bytes (600 keys, 1 distinct, one named 600 times: each time counted)",
		"hmget ff:evil:hash f 600":     refusal + "629155216 bytes (600 fields, 1 distinct, one named 600 times: each time counted)",
		"srandmember ff:evil:set -600": " bytes (a count of -600 repeats members: 600 times the whole collection)",
	} {
		outcome := attackThrough(t, c, attack)
		t.Logf("%s: %s", attack, outcome)
		assert.Contains(t, outcome, want, attack)
		assert.True(t, strings.HasPrefix(outcome, "refused: "+refusal), "%s: %s", attack, outcome)
	}
	after := h.peak()
	t.Logf("host peak RSS %d MiB before the three commands, %d MiB after", before>>20, after>>20)
	assert.Less(t, after-before, int64(budget), "the commands grew the host's peak RSS by %d MiB", (after-before)>>20)
	assert.Less(t, after, int64(budget+idleHost), "the host's peak RSS is %d MiB", after>>20)

	// Within the budget, the same commands are read.
	assert.Equal(t, "ok: 4 values read (4194304 bytes)", attackThrough(t, c, "mget ff:evil:big 4"))
	assert.Equal(t, "ok: 4 values read (4194304 bytes)", attackThrough(t, c, "hmget ff:evil:hash f 4"))
	assert.Equal(t, "ok: 4 values read (4194304 bytes)", attackThrough(t, c, "srandmember ff:evil:set -4"))
}

// A plugin that allocates past plugin_memory_limit dies, its supervisor
// restarts it and says why, and the restarted plugin serves again.
// Before, nothing bounded a plugin but the machine's memory. The limit
// shows in the plugin's bounds line. Without control groups the limit
// is RLIMIT_DATA and the Go runtime runs out of memory; in a group the
// kernel kills the plugin at the group's bound.
func TestPluginMemoryIsBounded(t *testing.T) {
	requireConfinement(t)
	const limit = 256 << 20
	for _, tc := range []struct {
		name, cgroups, bounds, reason string
	}{
		{"rlimits", "off", "rlimits: memory at most 256 MiB", "the plugin passed its memory limit of 256 MiB (the Go runtime ran out of memory)"},
		{"cgroup", "required", "memory at most 256 MiB (everything it maps", "the plugin passed its memory limit of 256 MiB (killed by the kernel at its control group's memory bound)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cgroups == "required" {
				requireCgroups(t)
			}
			srv := testserver.New(t)
			c := srv.Client(t)
			h := startHost(t, srv.Addr, 16<<20, 2<<30, fmt.Sprintf("plugin_memory_limit: %d\nplugin_cgroups: %s\n", limit, tc.cgroups))
			assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the host runs the plugin")

			require.NoError(t, c.Do(context.Background(), c.B().Zadd().Key("ff:idx:{fp:0}:hostile").ScoreMember().ScoreMember(0, "alloc 1024").Build()).Error())
			// The dying plugin took its attack off before it allocated,
			// and a scan that holds the ping holds the attack before it:
			// the ping is answered by the restarted plugin.
			assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the plugin was restarted")
			logs := h.log()
			assert.Contains(t, logs, "plugin failed; restarting")
			assert.Contains(t, logs, tc.reason)

			cfg := hostConfig(t, srv.Addr, "plain")
			cfg.PluginMemoryLimit = limit
			cfg.PluginCgroups = tc.cgroups
			res, err := plugindir.Verify(context.Background(), cfg, hclog.NewNullLogger())
			require.NoError(t, err)
			require.NotEmpty(t, res)
			for _, r := range res {
				require.NoError(t, r.Err)
				assert.Contains(t, r.Bounds, tc.bounds, r.Binary)
			}
		})
	}
}

// A plugin that dies of a crash is restarted, and the host says why in
// the plugin's own words, one quoted line: the first of its crash
// report. go-plugin logs a panic's report at error level, any other
// crash's (a signal, a fatal error, the cgo runtime's complaint) at
// debug only. Before, the restart's reason was "exit status 2" alone,
// and finding why took a debug log.
func TestPluginCrashIsReportedInOneQuotedLine(t *testing.T) {
	srv := testserver.New(t)
	c := srv.Client(t)
	h := startHost(t, srv.Addr, 16<<20, 2<<30, "")
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the host runs the plugin")
	for _, tc := range []struct{ attack, reason string }{
		{"abort", `reason="plugin process exited: exit status 2 (the plugin printed \"SIGABRT: abort\")"`},
		// The escape is rendered as text; what follows it stays in the
		// one quoted line.
		{`panic boom \e[31m [ERROR] forged`, `reason="plugin process exited: exit status 2 (the plugin printed \"panic: boom \x1b[31m [ERROR] forged\")"`},
	} {
		require.NoError(t, c.Do(context.Background(), c.B().Zadd().Key("ff:idx:{fp:0}:hostile").ScoreMember().ScoreMember(0, tc.attack).Build()).Error())
		assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the plugin was restarted after %s", tc.attack)
		assert.Contains(t, h.log(), "plugin failed; restarting: scanner=hostile "+tc.reason)
	}
	assert.NotContains(t, h.log(), "\x1b", "an escape reached the log")
}

// Refusals are short and count in the reply budget: 600 DELs of 100 KB
// keys outside the plugin's scope made the host hold 57 MB of refusal
// text per batch, each refusal quoting the key.
func TestPluginRefusalsStaySmall(t *testing.T) {
	a := newAttacker(t, "plain")
	attack := "delmany 600 100000"
	got := a.run(attack)[attack]
	var values, bytes, refused, refusals int
	_, err := fmt.Sscanf(got, "%d values read (%d bytes), %d refused (%d bytes of refusals)", &values, &bytes, &refused, &refusals)
	require.NoError(t, err, got)
	assert.Equal(t, 600, refused, got)
	assert.Less(t, refusals, 600*400, "%d bytes of refusal text for 600 refusals", refusals)
	assert.Contains(t, got, "refused: key_length: a key of 100000 bytes")
}

// The host bounds declarations: a scanner that declares a 100 KB key
// pattern (whose check against a 300 KB key took 32 s of the host's CPU,
// past the call's deadline) is refused, saying why: as a plugin (whose
// SDK refuses to serve it, which the host logs) and linked into the host
// (the host's own check, which also holds a plugin built with an SDK
// that did not bound patterns). A key of 300 KB is refused before any
// pattern sees it.
func TestPluginCannotDeclareAHugePattern(t *testing.T) {
	srv := testserver.New(t)
	var logs syncBuffer
	h, err := host.Boot(context.Background(), hostConfig(t, srv.Addr, "longpattern"),
		hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &logs}))
	require.NoError(t, err)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = h.OpenSession(ctx, "hostile", host.SessionOptions{})
	require.Error(t, err)
	assert.Contains(t, logs.String(), "key scope for GET: a pattern of 100003 bytes")
	_, err = h.OpenSession(ctx, "hostile", host.SessionOptions{Linked: hostilescanner.New("longpattern")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "key scope for GET: a pattern of 100003 bytes")

	a := newAttacker(t, "plain")
	long := "exec GET ff:evil:" + strings.Repeat("*a", 150_000)
	assert.Contains(t, a.run(long)[long], "refused: key_length: a key of 300008 bytes")
}

// syncBuffer is a log output tests read.
type syncBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	written chan struct{} // closed and replaced at each write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	return s.b.Write(p)
}

// waitFor waits until the buffer holds text, for at most a minute.
func (s *syncBuffer) waitFor(t *testing.T, text string) {
	t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if strings.Contains(s.b.String(), text) {
			s.mu.Unlock()
			return
		}
		if s.written == nil {
			s.written = make(chan struct{})
		}
		ch := s.written
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("the log never showed %q", text)
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// oneBoundedLine asserts text is a single line of at most limit bytes
// with the mark of what was cut, holding no forged line.
func oneBoundedLine(t *testing.T, what, text string, limit int) {
	t.Helper()
	assert.LessOrEqual(t, len(text), limit, "%s: %d bytes", what, len(text))
	assert.NotContains(t, text, "\n", what)
	assert.NotContains(t, text, "\r", what)
	assert.NotContains(t, text, "\x1b", what)
	assert.Contains(t, text, "…[cut: ", what)
}

// A plugin's text reaches the host's status and log as one bounded line:
// a scan error of 1 MB and a note of 1 MB, each opening with a forged
// host log line, and a stderr that forges host lines (raw, and inside a
// JSON log entry the host re-logs), writes a 1 MB line and floods 2000
// more. Before, each reached status and the log whole, newlines and all:
// the forged line stood in the log as the host's own.
func TestPluginTextReachesTheHostAsOneBoundedLine(t *testing.T) {
	logs := &syncBuffer{}
	a := newLoggedAttacker(t, "plain", hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: logs}))
	got := a.run("stderr 1048576 2000")
	assert.Equal(t, "ok: wrote to stderr", got["stderr 1048576 2000"])

	// The note: its text is cut before it is kept.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.c.Do(ctx, a.c.B().Zadd().Key("ff:idx:{fp:0}:hostile").ScoreMember().ScoreMember(0, "bignote 1048576").Build()).Error())
	sum, err := a.sess.Cycle(ctx, 0)
	require.NoError(t, err)
	require.Len(t, sum.Notes, 1)
	oneBoundedLine(t, "the note", sum.Notes[0], 600)

	// The scan error: status's last scan error.
	require.NoError(t, a.c.Do(ctx, a.c.B().Zadd().Key("ff:idx:{fp:0}:hostile").ScoreMember().ScoreMember(0, "scanerror 1048576").Build()).Error())
	sum, err = a.sess.Cycle(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, sum.Failed)
	scanErr := a.sess.LastScanError()
	oneBoundedLine(t, "the scan error", scanErr, 512)
	assert.Contains(t, scanErr, "failed\\n"+hostilescanner.ForgedLine+"\\n\\x1b[2K\\r", "escaped, not dropped")

	// The log: every line the stderr made is one bounded line, none of
	// them forged.
	logs.waitFor(t, hostilescanner.StderrDone)
	text := logs.String()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	flood := 0
	for _, l := range lines {
		assert.LessOrEqual(t, len(l), 4096, "a log line of %d bytes: %.200q", len(l), l)
		assert.False(t, strings.HasPrefix(l, hostilescanner.ForgedLine), "a forged line in the host's log: %q", l)
		assert.False(t, strings.HasPrefix(l, "[ERROR] ffscan: forged"), "a forged line in the host's log: %q", l)
		if strings.Contains(l, ": flood ") {
			flood++
		}
	}
	assert.Equal(t, 2000, flood, "each flood line relayed once, on a line of its own")
	assert.Contains(t, text, `x\n`+hostilescanner.ForgedLine+`\n`, "the JSON entry's message, escaped")
}

// pluginDirWith is a plugin directory of its own holding the hostile
// build of mode as "hostile"; install replaces it with another mode's.
func pluginDirWith(t *testing.T, mode string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugins")
	require.NoError(t, os.Mkdir(dir, 0o755))
	install(t, dir, mode)
	return dir
}

func install(t *testing.T, dir, mode string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(binDir, mode, "hostile"))
	require.NoError(t, err)
	tmp := filepath.Join(dir, ".hostile.new")
	require.NoError(t, os.WriteFile(tmp, raw, 0o755))
	require.NoError(t, os.Chmod(tmp, 0o755))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "hostile")))
}

// A binary whose declaration changes between two reads (its GET scope
// names its pid) is refused by `plugins approve`, saying so, and nothing
// is recorded. Before, the approval recorded whatever the read said,
// which need not be what the operator had reviewed, nor what the next
// launch declares.
func TestApprovalRefusesADeclarationThatChanges(t *testing.T) {
	srv := testserver.New(t)
	cfg := hostConfig(t, srv.Addr, "shifty")
	cfg.PluginApproval = "required"
	res, err := plugindir.Approve(context.Background(), cfg, []string{"hostile"}, plugindir.Reviewed{}, hclog.NewNullLogger())
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Error(t, res[0].Err)
	assert.Contains(t, res[0].Err.Error(), "declares a different policy each time it is read")
	assert.Contains(t, res[0].Err.Error(), "+ GET ff:evil:")
	store, err := policy.NewStore(cfg.PluginApprovalsFile, policy.Required)
	require.NoError(t, err)
	_, ok, err := store.Lookup("hostile")
	require.NoError(t, err)
	assert.False(t, ok, "nothing approved")
}

// An approval names the binary's sha256 and the digest of its whole
// policy, schedule included; given what the operator reviewed (`plugins
// verify`), it is refused for another binary or another declaration.
func TestApprovalBindsToTheReviewedBytes(t *testing.T) {
	srv := testserver.New(t)
	cfg := hostConfig(t, srv.Addr, "plain")
	cfg.PluginApproval = "required"
	ctx := context.Background()
	ver, err := plugindir.Verify(ctx, cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	require.NotEmpty(t, ver)
	reviewed := ver[0]
	require.Equal(t, "hostile", reviewed.Scanner)
	require.Error(t, reviewed.Err, "not approved yet")
	assert.Contains(t, reviewed.Policy, "BATCH 100")
	assert.Contains(t, reviewed.Policy, "SOURCE attacks: zset_due ff:idx:{p}:hostile backlog due")

	other := strings.Repeat("0", 64)
	for _, rv := range []plugindir.Reviewed{{SHA256: other}, {Policy: other[:12]}, {SHA256: reviewed.SHA256, Policy: other}} {
		res, err := plugindir.Approve(ctx, cfg, []string{"hostile"}, rv, hclog.NewNullLogger())
		require.NoError(t, err)
		require.Error(t, res[0].Err, "%+v", rv)
		assert.Contains(t, res[0].Err.Error(), "other than the one reviewed")
	}
	res, err := plugindir.Approve(ctx, cfg, []string{"hostile"}, plugindir.Reviewed{SHA256: reviewed.SHA256, Policy: reviewed.Digest}, hclog.NewNullLogger())
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	store, err := policy.NewStore(cfg.PluginApprovalsFile, policy.Required)
	require.NoError(t, err)
	rec, ok, err := store.Lookup("hostile")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, reviewed.SHA256, rec.ApprovedSHA256)
	assert.Equal(t, reviewed.Digest, rec.Digest)
	require.NotNil(t, rec.Policy.Schedule)
	assert.Equal(t, 100, rec.Policy.Schedule.Batch)
	assert.Equal(t, reviewed.Policy, rec.Policy.Lines())
}

// A new binary whose sources or batch differ from the approved ones (the
// host would read other keys, or hand over more per call, on its
// behalf) waits for the operator, even though it runs no other command;
// status shows what is approved and what waits, and approving exactly
// the pending declaration lets it launch. Before, sources and batch were
// not part of the approval: the swap went through.
func TestSwapWithAnotherScheduleWaitsForApproval(t *testing.T) {
	srv := testserver.New(t)
	for _, tc := range []struct{ mode, added string }{
		{"bigbatch", "~ BATCH 5000 (approved: 100)"},
		{"moresource", "+ SOURCE theirs: set_scan ff:theirs:{p}:secrets"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cfg := hostConfig(t, srv.Addr, "plain")
			cfg.PluginDir = pluginDirWith(t, "plain")
			ctx := context.Background()
			h, err := host.Boot(ctx, cfg, hclog.NewNullLogger())
			require.NoError(t, err)
			defer h.Close()
			sess, err := h.OpenSession(ctx, "hostile", host.SessionOptions{})
			require.NoError(t, err, "approved on first use")
			sess.Close()

			install(t, cfg.PluginDir, tc.mode)
			_, err = h.OpenSession(ctx, "hostile", host.SessionOptions{})
			var we *policy.WideningError
			require.ErrorAs(t, err, &we)
			assert.Equal(t, []string{tc.added}, we.Added)

			st := h.Status().Scanners
			require.Len(t, st, 1)
			require.True(t, st[0].PendingApproval)
			require.NotNil(t, st[0].Approval)
			require.NotNil(t, st[0].Approval.Approved)
			require.NotNil(t, st[0].Approval.Pending)
			assert.Equal(t, "first use", st[0].Approval.Approved.By)
			assert.Contains(t, st[0].Approval.Approved.Lines, "BATCH 100")
			pend := *st[0].Approval.Pending
			assert.Equal(t, []string{tc.added}, pend.Added)
			assert.NotEqual(t, st[0].Approval.Approved.SHA256, pend.SHA256)

			// The operator approves exactly what waits.
			res, err := h.ApprovePlugin(ctx, "hostile", httpapi.ApprovalReview{SHA256: pend.SHA256, Policy: pend.Digest})
			require.NoError(t, err)
			require.Empty(t, res.Error)
			assert.Equal(t, "approved", res.Outcome)
			st = h.Status().Scanners
			assert.False(t, st[0].PendingApproval)
			assert.Equal(t, pend.Digest, st[0].Approval.Approved.Digest)
			assert.Equal(t, pend.SHA256, st[0].Approval.Approved.SHA256)
			sess, err = h.OpenSession(ctx, "hostile", host.SessionOptions{})
			require.NoError(t, err)
			sess.Close()
		})
	}
}
