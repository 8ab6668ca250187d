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
	lanes, err := b.recordLanes(ctx, nLanes)
	if err != nil {
		return run, nil, err
	}
	h, pids, err := b.startLaneHost(ctx, census)
	if err != nil {
		return run, nil, err
	}
	defer h.Stop()
	// Boot, the first cycles and the census's first passes pass first.
	time.Sleep(5 * time.Second)
	s0, err := b.lanesSnap(pids)
	if err != nil {
		return run, nil, err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return run, nil, ctx.Err()
	}
	s1, err := b.lanesSnap(pids)
	if err != nil {
		return run, nil, err
	}
	run.Window, run.HostCPU, run.ServerCPU, run.Commands = s1.at.Sub(s0.at), s1.cpu-s0.cpu, s1.server-s0.server, s1.cmds-s0.cmds
	if nLanes < manyLanes || census != "auto" {
		return run, nil, nil
	}
	lat, err = b.laneLatency(ctx, lanes, probes)
	return run, lat, err
}

// recordLanes names n lanes ("default" alone when n is 1) and records them
// in the lanes index, as a deployment does: the host merges them at boot.
func (b *bench) recordLanes(ctx context.Context, n int) ([]string, error) {
	lanes := make([]string, n)
	for i := range lanes {
		lanes[i] = fmt.Sprintf("lane-%d", i)
	}
	if n == 1 {
		lanes[0] = "default"
	}
	for i := 0; i < len(lanes); i += 500 {
		if err := b.client.Do(ctx, b.client.B().Sadd().Key(keys.LanesIndex).Member(lanes[i:min(i+500, len(lanes))]...).Build()).Error(); err != nil {
			return nil, err
		}
	}
	return lanes, nil
}

// startLaneHost starts a host running the lane-scoped scanners with the
// given census mode, and returns it with the pids whose CPU is measured
// (the host's and its plugins').
func (b *bench) startLaneHost(ctx context.Context, census string) (*hostproc.Proc, map[int]bool, error) {
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
		return nil, nil, err
	}
	pids := map[int]bool{h.Pid(): true}
	for _, s := range laneScanners {
		st, err := h.Scanner(ctx, s)
		if err != nil {
			h.Stop()
			return nil, nil, err
		}
		pids[st.Pid] = true
	}
	return h, pids, nil
}

// laneSnap is one reading of what the lane bench measures.
type laneSnap struct {
	at          time.Time
	cpu, server time.Duration // the processes' CPU, the server's
	cmds        int64         // commands the server ran (INFO excluded)
}

func (b *bench) lanesSnap(pids map[int]bool) (laneSnap, error) {
	sn := laneSnap{at: time.Now()}
	var err error
	if sn.cpu, err = cpuOf(pids); err != nil {
		return sn, err
	}
	cmds, server, err := b.serverCounters()
	if err != nil {
		return sn, err
	}
	sn.cmds, sn.server = commandsBut(cmds, "info"), server
	return sn, nil
}

// laneLatency times executions due in random lanes that were empty, one
// at a time, each from when it became due to its promotion.
func (b *bench) laneLatency(ctx context.Context, lanes []string, probes int) ([]time.Duration, error) {
	cl, err := client.New(ctx, b.client, client.Options{Partitions: b.parts, Library: b.lib, Namespace: "bench"})
	if err != nil {
		return nil, err
	}
	const delay = 300 * time.Millisecond
	var lat []time.Duration
	for range probes {
		lane := lanes[rand.IntN(len(lanes))]
		created := time.Now()
		r, err := cl.CreateExecution(ctx, client.CreateRequest{Lane: lane, Kind: "probe", Delay: delay})
		if err != nil {
			return nil, err
		}
		due := created.Add(delay)
		for {
			st, err := cl.GetExecution(ctx, r.ID)
			if err != nil {
				return nil, err
			}
			if st.PublicState != "delayed" {
				lat = append(lat, max(0, time.Since(due)))
				break
			}
			if time.Since(due) > time.Minute {
				return nil, fmt.Errorf("execution %s in lane %s not promoted a minute after it was due", r.ID, lane)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return lat, nil
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
