// Package plugindir reads the plugin directory as a launch would: which
// binary serves a scanner (Resolver, for the host at run time), and the
// operator commands on the directory (List, Verify, Approve, Pin), which
// need no store and no running host.
package plugindir

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/config"
)

// ErrNoPlugins says the plugin directory holds no plugin binaries where
// some were needed. A plugin_dir pointing at the wrong folder (the
// plugins' source tree, a directory that was never built into) shows up
// here instead of as one launch failure per scanner.
var ErrNoPlugins = errors.New("no plugin binaries")

// Resolver finds the binary that serves a scanner whose configuration names
// none: the binary in the plugin directory that declares the scanner in its
// Info. A binary's declarations are read by launching it briefly and kept
// per file name and sha256, so later resolutions (reloads) launch only the
// binaries that changed.
type Resolver struct {
	mu    sync.Mutex
	known map[string]declared // by binary name
}

// declared is what one binary said it serves.
type declared struct {
	sha      string
	scanners []string
	err      error
}

// declarations returns, for every binary in the directory, what it
// declares, launching those not seen before at their current contents.
func (r *Resolver) declarations(ctx context.Context, cat *catalog.Catalog, probe Probe, log hclog.Logger) (map[string]declared, error) {
	names, err := cat.List()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.known == nil {
		r.known = map[string]declared{}
	}
	out := map[string]declared{}
	for _, name := range names {
		entry, err := cat.Verify(name, "")
		if err != nil {
			out[name] = declared{err: err}
			continue
		}
		if d, ok := r.known[name]; ok && d.sha == entry.SHA256 && d.err == nil {
			out[name] = d
			continue
		}
		pi := inspect(ctx, cat, name, "", probe, log)
		d := declared{sha: pi.SHA256, err: pi.Err}
		for _, in := range pi.Scanners {
			d.scanners = append(d.scanners, in.Name)
		}
		r.known[name] = d
		out[name] = d
	}
	return out, nil
}

// PluginFor returns the binary that serves scanner name: sc.Plugin when
// the configuration names one, else the one binary that declares name (a
// binary of that very name wins when several do).
func (r *Resolver) PluginFor(ctx context.Context, cat *catalog.Catalog, name string, sc config.Scanner, probe Probe, log hclog.Logger) (string, error) {
	if sc.Plugin != "" {
		return sc.Plugin, nil
	}
	decls, err := r.declarations(ctx, cat, probe, log)
	if err != nil {
		return "", err
	}
	return chooseBinary(cat.Dir(), name, decls)
}

func chooseBinary(dir, name string, decls map[string]declared) (string, error) {
	if len(decls) == 0 {
		return "", fmt.Errorf("%w: scanners.%s: %w in plugin_dir %s (`make build` puts ffscan's own in bin/plugins, the default for bin/ffscan)", config.ErrInvalid, name, ErrNoPlugins, dir)
	}
	var servers, unreadable []string
	known := map[string]bool{}
	for bin, d := range decls {
		if d.err != nil {
			unreadable = append(unreadable, fmt.Sprintf("%s (%v)", bin, d.err))
			continue
		}
		for _, s := range d.scanners {
			known[s] = true
			if s == name {
				servers = append(servers, bin)
			}
		}
	}
	sort.Strings(servers)
	switch {
	case len(servers) == 1:
		return servers[0], nil
	case len(servers) > 1:
		for _, b := range servers {
			if b == name {
				return b, nil
			}
		}
		return "", fmt.Errorf("%w: scanners.%s: served by %s in %s; say which with scanners.%s.plugin", config.ErrInvalid, name, strings.Join(servers, " and "), dir, name)
	}
	msg := fmt.Sprintf("scanners.%s: no plugin in %s declares scanner %q", name, dir, name)
	if len(known) > 0 {
		msg += " (they declare " + strings.Join(slices.Sorted(maps.Keys(known)), ", ") + ")"
	}
	if len(unreadable) > 0 {
		sort.Strings(unreadable)
		msg += "; could not read " + strings.Join(unreadable, ", ")
	}
	return "", fmt.Errorf("%w: %s", config.ErrInvalid, msg)
}

// ResolveAll returns a copy of cfg in which every enabled scanner names the
// binary that serves it; a disabled one does where it can be resolved, and
// is resolved again when a reload enables it. Every enabled scanner that
// cannot be resolved is reported, each by its key.
func (r *Resolver) ResolveAll(ctx context.Context, cfg *config.Config, cat *catalog.Catalog, log hclog.Logger) (*config.Config, error) {
	out := *cfg
	out.Scanners = maps.Clone(cfg.Scanners)
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cfg.Scanners)) {
		sc := cfg.Scanners[name]
		bin, err := r.PluginFor(ctx, cat, name, sc, ProbeOf(cfg), log)
		if err != nil {
			if sc.Enabled {
				errs = append(errs, err)
			}
			continue
		}
		sc.Plugin = bin
		out.Scanners[name] = sc
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &out, nil
}
