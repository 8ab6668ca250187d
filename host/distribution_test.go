package host

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/distribution"
	"github.com/ffscan/ffscan/host/plugindir"
	"github.com/ffscan/ffscan/internal/registrytest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// A plugin installed from a real registry into the plugin_dir of a
// running host is hot-swapped in by its file watch, and the example
// third-party scanner installed from an OCI layout directory (no
// registry) runs confined beside it; with
// plugin_signature: required, a binary the lock does not record is
// refused at the swap and at a launch, and the running one keeps serving.
func TestInstalledPluginHotSwapsAndUnlockedIsRefused(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t)
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond})
	cfg.Scanners["delayed_watchdog"] = config.Scanner{Enabled: true, Interval: 200 * time.Millisecond, Options: map[string]string{"max_age": "1h"}}
	cfg.PluginDir = ownPluginDir(t)
	cfg.Watch.Interval = 100 * time.Millisecond
	cfg.Supervisor.HealthInterval = 3 * time.Second
	cfg.Supervisor.SwapProbation = 300 * time.Millisecond
	cfg.PluginSignature = config.SignatureRequired
	opts := distribution.Options{PluginDir: cfg.PluginDir, LockFile: cfg.LockFile(),
		Keys: []distribution.TrustedKey{{Name: "publisher", Key: &key.PublicKey}}}

	// The publisher: the declaration read from the binary itself.
	pi := plugindir.InspectFile(ctx, cfg, filepath.Join(pluginDir, "hostwork"), hclog.NewNullLogger())
	require.NoError(t, pi.Err)
	publish := func(tag, bin, version string) {
		_, err := distribution.Publish(ctx, reg+"/acme/hostwork:"+tag, distribution.PublishOptions{
			Binaries: map[string]string{distribution.Platform(): bin},
			Declared: distribution.DeclaredFromInfo("hostwork", version, pi.Scanners), Key: key,
		})
		require.NoError(t, err)
	}
	publish("1.0.0", filepath.Join(pluginDir, "hostwork"), "1.0.0")
	publish("1.0.1", variant("v2"), "1.0.1")

	// The example scanner, published by its author to an OCI layout.
	example := filepath.Join(pluginDir, "customscanner")
	epi := plugindir.InspectFile(ctx, cfg, example, hclog.NewNullLogger())
	require.NoError(t, epi.Err)
	layout := "oci:" + filepath.Join(t.TempDir(), "layout") + ":1.0.0"
	_, err = distribution.Publish(ctx, layout, distribution.PublishOptions{
		Binaries: map[string]string{distribution.Platform(): example, "linux/riscv64": example},
		Declared: distribution.DeclaredFromInfo("customscanner", "1.0.0", epi.Scanners), Key: key,
	})
	require.NoError(t, err)

	_, err = distribution.Install(ctx, reg+"/acme/hostwork:1.0.0", opts)
	require.NoError(t, err)
	_, err = distribution.Install(ctx, layout, opts)
	require.NoError(t, err)
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "the installed plugins run", func() bool {
		return scannerStatus(h).State == "running" && statusOf(h, "delayed_watchdog").State == "running"
	})
	assert.Equal(t, fileSHA(t, filepath.Join(pluginDir, "hostwork")), scannerStatus(h).SHA256)
	ex := statusOf(h, "delayed_watchdog")
	assert.Equal(t, fileSHA(t, example), ex.SHA256)
	assert.Equal(t, "customscanner", ex.Plugin)
	assert.True(t, strings.HasPrefix(ex.Isolation, "confined"), "the installed plugin runs confined: %s", ex.Isolation)

	// The upgrade: installed while the host runs, swapped in by the watch.
	_, err = distribution.Install(ctx, reg+"/acme/hostwork:1.0.1", opts)
	require.NoError(t, err)
	v2 := fileSHA(t, variant("v2"))
	waitFor(t, h, 30*time.Second, "the file watch swaps the installed binary in", func() bool {
		st := scannerStatus(h)
		return st.SHA256 == v2 && st.LastSwap != nil && !st.LastSwap.Probation
	})
	before := scannerStatus(h)

	// A binary put there by other means is not the locked one.
	install(t, cfg.PluginDir, "hostwork", variant("v3"))
	waitFor(t, h, 30*time.Second, "the swap to an unlocked binary is refused", func() bool {
		st := scannerStatus(h)
		return st.LastSwap != nil && st.LastSwap.Outcome == "failed"
	})
	st := scannerStatus(h)
	assert.Contains(t, st.LastSwap.Reason, "is not the locked")
	assert.Equal(t, before.Pid, st.Pid)
	assert.Equal(t, v2, st.SHA256)
	parts := []uint16{3, 7}
	want := addWork(t, c, parts, 2)
	waitFor(t, h, 20*time.Second, "the locked plugin still works", func() bool { return allDone(c, parts, want) })

	// A host started on the unlocked binary refuses to launch it.
	cfg2 := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond})
	cfg2.PluginApprovalsFile = cfg.PluginApprovalsFile
	cfg2.PluginDir = cfg.PluginDir
	cfg2.PluginSignature = config.SignatureRequired
	h2, _ := running(t, cfg2)
	waitFor(t, h2, 30*time.Second, "the launch is refused", func() bool { return scannerStatus(h2).LastError != "" })
	st2 := scannerStatus(h2)
	assert.NotEqual(t, "running", st2.State)
	assert.Contains(t, st2.LastError, "is not the locked")
}

// An installed artifact whose binary declares more than the approved
// policy is placed (its signature and declaration check out), but the
// host's swap still waits for the operator's approval: installing is not
// approving.
func TestInstalledWiderPolicyWaitsForApproval(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	ctx := context.Background()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	cfg := testConfig(t, srv.Addr, config.Scanner{Interval: 100 * time.Millisecond})
	cfg.PluginDir = ownPluginDir(t)
	cfg.Watch.Interval = 100 * time.Millisecond
	cfg.Supervisor.HealthInterval = 3 * time.Second
	opts := distribution.Options{PluginDir: cfg.PluginDir, LockFile: cfg.LockFile(),
		Keys: []distribution.TrustedKey{{Name: "publisher", Key: &key.PublicKey}}}
	layout := filepath.Join(t.TempDir(), "layout")
	for _, v := range []struct{ tag, bin string }{{"1.0.0", filepath.Join(pluginDir, "hostwork")}, {"1.1.0", variant("wide")}} {
		pi := plugindir.InspectFile(ctx, cfg, v.bin, hclog.NewNullLogger())
		require.NoError(t, pi.Err)
		_, err := distribution.Publish(ctx, "oci:"+layout+":"+v.tag, distribution.PublishOptions{
			Binaries: map[string]string{distribution.Platform(): v.bin},
			Declared: distribution.DeclaredFromInfo("hostwork", v.tag, pi.Scanners), Key: key,
		})
		require.NoError(t, err)
	}
	_, err = distribution.Install(ctx, "oci:"+layout+":1.0.0", opts)
	require.NoError(t, err)
	h, _ := running(t, cfg)
	waitFor(t, h, 30*time.Second, "the installed plugin runs", func() bool { return scannerStatus(h).State == "running" })
	before := scannerStatus(h)

	res, err := distribution.Install(ctx, "oci:"+layout+":1.1.0", opts)
	require.NoError(t, err)
	assert.Equal(t, wideHostworkPolicy().Digest(), res.Locked.Policies["hostwork"], "the lock records the declared policy")
	waitFor(t, h, 30*time.Second, "the swap waits for approval", func() bool {
		st := scannerStatus(h)
		return st.LastSwap != nil && st.LastSwap.Outcome == "failed"
	})
	st := scannerStatus(h)
	assert.Contains(t, st.LastSwap.Reason, "declares more than its approved policy")
	assert.Equal(t, before.Pid, st.Pid)
	assert.Equal(t, before.SHA256, st.SHA256)
}
