package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/distribution"
	"github.com/ffscan/ffscan/internal/registrytest"
)

// The whole path through the CLI against a real registry: a publisher's
// key pair, publish (the declaration read from the binary), an
// operator's dry run, install, verify (offline), upgrade, a refused
// downgrade, lock, and verify catching a binary that is not the locked one.
func TestPluginsPublishInstallUpgradeVerify(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t)
	dir := t.TempDir()
	code, out := ffscan(t, "plugins", "keygen", "--out", filepath.Join(dir, "acme"))
	require.Equal(t, 0, code, out)

	// A second build of the plugin: other bytes, same behaviour.
	v2 := filepath.Join(dir, "build2", "hostwork")
	require.NoError(t, os.Mkdir(filepath.Dir(v2), 0o755))
	b, err := os.ReadFile(filepath.Join(pluginDir, "hostwork"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(v2, append(b, "v2"...), 0o755))

	plat := distribution.Platform()
	publish := func(tag, bin string) {
		t.Helper()
		code, out := ffscan(t, "plugins", "publish", reg+"/acme/hostwork:"+tag, "--key", filepath.Join(dir, "acme.key"), "--version", tag,
			"--binary", plat+"="+bin, "--binary", "linux/s390x="+bin)
		require.Equal(t, 0, code, out)
		assert.Contains(t, out, "plugin hostwork version "+tag+", scanners hostwork, platforms ")
		assert.Contains(t, out, "linux/s390x")
	}
	publish("1.0.0", filepath.Join(pluginDir, "hostwork"))
	publish("1.1.0", v2)

	plugins := filepath.Join(dir, "plugins")
	require.NoError(t, os.Mkdir(plugins, 0o755))
	cfg := writeConfig(t, "plugin_dir: "+plugins+"\nplugin_trust:\n  keys:\n    acme: {file: "+filepath.Join(dir, "acme.pub")+"}\n")

	code, out = ffscan(t, "plugins", "install", "--dry-run", "--config", cfg, reg+"/acme/hostwork:1.0.0")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "signed by acme")
	assert.Contains(t, out, "dry run")
	ents, _ := os.ReadDir(plugins)
	assert.Empty(t, ents)

	code, out = ffscan(t, "plugins", "install", "--config", cfg, reg+"/acme/hostwork:1.0.0")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "placed "+filepath.Join(plugins, "hostwork"))
	assert.Contains(t, out, "scanner hostwork: scanner API")

	code, out = ffscan(t, "plugins", "verify", "--config", cfg)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   locked plugin hostwork")

	code, out = ffscan(t, "plugins", "upgrade", "--config", cfg, "hostwork", "--to", "1.1.0")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "replaces sha256:")
	got, err := os.ReadFile(filepath.Join(plugins, "hostwork"))
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(got), "v2"))

	code, out = ffscan(t, "plugins", "install", "--config", cfg, reg+"/acme/hostwork:1.0.0")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "downgrade refused")

	code, out = ffscan(t, "plugins", "lock", "--config", cfg, reg+"/acme/hostwork:1.1.0")
	require.Equal(t, 0, code, out)

	// Someone else's bytes in plugin_dir.
	require.NoError(t, os.WriteFile(filepath.Join(plugins, ".x"), b, 0o755))
	require.NoError(t, os.Rename(filepath.Join(plugins, ".x"), filepath.Join(plugins, "hostwork")))
	code, out = ffscan(t, "plugins", "verify", "--config", cfg)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "FAIL locked plugin hostwork")
	assert.Contains(t, out, "is not the locked")

	// A signed declaration the binary does not keep (here: it declares
	// no commands at all) installs, and verify says so.
	v3 := filepath.Join(dir, "build3", "hostwork")
	require.NoError(t, os.Mkdir(filepath.Dir(v3), 0o755))
	require.NoError(t, os.WriteFile(v3, append(b, "v3"...), 0o755))
	decl := filepath.Join(dir, "declared.json")
	require.NoError(t, os.WriteFile(decl, []byte(`{"schema":1,"plugin":"hostwork","version":"1.2.0","scanners":[{"name":"hostwork","api_min":2,"api_max":2,"policy":{"commands":{},"functions":[]}}]}`), 0o644))
	code, out = ffscan(t, "plugins", "publish", reg+"/acme/hostwork:1.2.0", "--key", filepath.Join(dir, "acme.key"), "--declared", decl, "--binary", plat+"="+v3)
	require.Equal(t, 0, code, out)
	withScanner := writeConfig(t, "plugin_dir: "+plugins+"\nplugin_trust:\n  keys:\n    acme: {file: "+filepath.Join(dir, "acme.pub")+"}\nscanners:\n  hostwork: {}\n")
	code, out = ffscan(t, "plugins", "install", "--config", withScanner, reg+"/acme/hostwork:1.2.0")
	require.Equal(t, 0, code, out)
	code, out = ffscan(t, "plugins", "verify", "--config", withScanner)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "ok   locked plugin hostwork")
	assert.Contains(t, out, "FAIL scanner hostwork (hostwork)")
	assert.Contains(t, out, "its signed declaration")
}
