// Package hosttest runs scanners through a real ffscan host for the SDK's
// test kit: it implements scannertest.Runner with host.Boot and host
// sessions, so scannertest.Run exercises the same boot, candidate fetching
// and command enforcement production does. It lives in the host's module
// so the kit itself links no host code.
package hosttest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// Runner boots ffscan hosts for scannertest.Run.
type Runner struct{}

var _ scannertest.Runner = Runner{}

// Run is scannertest.Run through an ffscan host.
func Run(t testing.TB, c scannertest.Case) (linked, plugin scannertest.Report) {
	t.Helper()
	c.Runner = Runner{}
	return scannertest.Run(t, c)
}

// Boot starts a host with only the scanner b names, no HTTP listener and
// no completion listener.
func (Runner) Boot(ctx context.Context, b scannertest.Boot) (scannertest.BootedHost, error) {
	cfg := config.Defaults()
	cfg.Valkey.Addrs = []string{b.Addr}
	cfg.Valkey.Cluster = "off"
	cfg.Partitions = b.Partitions
	if len(b.Lanes) > 0 {
		cfg.Lanes = b.Lanes
	}
	if b.PluginDir != "" {
		cfg.PluginDir = b.PluginDir
	}
	cfg.Postgres.DSN = b.PostgresDSN
	cfg.Postgres.Namespace = b.PostgresFilter.Namespace
	if f := b.PostgresFilter; f.TagKey != "" {
		cfg.Postgres.InstanceTag = f.TagKey + "=" + f.TagValue
	}
	cfg.HTTP.Listen = ""
	cfg.Completions.Enabled = false
	cfg.Scanners = map[string]config.Scanner{b.Scanner: {Enabled: true, Plugin: b.Scanner, Options: b.Options}}
	// The plugin under test is approved on first use in a file of its
	// own, never in the user's.
	dir, err := os.MkdirTemp("", "ffscan-hosttest-*")
	if err != nil {
		return nil, err
	}
	cfg.PluginApprovalsFile = filepath.Join(dir, "plugin-approvals.json")
	log := hclog.New(&hclog.LoggerOptions{Name: "hosttest", Level: hclog.Warn, Output: os.Stderr})
	h, err := host.Boot(ctx, &cfg, log)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &booted{h: h, name: b.Scanner, dir: dir}, nil
}

type booted struct {
	h    *host.Host
	name string
	dir  string
}

func (b *booted) Close() {
	b.h.Close()
	os.RemoveAll(b.dir)
}

func (b *booted) Open(ctx context.Context, o scannertest.Open) (scannertest.Session, error) {
	s, err := b.h.OpenSession(ctx, b.name, host.SessionOptions{Linked: o.Linked, DryRun: o.DryRun, Observe: o.Observe})
	if err != nil {
		return nil, err
	}
	return session{s}, nil
}

type session struct{ s *host.Session }

func (s session) Close() { s.s.Close() }

func (s session) Cycle(ctx context.Context, partition int) (scannertest.Cycle, error) {
	sum, err := s.s.Cycle(ctx, partition)
	if err != nil {
		return scannertest.Cycle{}, err
	}
	return cycleOf(sum), nil
}

func cycleOf(s scheduler.Summary) scannertest.Cycle {
	c := scannertest.Cycle{
		Scanned: s.Scanned, Empty: s.Empty, Failed: s.Failed, Deferred: s.Deferred,
		Processed: s.Processed, Skipped: s.Skipped,
		Errors:  map[string]int64{},
		Backlog: s.Backlog, BacklogKnown: s.BacklogKnown,
		Notes: s.Notes,
	}
	for k, n := range s.Errors {
		c.Errors[string(k.Class)+"/"+k.Code] += n
	}
	return c
}
