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
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host"
	"github.com/ffscan/ffscan/host/config"
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
		for _, mode := range []string{"plain", "longpattern"} {
			if err := build(mode); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
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
	srv := testserver.New(t)
	cfg := hostConfig(t, srv.Addr, mode)
	h, err := host.Boot(context.Background(), cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	for _, at := range attacks {
		require.Contains(a.t, out, at, "the plugin reported no outcome for %q (notes: %q)", at, sum.Notes)
	}
	return out
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
