package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/bench/seed"
	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Drain modes.
const (
	// The plugin confined as a host confines it by default (Landlock,
	// the seccomp allow-list, its memory limit and, where the machine
	// lets the bench make one, a control group).
	modePlugin           = "plugin"
	modePluginUnconfined = "plugin-unconfined" // the same plugin, not confined: the confinement's cost side by side
	modePluginAudited    = "plugin-audited"    // the confined plugin with the audit trail on: the trail's cost side by side
	modePluginStream     = "plugin-grpcstream" // callback batches on a gRPC stream through the broker
	modePluginUnary      = "plugin-unary"      // one unary call per batch, as plugins built before the batch stream send them
	modeLinked           = "in-process"
	modeRaw              = "raw"
)

// drainModes are the known modes, in report order.
var drainModes = []string{modePlugin, modePluginAudited, modePluginUnconfined, modePluginStream, modePluginUnary, modeLinked, modeRaw}

// drainRun is one timed drain of the seeded state.
type drainRun struct {
	Mode     string
	Rep      int
	Elapsed  time.Duration
	Marked   int64 // leases the mode reports it marked
	Verified int   // cores found lease_expired_reclaimable afterwards
	Cycles   int   // scheduler cycles (raw: passes)
	// Audited and AuditDropped count the trail's entries written and
	// lost (plugin-audited).
	Audited, AuditDropped int64
	// AuditBytes is the memory of the trail's streams after the run.
	AuditBytes int64
	RPCs       int64 // ScanPartition/SampleBacklog calls (scheduler modes)
	Execs      int64 // callback batches (scheduler modes)
	Commands   int64 // commands in those batches
	FCalls     int64 // FCALLs sent (raw)
	Errors     int64
	// CPU used during the run: this process (host side: scheduler,
	// callbacks, linked scanner or raw loop), the plugin process, the server.
	BenchCPU, PluginCPU, ServerCPU time.Duration
	// OtherCPU is what the rest of the machine used meanwhile (other
	// engineers' builds and tests): /proc/stat busy time minus the above.
	OtherCPU time.Duration
	// Disturbed runs are left out of the medians (see maxOtherShare).
	Disturbed bool
}

// cpuMeter samples the CPU of the processes taking part in a run.
type cpuMeter struct {
	b                 *bench
	pluginPid         int
	stopProfile       func()
	self, plugin, srv time.Duration
	sys               time.Duration
}

func (b *bench) startCPU(ctx context.Context, mode string, pluginPid int) (*cpuMeter, error) {
	// Collect the set-up's garbage (the restore, the check of every
	// lease, the warm-up) now, so that no mode's timed run pays for it:
	// when it fell into a run was chance, and it moved this process's CPU
	// figure from run to run.
	runtime.GC()
	stop, err := b.profileDrain(mode)
	if err != nil {
		return nil, err
	}
	m := &cpuMeter{b: b, pluginPid: pluginPid, stopProfile: stop}
	m.self, _ = measure.ProcCPU(os.Getpid())
	if pluginPid > 0 {
		m.plugin, _ = measure.ProcCPU(pluginPid)
	}
	m.srv, _ = measure.ServerCPU(ctx, b.client)
	m.sys, _ = measure.SystemCPU()
	return m, nil
}

func (m *cpuMeter) stop(ctx context.Context, run *drainRun) {
	m.stopProfile()
	sys, _ := measure.SystemCPU()
	self, _ := measure.ProcCPU(os.Getpid())
	srv, _ := measure.ServerCPU(ctx, m.b.client)
	run.BenchCPU, run.ServerCPU = self-m.self, srv-m.srv
	if m.pluginPid > 0 {
		p, _ := measure.ProcCPU(m.pluginPid)
		run.PluginCPU = p - m.plugin
	}
	run.OtherCPU = max(0, sys-m.sys-run.BenchCPU-run.PluginCPU-run.ServerCPU)
}

func (d drainRun) rate() float64 { return float64(d.Marked) / d.Elapsed.Seconds() }

// busy is the fraction of the run's wall time the server spent working:
// a drain is Valkey-bound when it is near 1. Unlike throughput it does not
// move when the server itself runs slower (a busy neighbour on the same
// cores), so its ratios are the steadier reading of host-side overhead.
func (d drainRun) busy() float64 { return d.ServerCPU.Seconds() / d.Elapsed.Seconds() }

type drainResult struct {
	Leases     int
	Partitions int
	SeedTime   time.Duration
	SaveTime   time.Duration
	Restore    []time.Duration
	Runs       []drainRun
	LoadBefore string
	LoadAfter  string
}

// counted returns the runs of a mode that count: the undisturbed ones, or
// all of them when every run was disturbed.
func (r *drainResult) counted(mode string) []drainRun {
	var clean, all []drainRun
	for _, x := range r.Runs {
		if x.Mode != mode {
			continue
		}
		all = append(all, x)
		if !x.Disturbed {
			clean = append(clean, x)
		}
	}
	if len(clean) == 0 {
		return all
	}
	return clean
}

// median returns the median run of a mode by elapsed time.
func (r *drainResult) median(mode string) (drainRun, bool) {
	rs := r.counted(mode)
	if len(rs) == 0 {
		return drainRun{}, false
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Elapsed < rs[j].Elapsed })
	return rs[len(rs)/2], true
}

// medianHostCPU is the median host-side CPU (this process plus the
// plugin) per 10 000 leases of a mode's counted runs.
func (r *drainResult) medianHostCPU(mode string) (time.Duration, bool) {
	var per []time.Duration
	for _, x := range r.counted(mode) {
		if x.Verified > 0 {
			per = append(per, (x.BenchCPU+x.PluginCPU)*10_000/time.Duration(x.Verified))
		}
	}
	if len(per) == 0 {
		return 0, false
	}
	slices.Sort(per)
	return per[len(per)/2], true
}

// medianBusy is the median server busy fraction of a mode's runs.
func (r *drainResult) medianBusy(mode string) float64 {
	var v []float64
	for _, x := range r.counted(mode) {
		v = append(v, x.busy())
	}
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

// countingRecorder counts plugin calls and callback batches on top of the
// host's own metrics.
type countingRecorder struct {
	*metrics.Metrics
	rpcs, execs, cmds atomic.Int64
}

func (c *countingRecorder) RPC(scanner, method string, d time.Duration) {
	c.rpcs.Add(1)
	c.Metrics.RPC(scanner, method, d)
}

func (c *countingRecorder) CallbackCommands(scanner string, n int) {
	c.execs.Add(1)
	c.cmds.Add(int64(n))
	c.Metrics.CallbackCommands(scanner, n)
}

type staticTarget struct{ s scannerapi.Scanner }

func (t staticTarget) Current() (scannerapi.Scanner, scannerapi.Info, error) {
	return t.s, t.s.Info(), nil
}

// runDrain seeds n expired leases once, snapshots them, and drains the
// same state with every mode, reps times, rotating the order of modes
// between repetitions.
func (b *bench) runDrain(ctx context.Context, n, reps int) (*drainResult, error) {
	res := &drainResult{Leases: n, Partitions: int(b.parts.Flow), LoadBefore: measure.Load()}
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	s := seed.New(b.lib, b.parts)
	t0 := time.Now()
	ids, err := s.Leases(ctx, n, time.Millisecond)
	if err != nil {
		return nil, err
	}
	res.SeedTime = time.Since(t0)
	b.logf("drain: seeded %d expired leases over %d partitions in %s", n, b.parts.Flow, res.SeedTime.Round(time.Millisecond))
	t0 = time.Now()
	if err := seed.Snapshot(ctx, b.client); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	res.SaveTime = time.Since(t0)

	modes := b.drainModes
	for _, m := range modes {
		if !slices.Contains(drainModes, m) {
			return nil, fmt.Errorf("unknown drain mode %q (want one of %s)", m, strings.Join(drainModes, ", "))
		}
	}
	// Disturbed runs are repeated, within a budget that keeps the whole
	// benchmark well under ten minutes.
	retries, maxRetries := 0, reps*len(modes)/2
	for rep := 0; rep < reps; rep++ {
		for k := range modes {
			mode := modes[(k+rep)%len(modes)]
			for attempt := 1; ; attempt++ {
				run, err := b.drainOnce(ctx, mode, n, ids)
				if err != nil {
					return nil, err
				}
				run.Rep = rep + 1
				// A run during which the rest of the machine kept more
				// than a quarter of a core busy is disturbed: it is shown
				// but left out of the medians, and run again (twice at
				// most).
				run.Disturbed = run.OtherCPU.Seconds() > maxOtherShare*run.Elapsed.Seconds()
				b.logf("drain: %-10s rep %d: %d marked (%d verified) in %s = %.0f leases/s, %d cycles, %d RPCs, %d callback batches, rest of machine %.2f CPU s%s",
					run.Mode, run.Rep, run.Marked, run.Verified, run.Elapsed.Round(time.Millisecond), run.rate(), run.Cycles,
					run.RPCs, run.Execs, run.OtherCPU.Seconds(), map[bool]string{true: " (disturbed)"}[run.Disturbed])
				res.Runs = append(res.Runs, run)
				if !run.Disturbed || attempt == 3 || retries >= maxRetries {
					break
				}
				retries++
			}
		}
	}
	res.Restore = b.restoreTimes
	res.LoadAfter = measure.Load()
	return res, nil
}

// maxOtherShare is the share of one core the rest of the machine may use
// during a drain run before the run counts as disturbed.
const maxOtherShare = 0.25

// drainOnce restores the snapshot and drains it once with mode.
func (b *bench) drainOnce(ctx context.Context, mode string, n int, ids []keys.ExecutionID) (drainRun, error) {
	t0 := time.Now()
	if err := seed.Restore(ctx, b.client); err != nil {
		return drainRun{}, fmt.Errorf("restore: %w", err)
	}
	b.restoreTimes = append(b.restoreTimes, time.Since(t0))
	if err := b.checkDue(ctx, n); err != nil {
		return drainRun{}, err
	}
	var (
		run drainRun
		err error
	)
	switch mode {
	case modeRaw:
		run, err = b.drainRaw(ctx, n)
	default:
		run, err = b.drainScheduler(ctx, mode, n)
	}
	if err != nil {
		return run, fmt.Errorf("drain %s: %w", mode, err)
	}
	if run.Verified, err = countMarked(ctx, b.client, ids); err != nil {
		return run, err
	}
	if run.Verified != n {
		return run, fmt.Errorf("drain %s: %d of %d cores marked afterwards", mode, run.Verified, n)
	}
	return run, nil
}

// profileDrain starts a CPU profile of this process for the timed part
// of one drain run (with -cpuprofile PATH: PATH.MODE.N, N counting the
// mode's runs), so the profile holds what the run's CPU figures count.
func (b *bench) profileDrain(mode string) (stop func(), err error) {
	if b.cpuProfile == "" {
		return func() {}, nil
	}
	if b.profiled == nil {
		b.profiled = map[string]int{}
	}
	b.profiled[mode]++
	f, err := os.Create(fmt.Sprintf("%s.%s.%d", b.cpuProfile, mode, b.profiled[mode]))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// checkDue makes sure the restored state holds n due, unmarked leases.
func (b *bench) checkDue(ctx context.Context, n int) error {
	var cmds valkey.Commands
	for _, p := range b.parts.Partitions(keys.FamilyFlow) {
		cmds = append(cmds, b.client.B().Zcard().Key(keys.FlowPart(p).LeaseExpiry()).Build())
	}
	total := int64(0)
	for _, r := range b.client.DoMulti(ctx, cmds...) {
		v, err := r.AsInt64()
		if err != nil {
			return err
		}
		total += v
	}
	if total != int64(n) {
		return fmt.Errorf("restored state has %d lease index entries, want %d", total, n)
	}
	return nil
}

func countMarked(ctx context.Context, c valkey.Client, ids []keys.ExecutionID) (int, error) {
	vals, err := seed.Fields(ctx, c, ids, "ownership_state")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range vals {
		if v[0] == "lease_expired_reclaimable" {
			n++
		}
	}
	return n, nil
}

// launched is a scanner plugin a drain run drives.
type launched struct {
	scanner scannerapi.Scanner
	// host is the callback service bound to the instance's policy (the
	// launcher's binding; the plugin calls back through it).
	host  scannerapi.Host
	pid   int
	close func()
}

// launchPlugin starts the plugin cfg names from the bench's plugin
// directory, its callbacks served by svc, as the host's launcher does.
// confined is cfg with the confinement a host gives a plugin by default
// (config.Defaults: plugin_isolation auto, plugin_memory_limit,
// plugin_cgroups auto with plugin_cpu_limit and plugin_pids_limit).
func (b *bench) confined(cfg launcher.Config) launcher.Config {
	d := config.Defaults()
	lim := d.PluginLimits(config.Scanner{})
	cfg.Isolation, cfg.MemoryLimit, cfg.CPULimit, cfg.PidsLimit = d.PluginIsolation.Mode(), lim.Memory, lim.CPU, lim.Pids
	b.cgroupsOnce.Do(func() {
		if cg, err := pluginhost.OpenCgroups(pluginhost.CgroupOptions{}); err == nil {
			b.cgroups = cg
		} else {
			b.log.Info("the confined plugin runs without a control group", "why", err)
		}
	})
	cfg.Cgroups = b.cgroups
	return cfg
}

func (b *bench) launchPlugin(ctx context.Context, cfg launcher.Config, svc *callbacks.Service) (*launched, error) {
	cat, err := catalog.New(b.pluginDir)
	if err != nil {
		return nil, err
	}
	cfg.StartTimeout = 30 * time.Second
	inst, _, err := launcher.New(cfg, cat, svc, b.log.Named(cfg.Scanner)).Launch(ctx)
	if err != nil {
		cat.Close()
		return nil, err
	}
	p := &launched{scanner: inst.Scanner(), pid: inst.Pid(), close: func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = inst.Close(cctx)
		cancel()
		inst.Kill()
		cat.Close()
	}}
	if hi, ok := inst.(interface{ Host() scannerapi.Host }); ok {
		p.host = hi.Host()
	}
	return p, nil
}

// drainScheduler drives the host's scheduler over the scanner, plugin or
// linked, with cycles back to back (no interval sleep) until every lease
// is marked. The scanner and runner are fresh for each run: the scanner
// remembers entries it has marked, and the state is restored between runs.
func (b *bench) drainScheduler(ctx context.Context, mode string, n int) (drainRun, error) {
	run := drainRun{Mode: mode}
	rec := &countingRecorder{Metrics: metrics.New()}
	svc := callbacks.New(b.lib, rec)
	var (
		sc        scannerapi.Scanner
		host      scannerapi.Host
		pluginPid int
		trail     *audit.Recorder
	)
	switch mode {
	case modePlugin, modePluginAudited, modePluginUnconfined, modePluginStream, modePluginUnary:
		cfg := launcher.Config{Scanner: leaseexpiry.Name, Binary: "leaseexpiry",
			CallbackPath: map[string]pluginhost.CallbackPath{modePluginStream: pluginhost.CallbackStream, modePluginUnary: pluginhost.CallbackUnary}[mode]}
		if mode == modePlugin || mode == modePluginAudited {
			cfg = b.confined(cfg)
		}
		if mode == modePluginAudited {
			// As a host keeps it: every marking written to the trail, off
			// the scanner's path. Its last entries are written before the
			// run's time stops (trail.Stop below).
			trail = audit.New(b.client, audit.Config{Host: "bench", Partitions: b.parts, Logger: b.log.Named("audit")})
			if err := trail.Start(ctx); err != nil {
				return run, err
			}
			defer trail.Stop(context.Background())
			cfg.Audit = trail
		}
		p, err := b.launchPlugin(ctx, cfg, svc)
		if err != nil {
			return run, err
		}
		defer p.close()
		sc, host, pluginPid = p.scanner, p.host, p.pid
	case modeLinked:
		// As the launcher does for a plugin: the callback service bound
		// to the scanner's declared policy, options resolved against its
		// schema.
		sc = pluginhost.Linked(leaseexpiry.New(), nil)
		info := sc.Info()
		opts, err := launcher.ResolveOptions(leaseexpiry.Name, info.Options, nil)
		if err != nil {
			return run, err
		}
		pol, _ := callbacks.PolicyFromInfo(info, false)
		host = svc.Bind(leaseexpiry.Name, pol)
		if err := sc.Configure(pluginhost.WithLogger(ctx, b.log.Named(leaseexpiry.Name)), opts); err != nil {
			return run, err
		}
	}
	r := scheduler.New(scheduler.Config{
		Name:        leaseexpiry.Name,
		Partitions:  b.parts,
		Lanes:       []string{seed.DefaultLane},
		Concurrency: b.concurrency,
		CallTimeout: 30 * time.Second,
		CallParent:  pluginhost.WithLogger(context.Background(), b.log.Named(leaseexpiry.Name)),
		NoJitter:    true,
		Client:      b.client,
		Target:      staticTarget{sc},
		Host:        host,
		Recorder:    rec,
		Logger:      b.log.Named("scheduler"),
	})

	if err := b.warmUp(ctx, r, n); err != nil {
		return run, fmt.Errorf("warm-up: %w", err)
	}
	rec.rpcs.Store(0)
	rec.execs.Store(0)
	rec.cmds.Store(0)

	cpu, err := b.startCPU(ctx, mode, pluginPid)
	if err != nil {
		return run, err
	}
	t0 := time.Now()
	for run.Marked < int64(n) {
		sum, err := r.Cycle(ctx, scheduler.CycleOptions{})
		if err != nil {
			return run, err
		}
		run.Cycles++
		run.Marked += sum.Processed
		run.Errors += sum.ErrorTotal()
		if sum.Processed == 0 {
			return run, fmt.Errorf("cycle %d marked nothing with %d of %d leases marked", run.Cycles, run.Marked, n)
		}
	}
	if trail != nil {
		// The trail's queue written out: part of the run's cost.
		if err := trail.Stop(ctx); err != nil {
			return run, err
		}
		st := trail.Stats()
		run.Audited, run.AuditDropped = int64(st.Written), int64(st.Dropped+st.Failed)
	}
	run.Elapsed = time.Since(t0)
	if trail != nil {
		// What the trail costs the store: its streams' memory, all of it.
		for _, p := range b.parts.Partitions(keys.FamilyFlow) {
			n, err := b.client.Do(ctx, b.client.B().MemoryUsage().Key("ffscan:audit:"+p.Tag()).Samples(0).Build()).AsInt64()
			if err == nil {
				run.AuditBytes += n
			}
		}
	}
	cpu.stop(ctx, &run)
	run.RPCs, run.Execs, run.Commands = rec.rpcs.Load(), rec.execs.Load(), rec.cmds.Load()
	return run, nil
}

// drainRaw is the Valkey-bound reference: no scanner, no RPC, no callback
// checks. Per pass: server TIME, one pipeline with a ZRANGE of every
// partition's whole due range, then ff_mark_lease_expired_if_due for every
// member in pipelines of b.rawChunk FCALLs, b.concurrency of them in
// flight. With rawChunk 0 each worker takes whole partitions instead
// (ZRANGE, then one pipeline of all its FCALLs).
func (b *bench) drainRaw(ctx context.Context, n int) (drainRun, error) {
	run := drainRun{Mode: modeRaw}
	rd := &rawDrain{b: b, c: b.client}
	cpu, err := b.startCPU(ctx, modeRaw, 0)
	if err != nil {
		return run, err
	}
	t0 := time.Now()
	for run.Marked < int64(n) {
		run.Cycles++
		if run.Cycles > 5 {
			return run, fmt.Errorf("%d of %d marked after %d passes", run.Marked, n, run.Cycles-1)
		}
		if err := rd.pass(ctx); err != nil {
			return run, err
		}
		run.Marked = rd.marked.Load()
	}
	run.Elapsed = time.Since(t0)
	cpu.stop(ctx, &run)
	run.FCalls, run.Errors = rd.fcalls.Load(), rd.errs.Load()
	return run, nil
}

// rawDrain is drainRaw's state: the client and what the passes counted.
type rawDrain struct {
	b                    *bench
	c                    valkey.Client
	marked, fcalls, errs atomic.Int64
}

// fcall builds the marking FCALL of one due member (false, counted as an
// error: not an execution id).
func (rd *rawDrain) fcall(pk keys.FlowPartKeys, member string) (valkey.Completed, bool) {
	id, err := keys.ParseExecutionID(member)
	if err != nil {
		rd.errs.Add(1)
		return valkey.Completed{}, false
	}
	k := keys.Exec(id)
	return rd.c.B().Fcall().Function(leaseexpiry.Function).Numkeys(4).
		Key(k.Core(), k.LeaseCurrent(), pk.LeaseExpiry(), k.LeaseHistory()).Arg(member).Build(), true
}

// send runs one pipeline of FCALLs and counts the leases marked.
func (rd *rawDrain) send(ctx context.Context, cmds valkey.Commands) {
	rd.fcalls.Add(int64(len(cmds)))
	for _, r := range rd.c.DoMulti(ctx, cmds...) {
		arr, err := r.ToArray()
		if err != nil || len(arr) < 2 {
			rd.errs.Add(1)
			continue
		}
		if st, _ := arr[1].ToString(); st == "OK" {
			rd.marked.Add(1)
		}
	}
}

// pass is one pass over every partition's due range at the server's time.
func (rd *rawDrain) pass(ctx context.Context) error {
	ms, err := serverMs(ctx, rd.c)
	if err != nil {
		return err
	}
	now := strconv.FormatInt(ms, 10)
	zrange := func(p keys.Partition) valkey.Completed {
		return rd.c.B().Zrange().Key(keys.FlowPart(p).LeaseExpiry()).Min("-inf").Max(now).Byscore().Build()
	}
	work := make(chan valkey.Commands)
	var wg sync.WaitGroup
	for range rd.b.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cmds := range work {
				rd.send(ctx, cmds)
			}
		}()
	}
	if rd.b.rawChunk <= 0 {
		err = rd.byPartition(ctx, zrange)
	} else {
		err = rd.chunked(ctx, zrange, work)
	}
	close(work)
	wg.Wait()
	return err
}

// byPartition gives each worker whole partitions: its ZRANGE, then one
// pipeline of its FCALLs.
func (rd *rawDrain) byPartition(ctx context.Context, zrange func(keys.Partition) valkey.Completed) error {
	pw := make(chan keys.Partition)
	var pwg sync.WaitGroup
	var firstErr atomic.Value
	for range rd.b.concurrency {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for p := range pw {
				due, err := rd.c.Do(ctx, zrange(p)).AsStrSlice()
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				var cmds valkey.Commands
				for _, m := range due {
					if cmd, ok := rd.fcall(keys.FlowPart(p), m); ok {
						cmds = append(cmds, cmd)
					}
				}
				if len(cmds) > 0 {
					rd.send(ctx, cmds)
				}
			}
		}()
	}
	for _, p := range rd.b.parts.Partitions(keys.FamilyFlow) {
		pw <- p
	}
	close(pw)
	pwg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	return nil
}

// chunked reads every partition's due range in one pipeline and hands the
// FCALLs to the workers in pipelines of rawChunk.
func (rd *rawDrain) chunked(ctx context.Context, zrange func(keys.Partition) valkey.Completed, work chan<- valkey.Commands) error {
	parts := rd.b.parts.Partitions(keys.FamilyFlow)
	cmds := make(valkey.Commands, len(parts))
	for i, p := range parts {
		cmds[i] = zrange(p)
	}
	var batch valkey.Commands
	for i, r := range rd.c.DoMulti(ctx, cmds...) {
		due, err := r.AsStrSlice()
		if err != nil {
			return err
		}
		for _, m := range due {
			if cmd, ok := rd.fcall(keys.FlowPart(parts[i]), m); ok {
				batch = append(batch, cmd)
			}
			if len(batch) == rd.b.rawChunk {
				work <- batch
				batch = nil
			}
		}
	}
	if len(batch) > 0 {
		work <- batch
	}
	return nil
}

// warmUp runs one dry-run cycle over every partition before the clock
// starts, as in a host that has been running for a while: the RPC
// connection and callback channel are established, and both processes'
// heaps have grown to their working size. A fresh plugin process touches
// each page of its heap for the first time during its first cycles
// (measured in a 100k drain: 7 000 to 9 000 minor page faults in the
// plugin during the timed cycle, 2 000 to 4 000 after this warm-up), a
// cost a long-running plugin pays once. The dry run reads
// the cores (HMGET) and changes nothing, in the store or in the scanner's
// memory: every entry is predicted marked (nothing to remember), and the
// look-ahead reaches every partition's window (no cursor is kept).
func (b *bench) warmUp(ctx context.Context, r *scheduler.Runner, n int) error {
	sum, err := r.Cycle(ctx, scheduler.CycleOptions{DryRun: true})
	if err != nil {
		return err
	}
	if sum.Processed != int64(n) || sum.ErrorTotal() != 0 {
		return fmt.Errorf("dry run predicted %d of %d markings with %d errors", sum.Processed, n, sum.ErrorTotal())
	}
	return nil
}
