// Command ffbench is the benchmark runner behind `make bench`
// (scripts/bench.sh). It starts its own throwaway server with
// sdk/testserver and measures, side by side in one run on that server:
//
//   - drain: N expired leases over every flow partition, marked by the
//     lease_expiry plugin as a subprocess driven by the host's scheduler and
//     callback service, by the same scanner linked in-process through the
//     same scheduler, and by a raw pipelined loop of the same FCALLs;
//   - reclaim: p50/p99 from each lease's expiry to its marking while the
//     real host binary runs lease_expiry at its default interval;
//   - idle: plugin RPCs, Valkey commands and host/plugin CPU per second of
//     the real host binary over empty partitions;
//   - dag: per-hop latency from a parent's completion to its child becoming
//     eligible in a chain, with the push path and with the reconciler only.
//
// docs/performance.md explains each measurement and records a full run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// sizes are the scale knobs; -quick picks CI-sized ones.
type sizes struct {
	DrainLeases int
	DrainReps   int
	Burst       int
	Idle        time.Duration
	DAGLevels   int
	DAGRuns     int // listener on: chains one after the other
	// Listener off (reconciler at its 15 s interval): chains run at once.
	DAGOffLevels int
	DAGOffChains int
	// LaneProbes: executions timed from due to promoted among many lanes.
	LaneProbes int
	// PGRows: lapsed leases of the Postgres drain, PGReps its repetitions.
	PGRows, PGReps int
	// LaunchReps: host starts with all scanners, per load (idle, two
	// CPU burners).
	LaunchReps int
	// PGReplanRuns: reads of each form of the Postgres read-forms
	// benchmark, steady and after an analyze (odd: medians).
	PGReplanRuns int
}

var (
	fullSizes = sizes{DrainLeases: 100_000, DrainReps: 5, Burst: 10_000, Idle: 20 * time.Second,
		DAGLevels: 10, DAGRuns: 20, DAGOffLevels: 10, DAGOffChains: 5, LaneProbes: 20, PGRows: 20_000, PGReps: 3, LaunchReps: 3, PGReplanRuns: 21}
	quickSizes = sizes{DrainLeases: 10_000, DrainReps: 1, Burst: 2_000, Idle: 5 * time.Second,
		DAGLevels: 10, DAGRuns: 5, DAGOffLevels: 3, DAGOffChains: 2, LaneProbes: 5, PGRows: 2_000, PGReps: 1, LaunchReps: 1, PGReplanRuns: 7}
)

type bench struct {
	srv         *testserver.Server
	client      valkey.Client
	lib         *lua.Library
	parts       keys.PartitionConfig
	binDir      string
	pluginDir   string
	concurrency int
	drainModes  []string
	cpuProfile  string         // drain: profile path prefix (-cpuprofile)
	timingParts []string       // timing: the measures to run (-timing)
	timingModes []timingMode   // timing: the host modes (-timing-modes)
	profiled    map[string]int // drain: profiled runs per mode
	// cgroups are the confined plugin's control groups (nil where the
	// machine lets the bench make none), opened once.
	cgroupsOnce sync.Once
	cgroups     *pluginhost.Cgroups
	rawChunk    int

	restoreTimes []time.Duration
	log          hclog.Logger
	verbose      bool
	pgLogDir     string // pgtiming, pghosts: where to keep the server's log (-pglog)
	pgStatements bool   // pghosts: count statements (-pgstatements)
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ffbench: "+format+"\n", args...)
}

// connect opens the bench's client to the server (and the library
// handle on it).
func (b *bench) connect() error {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{b.srv.Addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return err
	}
	b.client, b.lib = c, lua.New(c, lua.Options{})
	return nil
}

// disconnect closes the bench's client (idle measurements: its keep-alive
// PINGs would count as server commands).
func (b *bench) disconnect() {
	if b.client != nil {
		b.client.Close()
		b.client, b.lib = nil, nil
	}
}

// flush empties the dataset; the library survives FLUSHALL, the partition
// record is written again.
func (b *bench) flush(ctx context.Context) error {
	if err := b.client.Do(ctx, b.client.B().Flushall().Build()).Error(); err != nil {
		return err
	}
	if _, err := b.lib.Ensure(ctx); err != nil {
		return err
	}
	_, _, err := boot.EnsurePartitions(ctx, b.client, b.parts)
	return err
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ffbench:", err)
		os.Exit(1)
	}
}

// options are ffbench's flags.
type options struct {
	quick                                               bool
	only, binDir, drainModes, cpuProfile                string
	timingParts, timingModes                            string
	leases, reps, burst, dagRuns, concurrency, rawChunk int
	idle                                                time.Duration
	maxLoad                                             float64
	verbose                                             bool
	pgLogDir                                            string
	pgStatements                                        bool
}

func parseFlags() options {
	var o options
	flag.BoolVar(&o.quick, "quick", false, "CI-sized run (10k drain, 2k burst, 5 s idle, short DAG runs)")
	flag.StringVar(&o.only, "only", "drain,reclaim,idle,dag,idleall,launch,hosts,cluster,lanes,pgdrain,pgidle,pghosts,timing,pgtiming,pgreplan", "comma-separated benchmarks to run")
	flag.StringVar(&o.binDir, "bin", "bin", "directory holding the ffscan binary and plugins/ (make build)")
	flag.IntVar(&o.leases, "leases", 0, "drain: expired leases (default 100000, quick 10000)")
	flag.IntVar(&o.reps, "reps", 0, "drain: repetitions of each mode (default 3, quick 1)")
	flag.IntVar(&o.burst, "burst", 0, "reclaim: leases in the burst (default 10000, quick 2000)")
	flag.DurationVar(&o.idle, "idle", 0, "idle: measuring window (default 20s, quick 5s)")
	flag.IntVar(&o.dagRuns, "dag-runs", 0, "dag: chains with the listener on (default 20, quick 5)")
	flag.IntVar(&o.concurrency, "concurrency", 8, "scheduler concurrency (the host's default) and raw-loop workers")
	flag.Float64Var(&o.maxLoad, "max-load", 0, "wait (up to 2 min) for the 1-minute load average to drop below this before starting; 0: don't wait")
	flag.BoolVar(&o.verbose, "v", false, "host and plugin logs at info level")
	flag.BoolVar(&o.pgStatements, "pgstatements", false, "pghosts: count each statement's calls over the median drains (pg_stat_statements, loaded by the bench's server) and print the most called")
	flag.StringVar(&o.pgLogDir, "pglog", "", "pgtiming, pghosts: keep the PostgreSQL server's log in this directory (pgtiming.log: every statement; pghosts.log: statements of 50 ms or more)")
	flag.IntVar(&o.rawChunk, "raw-chunk", 200, "drain: FCALLs per pipeline of the raw loop (0: whole partitions per worker)")
	flag.StringVar(&o.drainModes, "drain-modes", "plugin,plugin-audited,plugin-unconfined,plugin-grpcstream,plugin-unary,in-process,raw", "drain: modes to run (plugin: confined as a host confines it by default; plugin-audited: the same with the audit trail on; plugin-unconfined: not confined; plugin-grpcstream, plugin-unary: the callback paths of older plugins)")
	flag.StringVar(&o.timingParts, "timing", "reclaim,promote,deadline,attempt,drain,idle", "timing: measures to run")
	flag.StringVar(&o.timingModes, "timing-modes", "polling,due-time", "timing: host modes to run, side by side (also wakeups-only, events-only)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "drain: write a CPU profile of this process (host side) during each run to PATH.MODE.N")
	flag.Parse()
	return o
}

// sizes are the run's sizes: full or quick, then the flags that override
// them.
func (o options) sizes() sizes {
	sz := fullSizes
	if o.quick {
		sz = quickSizes
	}
	setIf(&sz.DrainLeases, o.leases)
	setIf(&sz.DrainReps, o.reps)
	setIf(&sz.Burst, o.burst)
	setIf(&sz.DAGRuns, o.dagRuns)
	if o.idle > 0 {
		sz.Idle = o.idle
	}
	return sz
}

func run() error {
	o := parseFlags()
	sz := o.sizes()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	bin, err := filepath.Abs(o.binDir)
	if err != nil {
		return err
	}
	for _, p := range []string{filepath.Join(bin, "ffscan"), filepath.Join(bin, "plugins", "leaseexpiry")} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s missing: run `make build` first (%w)", p, err)
		}
	}
	if o.maxLoad > 0 {
		waitForLoad(ctx, o.maxLoad, 2*time.Minute)
	}

	level := hclog.Warn
	if o.verbose {
		level = hclog.Info
	}
	modes, err := pickTimingModes(splitList(o.timingModes))
	if err != nil {
		return err
	}
	b := &bench{binDir: bin, drainModes: splitList(o.drainModes), timingParts: splitList(o.timingParts), timingModes: modes, cpuProfile: o.cpuProfile, rawChunk: o.rawChunk, pluginDir: filepath.Join(bin, "plugins"), concurrency: o.concurrency,
		parts: keys.DefaultPartitionConfig(), verbose: o.verbose, pgLogDir: o.pgLogDir, pgStatements: o.pgStatements,
		log: hclog.New(&hclog.LoggerOptions{Name: "ffbench", Level: level, Output: os.Stderr})}
	// DEBUG RELOAD restores the drain's snapshot between modes.
	b.srv, err = testserver.Start(testserver.WithArgs("--enable-debug-command", "local"))
	if err != nil {
		return err
	}
	defer b.srv.Stop()
	defer func() {
		if b.cgroups != nil {
			_ = b.cgroups.Close()
		}
	}()
	if err := b.connect(); err != nil {
		return err
	}
	defer b.disconnect()
	if err := b.flush(ctx); err != nil {
		return err
	}

	rep := &report{Sizes: sz, Quick: o.quick, Concurrency: o.concurrency, Machine: measure.Describe(), Start: time.Now(), LoadStart: measure.Load()}
	rep.Machine.Server = serverVersion(ctx, b.client)
	b.logf("server %s on %s; load %s", rep.Machine.Server, b.srv.Addr, rep.LoadStart)
	rep.Errors = b.runAll(ctx, splitList(o.only), sz, rep)
	rep.End, rep.LoadEnd = time.Now(), measure.Load()
	rep.print(os.Stdout)
	return errors.Join(rep.Errors...)
}

// runAll runs the benchmarks named in only, in their fixed order, into
// rep, and returns what failed (a failed one does not stop the others).
func (b *bench) runAll(ctx context.Context, only []string, sz sizes, rep *report) []error {
	want := map[string]bool{}
	for _, s := range only {
		want[s] = true
	}
	var errs []error
	step := func(name string, f func() error) {
		if !want[name] || ctx.Err() != nil {
			return
		}
		if err := f(); err != nil {
			b.logf("%s failed: %v", name, err)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	step("drain", func() (err error) { rep.Drain, err = b.runDrain(ctx, sz.DrainLeases, sz.DrainReps); return })
	step("reclaim", func() (err error) { rep.Reclaim, err = b.runReclaim(ctx, sz.Burst); return })
	step("idle", func() (err error) { rep.Idle, err = b.runIdle(ctx, sz.Idle); return })
	step("dag", func() (err error) {
		rep.DAG, err = b.runDAG(ctx, sz.DAGLevels, sz.DAGRuns, sz.DAGOffLevels, sz.DAGOffChains)
		return
	})
	step("idleall", func() (err error) { rep.IdleAll, err = b.runIdleAll(ctx, sz.Idle); return })
	step("launch", func() (err error) { rep.Launch, err = b.runLaunch(ctx, sz.LaunchReps); return })
	step("hosts", func() (err error) { rep.Hosts, err = b.runHosts(ctx, sz.Burst); return })
	step("cluster", func() (err error) { rep.Cluster, err = b.runCluster(ctx, sz.DrainLeases/2); return })
	step("lanes", func() (err error) { rep.Lanes, err = b.runLanes(ctx, sz.Idle, sz.LaneProbes); return })
	step("pgdrain", func() (err error) { rep.PGDrain, err = b.runPGDrain(ctx, sz.PGRows, sz.PGReps); return })
	step("pgidle", func() (err error) { rep.PGIdle, err = b.runPGIdle(ctx, sz.Idle); return })
	step("pghosts", func() (err error) { rep.PGHosts, err = b.runPGHosts(ctx, sz.PGRows, sz.Idle); return })
	step("timing", func() (err error) { rep.Timing, err = b.runTiming(ctx, sz); return })
	step("pgtiming", func() (err error) { rep.PGTiming, err = b.runPGTiming(ctx, sz); return })
	step("pgreplan", func() (err error) { rep.PGReplan, err = b.runPGReplan(ctx, sz.PGReplanRuns); return })
	return errs
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func setIf(dst *int, v int) {
	if v > 0 {
		*dst = v
	}
}

func serverVersion(ctx context.Context, c valkey.Client) string {
	if v := measure.InfoField(ctx, c, "server", "valkey_version"); v != "" {
		return "valkey " + v
	}
	return "redis " + measure.InfoField(ctx, c, "server", "redis_version")
}

func waitForLoad(ctx context.Context, limit float64, patience time.Duration) {
	deadline := time.Now().Add(patience)
	for l := measure.Load1(); l >= limit && time.Now().Before(deadline) && ctx.Err() == nil; l = measure.Load1() {
		fmt.Fprintf(os.Stderr, "ffbench: load %.2f >= %.2f, waiting\n", l, limit)
		time.Sleep(10 * time.Second)
	}
}
