package config

import (
	"os"
	"path/filepath"
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

// minimalRoot is a Sigstore trusted root with nothing in it: what the
// configuration checks is that the file is one.
const minimalRoot = `{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`

func TestPluginTrustIdentities(t *testing.T) {
	t.Parallel()
	rootFile := filepath.Join(t.TempDir(), "trusted_root.json")
	require.NoError(t, os.WriteFile(rootFile, []byte(minimalRoot), 0o644))
	p := writeFile(t, `
plugin_signature: required
plugin_trust:
  trusted_root: `+rootFile+`
  identities:
    acme-ci:
      issuer: https://token.actions.githubusercontent.com
      subject: https://github.com/acme/scanners/.github/workflows/release.yml@refs/heads/main
    acme-any: {issuer: https://token.actions.githubusercontent.com, subject_regexp: 'https://github\.com/acme/.*'}
`)
	cfg, err := Load(Sources{File: p, Environ: noEnv})
	require.NoError(t, err, "identities without keys satisfy plugin_signature: required")
	assert.Equal(t, rootFile, cfg.PluginTrust.TrustedRoot)
	assert.Equal(t, TrustedIdentity{
		Issuer:  "https://token.actions.githubusercontent.com",
		Subject: "https://github.com/acme/scanners/.github/workflows/release.yml@refs/heads/main",
	}, cfg.PluginTrust.Identities["acme-ci"])
	assert.Equal(t, `https://github\.com/acme/.*`, cfg.PluginTrust.Identities["acme-any"].SubjectRegexp)
}

func TestPluginTrustIdentityProblemsNamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"mediaType": "text/plain"}`), 0o644))
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"identities without a root", `
plugin_trust:
  identities: {ci: {issuer: https://i.example, subject: s}}
`, []string{"plugin_trust.identities: keyless identities need plugin_trust.trusted_root"}},
		{"a root without identities", `
plugin_trust: {trusted_root: ` + bad + `}
`, []string{"plugin_trust.trusted_root: set, but plugin_trust.identities names no identity"}},
		{"an invalid root and bad identities", `
plugin_trust:
  trusted_root: ` + bad + `
  identities:
    noissuer: {subject: s}
    nosubject: {issuer: https://i.example}
    both: {issuer: https://i.example, subject: s, subject_regexp: s.*}
    badre: {issuer: https://i.example, subject_regexp: "("}
    "bad name": {issuer: https://i.example, subject: s}
    extra: {issuer: https://i.example, subject: s, email: x}
`, []string{
			"plugin_trust.trusted_root: " + bad + " is not a usable Sigstore trusted root",
			"plugin_trust.identities.noissuer.issuer: must name the OIDC issuer",
			"plugin_trust.identities.nosubject: needs subject",
			"plugin_trust.identities.both: has both subject and subject_regexp",
			`plugin_trust.identities.badre.subject_regexp: "("`,
			`plugin_trust.identities.bad name: identity name "bad name"`,
			"plugin_trust.identities.extra.email: unknown key",
		}},
		{"a missing root file", `
plugin_trust:
  trusted_root: ` + filepath.Join(dir, "missing.json") + `
  identities: {ci: {issuer: https://i.example, subject: s}}
`, []string{"plugin_trust.trusted_root: " + filepath.Join(dir, "missing.json") + " is not a usable Sigstore trusted root"}},
		{"a relative root path", `
plugin_trust:
  trusted_root: trusted_root.json
  identities: {ci: {issuer: https://i.example, subject: s}}
`, []string{`plugin_trust.trusted_root: "trusted_root.json" is not an absolute path`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(Sources{File: writeFile(t, tc.body), Environ: noEnv})
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
