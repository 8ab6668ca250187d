package host

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// v1SDKCommit is the last commit before the scanner API was versioned: its
// sdk/scannerapi had APIVersion 1 and offered only that in the handshake.
const v1SDKCommit = "3eb3e7d8644487846fcf8f6af2ef22df40bc787f"

// A plugin really built with the old SDK (the test plugin's source and the
// SDK as they were at v1SDKCommit, taken from git) runs under this host,
// negotiating API version 1.
func TestPluginBuiltWithTheOldSDKRuns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a plugin from git history")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	if err := exec.Command("git", "-C", root, "cat-file", "-e", v1SDKCommit+"^{commit}").Run(); err != nil {
		t.Skipf("git history with %s is not available: %v", v1SDKCommit, err)
	}
	src := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", v1SDKCommit, "go.mod", "go.sum", "keys", "sdk/scannerapi", "host/internal/testplugin")
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	require.NoError(t, archive.Run(), stderr.String())
	untar := exec.Command("tar", "-x", "-C", src)
	untar.Stdin = &tarball
	out, err := untar.CombinedOutput()
	require.NoError(t, err, string(out))

	dir := ownPluginDir(t)
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "hostwork"), "./host/internal/testplugin")
	build.Dir = src
	// The old module alone (no workspace) selects versions of its
	// dependencies that this workspace's build need not have fetched (on
	// a fresh machine's empty module cache, go-hclog's fatih/color
	// v1.13.0): the build fetches them from GOPROXY as any build does.
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "build the old plugin: %s", out)
	require.NoError(t, os.Chmod(filepath.Join(dir, "hostwork"), 0o755))

	srv := testserver.New(t)
	c := srv.Client(t)
	// The old SDK dials the host's broker for its callbacks: the operator
	// lets it connect (a confined plugin may not by default).
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond, LegacyCallbacks: true})
	cfg.PluginDir = dir
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "", func() bool { return scannerStatus(h).State == "running" })
	assert.Equal(t, 1, scannerStatus(h).APIVersion)
	parts := []uint16{2, 12}
	want := addWork(t, c, parts, 4)
	waitFor(t, h, 20*time.Second, "", func() bool { return allDone(c, parts, want) })
	assert.Zero(t, scannerStatus(h).Errors)

	// It predates the Explain RPC: asked, it answers Unimplemented, which
	// the host reports as not explained, and it keeps serving.
	l, err := h.units.Get("hostwork").Supervisor().Acquire()
	require.NoError(t, err)
	defer l.Release()
	hs, ok := l.Scanner.(pluginhost.HostScanner)
	require.True(t, ok)
	_, err = pluginhost.Explain(context.Background(), hs, l.Host, &scannerapi.ExplainRequest{
		Scan: scannerapi.ScanRequest{Partition: keys.Partition{Family: keys.FamilyFlow, Index: 2}}, ExecutionID: "{fp:2}:x"})
	require.ErrorIs(t, err, scannerapi.ErrNotExplained)
	assert.Equal(t, "running", scannerStatus(h).State)
}
