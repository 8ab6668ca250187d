package host

// The explain view: "why is my execution stuck?" (host/explain builds
// it from the host's facts and each scanner's own answer).

import (
	"context"
	"github.com/ffscan/ffscan/host/audit"
	"sort"
	"strings"

	"github.com/ffscan/ffscan/host/explain"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/keys"
)

// Explain implements httpapi.Explainer: what every scanner of this host
// does with the execution on its next cycle, and why.
func (h *Host) Explain(ctx context.Context, id string) (*explain.Report, error) {
	cfg := h.config()
	env := h.explainEnv()
	names := make([]string, 0, len(cfg.Scanners))
	for n := range cfg.Scanners {
		names = append(names, n)
	}
	sort.Strings(names)
	running := h.units.Views()
	for _, n := range names {
		sc := cfg.Scanners[n]
		// In shadow by what runs (a relaunch into another mode may have
		// failed).
		t := explain.Target{Name: n, Enabled: sc.Enabled, State: "stopped", Shadow: running[n].Scanner.Shadow()}
		if u := h.units.Get(n); u != nil {
			sup, run := u.Supervisor(), u.Runner()
			ss, rs := sup.Status(), run.Status()
			t.State, t.StateReason = string(ss.State), ss.LastError
			t.Cycle, t.LastCycleAt = rs.Cycle, rs.LastCycleAt
			if p := run.Paused(); p != nil {
				t.Paused = p.Reason
			}
			if _, info, err := sup.Current(); err == nil {
				tun := run.Tuning()
				t.Interval, t.Batch = tun.Interval, tun.Batch
				if t.Interval == 0 {
					t.Interval = info.DefaultInterval
				}
				if t.Batch == 0 {
					t.Batch = info.DefaultBatch
				}
				t.Acquire = func() (explain.Instance, error) {
					l, err := sup.Acquire()
					if err != nil {
						return explain.Instance{}, err
					}
					return explain.Instance{Scanner: l.Scanner, Info: l.Info, Host: l.Host, Release: l.Release}, nil
				}
			}
		}
		env.Targets = append(env.Targets, t)
	}
	rep, err := explain.Explain(ctx, env, id)
	if err != nil || h.audit == nil {
		return rep, err
	}
	// What happened beside what will happen: the execution's latest
	// entries in the trail.
	hist, herr := h.audit.Query(ctx, audit.Filter{Execution: id, Limit: HistoryShown})
	if herr != nil {
		rep.HistoryError = herr.Error()
	}
	rep.History = hist
	return rep, nil
}

// HistoryShown is how many of an execution's latest audit entries
// explain shows.
const HistoryShown = 20

// History implements console.Source: the scanner's last cycles.
func (h *Host) History(scanner string) []metrics.Sample { return h.met.History(scanner) }

// explainEnv is the host's side of an explanation, without targets.
func (h *Host) explainEnv() explain.Env {
	env := explain.Env{
		Valkey: h.client, Postgres: h.pg, PostgresReads: h.pgReads, PostgresFilter: h.config().Postgres.Filter(),
		Partitions: h.parts, Lanes: h.Lanes(), Now: h.clk.Now,
	}
	if h.share != nil {
		env.Owner = h.partitionOwner
	}
	return env
}

// partitionOwner reads which host holds p in the sharing's owners hash:
// this one (owned), another (its id), or none yet.
func (h *Host) partitionOwner(ctx context.Context, p keys.Partition) (string, bool) {
	if h.share.Owns(p) {
		return h.share.Status().ID, true
	}
	v, err := h.client.Do(ctx, h.client.B().Hget().Key(sharing.OwnersKey).Field(sharing.OwnerField(p)).Build()).ToString()
	if err != nil || v == "" {
		return "nobody (being handed over)", false
	}
	owner, _, _ := strings.Cut(v, "|")
	return owner, false
}
