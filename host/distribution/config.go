package distribution

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sigstore/sigstore-go/pkg/root"

	"github.com/ffscan/ffscan/host/config"
)

// OptionsFromConfig is an install's settings from the host's
// configuration: plugin_dir, the lock, the trusted keys (their files
// read now), the trusted identities and root (read now) and the allowed commands and functions.
func OptionsFromConfig(cfg *config.Config) (Options, error) {
	o := Options{
		PluginDir: cfg.PluginDir,
		LockFile:  cfg.LockFile(),
		Allowed:   Allowed{Commands: cfg.PluginTrust.AllowCommands, Functions: cfg.PluginTrust.AllowFunctions},
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.PluginTrust.Keys)) {
		k := cfg.PluginTrust.Keys[name]
		pub, err := LoadPublicKey(k.File)
		if err != nil {
			return o, fmt.Errorf("plugin_trust.keys.%s.file %s: %w", name, k.File, err)
		}
		o.Keys = append(o.Keys, TrustedKey{Name: name, Key: pub, NotBefore: k.NotBefore, NotAfter: k.NotAfter})
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.PluginTrust.Identities)) {
		id := cfg.PluginTrust.Identities[name]
		o.Identities = append(o.Identities, TrustedIdentity{Name: name, Issuer: id.Issuer, Subject: id.Subject, SubjectRegexp: id.SubjectRegexp})
	}
	if cfg.PluginTrust.TrustedRoot != "" {
		tr, err := root.NewTrustedRootFromPath(cfg.PluginTrust.TrustedRoot)
		if err != nil {
			return o, fmt.Errorf("plugin_trust.trusted_root %s: %w", cfg.PluginTrust.TrustedRoot, err)
		}
		o.TrustedRoot = tr
	}
	return o, nil
}
