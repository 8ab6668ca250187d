package boot

import (
	"fmt"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/sdk/pluginhost"
)

// PluginBounds are the kernel's bounds on the host's plugin processes:
// the control groups they run in, or why there are none.
type PluginBounds struct {
	// Cgroups makes each plugin's group; nil: rlimits alone.
	Cgroups *pluginhost.Cgroups
	// Kind says which applies: "cgroup v1 at DIR", "cgroup v2 at DIR" or
	// "rlimits (why there are no control groups)".
	Kind string
}

// OpenPluginBounds opens the plugins' control groups as plugin_cgroups
// says: auto falls back to rlimits, saying why (never silently: Kind
// carries it to status and the log); required fails the boot.
func OpenPluginBounds(cfg *config.Config) (PluginBounds, error) {
	if cfg.PluginCgroups == config.CgroupsOff {
		return PluginBounds{Kind: "rlimits (plugin_cgroups: off)"}, nil
	}
	cg, err := pluginhost.OpenCgroups(pluginhost.CgroupOptions{Parent: cfg.PluginCgroupParent})
	if err != nil {
		if cfg.PluginCgroups == config.CgroupsRequired {
			return PluginBounds{}, fmt.Errorf("plugin_cgroups is required but the host cannot make control groups for its plugins: %w", err)
		}
		return PluginBounds{Kind: fmt.Sprintf("rlimits (no control groups: %v)", err)}, nil
	}
	return PluginBounds{Cgroups: cg, Kind: cg.Kind()}, nil
}

// Close removes the host's group.
func (b PluginBounds) Close() error {
	if b.Cgroups == nil {
		return nil
	}
	return b.Cgroups.Close()
}

// Describe says what bounds a plugin launched with limits l gets.
func (b PluginBounds) Describe(l pluginhost.Limits) string {
	desc := pluginhost.DescribeBounds(b.Cgroups, l)
	if b.Cgroups == nil {
		desc += "; " + b.Kind
	}
	return desc
}
