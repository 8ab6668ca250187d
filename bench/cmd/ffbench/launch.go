package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/host/supervisor"
)

// launchRun is one start of the host with all seventeen scanners.
type launchRun struct {
	Burners int
	// Ready is from the host's exec until /readyz says every scanner
	// runs.
	Ready time.Duration
	// Slowest is the longest single launch (from its slot in the launch
	// gate until the plugin ran configured), and its scanner.
	Slowest        time.Duration
	SlowestScanner string
	// Launches and Failed count launches that succeeded and restarts
	// (a launch past the start timeout is one).
	Launches, Failed int
	Load             string
}

type launchResult struct {
	StartTimeout time.Duration
	Runs         []launchRun
}

// runLaunch starts the host with all seventeen scanners reps times
// with no other load and reps times beside two CPU burners (threads that
// spin, each holding a CPU), alternating, and reads how long each launch
// took from the host's own histogram.
func (b *bench) runLaunch(ctx context.Context, reps int) (*launchResult, error) {
	res := &launchResult{StartTimeout: supervisor.DefaultStartTimeout}
	for i := 0; i < reps; i++ {
		for _, burners := range []int{0, 2} {
			r, err := b.launchOnce(ctx, burners)
			if err != nil {
				return nil, err
			}
			res.Runs = append(res.Runs, r)
		}
	}
	return res, nil
}

func (b *bench) launchOnce(ctx context.Context, burners int) (launchRun, error) {
	r := launchRun{Burners: burners}
	stop := burn(burners)
	defer stop()
	var scanners []hostproc.Scanner
	for _, s := range ffScanners {
		scanners = append(scanners, hostproc.Scanner{Name: s.name})
	}
	logw := io.Discard
	if b.verbose {
		logw = os.Stderr
	}
	t0 := time.Now()
	h, err := hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir,
		ValkeyAddr: b.srv.Addr, Scanners: scanners, Log: logw}, 120*time.Second)
	if err != nil {
		return r, err
	}
	defer h.Stop()
	r.Ready = time.Since(t0)
	r.Load = measure.Load()
	text, err := h.Metrics(ctx)
	if err != nil {
		return r, err
	}
	m := measure.ParseMetrics(text)
	for _, s := range ffScanners {
		label := fmt.Sprintf(`scanner="%s"`, s.name)
		n := m.Sum("ffscan_plugin_launch_duration_seconds_count", label)
		sum := m.Sum("ffscan_plugin_launch_duration_seconds_sum", label)
		r.Launches += int(n)
		r.Failed += int(m.Sum("ffscan_plugin_restarts_total", label))
		if n == 0 {
			return r, fmt.Errorf("%s: no launch recorded", s.name)
		}
		// One launch each unless one failed; the mean then hides
		// nothing the failure count does not say.
		if d := time.Duration(sum / n * float64(time.Second)); d > r.Slowest {
			r.Slowest, r.SlowestScanner = d, s.name
		}
	}
	return r, nil
}

// burn starts n threads that spin, each locked to an OS thread, until the
// returned function is called.
func burn(n int) func() {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Unlocked before the goroutine ends: Go ends a thread whose
			// goroutine exits locked, and a child started from that
			// thread with Pdeathsig (the bench's own server, through
			// sdk/testserver) is killed with it. The sections after
			// this one lost their server that way.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			x := 0
			for !done.Load() {
				for i := 0; i < 1_000_000; i++ {
					x += i
				}
			}
			_ = x
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}

func (r *launchResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("13. LAUNCH: the host started with all %d scanners (one plugin process each), idle and beside two CPU burners", len(ffScanners))
	p("   (threads that spin); each launch timed by the host (ffscan_plugin_launch_duration_seconds) against")
	p("   supervisor.start_timeout %s", r.StartTimeout)
	p("   %-9s %-12s %-28s %-9s %-7s %s", "burners", "all ready", "slowest launch", "launches", "failed", "load")
	worst := map[int]time.Duration{}
	failed := 0
	for _, run := range r.Runs {
		p("   %-9d %-12s %-28s %-9d %-7d %s", run.Burners, run.Ready.Round(time.Millisecond),
			fmt.Sprintf("%s (%s)", run.Slowest.Round(time.Millisecond), run.SlowestScanner), run.Launches, run.Failed, run.Load)
		worst[run.Burners] = max(worst[run.Burners], run.Slowest)
		failed += run.Failed
	}
	for _, n := range []int{0, 2} {
		if d, ok := worst[n]; ok && d > 0 {
			p("   %d burners: slowest launch %s, start timeout / slowest = %.1f (target >= 3: %s)", n, d.Round(time.Millisecond),
				float64(r.StartTimeout)/float64(d), verdict(float64(r.StartTimeout)/float64(d) >= 3))
		}
	}
	p("   launches that failed or passed the start timeout: %d (target 0: %s)", failed, verdict(failed == 0))
}
