package host

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/internal/plaintext"
	"github.com/ffscan/ffscan/host/keyevents"
	"github.com/ffscan/ffscan/host/keyless"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/host/unit"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua/topology"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Status implements httpapi.Source: every configured scanner (running or
// not), the configuration's reload history and the completion listener.
func (h *Host) Status() httpapi.StatusDoc {
	cfg := h.config()
	doc := httpapi.StatusDoc{
		Version: Version, StartedAt: h.started, Valkey: cfg.Valkey.Addrs, Lanes: h.Lanes(),
		ScannerAPI: fmt.Sprintf("%d..%d", pluginhost.MinAPIVersion, scannerapi.APIVersion),
	}
	if h.census != nil {
		doc.LaneCensus = h.census.State()
	}
	if h.events != nil {
		doc.KeyEvents = keyEventsStatus(h.events.State())
	}
	if h.client != nil && h.client.Mode() == valkey.ClientModeCluster {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if ms, err := topology.Masters(ctx, h.client); err == nil {
			doc.ValkeyNodes = ms
		}
		cancel()
	}
	if h.pg != nil {
		st := h.pg.Stat()
		doc.Postgres = &httpapi.PostgresStatus{Schema: h.pgSchema.String(), Library: h.pgLibrary, Filter: cfg.Postgres.Filter().String(), PoolSize: int(st.MaxConns()),
			Connections: int(st.TotalConns()), InUse: int(st.AcquiredConns()), ReadConnections: h.pgReads.Connections(),
			SharedTransactions: h.pgSlots.Total(), ActionSlots: h.pgSlots.Size()}
	}
	h.relMu.Lock()
	doc.Config = httpapi.ConfigStatus{
		File: h.src.File, FileSHA256: h.reloads.fileSHA, Generation: 1 + h.reloads.reloads,
		LoadedAt: h.reloads.loadedAt, Reloads: h.reloads.reloads,
		Refused: h.reloads.refused, LastError: h.reloads.lastError,
	}
	if !h.reloads.lastErrorAt.IsZero() {
		t := h.reloads.lastErrorAt
		doc.Config.LastErrorAt = &t
	}
	h.relMu.Unlock()

	doc.Sharing = h.sharingStatus()
	if h.audit != nil {
		st := h.audit.Stats()
		doc.Audit = &st
	}
	lc, comp, pgComp := h.listeners.Stats()
	if pgComp != nil && doc.Postgres != nil {
		st := pgComp
		doc.Postgres.Completions = &httpapi.PGCompletionsStatus{Notifications: st.Notifications, Drains: st.Drains, Dispatched: st.Dispatched,
			AlreadyDone: st.AlreadyDone, Filtered: st.Filtered, Errors: st.Errors, Reconnects: st.Reconnects, Listening: st.Listening,
			Standby: st.Standby}
	}
	if st := comp; st != nil {
		doc.Completions = &httpapi.CompletionsStatus{
			Concurrency: lc.Concurrency, Subscribed: st.Subscribed,
			Messages: st.Messages, Accepted: st.Accepted, Malformed: st.Malformed, Dropped: st.Dropped,
			Dispatched: st.Dispatched, Failed: st.Failed, Panics: st.Panics, Resolved: st.Resolved, Reconnects: st.Reconnects,
		}
	}

	approvals, _ := h.approvals.All() // an unreadable file refuses every launch, which says why
	running := h.units.Views()
	names := make([]string, 0, len(cfg.Scanners))
	for n := range cfg.Scanners {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sc := cfg.Scanners[n]
		s := httpapi.ScannerStatus{Name: n, Enabled: sc.Enabled, Plugin: sc.Plugin, State: string(supervisor.StateStopped)}
		if run, ok := running[n]; ok {
			fillStatus(&s, run.Unit)
			s.NotApplied = run.NotApplied
		}
		// The mode of what runs (a relaunch into another may have failed).
		s.Mode = config.ModeAct
		if run, ok := running[n]; (ok && run.Scanner.Shadow()) || (!ok && sc.Shadow()) {
			s.Mode = config.ModeShadow
		}
		if l, ok := h.shadows.Lookup(n); ok {
			snap := l.Snapshot(ShadowShown)
			s.Shadow = &snap
		}
		s.Swap = config.SwapDirect
		if run, ok := running[n]; (ok && run.Scanner.Swap == config.SwapCanary) || (!ok && sc.Swap == config.SwapCanary) {
			s.Swap = config.SwapCanary
		}
		if cs, ok := h.units.CanaryStatus(n, CanaryShown); ok {
			s.Canary = &cs
		}
		s.Approval = h.approvalStatus(n, approvals)
		s.PendingApproval = pendingApproval(s)
		s.Override = h.override(n)
		if hist := h.met.History(n); len(hist) > 0 {
			l := hist[len(hist)-1].Lag.Round(time.Millisecond).String()
			s.Lag = l
		}
		doc.Scanners = append(doc.Scanners, s)
	}
	return doc
}

func keyEventsStatus(st keyevents.State) *httpapi.KeyEventsStatus {
	out := &httpapi.KeyEventsStatus{Mode: string(st.Mode), On: st.On, Reason: st.Reason, Generation: st.Gen, Gaps: st.Gaps, Events: st.Events}
	for _, n := range st.Nodes {
		out.Nodes = append(out.Nodes, httpapi.KeyEventsNode{Addr: n.Addr, Master: n.Master, Setting: n.Setting, Publishes: n.Publishes, Subscribed: n.Subscribed, Error: n.Error})
	}
	return out
}

// sharingStatus is this host's share of the partitions (nil without
// sharing).
func (h *Host) sharingStatus() *httpapi.SharingStatus {
	if h.share == nil {
		return nil
	}
	st := h.share.Status()
	ss := &httpapi.SharingStatus{HostID: st.ID, Store: st.Store, Hosts: st.Members, Owned: map[string]int{}, Totals: map[string]int{},
		Partitions: map[string][]int{}, At: st.At, Ticks: st.Ticks, Failures: st.Failures, LastError: st.LastError, Changes: st.Changes}
	for _, f := range []keys.Family{keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota} {
		ss.Owned[f.String()] = st.Owned[f]
		ss.Totals[f.String()] = len(h.parts.Partitions(f))
		ss.Partitions[f.String()] = []int{}
	}
	for _, p := range st.Partitions {
		ss.Partitions[p.Family.String()] = append(ss.Partitions[p.Family.String()], int(p.Index))
	}
	if st.ValidFor > 0 {
		until := st.At.Add(st.ValidFor)
		ss.ValidUntil = &until
	}
	return ss
}

// ShadowShown is how many of a shadow scanner's latest held-back writes
// status shows.
const ShadowShown = 20

// budgetText says an action budget in one line.
func budgetText(b scheduler.ActionBudget) string {
	if b.Off() {
		return "off"
	}
	var parts []string
	if b.Max > 0 {
		parts = append(parts, fmt.Sprintf("%d per %s", b.Max, b.Window))
	}
	if b.MaxFraction > 0 {
		parts = append(parts, fmt.Sprintf("%g%% of those examined per %s once %d were", 100*b.MaxFraction, b.Window, b.MinExamined))
	}
	s := strings.Join(parts, ", ")
	if b.CoolDown > 0 {
		s += fmt.Sprintf(", cool-down %s", b.CoolDown)
	}
	return s
}

// pauseStatus is a runner's pause as status shows it (nil: none).
func pauseStatus(p *scheduler.Pause) *httpapi.PauseStatus {
	if p == nil {
		return nil
	}
	ps := &httpapi.PauseStatus{Since: p.At, Reason: p.Reason, Acted: p.Acted, Examined: p.Examined, Window: p.Budget.Window.String(),
		Max: p.Budget.Max, MaxFraction: p.Budget.MaxFraction, MinExamined: p.Budget.MinExamined}
	if !p.Until.IsZero() {
		u := p.Until
		ps.Until = &u
	}
	return ps
}

func fillStatus(s *httpapi.ScannerStatus, u *unit.Unit) {
	sup, run := u.Supervisor(), u.Runner()
	ss := sup.Status()
	rs := run.Status()
	s.Path, s.Version, s.APIVersion, s.SHA256, s.Pid = ss.Meta.Path, ss.Meta.Version, ss.Meta.APIVersion, ss.Meta.SHA256, ss.Pid
	s.Isolation, s.Bounds, s.Policy = ss.Meta.Isolation, ss.Meta.Bounds, ss.Meta.Policy
	if u, ok := sup.Usage(); ok {
		s.Resources = &httpapi.Resources{MemoryBytes: u.MemoryBytes, CPUSeconds: u.CPUSeconds, ThrottledSeconds: u.ThrottledSeconds,
			Tasks: u.Pids, OOMKills: u.OOMKills}
	}
	// Errors may quote a plugin's text (bounded where it entered): one
	// line each here.
	s.State, s.Since, s.Restarts, s.Swaps, s.LastError = string(ss.State), ss.Since, ss.Restarts, ss.Swaps, plaintext.Line(ss.LastError, plaintext.MaxLog)
	if !ss.NextAttempt.IsZero() {
		t := ss.NextAttempt
		s.NextAttempt = &t
	}
	if ls := ss.LastSwap; ls != nil {
		s.LastSwap = &httpapi.SwapInfo{
			At: ls.At, Outcome: string(ls.Outcome), FromSHA256: ls.From.SHA256, ToSHA256: ls.To.SHA256,
			FromVersion: ls.From.Version, ToVersion: ls.To.Version, Reason: plaintext.Line(ls.Reason, plaintext.MaxLog), Probation: ls.Probation,
		}
	}
	if _, info, err := sup.Current(); err == nil {
		tun := run.Tuning()
		iv := tun.Interval
		if iv == 0 {
			iv = info.DefaultInterval
		}
		s.Interval = iv.String()
		s.Batch = tun.Batch
		if s.Batch == 0 {
			s.Batch = info.DefaultBatch
		}
	}
	s.Cycle, s.Processed, s.Skipped, s.Errors, s.FailedPartitions = rs.Cycle, rs.Processed, rs.Skipped, rs.Errors, rs.Failed
	s.ActionBudget = budgetText(run.ActionBudget())
	s.Paused = pauseStatus(run.Paused())
	s.Wakeups, s.Scheduled, s.Quiet = rs.Wakeups, rs.Scheduled, rs.Quiet
	if !rs.LastCycleAt.IsZero() {
		t := rs.LastCycleAt
		s.LastCycleAt = &t
		s.LastCycleDuration = rs.LastDuration.Round(time.Microsecond).String()
	}
	if rs.BacklogKnown {
		b := rs.Backlog
		s.Backlog = &b
	}
	s.LastScanError = plaintext.Line(rs.LastError, plaintext.Max)
}

// Ready implements httpapi.Source.
func (h *Host) Ready(ctx context.Context) error {
	if h.client != nil {
		if err := keyless.Do(ctx, h.client, func(b valkey.Builder) valkey.Completed { return b.Ping().Build() }).Error(); err != nil {
			return fmt.Errorf("valkey: %w", err)
		}
	}
	if h.pg != nil {
		if err := h.pg.Ping(ctx); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	if h.library != nil {
		if err := h.library.Verify(ctx); err != nil {
			return fmt.Errorf("flowfabric library: %w", err)
		}
	}
	return h.units.Ready()
}

// approvalStatus is scanner name's recorded approval and the declaration
// a launch refused, if one waits.
func (h *Host) approvalStatus(name string, recs map[string]policy.Record) *httpapi.ApprovalStatus {
	var st httpapi.ApprovalStatus
	if rec, ok := recs[name]; ok {
		st.Approved = &httpapi.ApprovedPolicy{Digest: rec.Digest, SHA256: rec.ApprovedSHA256, Running: rec.BinarySHA256,
			By: rec.ApprovedBy, At: rec.ApprovedAt, Lines: rec.Policy.Lines()}
	}
	if p, ok := h.approvals.PendingFor(name); ok {
		st.Pending = &httpapi.PendingPolicy{SHA256: p.SHA256, Digest: p.Digest, Lines: p.Policy.Lines(), Added: p.Added, At: p.At}
	}
	if st.Approved == nil && st.Pending == nil {
		return nil
	}
	return &st
}

// pendingApproval says whether a scanner's plugin waits for an
// operator's approval of its policy: its last launch or swap was refused
// by the approvals (host/policy's refusals name the command to run).
func pendingApproval(s httpapi.ScannerStatus) bool {
	if s.Approval != nil && s.Approval.Pending != nil {
		return true
	}
	const mark = "ffscan plugins approve"
	if strings.Contains(s.LastError, mark) && s.State != "running" {
		return true
	}
	return s.LastSwap != nil && s.LastSwap.Outcome == "failed" && strings.Contains(s.LastSwap.Reason, mark)
}
