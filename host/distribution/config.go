package distribution

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ffscan/ffscan/host/config"
)

// OptionsFromConfig is an install's settings from the host's
// configuration: plugin_dir, the lock, the trusted keys (their files
// read now) and the allowed commands and functions.
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
	return o, nil
}
