package host

// The audit trail's place in the host (host/audit): the recorder, the
// operator actions it records, and the trail read back (GET /v1/audit,
// ffscan audit, explain's history of an execution).

import (
	"context"
	"fmt"
	"strings"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/supervisor"
)

// newAudit is the recorder of the trail, for a host that acts (nil for a
// read-only host, or when audit.enabled is off). A host with Valkey keeps
// it in Valkey, its PGCALLs too when it also has Postgres: one trail per
// host, read in one place, and a PGCALL's entry names its execution as
// "{fp:N}:uuid" (audit/pgcall.go), so it is in that partition's stream
// with the execution's Valkey actions. A host with Postgres alone keeps
// it in ffscan.audit_entry.
func (h *Host) newAudit(cfg *config.Config, id string) *audit.Recorder {
	if !cfg.Audit.Enabled || h.readOnly {
		return nil
	}
	c := audit.Config{MaxEntries: cfg.Audit.MaxEntries, MaxAge: cfg.Audit.MaxAge, Queue: cfg.Audit.Queue,
		Host: id, Partitions: h.parts, Clock: h.clk, Logger: h.log.Named("audit")}
	switch {
	case h.client != nil:
		return audit.New(h.client, c)
	case h.pg != nil:
		return audit.NewPostgres(h.pg, c)
	}
	return nil
}

// auditOperator records an operator's action (its actor in ctx).
func (h *Host) auditOperator(ctx context.Context, action, scanner, detail string) {
	h.audit.Record(audit.Operator(ctx, action, scanner, detail))
}

// auditSwap records a hot swap asked for in ctx and how it went.
func (h *Host) auditSwap(ctx context.Context, name string, res supervisor.SwapResult, err error) {
	detail := string(res.Outcome)
	switch {
	case err != nil:
		detail = "failed: " + err.Error()
	case res.Err != nil:
		detail += ": " + res.Err.Error()
	case res.To.SHA256 != "":
		detail += fmt.Sprintf(" to sha256 %.12s", res.To.SHA256)
	}
	h.auditOperator(ctx, "swap", name, detail)
}

// Audit reads the trail (GET /v1/audit, ffscan audit).
func (h *Host) Audit(ctx context.Context, f audit.Filter) ([]audit.Entry, error) {
	if h.audit == nil {
		return nil, fmt.Errorf("this host keeps no audit trail (audit.enabled is off, or the host is read-only)")
	}
	return h.audit.Query(ctx, f)
}

// reloadDetail says how a reload (or an enable, disable, mode switch)
// went, and why it was asked for.
func reloadDetail(why string, res httpapi.ReloadResult, err error) string {
	switch {
	case err != nil:
		return why + ": failed: " + err.Error()
	case res.Error != "":
		return why + ": refused: " + res.Error
	}
	d := why + ": applied"
	for _, p := range []struct {
		what  string
		names []string
	}{{"started", res.Started}, {"stopped", res.Stopped}, {"retuned", res.Retuned}} {
		if len(p.names) > 0 {
			d += fmt.Sprintf("; %s %s", p.what, strings.Join(p.names, ", "))
		}
	}
	return d
}

// swapDetail says how a hot swap asked for went.
func swapDetail(res httpapi.PluginSwapResult, err error) string {
	switch {
	case err != nil:
		return "failed: " + err.Error()
	case res.Error != "":
		return res.Outcome + ": " + res.Error
	case res.ToSHA256 != "":
		return fmt.Sprintf("%s to sha256 %.12s", res.Outcome, res.ToSHA256)
	}
	return res.Outcome
}

// canaryDetail says how a canary action went.
func canaryDetail(res httpapi.CanaryResult, err error) string {
	switch {
	case err != nil:
		return "failed: " + err.Error()
	case res.Error != "":
		return "refused: " + res.Error
	case res.Canary != nil:
		return fmt.Sprintf("%s: sha256 %.12s, %d cycles compared, %d items differed", res.Canary.State, res.Canary.To.SHA256, res.Canary.Cycles, res.Canary.Differences())
	}
	return ""
}
