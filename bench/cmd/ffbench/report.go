package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ffscan/ffscan/bench/measure"
)

type report struct {
	Sizes       sizes
	Quick       bool
	Concurrency int
	Machine     measure.Machine
	Start, End  time.Time
	LoadStart   string
	LoadEnd     string
	Drain       *drainResult
	Reclaim     *reclaimResult
	Idle        *idleResult
	DAG         *dagResult
	IdleAll     *idleAllResult
	Launch      *launchResult
	Hosts       *hostsResult
	Cluster     *clusterResult
	Lanes       *lanesResult
	PGDrain     *pgDrainResult
	PGIdle      *pgIdleResult
	Timing      *timingResult
	PGTiming    *pgTimingResult
	PGReplan    *pgReplanResult
	PGHosts     *pgHostsResult
	Errors      []error
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func (r *report) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	rule := strings.Repeat("=", 78)
	p(rule)
	size := "full"
	if r.Quick {
		size = "quick"
	}
	p("ffscan benchmark report (%s size), %s", size, r.Start.UTC().Format(time.RFC3339))
	m := r.Machine
	p("machine: %d CPUs, %s, %.1f GiB RAM, kernel %s, %s, server %s", m.CPUs, m.CPU, m.MemGiB, m.Kernel, m.Go, m.Server)
	p("load average (1/5/15 min): %s at start, %s at end; took %s", r.LoadStart, r.LoadEnd, r.End.Sub(r.Start).Round(time.Second))
	if r.Drain != nil {
		p(rule)
		r.Drain.print(w, r.Concurrency)
	}
	if r.Reclaim != nil {
		p(rule)
		r.Reclaim.print(w)
	}
	if r.Idle != nil {
		p(rule)
		r.Idle.print(w)
	}
	if r.DAG != nil {
		p(rule)
		r.DAG.print(w)
	}
	if r.IdleAll != nil {
		p(rule)
		r.IdleAll.print(w)
	}
	if r.Launch != nil {
		p(rule)
		r.Launch.print(w)
	}
	if r.Hosts != nil {
		p(rule)
		r.Hosts.print(w)
	}
	if r.Cluster != nil {
		p(rule)
		r.Cluster.print(w)
	}
	if r.PGDrain != nil {
		p(rule)
		r.PGDrain.print(w)
	}
	if r.PGIdle != nil {
		p(rule)
		r.PGIdle.print(w)
	}
	if r.PGHosts != nil {
		p(rule)
		r.PGHosts.print(w)
	}
	if r.Lanes != nil {
		p(rule)
		r.Lanes.print(w)
	}
	if r.Timing != nil {
		p(rule)
		r.Timing.print(w)
	}
	if r.PGTiming != nil {
		p(rule)
		r.PGTiming.print(w)
	}
	if r.PGReplan != nil {
		p(rule)
		r.PGReplan.print(w)
	}
	if len(r.Errors) > 0 {
		p(rule)
		for _, e := range r.Errors {
			p("FAILED: %v", e)
		}
	}
	p(rule)
}

func (d *drainResult) print(w io.Writer, conc int) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("1. DRAIN: %d expired leases over %d partitions (seeded in %s; snapshot %s; restore %s per run)",
		d.Leases, d.Partitions, d.SeedTime.Round(time.Millisecond), d.SaveTime.Round(time.Millisecond), avg(d.Restore).Round(time.Millisecond))
	p("   scheduler concurrency %d, cycles back to back; load %s -> %s", conc, d.LoadBefore, d.LoadAfter)
	p("   %-17s %3s %8s %8s %5s %6s %4s %5s %8s %4s  %s", "mode", "rep", "time", "leases/s", "srv%",
		"cycles", "RPCs", "cbks", "verified", "errs", "CPU s: bench+plugin=host side | server | rest of machine")
	for _, x := range d.Runs {
		rpcs, execs := fmt.Sprint(x.RPCs), fmt.Sprint(x.Execs)
		if x.Mode == modeRaw {
			rpcs, execs = "-", "-"
		}
		mark := ""
		if x.Disturbed {
			mark = "  disturbed: not counted"
		}
		p("   %-17s %3d %8s %8.0f %5.0f %6d %4s %5s %8d %4d  %.2f+%.2f=%.2f | %.2f | %.2f%s", x.Mode, x.Rep,
			x.Elapsed.Round(time.Millisecond), x.rate(), 100*x.busy(), x.Cycles, rpcs, execs, x.Verified, x.Errors,
			x.BenchCPU.Seconds(), x.PluginCPU.Seconds(), (x.BenchCPU + x.PluginCPU).Seconds(), x.ServerCPU.Seconds(),
			x.OtherCPU.Seconds(), mark)
	}
	p("   (srv%%: server CPU / wall time, how busy the run kept Valkey; 100%% is the Valkey-bound limit. A run during")
	p("   which the rest of the machine used over %.0f%% of a core is disturbed: shown, not counted, run again.)", 100*maxOtherShare)
	pl, ok1 := d.median(modePlugin)
	li, ok2 := d.median(modeLinked)
	raw, ok3 := d.median(modeRaw)
	var meds, cpus []string
	for _, m := range drainModes {
		if r, ok := d.median(m); ok {
			meds = append(meds, fmt.Sprintf("%s %.0f/s (srv %.0f%%)", m, r.rate(), 100*d.medianBusy(m)))
		}
		if c, ok := d.medianHostCPU(m); ok {
			cpus = append(cpus, fmt.Sprintf("%s %.3f s", m, c.Seconds()))
		}
	}
	p("   medians: %s", strings.Join(meds, ", "))
	p("   host-side CPU (this process + plugin) per 10k leases, medians: %s", strings.Join(cpus, ", "))
	if ok1 && ok2 {
		a := pl.rate() / li.rate()
		p("   plugin/in-process = %.3f (target >= 0.90: %s); by server busy time %.3f",
			a, verdict(a >= 0.9), d.medianBusy(modePlugin)/d.medianBusy(modeLinked))
	}
	if ok1 && ok3 {
		b := pl.rate() / raw.rate()
		p("   plugin/raw        = %.3f (target >= 0.70: %s); by server busy time %.3f",
			b, verdict(b >= 0.7), d.medianBusy(modePlugin)/d.medianBusy(modeRaw))
	}
	if ok2 && ok3 {
		p("   in-process/raw    = %.3f; by server busy time %.3f", li.rate()/raw.rate(), d.medianBusy(modeLinked)/d.medianBusy(modeRaw))
	}
	if au, ok := d.median(modePluginAudited); ok && ok1 {
		r := au.rate() / pl.rate()
		p("   throughput plugin-audited / plugin = %.3f (target >= 0.95: %s); trail entries written %d, lost %d in its median run",
			r, verdict(r >= 0.95), au.Audited, au.AuditDropped)
		if au.Audited > 0 {
			p("   the trail's store memory: %d bytes for %d entries, %.0f MiB per million recorded actions",
				au.AuditBytes, au.Audited, float64(au.AuditBytes)/float64(au.Audited)*1e6/(1<<20))
		}
		if ac, ok := d.medianHostCPU(modePluginAudited); ok {
			if pc, ok := d.medianHostCPU(modePlugin); ok && pc > 0 {
				p("   CPU per item plugin-audited / plugin = %.2f", ac.Seconds()/pc.Seconds())
			}
		}
	}
	// CPU per item: what a busy host pays for running the scanner as a
	// plugin rather than linked in.
	lc, okl := d.medianHostCPU(modeLinked)
	for _, m := range []string{modePlugin, modePluginAudited, modePluginUnconfined, modePluginStream, modePluginUnary, modeRaw} {
		c, ok := d.medianHostCPU(m)
		if !ok || !okl || lc == 0 {
			continue
		}
		r := c.Seconds() / lc.Seconds()
		switch m {
		case modePlugin:
			p("   CPU per item %-17s / in-process = %.2f (target <= 1.50: %s)", m, r, verdict(r <= 1.5))
		default:
			p("   CPU per item %-17s / in-process = %.2f", m, r)
		}
	}
}

func avg(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}
