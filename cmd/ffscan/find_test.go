package main

// Finding plugins and scanners the way a new user expects: the plugins
// beside the executable by default, a scanner by the name its plugin
// declares, and clear failures when there is nothing to find.

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// copyPlugin puts the test plugin (it declares the scanner "hostwork")
// into dir under another file name.
func copyPlugin(t *testing.T, dir, name string) {
	t.Helper()
	src, err := os.Open(filepath.Join(pluginDir, "hostwork"))
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
}

// With no --plugin-dir and no plugin_dir, ffscan looks in the plugins
// directory beside its own executable (the test's ffscan has the test
// plugin there, as bin/ffscan has bin/plugins).
func TestPluginsBesideTheExecutableByDefault(t *testing.T) {
	t.Parallel()
	code, out := ffscan(t, "plugins", "list")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "hostwork")
	code, out = ffscan(t, "plugins", "verify")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   binary hostwork")
}

// A plugin directory without plugin binaries (here: only folders, like the
// repository's plugins/ source tree) is an error wherever plugins are
// needed, not an empty success.
func TestNoPluginsIsAnError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "leaseexpiry"), 0o755))
	for _, args := range [][]string{
		{"plugins", "list", "--plugin-dir", dir},
		{"plugins", "verify", "--plugin-dir", dir},
		{"scan-once", "--scanner", "lease_expiry", "--plugin-dir", dir, "--valkey-addr", testserver.New(t).Addr},
	} {
		code, out := ffscan(t, args...)
		assert.NotEqual(t, 0, code, "%v: %s", args, out)
		assert.Contains(t, out, "no plugin binaries in plugin_dir "+dir, args)
	}
	cfg := writeConfig(t, "scanners:\n  lease_expiry: {}\n")
	code, out := ffscan(t, "run", "--config", cfg, "--plugin-dir", dir, "--valkey-addr", testserver.New(t).Addr, "--http-listen", proctest.FreeAddr(t))
	assert.Equal(t, exitUsage, code, out)
	assert.Contains(t, out, "scanners.lease_expiry: no plugin binaries in plugin_dir "+dir)
}

// A scanner is found by what the plugins declare, whatever the binary's
// file name; `plugin:` still overrides; unknown names and ambiguity are
// configuration errors that say what is there.
func TestScannerFoundByDeclaration(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	dir := t.TempDir()
	copyPlugin(t, dir, "workers")
	redisCLI(t, srv.Addr, "ZADD", "ff:idx:{fp:3}:hostwork", "1", "a")

	code, out := ffscan(t, "scan-once", "--scanner", "hostwork", "--plugin-dir", dir, "--valkey-addr", srv.Addr)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "items:      1 processed")

	code, out = ffscan(t, "plugins", "verify", "--plugin-dir", dir, "--config", writeConfig(t, "scanners:\n  hostwork: {}\n"))
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   scanner hostwork (workers)")

	code, out = ffscan(t, "scan-once", "--scanner", "hostwrok", "--plugin-dir", dir, "--valkey-addr", srv.Addr)
	assert.Equal(t, exitUsage, code, out)
	assert.Contains(t, out, `no plugin in `+dir+` declares scanner "hostwrok" (they declare hostwork)`)
	assert.NotContains(t, out, "errors:     none", "a failed scan-once prints no success-looking summary")

	// A scanner name that only the environment introduces (a typo in
	// FFSCAN_SCANNERS__<NAME>__...) is refused the same way.
	cfg := writeConfig(t, "scanners:\n  hostwork: {}\n")
	code, out = ffscanEnv(t, []string{"FFSCAN_SCANNERS__HOSTWROK__INTERVAL=1s"}, "run", "--config", cfg, "--plugin-dir", dir, "--valkey-addr", srv.Addr, "--http-listen", proctest.FreeAddr(t))
	assert.Equal(t, exitUsage, code, out)
	assert.Contains(t, out, `scanners.hostwrok: no plugin in `+dir+` declares scanner "hostwrok"`)

	copyPlugin(t, dir, "workers-v2")
	code, out = ffscan(t, "scan-once", "--scanner", "hostwork", "--plugin-dir", dir, "--valkey-addr", srv.Addr)
	assert.Equal(t, exitUsage, code, out)
	assert.Contains(t, out, "scanners.hostwork: served by workers and workers-v2")
	assert.Contains(t, out, "scanners.hostwork.plugin")

	redisCLI(t, srv.Addr, "ZADD", "ff:idx:{fp:3}:hostwork", "1", "b")
	pick := writeConfig(t, "scanners:\n  hostwork: {plugin: workers-v2}\n")
	code, out = ffscan(t, "scan-once", "--scanner", "hostwork", "--plugin-dir", dir, "--config", pick, "--valkey-addr", srv.Addr)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "items:      1 processed")
}

// scan-once of a scanner whose cycle fails says so first, exits non-zero,
// and shows what it did only as a partial result on stderr.
func TestScanOnceFailureComesFirst(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	// A partition count the server's record contradicts fails at boot:
	// nothing was scanned, so no summary at all.
	redisCLI(t, srv.Addr, "HSET", "ff:config:partitions", "num_flow_partitions", "8", "num_budget_partitions", "32", "num_quota_partitions", "32")
	code, out := ffscan(t, "scan-once", "--scanner", "hostwork", "--valkey-addr", srv.Addr)
	assert.Equal(t, exitUsage, code, out)
	assert.True(t, strings.HasPrefix(out, "ffscan scan-once: "), out)
	assert.NotContains(t, out, "visited")
	assert.NotContains(t, out, "errors:     none")
}

// scan-once --dry-run leaves a fresh keyspace as it found it: no partition
// record, no lane index, no library.
func TestDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	redisCLI(t, srv.Addr, "ZADD", "ff:idx:{fp:3}:hostwork", "1", "a")
	code, out := ffscan(t, "scan-once", "--dry-run", "--scanner", "hostwork", "--valkey-addr", srv.Addr)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "items:      0 processed, 1 skipped")

	c := srv.Client(t)
	ctx := context.Background()
	ks, err := c.Do(ctx, c.B().Keys().Pattern("*").Build()).AsStrSlice()
	require.NoError(t, err)
	assert.Equal(t, []string{"ff:idx:{fp:3}:hostwork"}, ks)
	libs, err := c.Do(ctx, c.B().FunctionList().Build()).ToArray()
	require.NoError(t, err)
	assert.Empty(t, libs, "no library loaded")

	// Without --dry-run the same command records the partitions and loads
	// the library, as a host does.
	code, out = ffscan(t, "scan-once", "--scanner", "hostwork", "--valkey-addr", srv.Addr)
	require.Equal(t, 0, code, out)
	n, err := c.Do(ctx, c.B().Exists().Key("ff:config:partitions", "ff:idx:lanes").Build()).AsInt64()
	require.NoError(t, err)
	assert.EqualValues(t, 2, n)
}

// `ffscan run` with no scanner configured says so at once, loudly.
func TestRunWithoutScannersSaysSo(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	addr := proctest.FreeAddr(t)
	logs := &syncBuffer{}
	cmd := exec.Command(ffscanBin, "run", "--valkey-addr", srv.Addr, "--http-listen", addr)
	cmd.Env = append(cleanEnv(), "TMPDIR="+t.TempDir())
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	require.Eventually(t, func() bool {
		_, err := getStatus(addr)
		return err == nil
	}, 60*time.Second, 20*time.Millisecond, logs.String())
	// The log reaches us through a pipe, independently of HTTP: wait for it.
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "[WARN]  ffscan: no scanners enabled: this host runs none")
	}, 30*time.Second, 20*time.Millisecond, logs.String())
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	<-exited
}
