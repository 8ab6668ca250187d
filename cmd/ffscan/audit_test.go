package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// demoBuild holds the lease_expiry plugin and the demo workload, built
// once for the package.
var demoBuild struct {
	once         sync.Once
	plugin, demo string
	err          error
}

func demoBinaries(t *testing.T) (plugin, demo string) {
	t.Helper()
	demoBuild.once.Do(func() {
		dir := filepath.Join(filepath.Dir(ffscanBin), "demo")
		if demoBuild.err = os.Mkdir(dir, 0o755); demoBuild.err != nil {
			return
		}
		for _, b := range [][2]string{
			{filepath.Join(dir, "leaseexpiry"), "github.com/ffscan/ffscan/plugins/leaseexpiry/cmd/leaseexpiry"},
			{filepath.Join(dir, "demo"), "github.com/ffscan/ffscan/examples/demo"},
		} {
			out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput()
			if err != nil {
				demoBuild.err = fmt.Errorf("build %s: %v\n%s", b[1], err, out)
				return
			}
			if demoBuild.err = os.Chmod(b[0], 0o755); demoBuild.err != nil {
				return
			}
		}
		demoBuild.plugin, demoBuild.demo = filepath.Join(dir, "leaseexpiry"), filepath.Join(dir, "demo")
	})
	require.NoError(t, demoBuild.err)
	return demoBuild.plugin, demoBuild.demo
}

// placeBinary writes src's bytes, then extra, as dst, the way a deployment
// replaces a plugin: into a temporary file beside it, renamed over it.
// Trailing bytes leave an ELF binary runnable and give it another sha256.
func placeBinary(t *testing.T, src, dst string, extra []byte) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	tmp := dst + ".new"
	require.NoError(t, os.WriteFile(tmp, append(b, extra...), 0o755))
	require.NoError(t, os.Chmod(tmp, 0o755))
	require.NoError(t, os.Rename(tmp, dst))
}

// auditEntries is `ffscan audit ... --json`.
func auditEntries(t *testing.T, env []string, args ...string) []audit.Entry {
	t.Helper()
	code, out := ffscanEnv(t, env, append([]string{"audit", "--json"}, args...)...)
	require.Equal(t, 0, code, out)
	var entries []audit.Entry
	require.NoError(t, json.Unmarshal([]byte(out), &entries), out)
	return entries
}

// The demo workload runs under a host with lease_expiry; every operator
// action is taken through the CLI (each command as an operator types it)
// and some through the console; then `ffscan audit` finds each one with
// its channel and who took it, and finds what lease_expiry did to one
// execution of the demo, with the plugin's digest; `ffscan explain` shows
// that execution's history.
func TestAuditTrailOfTheDemoThroughTheCLIAndTheConsole(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	plugin, demo := demoBinaries(t)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	plugins := filepath.Join(dir, "plugins")
	require.NoError(t, os.Mkdir(plugins, 0o755))
	placeBinary(t, plugin, filepath.Join(plugins, "leaseexpiry"), nil)
	env := []string{"FFSCAN_PLUGIN_APPROVALS_FILE=" + filepath.Join(dir, "approvals.json")}
	cfg := filepath.Join(dir, "ffscan.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`partitions: {flow: 16}
plugin_approval: required
scanners:
  lease_expiry:
    interval: 300ms
    swap: canary
`), 0o600))
	offline := []string{"--config", cfg, "--valkey-addr", srv.Addr, "--plugin-dir", plugins}
	flags := offline
	run := func(flags []string, args ...string) string {
		t.Helper()
		code, out := ffscanEnv(t, env, append(args, flags...)...)
		require.Equal(t, 0, code, "ffscan %s: %s", strings.Join(args, " "), out)
		return out
	}
	// cli runs a command of a running host's (flags name its address).
	cli := func(args ...string) string { t.Helper(); return run(flags, args...) }

	// Approved before the host starts: no host sees it, the CLI records it.
	assert.Contains(t, run(offline, "plugins", "approve", "lease_expiry"), "approved scanner lease_expiry")
	hp := startHostWith(t, cfg, env, "--valkey-addr", srv.Addr, "--plugin-dir", plugins)
	flags = append(slices.Clone(offline), "--addr", hp.addr)
	status := func() httpapi.ScannerStatus {
		st, err := getStatus(hp.addr)
		require.NoError(t, err)
		require.Len(t, st.Scanners, 1)
		return st.Scanners[0]
	}
	first := status().SHA256

	// The demo: some of its workers walk away from their leases.
	wl := exec.Command(demo, "-addr", srv.Addr, "-duration", "10m", "-rate", "10", "-crash", "0.3")
	wl.Stdout, wl.Stderr = nil, nil
	require.NoError(t, wl.Start())
	t.Cleanup(func() { _ = wl.Process.Kill(); _ = wl.Wait() })

	// What lease_expiry did to one execution of the demo.
	var acted audit.Entry
	require.Eventually(t, func() bool {
		for _, e := range auditEntries(t, env, append([]string{"--scanner", "lease_expiry", "--kind", "scanner"}, flags...)...) {
			if e.Outcome == audit.Acted && e.Execution != "" {
				acted = e
				return true
			}
		}
		return false
	}, 3*time.Minute, 500*time.Millisecond, "lease_expiry never acted on the demo's lapsed leases")
	history := auditEntries(t, env, append([]string{"--execution", acted.Execution}, flags...)...)
	require.NotEmpty(t, history)
	var mine []audit.Entry
	for _, e := range history {
		assert.Equal(t, acted.Execution, e.Execution, "only that execution's entries")
		if e.Scanner == "lease_expiry" {
			mine = append(mine, e)
		}
	}
	require.NotEmpty(t, mine)
	assert.Equal(t, "FCALL ff_mark_lease_expired_if_due", mine[len(mine)-1].Command)
	assert.Equal(t, first[:audit.DigestShown], mine[len(mine)-1].Digest, "the digest of the binary that ran")
	assert.NotEmpty(t, mine[len(mine)-1].Host)
	out := cli("explain", acted.Execution)
	assert.Contains(t, out, "ff_mark_lease_expired_if_due", "explain shows what was done beside what will be")

	// Operator actions through the CLI.
	cli("scanners", "shadow", "lease_expiry")
	cli("scanners", "act", "lease_expiry")
	cli("scanners", "disable", "lease_expiry")
	cli("scanners", "enable", "lease_expiry")
	require.Eventually(t, func() bool { return status().State == "running" }, time.Minute, 100*time.Millisecond)
	assert.Contains(t, cli("scanners", "resume", "lease_expiry"), "was not paused")
	cli("plugins", "reload", "lease_expiry", "--force")
	cli("reload")

	// Through the console.
	tokPath, err := admintoken.Resolve(tokenFile)
	require.NoError(t, err)
	token, err := admintoken.Read(tokPath)
	require.NoError(t, err)
	for _, action := range []string{"disable", "enable"} {
		form := url.Values{"token": {token}, "scanner": {"lease_expiry"}, "action": {action}}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
			PostForm("http://"+hp.addr+"/actions", form)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, action)
	}
	require.Eventually(t, func() bool { return status().State == "running" }, time.Minute, 100*time.Millisecond)

	// A new binary: the file watch starts its canary; the CLI aborts it,
	// starts it again and promotes it.
	placeBinary(t, plugin, filepath.Join(plugins, "leaseexpiry"), []byte("canary build"))
	canaryIn := func(state string) func() bool {
		return func() bool { c := status().Canary; return c != nil && c.State == state }
	}
	require.Eventually(t, canaryIn(canary.Comparing), time.Minute, 100*time.Millisecond, "the file watch never started a canary")
	cli("plugins", "canary", "lease_expiry", "--abort")
	require.Eventually(t, canaryIn(canary.Aborted), time.Minute, 100*time.Millisecond)
	cli("plugins", "canary", "lease_expiry")
	require.Eventually(t, canaryIn(canary.Comparing), time.Minute, 100*time.Millisecond)
	cli("plugins", "canary", "lease_expiry", "--promote")
	require.Eventually(t, func() bool { return status().SHA256 != first && status().State == "running" }, 2*time.Minute, 100*time.Millisecond,
		"the promoted canary never ran")

	// The new binary pinned in the configuration (the CLI records it; the
	// file watch reloads it), and a SIGHUP.
	run(offline, "plugins", "pin", "lease_expiry", "--write")
	require.Eventually(t, func() bool {
		for _, e := range auditEntries(t, env, append([]string{"--kind", "operator"}, flags...)...) {
			if e.Action == "reload" && e.Channel == audit.ChannelFileWatch {
				return true
			}
		}
		return false
	}, 2*time.Minute, 250*time.Millisecond, "the file watch never reloaded the pinned configuration")
	require.NoError(t, hp.cmd.Process.Signal(syscall.SIGHUP))

	type want struct{ action, channel string }
	wants := []want{
		{"approve", audit.ChannelCLI}, {"mode shadow", audit.ChannelCLI}, {"mode act", audit.ChannelCLI},
		{"disable", audit.ChannelCLI}, {"enable", audit.ChannelCLI}, {"resume", audit.ChannelCLI}, {"swap", audit.ChannelCLI},
		{"reload", audit.ChannelCLI}, {"disable", audit.ChannelConsole}, {"enable", audit.ChannelConsole},
		{"canary start", audit.ChannelFileWatch}, {"canary abort", audit.ChannelCLI}, {"canary start", audit.ChannelCLI},
		{"canary promote", audit.ChannelCLI}, {"pin", audit.ChannelCLI}, {"reload", audit.ChannelFileWatch}, {"reload", audit.ChannelSIGHUP},
	}
	var ops []audit.Entry
	found := func(w want) (audit.Entry, bool) {
		for _, e := range ops {
			if e.Action == w.action && e.Channel == w.channel {
				return e, true
			}
		}
		return audit.Entry{}, false
	}
	var missing []want
	if !assert.Eventually(t, func() bool {
		ops = auditEntries(t, env, append([]string{"--kind", "operator", "--since", "1h"}, flags...)...)
		missing = missing[:0]
		for _, w := range wants {
			if _, ok := found(w); !ok {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0
	}, 2*time.Minute, 250*time.Millisecond) {
		t.Fatalf("not every operator action reached the trail: missing %v\n%s\nhost's log:\n%s", missing, cli("audit", "--kind", "operator"), hp.logs.String())
	}
	identity := audit.TokenIdentity(token)
	for _, w := range wants {
		e, _ := found(w)
		if w.action != "reload" {
			assert.Equal(t, "lease_expiry", e.Scanner, "%+v", w)
		}
		switch {
		case w.action == "approve" || w.action == "pin":
			assert.True(t, strings.HasPrefix(e.Who, "user "), "%+v: %q", w, e.Who)
			assert.True(t, strings.HasPrefix(e.Host, "cli on "), "%+v: %q", w, e.Host)
		case w.channel == audit.ChannelCLI || w.channel == audit.ChannelConsole:
			assert.Contains(t, e.Who, identity, "%+v", w)
		}
	}
	promoted, _ := found(want{"canary promote", audit.ChannelCLI})
	assert.Contains(t, promoted.Detail, "sha256 "+status().SHA256[:12])
	pinned, _ := found(want{"pin", audit.ChannelCLI})
	assert.Contains(t, pinned.Detail, status().SHA256[:12])
	assert.NotContains(t, strings.Join([]string{fmt.Sprint(ops)}, ""), token, "the token itself is never written")

	// The scanner's view holds both kinds; the text view names channels.
	both := map[string]bool{}
	for _, e := range auditEntries(t, env, append([]string{"--scanner", "lease_expiry", "--limit", "1000"}, flags...)...) {
		assert.Equal(t, "lease_expiry", e.Scanner)
		both[e.Kind] = true
	}
	assert.True(t, both[audit.KindScanner] && both[audit.KindOperator], "%v", both)
	text := cli("audit", "--kind", "operator")
	for _, s := range []string{"via console", "via cli", "via file_watch", "via sighup", "canary promote"} {
		assert.Contains(t, text, s)
	}
	code, out := ffscanEnv(t, env, append([]string{"audit", "--kind", "nobody"}, flags...)...)
	assert.Equal(t, 2, code, out)
}
