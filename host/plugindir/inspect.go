package plugindir

// A binary of the plugin directory inspected: launched, under the
// isolation a scanner's launch has, long enough to read its Info. The
// operator commands (plugindir.go) and the Resolver (resolve.go) both
// inspect binaries this way.

import (
	"context"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/internal/plaintext"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// PluginInfo describes one binary in the plugin directory, read by
// launching it briefly. These operator commands need no Valkey.
type PluginInfo struct {
	Binary     string
	Path       string
	SHA256     string
	APIVersion int
	Scanners   []scannerapi.Info
	// Isolation is what confined the process that answered (see
	// pluginhost.Plugin.Isolation).
	Isolation string
	// Err is set when the binary failed the catalog checks or the launch.
	Err error
}

// Probe is how a plugin is started to read its Info (list, verify, pin,
// finding the binary that serves a scanner): under the same isolation as
// a scanner's launch, since its code runs all the same.
type Probe struct {
	timeout   time.Duration
	isolation pluginhost.Isolation
	memory    int64
}

// ProbeOf is the probe cfg sets.
func ProbeOf(cfg *config.Config) Probe {
	return Probe{timeout: cfg.Supervisor.StartTimeout, isolation: cfg.PluginIsolation.Mode(), memory: cfg.PluginMemoryLimit}
}

func inspect(ctx context.Context, cat *catalog.Catalog, name, pin string, probe Probe, log hclog.Logger) PluginInfo {
	entry, err := cat.Stage(name, pin)
	if err != nil {
		return PluginInfo{Binary: name, Err: err}
	}
	return inspectEntry(ctx, name, entry, probe, log)
}

// inspectEntry launches a staged binary long enough to read its Info.
func inspectEntry(ctx context.Context, name string, entry catalog.Entry, probe Probe, log hclog.Logger) PluginInfo {
	pi := PluginInfo{Binary: name, Path: entry.Path, SHA256: entry.SHA256}
	p, err := pluginhost.Launch(ctx, pluginhost.LaunchConfig{Path: entry.ExecPath, Logger: plaintext.Logger(log.Named(name), plaintext.Max),
		StartTimeout: probe.timeout, Isolation: probe.isolation, MemoryLimit: probe.memory})
	if err != nil {
		pi.Err = err
		return pi
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(cctx)
	}()
	pi.APIVersion = p.APIVersion()
	pi.Isolation = p.Isolation()
	for _, s := range p.Scanners() {
		pi.Scanners = append(pi.Scanners, s.Info())
	}
	sort.Slice(pi.Scanners, func(i, j int) bool { return pi.Scanners[i].Name < pi.Scanners[j].Name })
	return pi
}
