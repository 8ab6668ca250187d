package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPluginTrustSettings(t *testing.T) {
	cfg, err := Load(Sources{Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, SignatureOff, cfg.PluginSignature)
	assert.Equal(t, cfg.PluginDir+"/.ffscan-plugins.lock", cfg.LockFile())

	p := writeFile(t, `
plugin_dir: /srv/ffscan/plugins
plugin_signature: required
plugin_lock_file: /srv/ffscan/plugins.lock
plugin_trust:
  keys:
    acme:
      file: /etc/ffscan/trust/acme.pub
      not_after: 2027-01-31T00:00:00Z
    beta: {file: /etc/ffscan/trust/beta.pub, not_before: "2026-01-01T00:00:00Z"}
  allow_commands: [HGET, DEL]
  allow_functions: [ff_expire_execution]
`)
	cfg, err = Load(Sources{File: p, Environ: noEnv})
	require.NoError(t, err)
	assert.Equal(t, SignatureRequired, cfg.PluginSignature)
	assert.Equal(t, "/srv/ffscan/plugins.lock", cfg.LockFile())
	require.Len(t, cfg.PluginTrust.Keys, 2)
	assert.Equal(t, "/etc/ffscan/trust/acme.pub", cfg.PluginTrust.Keys["acme"].File)
	assert.True(t, cfg.PluginTrust.Keys["acme"].NotAfter.Equal(time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)))
	assert.True(t, cfg.PluginTrust.Keys["beta"].NotBefore.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	assert.Equal(t, []string{"HGET", "DEL"}, cfg.PluginTrust.AllowCommands)
	assert.Equal(t, []string{"ff_expire_execution"}, cfg.PluginTrust.AllowFunctions)
}

func TestPluginTrustProblemsNamed(t *testing.T) {
	p := writeFile(t, `
plugin_signature: always
plugin_lock_file: plugins.lock
plugin_trust:
  keys:
    "bad name": {file: /k.pub}
    nofile: {}
    rel: {file: keys/rel.pub, not_before: 2027-01-01T00:00:00Z, not_after: 2026-01-01T00:00:00Z}
    when: {file: /k.pub, not_after: tomorrow}
    extra: {file: /k.pub, hint: x}
`)
	_, err := Load(Sources{File: p, Environ: noEnv})
	require.Error(t, err)
	for _, want := range []string{
		`plugin_signature: "always" is not one of off, required`,
		`plugin_lock_file: "plugins.lock" is not an absolute path`,
		`plugin_trust.keys.bad name: key name "bad name"`,
		`plugin_trust.keys.nofile.file: must name`,
		`plugin_trust.keys.rel.file: "keys/rel.pub" is not an absolute path`,
		`plugin_trust.keys.rel.not_after: 2026-01-01T00:00:00Z is not after not_before`,
		`plugin_trust.keys.when.not_after: "tomorrow" is not an RFC 3339 time`,
		`plugin_trust.keys.extra.hint: unknown key`,
	} {
		assert.Contains(t, err.Error(), want)
	}

	p = writeFile(t, "plugin_signature: required\n")
	_, err = Load(Sources{File: p, Environ: noEnv})
	require.ErrorContains(t, err, "plugin_signature: required, but plugin_trust.keys lists no key")
}
