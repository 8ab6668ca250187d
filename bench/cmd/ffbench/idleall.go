package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
)

// ffScanner is one of FlowFabric's seventeen scanners with what it costs
// FlowFabric on an idle deployment (scanners.md §15, P20): its default
// interval, its partition family and the commands it sends per empty
// partition per cycle (TIME plus its range reads; per lane where the
// scanner is lane scoped). The set is the one every shipped Valkey
// configuration enables (TestIdleAllRunsTheConfiguredScanners).
type ffScanner struct {
	name       string
	interval   time.Duration
	budget     bool // budget/quota family (32 partitions) instead of flow (256)
	perPart    float64
	laneScoped bool
}

var ffScanners = []ffScanner{
	{"lease_expiry", 1500 * time.Millisecond, false, 2, false},
	{"delayed_promoter", 750 * time.Millisecond, false, 2, true},
	{"attempt_timeout", 2 * time.Second, false, 2, false},
	{"execution_deadline", 5 * time.Second, false, 2, false},
	{"suspension_timeout", 2 * time.Second, false, 2, false},
	{"pending_wp_expiry", 5 * time.Second, false, 2, false},
	{"index_reconciler", 45 * time.Second, false, 1, false},
	{"retention_trimmer", 60 * time.Second, false, 2, true},
	{"dependency_reconciler", 15 * time.Second, false, 1, true},
	{"unblock", 5 * time.Second, false, 3, true},
	{"budget_reset", 15 * time.Second, true, 2, false},
	{"budget_reconciler", 30 * time.Second, true, 2, false},
	{"quota_reconciler", 30 * time.Second, true, 2, false},
	{"flow_projector", 15 * time.Second, false, 2, false},
	{"cancel_reconciler", 15 * time.Second, false, 2, false},
	{"edge_cancel_dispatcher", time.Second, false, 1, false},
	{"edge_cancel_reconciler", 10 * time.Second, false, 1, false},
}

// ffIdleRate is FlowFabric's idle command rate for the whole set over the
// given partition counts and one lane.
func ffIdleRate(flowParts, budgetParts int) float64 {
	total := 0.0
	for _, s := range ffScanners {
		parts := flowParts
		if s.budget {
			parts = budgetParts
		}
		total += float64(parts) * s.perPart / s.interval.Seconds()
	}
	return total
}

type idleAllResult struct {
	Window     time.Duration
	FlowParts  int
	Scanners   int
	Plugins    int
	ScanRPCs   float64
	Commands   int64
	ByCommand  map[string]int64
	HostCPU    time.Duration
	PluginCPU  time.Duration
	ServerCPU  time.Duration
	FFRate     float64
	LoadBefore string
	LoadAfter  string
}

// runIdleAll runs the host with all seventeen scanners at their default
// intervals over empty partitions and measures the whole set's idle cost.
func (b *bench) runIdleAll(ctx context.Context, window time.Duration) (_ *idleAllResult, err error) {
	res := &idleAllResult{Window: window, FlowParts: int(b.parts.Flow), Scanners: len(ffScanners),
		FFRate: ffIdleRate(int(b.parts.Flow), int(b.parts.Budget)), LoadBefore: measure.Load()}
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	var scanners []hostproc.Scanner
	for _, s := range ffScanners {
		scanners = append(scanners, hostproc.Scanner{Name: s.name})
	}
	logw := io.Writer(os.Stderr)
	level := "warn"
	if b.verbose {
		level = "info"
	}
	h, err := hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir,
		ValkeyAddr: b.srv.Addr, Scanners: scanners, LogLevel: level, Log: logw}, 60*time.Second)
	if err != nil {
		return nil, err
	}
	defer h.Stop()
	pids := map[int]bool{}
	for _, s := range ffScanners {
		st, err := h.Scanner(ctx, s.name)
		if err != nil {
			return nil, err
		}
		if st.Pid == 0 {
			return nil, fmt.Errorf("%s: no plugin pid in /v1/status", s.name)
		}
		pids[st.Pid] = true
	}
	res.Plugins = len(pids)
	// Start-up work (boot, first cycles, lane discovery) passes first.
	time.Sleep(5 * time.Second)
	b.disconnect()
	defer func() {
		if rerr := b.connect(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	s0, err := b.idleAllSnap(ctx, h, pids)
	if err != nil {
		return nil, err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s1, err := b.idleAllSnap(ctx, h, pids)
	if err != nil {
		return nil, err
	}
	res.Window = s1.at.Sub(s0.at)
	res.HostCPU, res.PluginCPU, res.ServerCPU = s1.host-s0.host, s1.plugins-s0.plugins, s1.server-s0.server
	res.ScanRPCs = s1.rpcs - s0.rpcs
	res.ByCommand = map[string]int64{}
	for k, v := range s1.cmds {
		if k == "info" {
			continue
		}
		if d := v - s0.cmds[k]; d > 0 {
			res.ByCommand[k] = d
			res.Commands += d
		}
	}
	res.LoadAfter = measure.Load()
	return res, nil
}

// idleAllSnap is one reading of what the all-scanners idle bench measures.
type idleAllSnap struct {
	at                    time.Time
	host, plugins, server time.Duration // CPU time
	cmds                  map[string]int64
	rpcs                  float64 // scan RPCs, from the host's metrics
}

func (b *bench) idleAllSnap(ctx context.Context, h *hostproc.Proc, pids map[int]bool) (idleAllSnap, error) {
	sn := idleAllSnap{at: time.Now()}
	var err error
	if sn.host, err = measure.ProcCPU(h.Pid()); err != nil {
		return sn, err
	}
	if sn.plugins, err = cpuOf(pids); err != nil {
		return sn, err
	}
	if sn.cmds, sn.server, err = b.serverCounters(); err != nil {
		return sn, err
	}
	text, err := h.Metrics(ctx)
	if err != nil {
		return sn, err
	}
	sn.rpcs = measure.ParseMetrics(text).Sum("ffscan_plugin_rpc_duration_seconds_count")
	return sn, nil
}

func (r *idleAllResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	secs := r.Window.Seconds()
	rate := float64(r.Commands) / secs
	p("5. IDLE, ALL SCANNERS: the host with all %d scanners (%d plugin processes) at their default intervals,", r.Scanners, r.Plugins)
	p("   %d empty flow partitions, lane \"default\", measured over %s; load %s -> %s", r.FlowParts,
		r.Window.Round(100*time.Millisecond), r.LoadBefore, r.LoadAfter)
	var names []string
	for k := range r.ByCommand {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return r.ByCommand[names[i]] > r.ByCommand[names[j]] })
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f", strings.ToUpper(k), float64(r.ByCommand[k])/secs))
	}
	p("   Valkey commands:     %.1f/s (%s)", rate, strings.Join(parts, ", "))
	p("   FlowFabric, same set (from its intervals and per-partition reads): %.0f/s; ffscan/FlowFabric %.2f (target < 0.50: %s)",
		r.FFRate, rate/r.FFRate, verdict(rate < r.FFRate/2))
	p("   plugin scan RPCs:    %.2f/s (target 0: %s)", r.ScanRPCs/secs, verdict(r.ScanRPCs == 0))
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / secs }
	p("   CPU, %% of one core:  host %.2f%%, plugins %.2f%%, total %.2f%%; server %.2f%%",
		pct(r.HostCPU), pct(r.PluginCPU), pct(r.HostCPU+r.PluginCPU), pct(r.ServerCPU))
}
