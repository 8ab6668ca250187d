package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
)

type idleResult struct {
	Window     time.Duration
	Partitions int
	Interval   time.Duration
	HostPid    int
	PluginPid  int
	Cycles     uint64
	Sources    int // the scanner's candidate sources (per partition)

	ScanRPCs     float64 // ScanPartition + SampleBacklog calls (host metrics)
	Callbacks    float64 // callback commands (host metrics)
	Commands     int64   // server commands, our own INFO excluded
	ByCommand    map[string]int64
	HostCPU      time.Duration
	PluginCPU    time.Duration
	ServerCPU    time.Duration
	OtherCPU     time.Duration // the rest of the machine meanwhile
	HealthPeriod time.Duration
	LoadBefore   string
	LoadAfter    string
}

type idleSnap struct {
	at        time.Time
	hostCPU   time.Duration
	pluginCPU time.Duration
	serverCPU time.Duration
	sysCPU    time.Duration
	cmds      map[string]int64
	rpcs      float64
	callbacks float64
	cycle     uint64
}

func (b *bench) idleSnap(ctx context.Context, h *hostproc.Proc, pluginPid int) (idleSnap, error) {
	s := idleSnap{at: time.Now()}
	var err error
	if s.sysCPU, err = measure.SystemCPU(); err != nil {
		return s, err
	}
	if s.hostCPU, err = measure.ProcCPU(h.Pid()); err != nil {
		return s, err
	}
	if s.pluginCPU, err = measure.ProcCPU(pluginPid); err != nil {
		return s, err
	}
	if s.cmds, s.serverCPU, err = b.serverCounters(); err != nil {
		return s, err
	}
	text, err := h.Metrics(ctx)
	if err != nil {
		return s, err
	}
	m := measure.ParseMetrics(text)
	s.rpcs = m.Sum("ffscan_plugin_rpc_duration_seconds_count")
	s.callbacks = m.Sum("ffscan_callback_commands_total")
	st, err := h.Scanner(ctx, leaseexpiry.Name)
	if err != nil {
		return s, err
	}
	s.cycle = st.Cycle
	return s, nil
}

// runIdle runs the host binary over empty partitions and measures what it
// costs per second: plugin RPCs and callback commands from the host's
// /metrics, server commands from INFO commandstats (our own INFO calls
// excluded), and CPU of the host and plugin processes from /proc.
func (b *bench) runIdle(ctx context.Context, window time.Duration) (_ *idleResult, err error) {
	res := &idleResult{Window: window, Partitions: int(b.parts.Flow), Interval: leaseexpiry.DefaultInterval,
		Sources: len(leaseexpiry.New().Info().Sources), HealthPeriod: 5 * time.Second, LoadBefore: measure.Load()}
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	h, err := b.startHost(ctx)
	if err != nil {
		return nil, err
	}
	defer h.Stop()
	st, err := h.Scanner(ctx, leaseexpiry.Name)
	if err != nil {
		return nil, err
	}
	res.HostPid, res.PluginPid = h.Pid(), st.Pid
	if res.PluginPid == 0 {
		return nil, fmt.Errorf("no plugin pid in /v1/status")
	}
	// Let start-up work (boot, first cycles, lane read) pass.
	time.Sleep(3 * res.Interval)
	// Only the host talks to the server during the window.
	b.disconnect()
	defer func() {
		if rerr := b.connect(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	s0, err := b.idleSnap(ctx, h, res.PluginPid)
	if err != nil {
		return nil, err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s1, err := b.idleSnap(ctx, h, res.PluginPid)
	if err != nil {
		return nil, err
	}
	res.Window = s1.at.Sub(s0.at)
	res.Cycles = s1.cycle - s0.cycle
	res.ScanRPCs = s1.rpcs - s0.rpcs
	res.Callbacks = s1.callbacks - s0.callbacks
	res.HostCPU, res.PluginCPU, res.ServerCPU = s1.hostCPU-s0.hostCPU, s1.pluginCPU-s0.pluginCPU, s1.serverCPU-s0.serverCPU
	res.OtherCPU = max(0, s1.sysCPU-s0.sysCPU-res.HostCPU-res.PluginCPU-res.ServerCPU)
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

func (r *idleResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	secs := r.Window.Seconds()
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / secs }
	p("3. IDLE: host process (bin/ffscan run, pid %d) with the lease_expiry plugin subprocess (pid %d),", r.HostPid, r.PluginPid)
	p("   %d empty partitions, %s interval, measured over %s (%d cycles); load %s -> %s", r.Partitions, r.Interval,
		r.Window.Round(100*time.Millisecond), r.Cycles, r.LoadBefore, r.LoadAfter)
	p("   plugin scan RPCs:    %.2f/s (%.0f in the window; target 0: %s)", r.ScanRPCs/secs, r.ScanRPCs, verdict(r.ScanRPCs == 0))
	p("   health pings:        %.2f/s (supervisor.health_interval %s; not in the metrics)", 1/r.HealthPeriod.Seconds(), r.HealthPeriod)
	p("   callback commands:   %.2f/s", r.Callbacks/secs)
	var names []string
	for k := range r.ByCommand {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return r.ByCommand[names[i]] > r.ByCommand[names[j]] })
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f", strings.ToUpper(k), float64(r.ByCommand[k])/secs))
	}
	p("   Valkey commands:     %.1f/s (%s)", float64(r.Commands)/secs, strings.Join(parts, ", "))
	if visits := float64(r.Cycles) * float64(r.Partitions) * float64(r.Sources); visits > 0 {
		// The candidate and backlog reads; the rest is per cycle (TIME),
		// per connection (PING) or per host (the library check's ROLE and
		// FUNCTION LIST).
		var reads int64
		for _, c := range []string{"zrange", "zcount", "zcard", "scard", "sscan", "exists"} {
			reads += r.ByCommand[c]
		}
		per := float64(reads) / visits
		// The window's edges can add part of one cycle to the commands.
		p("   per empty partition: %.2f commands per source per interval (%d cycles x %d partitions x %d source(s); target 1.0: %s)",
			per, r.Cycles, r.Partitions, r.Sources, verdict(per <= float64(r.Cycles+1)/float64(r.Cycles)))
	}
	p("   CPU, %% of one core:  host %.2f%%, plugin %.2f%%, total %.2f%% (target <= 2%%: %s); server %.2f%%",
		pct(r.HostCPU), pct(r.PluginCPU), pct(r.HostCPU+r.PluginCPU), verdict(pct(r.HostCPU+r.PluginCPU) <= 2), pct(r.ServerCPU))
	p("   (CPU from /proc/<pid>/stat utime+stime, 10 ms ticks: resolution %.2f%% over this window;", pct(10*time.Millisecond))
	p("   the rest of the machine used %.0f%% of one core meanwhile)", pct(r.OtherCPU))
}
