package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

var regexpSHA = regexp.MustCompile(`[0-9a-f]{64}`)

func statusOf(t *testing.T, addr, name string) (state string, pid int, sha string) {
	t.Helper()
	st, err := getStatus(addr)
	if err != nil {
		return "", 0, ""
	}
	for _, s := range st.Scanners {
		if s.Name == name {
			return s.State, s.Pid, s.SHA256
		}
	}
	return "", 0, ""
}

// SIGHUP reloads the configuration file: a scanner enabled in it starts;
// an invalid edit is refused and the host keeps running as it was.
func TestSIGHUPReloadsTheConfig(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	body := "partitions: {flow: 16}\nwatch: {config: false}\nscanners:\n  hostwork: {interval: 100ms}\n  other: {enabled: false, plugin: hostwork}\n"
	hp := startHost(t, body, "--valkey-addr", srv.Addr)
	cfgPath := hp.cmd.Args[3]
	state, _, _ := statusOf(t, hp.addr, "other")
	require.Equal(t, "stopped", state)

	// "other" is enabled, but the binary serves only "hostwork": the
	// reload applies (the binary passes the catalog checks) and the
	// scanner's launch fails with a clear reason in its status.
	require.NoError(t, os.WriteFile(cfgPath, []byte(strings.Replace(body, "other: {enabled: false", "other: {enabled: true", 1)), 0o600))
	require.NoError(t, hp.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		st, err := getStatus(hp.addr)
		return err == nil && st.Config.Reloads == 1
	}, 20*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		st, _ := getStatus(hp.addr)
		for _, s := range st.Scanners {
			if s.Name == "other" {
				return strings.Contains(s.LastError, `serves scanners [hostwork], not "other"`)
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond)

	// An invalid file: refused, logged, nothing changes.
	_, pid, _ := statusOf(t, hp.addr, "hostwork")
	require.NoError(t, os.WriteFile(cfgPath, []byte("partitions: {flow: 16}\nscanners:\n  hostwork: {interval: never}\n"), 0o600))
	require.NoError(t, hp.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		st, err := getStatus(hp.addr)
		return err == nil && st.Config.Refused == 1
	}, 20*time.Second, 50*time.Millisecond)
	st, err := getStatus(hp.addr)
	require.NoError(t, err)
	assert.Contains(t, st.Config.LastError, `scanners.hostwork.interval: "never" is not a duration`)
	// The log comes through a pipe, apart from the status: wait for it.
	require.Eventually(t, func() bool {
		return strings.Contains(hp.logs.String(), "configuration reload refused; the running configuration stays")
	}, 20*time.Second, 20*time.Millisecond)
	state, pid2, _ := statusOf(t, hp.addr, "hostwork")
	assert.Equal(t, "running", state)
	assert.Equal(t, pid, pid2)

	// The CLI shows it all.
	code, out := ffscan(t, "status", "--addr", hp.addr)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "generation 2, 1 reload(s), 1 refused; last refusal at ")
	assert.Contains(t, out, "SWAPS")
	assert.Contains(t, out, "hostwork: plugin "+filepath.Join(pluginDir, "hostwork"))
}

// `ffscan plugins reload` hot-swaps through the admin endpoint; `ffscan
// reload` reports a refused configuration with exit status 1.
func TestPluginsReloadAndReloadCommands(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	hp := startHost(t, "partitions: {flow: 16}\nsupervisor: {swap_probation: 200ms}\nscanners:\n  hostwork: {interval: 100ms}\n", "--valkey-addr", srv.Addr)
	_, pid, sha := statusOf(t, hp.addr, "hostwork")

	code, out := ffscan(t, "plugins", "reload", "hostwork", "--addr", hp.addr)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "unchanged: the file is what runs")

	code, out = ffscan(t, "plugins", "reload", "--addr", hp.addr, "--force", "hostwork")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "scanner hostwork: kept: now version 1.0.0")
	_, pid2, sha2 := statusOf(t, hp.addr, "hostwork")
	assert.NotEqual(t, pid, pid2)
	assert.Equal(t, sha, sha2)
	proctest.WaitGone(t, pid, 10*time.Second)

	code, out = ffscan(t, "plugins", "reload", "nosuch", "--addr", hp.addr)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "not an enabled scanner")

	code, out = ffscan(t, "reload", "--addr", hp.addr)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "configuration reloaded")

	// Without the host's token nothing is sent; with another token the
	// host refuses.
	code, out = ffscan(t, "reload", "--addr", hp.addr, "--token-file", filepath.Join(t.TempDir(), "none"))
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "admin token")
	assert.Contains(t, out, "--token-file")
	other := filepath.Join(t.TempDir(), "other")
	require.NoError(t, os.WriteFile(other, []byte(strings.Repeat("f", 64)+"\n"), 0o600))
	code, out = ffscan(t, "plugins", "reload", "hostwork", "--addr", hp.addr, "--token-file", other)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "the host refused: admin requests need the host's admin token")

	cfgPath := hp.cmd.Args[3]
	require.NoError(t, os.WriteFile(cfgPath, []byte("partitions: {flow: 32}\nscanners:\n  hostwork: {}\n"), 0o600))
	code, out = ffscan(t, "reload", "--addr", hp.addr)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "partitions changed; that takes a restart")
}

func TestPluginsPin(t *testing.T) {
	t.Parallel()
	code, out := ffscan(t, "plugins", "list", "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	sha := regexpSHA.FindString(out)
	require.NotEmpty(t, sha)

	code, out = ffscan(t, "plugins", "pin", "hostwork", "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "scanners:\n  hostwork:\n    sha256: \""+sha+"\"")
	assert.Contains(t, out, "version 1.0.0, scanner API 2")

	file := writeConfig(t, "# production\nscanners:\n  # the lease scanner\n  hostwork:\n    interval: 1s # fast\n    options: {delay: 1ms}\n  other: {plugin: hostwork, enabled: false}\n")
	code, out = ffscan(t, "plugins", "pin", "hostwork", "--write", "--config", file, "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	b, _ := os.ReadFile(file)
	assert.Equal(t, "# production\nscanners:\n  # the lease scanner\n  hostwork:\n    sha256: \""+sha+"\"\n    interval: 1s # fast\n    options: {delay: 1ms}\n  other: {plugin: hostwork, enabled: false}\n", string(b))
	// Pinning again replaces the line.
	code, out = ffscan(t, "plugins", "pin", "hostwork", "--write", "--config", file, "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	b, _ = os.ReadFile(file)
	assert.Equal(t, 1, strings.Count(string(b), "sha256: \""+sha+"\"\n"), string(b))
	cfg, err := config.Load(config.Sources{File: file, Environ: []string{}})
	require.NoError(t, err)
	assert.Equal(t, sha, cfg.Scanners["hostwork"].SHA256)
	assert.False(t, cfg.Scanners["other"].Enabled)
	// A scanner the binary does not serve is not pinned.
	code, out = ffscan(t, "plugins", "pin", "other", "--write", "--config", file, "--plugin-dir", pluginDir)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, `serves [hostwork], not scanner "other"`)
	// A flow-style entry is edited in place.
	flow := writeConfig(t, "scanners:\n  hostwork: {interval: 1s, sha256: \""+strings.Repeat("0", 64)+"\"}\n")
	code, out = ffscan(t, "plugins", "pin", "hostwork", "--write", "--config", flow, "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)
	b, _ = os.ReadFile(flow)
	assert.Equal(t, "scanners:\n  hostwork: {interval: 1s, sha256: \""+sha+"\"}\n", string(b))

	code, out = ffscan(t, "plugins", "verify", "--config", flow, "--plugin-dir", pluginDir)
	require.Equal(t, 0, code, out)

	// A scanner no plugin declares is a configuration error.
	code, out = ffscan(t, "plugins", "pin", "third", "--write", "--config", file, "--plugin-dir", pluginDir)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, `declares scanner "third"`)
	// Not in the file: refused (adding it would enable it).
	without := writeConfig(t, "scanners:\n  other: {plugin: hostwork, enabled: false}\n")
	code, out = ffscan(t, "plugins", "pin", "hostwork", "--write", "--config", without, "--plugin-dir", pluginDir)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "scanners.hostwork is not in the file")
	code, out = ffscan(t, "plugins", "pin", "hostwork", "--write", "--plugin-dir", pluginDir)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "--write needs --config")
}
