package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"time"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
)

// laneScanners are the scanners with lane-scoped sources, at their
// default intervals.
var laneScanners = []string{"delayed_promoter", "unblock", "dependency_reconciler", "retention_trimmer"}

// manyLanes is the lane count of the "lanes" benchmark (issue: 3000 lanes
// took Valkey from 3.2k to 407k commands/s).
const manyLanes = 3000

// lanesRun is one configuration's idle cost.
type lanesRun struct {
	Lanes     int
	Census    string
	Window    time.Duration
	Commands  int64
	ServerCPU time.Duration
	HostCPU   time.Duration // host and plugin processes
}

// lanesResult compares the idle cost of one lane with that of many, with
// and without the census, and measures how late work in a lane that was
// empty is handled.
type lanesResult struct {
	Runs      []lanesRun
	Interval  time.Duration // delayed_promoter's
	Latencies []time.Duration
	Probes    int
}

// runLanes measures, side by side: the lane-scoped scanners idle with one
// lane, with manyLanes lanes and the census (auto), and with manyLanes
// lanes read directly (census off); then, census on, the delay between an
// execution becoming due in a random lane and its promotion.
func (b *bench) runLanes(ctx context.Context, window time.Duration, probes int) (*lanesResult, error) {
	res := &lanesResult{Interval: 750 * time.Millisecond, Probes: probes}
	for _, cfg := range []struct {
		lanes  int
		census string
	}{{1, "auto"}, {manyLanes, "auto"}, {manyLanes, "off"}} {
		run, lat, err := b.lanesOnce(ctx, cfg.lanes, cfg.census, window, probes)
		if err != nil {
			return nil, fmt.Errorf("%d lanes, census %s: %w", cfg.lanes, cfg.census, err)
		}
		res.Runs = append(res.Runs, run)
		if cfg.lanes == manyLanes && cfg.census == "auto" {
			res.Latencies = lat
		}
	}
	return res, nil
}

func (b *bench) lanesOnce(ctx context.Context, nLanes int, census string, window time.Duration, probes int) (run lanesRun, lat []time.Duration, err error) {
	run = lanesRun{Lanes: nLanes, Census: census}
	if err := b.flush(ctx); err != nil {
		return run, nil, err
	}
	lanes := make([]string, nLanes)
	for i := range lanes {
		lanes[i] = fmt.Sprintf("lane-%d", i)
	}
	if nLanes == 1 {
		lanes[0] = "default"
	}
	// The lanes a deployment records: the host merges them at boot.
	for i := 0; i < len(lanes); i += 500 {
		if err := b.client.Do(ctx, b.client.B().Sadd().Key(keys.LanesIndex).Member(lanes[i:min(i+500, len(lanes))]...).Build()).Error(); err != nil {
			return run, nil, err
		}
	}
	var scanners []hostproc.Scanner
	for _, s := range laneScanners {
		scanners = append(scanners, hostproc.Scanner{Name: s})
	}
	level := "warn"
	if b.verbose {
		level = "info"
	}
	h, err := hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir, ValkeyAddr: b.srv.Addr,
		Scanners: scanners, LogLevel: level, Log: io.Writer(os.Stderr), Extra: "scheduler:\n  lane_census: " + census + "\n"}, 60*time.Second)
	if err != nil {
		return run, nil, err
	}
	defer h.Stop()
	pids := map[int]bool{h.Pid(): true}
	for _, s := range laneScanners {
		st, err := h.Scanner(ctx, s)
		if err != nil {
			return run, nil, err
		}
		pids[st.Pid] = true
	}
	// Boot, the first cycles and the census's first passes pass first.
	time.Sleep(5 * time.Second)
	snap := func() (time.Time, time.Duration, time.Duration, int64, error) {
		at := time.Now()
		var cpu time.Duration
		for pid := range pids {
			c, err := measure.ProcCPU(pid)
			if err != nil {
				return at, 0, 0, 0, err
			}
			cpu += c
		}
		info, err := measure.RawInfo(b.srv.Addr, "commandstats")
		if err != nil {
			return at, 0, 0, 0, err
		}
		var cmds int64
		for k, v := range measure.ParseCommandStats(info) {
			if k != "info" {
				cmds += v
			}
		}
		if info, err = measure.RawInfo(b.srv.Addr, "cpu"); err != nil {
			return at, 0, 0, 0, err
		}
		return at, cpu, measure.ParseServerCPU(info), cmds, nil
	}
	t0, h0, s0, c0, err := snap()
	if err != nil {
		return run, nil, err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return run, nil, ctx.Err()
	}
	t1, h1, s1, c1, err := snap()
	if err != nil {
		return run, nil, err
	}
	run.Window, run.HostCPU, run.ServerCPU, run.Commands = t1.Sub(t0), h1-h0, s1-s0, c1-c0
	if nLanes < manyLanes || census != "auto" {
		return run, nil, nil
	}

	// Latency: executions due in random lanes that were empty, one at a
	// time, each timed from when it became due to its promotion.
	cl, err := client.New(ctx, b.client, client.Options{Partitions: b.parts, Library: b.lib, Namespace: "bench"})
	if err != nil {
		return run, nil, err
	}
	const delay = 300 * time.Millisecond
	for range probes {
		lane := lanes[rand.IntN(len(lanes))]
		created := time.Now()
		r, err := cl.CreateExecution(ctx, client.CreateRequest{Lane: lane, Kind: "probe", Delay: delay})
		if err != nil {
			return run, nil, err
		}
		due := created.Add(delay)
		for {
			st, err := cl.GetExecution(ctx, r.ID)
			if err != nil {
				return run, nil, err
			}
			if st.PublicState != "delayed" {
				lat = append(lat, max(0, time.Since(due)))
				break
			}
			if time.Since(due) > time.Minute {
				return run, nil, fmt.Errorf("execution %s in lane %s not promoted a minute after it was due", r.ID, lane)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return run, lat, nil
}

func (r *lanesResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("8. LANES: the lane-scoped scanners (%v) idle at their default intervals, 256 empty flow partitions", laneScanners)
	var one lanesRun
	for _, run := range r.Runs {
		secs := run.Window.Seconds()
		p("   %4d lanes, census %-4s: Valkey %.1f commands/s, %.2f %% of a core; host+plugins %.2f %% of a core",
			run.Lanes, run.Census, float64(run.Commands)/secs, 100*run.ServerCPU.Seconds()/secs, 100*run.HostCPU.Seconds()/secs)
		if run.Lanes == 1 {
			one = run
		}
	}
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	for _, run := range r.Runs {
		if run.Lanes == 1 || one.Window == 0 {
			continue
		}
		cmd := ratio(float64(run.Commands)/run.Window.Seconds(), float64(one.Commands)/one.Window.Seconds())
		cpu := ratio(run.ServerCPU.Seconds()/run.Window.Seconds(), one.ServerCPU.Seconds()/one.Window.Seconds())
		line := fmt.Sprintf("   %d lanes / 1 lane, census %s: Valkey commands x%.2f, Valkey CPU x%.2f", run.Lanes, run.Census, cmd, cpu)
		if run.Census == "auto" {
			line += fmt.Sprintf(" (target at most x5: %s)", verdict(cmd <= 5 && cpu <= 5))
		}
		p("%s", line)
	}
	if len(r.Latencies) > 0 {
		l := append([]time.Duration(nil), r.Latencies...)
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		worst := l[len(l)-1]
		p("   due -> promoted in a random one of %d lanes (census on), %d probes: median %s, max %s; delayed_promoter interval %s (target within 2x: %s)",
			manyLanes, len(l), l[len(l)/2].Round(time.Millisecond), worst.Round(time.Millisecond), r.Interval, verdict(worst <= 2*r.Interval))
	}
}
