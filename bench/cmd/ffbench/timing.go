package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/bench/seed"
	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// The "timing" benchmark (issue 34) runs the real host binary twice for
// each measurement, side by side in one run: in polling mode (the
// interval sweep alone, scheduler.wakeups false, key_events off), and with
// due-time wake-ups and new-key events on (the defaults, the host allowed
// to set notify-keyspace-events).

// timingMode is one way of running the host.
type timingMode struct {
	Name  string
	Extra string // YAML appended to the host's config
}

// allTimingModes are the modes -timing-modes picks from: polling and
// due-time (both features, the defaults) are the side-by-side pair; the
// other two take the features apart.
var allTimingModes = []timingMode{
	{"polling", "scheduler:\n  wakeups: false\nkey_events:\n  mode: \"off\"\n"},
	{"due-time", "scheduler:\n  wakeups: true\nkey_events:\n  mode: auto\n  configure: true\n"},
	{"wakeups-only", "scheduler:\n  wakeups: true\nkey_events:\n  mode: \"off\"\n"},
	{"events-only", "scheduler:\n  wakeups: false\nkey_events:\n  mode: auto\n  configure: true\n"},
}

// pickTimingModes returns the named modes, in the order given.
func pickTimingModes(names []string) ([]timingMode, error) {
	var out []timingMode
	for _, n := range names {
		i := slices.IndexFunc(allTimingModes, func(m timingMode) bool { return m.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("-timing-modes: no mode %q (polling, due-time, wakeups-only, events-only)", n)
		}
		out = append(out, allTimingModes[i])
	}
	if len(out) == 0 {
		return nil, errors.New("-timing-modes: no mode given")
	}
	return out, nil
}

// latencyRun is one mode's distribution of due -> handled.
type latencyRun struct {
	Mode     string
	Items    int
	Latency  measure.Dist
	Unmarked int
	Load     string
}

// timingDrain is one mode's drain of expired leases.
type timingDrain struct {
	Mode   string
	Leases int
	Span   time.Duration // first marking to last (server stamps)
	Load   string
}

// timingIdle is one mode's idle cost on one target.
type timingIdle struct {
	Target, Mode string
	Window       time.Duration
	Commands     int64
	ByCommand    map[string]int64
	EventsOn     bool
}

type timingResult struct {
	Interval        time.Duration // lease_expiry's
	PromoteInterval time.Duration // delayed_promoter's
	Lead, Spread    time.Duration // reclaim: first TTL, spread of the TTLs
	Reclaim         []latencyRun
	Promote         []latencyRun
	Deadline        []latencyRun // due -> expired, execution_deadline at its default interval
	Attempt         []latencyRun // attempt timeout -> expired, attempt_timeout at its default interval
	Drain           []timingDrain
	Idle            []timingIdle
	Notes           []string
}

// runTiming runs the timing benchmark: the latency measures, the drain
// and the idle cost, each in every mode (-timing picks the measures,
// -timing-modes the modes).
func (b *bench) runTiming(ctx context.Context, sz sizes) (*timingResult, error) {
	res := &timingResult{Interval: leaseexpiry.DefaultInterval, PromoteInterval: 750 * time.Millisecond,
		Lead: 2 * leaseexpiry.DefaultInterval, Spread: 3 * time.Second}
	reclaimN, dueN := 2000, 500
	if sz.DrainLeases < fullSizes.DrainLeases {
		reclaimN, dueN = 500, 100
	}
	latencies := []struct {
		part string
		into *[]latencyRun
		run  func(timingMode) (latencyRun, error)
	}{
		{"reclaim", &res.Reclaim, func(m timingMode) (latencyRun, error) {
			return b.timedReclaim(ctx, m, reclaimN, res.Lead, res.Spread)
		}},
		{"promote", &res.Promote, func(m timingMode) (latencyRun, error) { return b.timedPromote(ctx, m, dueN) }},
		{"deadline", &res.Deadline, func(m timingMode) (latencyRun, error) { return b.timedDeadline(ctx, m, dueN) }},
		{"attempt", &res.Attempt, func(m timingMode) (latencyRun, error) { return b.timedAttemptTimeout(ctx, m, dueN) }},
	}
	for _, l := range latencies {
		if !slices.Contains(b.timingParts, l.part) {
			continue
		}
		for _, m := range b.timingModes {
			run, err := l.run(m)
			if err != nil {
				return res, fmt.Errorf("%s, %s: %w", l.part, m.Name, err)
			}
			*l.into = append(*l.into, run)
		}
	}
	if slices.Contains(b.timingParts, "drain") {
		if err := b.timedDrains(ctx, sz, res); err != nil {
			return res, err
		}
	}
	if slices.Contains(b.timingParts, "idle") {
		return res, b.timedIdle(ctx, sz, res)
	}
	return res, nil
}

// timedDrains runs the drain in every mode, sz.DrainReps times each: a
// backlog of expired leases planted before the host starts, so that the
// drain measures the host alone (planted while it runs, the span would
// include the planting). The modes alternate rep by rep, so that a change
// in the machine's load falls on all of them.
func (b *bench) timedDrains(ctx context.Context, sz sizes, res *timingResult) error {
	for rep := range max(sz.DrainReps, 1) {
		for _, m := range b.timingModes {
			if err := b.flush(ctx); err != nil {
				return err
			}
			run, err := b.drainLeases(ctx, drainSetup{target: "single node, " + m.Name, client: b.client, lib: b.lib,
				addrs: []string{b.srv.Addr}, n: sz.DrainLeases, extra: m.Extra, backlog: true})
			if err != nil {
				return fmt.Errorf("drain %d, %s: %w", rep+1, m.Name, err)
			}
			res.Drain = append(res.Drain, timingDrain{Mode: m.Name, Leases: run.Leases, Span: run.Drain, Load: measure.Load()})
		}
	}
	return nil
}

// timedIdle measures the idle cost in every mode on the bench's server,
// then on a fresh 3-master cluster.
func (b *bench) timedIdle(ctx context.Context, sz sizes, res *timingResult) error {
	for _, m := range b.timingModes {
		if err := b.flush(ctx); err != nil {
			return err
		}
		run, err := b.timedIdleSingle(ctx, m, sz.Idle)
		if err != nil {
			return fmt.Errorf("idle on one node, %s: %w", m.Name, err)
		}
		res.Idle = append(res.Idle, run)
	}
	runs, err := b.timedIdleCluster(ctx, sz.Idle)
	res.Idle = append(res.Idle, runs...)
	if err != nil {
		return fmt.Errorf("idle on the cluster: %w", err)
	}
	return nil
}

// startTimingHost runs the host binary with the given scanners in mode m
// against the store at addrs (a cluster when more than one).
func (b *bench) startTimingHost(ctx context.Context, m timingMode, addrs []string, scanners []hostproc.Scanner) (*hostproc.Proc, error) {
	level := "warn"
	if b.verbose {
		level = "info"
	}
	return hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir, ValkeyAddr: addrs[0], Cluster: len(addrs) > 1,
		Scanners: scanners, LogLevel: level, Log: io.Writer(os.Stderr), Extra: m.Extra}, 60*time.Second)
}

// timedReclaim claims n leases whose TTLs run from lead to lead+spread
// (every one claimed at least one interval before it expires), waits until
// the host marked them all and returns expiry -> marked, by the stamps the
// library writes (lease_expires_at, lease_expired_at).
func (b *bench) timedReclaim(ctx context.Context, m timingMode, n int, lead, spread time.Duration) (latencyRun, error) {
	run := latencyRun{Mode: m.Name, Items: n}
	if err := b.flush(ctx); err != nil {
		return run, err
	}
	s := seed.New(b.lib, b.parts)
	ids := s.IDs(n)
	if err := s.Prepare(ctx, ids); err != nil {
		return run, err
	}
	h, err := b.startTimingHost(ctx, m, []string{b.srv.Addr}, []hostproc.Scanner{{Name: leaseexpiry.Name, Plugin: "leaseexpiry"}})
	if err != nil {
		return run, err
	}
	defer h.Stop()
	time.Sleep(2 * leaseexpiry.DefaultInterval) // past the first cycles
	if err := s.Claim(ctx, ids, func(i int) time.Duration { return lead + time.Duration(int64(spread)*int64(i)/int64(n)) }); err != nil {
		return run, err
	}
	limit := lead + spread + 10*leaseexpiry.DefaultInterval
	if err := waitUntil(ctx, limit, func() (bool, error) {
		left, err := countNot(ctx, b.client, ids, "ownership_state", "lease_expired_reclaimable")
		return left == 0, err
	}); err != nil {
		return run, err
	}
	run.Latency, run.Unmarked, err = stampLatency(ctx, b.client, ids, "lease_expires_at", "lease_expired_at")
	run.Load = measure.Load()
	b.logf("timing: reclaim, %s: %s", m.Name, run.Latency)
	return run, err
}

// timedPromote creates n delayed executions due 2 to 3 s after the first
// was created (each created at least one delayed_promoter interval before
// it is due), waits until the host promoted them all and returns due ->
// promoted (delay_until, read back at once, and the promotion's
// last_transition_at).
func (b *bench) timedPromote(ctx context.Context, m timingMode, n int) (latencyRun, error) {
	return b.timedDue(ctx, m, n, dueRun{
		scanner: "delayed_promoter", what: "due -> promoted",
		create: func(due time.Time) client.CreateRequest {
			return client.CreateRequest{Lane: seed.DefaultLane, Kind: "probe", DelayUntil: due}
		},
		pending: func(ids []keys.ExecutionID) (int, error) {
			return countIs(ctx, b.client, ids, "public_state", "delayed")
		},
	})
}

// timedDeadline creates n executions whose deadline passes 2 to 3 s after
// the first was created (none claimed), waits until the host expired them
// all (execution_deadline at its default interval) and returns deadline ->
// expired (the deadline given, and the expiry's last_transition_at).
func (b *bench) timedDeadline(ctx context.Context, m timingMode, n int) (latencyRun, error) {
	return b.timedDue(ctx, m, n, dueRun{
		scanner: "execution_deadline", what: "deadline -> expired",
		create: func(due time.Time) client.CreateRequest {
			return client.CreateRequest{Lane: seed.DefaultLane, Kind: "probe", Deadline: due}
		},
		pending: func(ids []keys.ExecutionID) (int, error) {
			return countNot(ctx, b.client, ids, "lifecycle_phase", "terminal")
		},
	})
}

// attemptTimeoutInterval is attempt_timeout's default interval
// (scanners.md 7.2).
const attemptTimeoutInterval = 2 * time.Second

// timedAttemptTimeout claims n executions, each with a lease far longer
// than the run and an attempt timeout of 3 to 4 s (at least one
// attempt_timeout interval ahead once every claim is made; the bench
// refuses to go on otherwise), waits until the host expired them all
// (attempt_timeout at its default interval) and returns timeout ->
// expired: the execution's score in its partition's attempt_timeout index,
// read back after the claims, to the expiry's last_transition_at.
func (b *bench) timedAttemptTimeout(ctx context.Context, m timingMode, n int) (latencyRun, error) {
	run := latencyRun{Mode: m.Name, Items: n}
	if err := b.flush(ctx); err != nil {
		return run, err
	}
	s := seed.New(b.lib, b.parts)
	ids := s.IDs(n)
	if err := s.Prepare(ctx, ids); err != nil {
		return run, err
	}
	h, err := b.startTimingHost(ctx, m, []string{b.srv.Addr}, []hostproc.Scanner{{Name: "attempt_timeout"}})
	if err != nil {
		return run, err
	}
	defer h.Stop()
	time.Sleep(attemptTimeoutInterval) // past the first cycles
	lead := attemptTimeoutInterval + time.Second
	if err := s.ClaimTimed(ctx, ids, 10*time.Minute, func(i int) time.Duration {
		return lead + time.Duration(int64(time.Second)*int64(i)/int64(n))
	}); err != nil {
		return run, err
	}
	dues, err := attemptTimeoutDues(ctx, b.client, ids)
	if err != nil {
		return run, err
	}
	now, err := serverMs(ctx, b.client)
	if err != nil {
		return run, err
	}
	if first := slices.Min(dues); first-now < attemptTimeoutInterval.Milliseconds() {
		return run, fmt.Errorf("claiming took too long: the first attempt times out %d ms after the last claim, less than one interval", first-now)
	}
	if err := waitUntil(ctx, time.Minute, func() (bool, error) {
		left, err := countNot(ctx, b.client, ids, "lifecycle_phase", "terminal")
		return left == 0, err
	}); err != nil {
		return run, err
	}
	run.Latency, run.Unmarked, err = latencyFrom(ctx, b.client, ids, dues, "last_transition_at")
	run.Load = measure.Load()
	b.logf("timing: attempt timeout -> expired, %s: %s", m.Name, run.Latency)
	return run, err
}

// attemptTimeoutDues reads each execution's score in its partition's
// attempt_timeout index (the instant its attempt times out), pipelined.
func attemptTimeoutDues(ctx context.Context, c valkey.Client, ids []keys.ExecutionID) ([]int64, error) {
	cmds := make(valkey.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = c.B().Zscore().Key(keys.FlowPart(id.Partition()).AttemptTimeout()).Member(id.String()).Build()
	}
	dues := make([]int64, len(ids))
	for i, r := range c.DoMulti(ctx, cmds...) {
		f, err := r.AsFloat64()
		if err != nil {
			return nil, fmt.Errorf("attempt_timeout score of %s: %w", ids[i], err)
		}
		dues[i] = int64(f)
	}
	return dues, nil
}

// serverMs is the server's clock (TIME) in Unix milliseconds.
func serverMs(ctx context.Context, c valkey.Client) (int64, error) {
	tm, err := c.Do(ctx, c.B().Time().Build()).AsIntSlice()
	if err != nil || len(tm) != 2 {
		return 0, fmt.Errorf("TIME: %v %w", tm, err)
	}
	return tm[0]*1000 + tm[1]/1000, nil
}

// latencyFrom returns the distribution of the core's field (a millisecond
// stamp) minus dues[i] over the executions, and how many lack the field.
func latencyFrom(ctx context.Context, c valkey.Client, ids []keys.ExecutionID, dues []int64, field string) (measure.Dist, int, error) {
	done, err := seed.Fields(ctx, c, ids, field)
	if err != nil {
		return measure.Dist{}, 0, err
	}
	var lat []time.Duration
	missing := 0
	for i := range ids {
		p, err := strconv.ParseInt(done[i][0], 10, 64)
		if err != nil {
			missing++
			continue
		}
		lat = append(lat, time.Duration(p-dues[i])*time.Millisecond)
	}
	return measure.Distribution(lat), missing, nil
}

// dueRun is one due-time measure: the scanner that acts, the executions
// it acts on (due at the instant given) and how many are still to do.
type dueRun struct {
	scanner, what string
	create        func(due time.Time) client.CreateRequest
	pending       func(ids []keys.ExecutionID) (int, error)
}

// timedDue creates n executions due 2 to 3 s after the first was created
// (each at least 750 ms before it is due), waits until the host acted on
// them all and returns due -> acted: the due instant given, to the core's
// last_transition_at.
func (b *bench) timedDue(ctx context.Context, m timingMode, n int, d dueRun) (latencyRun, error) {
	run := latencyRun{Mode: m.Name, Items: n}
	if err := b.flush(ctx); err != nil {
		return run, err
	}
	if _, err := b.recordLanes(ctx, 1); err != nil {
		return run, err
	}
	h, err := b.startTimingHost(ctx, m, []string{b.srv.Addr}, []hostproc.Scanner{{Name: d.scanner}})
	if err != nil {
		return run, err
	}
	defer h.Stop()
	time.Sleep(2 * time.Second) // past the first cycles
	cl, err := client.New(ctx, b.client, client.Options{Partitions: b.parts, Library: b.lib, Namespace: "bench"})
	if err != nil {
		return run, err
	}
	base := time.Now().Add(2 * time.Second)
	ids := make([]keys.ExecutionID, 0, n)
	dues := make([]int64, 0, n)
	for i := range n {
		due := base.Add(time.Duration(int64(time.Second) * int64(i) / int64(n))).Truncate(time.Millisecond)
		if time.Until(due) < 750*time.Millisecond {
			return run, fmt.Errorf("creating the executions took too long: execution %d of %d is due in %s", i, n, time.Until(due))
		}
		r, err := cl.CreateExecution(ctx, d.create(due))
		if err != nil {
			return run, err
		}
		ids, dues = append(ids, r.ID), append(dues, due.UnixMilli())
	}
	if err := waitUntil(ctx, time.Minute, func() (bool, error) {
		left, err := d.pending(ids)
		return left == 0, err
	}); err != nil {
		return run, err
	}
	run.Latency, run.Unmarked, err = latencyFrom(ctx, b.client, ids, dues, "last_transition_at")
	run.Load = measure.Load()
	b.logf("timing: %s, %s: %s", d.what, m.Name, run.Latency)
	return run, err
}

// timedIdleSingle measures the idle cost of all seventeen scanners on the
// bench's server in mode m.
func (b *bench) timedIdleSingle(ctx context.Context, m timingMode, window time.Duration) (_ timingIdle, err error) {
	run := timingIdle{Target: "one node", Mode: m.Name}
	h, err := b.startTimingHost(ctx, m, []string{b.srv.Addr}, allScanners())
	if err != nil {
		return run, err
	}
	defer h.Stop()
	b.disconnect()
	defer func() {
		if rerr := b.connect(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	return b.idleWindow(ctx, h, run, []string{b.srv.Addr}, window)
}

// timedIdleCluster measures the idle cost of all seventeen scanners on a
// fresh 3-master cluster, in both modes.
func (b *bench) timedIdleCluster(ctx context.Context, window time.Duration) ([]timingIdle, error) {
	cl, err := testserver.StartCluster(3)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		return nil, err
	}
	lib := lua.New(c, lua.Options{})
	if _, err := lib.Ensure(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if _, _, err := boot.EnsurePartitions(ctx, c, b.parts); err != nil {
		c.Close()
		return nil, err
	}
	c.Close() // its keep-alive would count
	var out []timingIdle
	for _, m := range b.timingModes {
		h, err := b.startTimingHost(ctx, m, cl.Addrs(), allScanners())
		if err != nil {
			return out, err
		}
		run, err := b.idleWindow(ctx, h, timingIdle{Target: "3-master cluster", Mode: m.Name}, cl.Addrs(), window)
		h.Stop()
		if err != nil {
			return out, err
		}
		out = append(out, run)
	}
	return out, nil
}

func allScanners() []hostproc.Scanner {
	var out []hostproc.Scanner
	for _, s := range ffScanners {
		out = append(out, hostproc.Scanner{Name: s.name})
	}
	return out
}

// idleWindow lets the host's start-up pass, then counts the commands the
// servers at addrs ran over window (INFO, the bench's own, left out).
func (b *bench) idleWindow(ctx context.Context, h *hostproc.Proc, run timingIdle, addrs []string, window time.Duration) (timingIdle, error) {
	// Start-up passes first: boot, lane discovery, and every scanner's
	// first sweep (a scanner's first sweep reads every partition; those
	// of the long intervals, 45 to 60 s, would land in the window).
	if err := pollUntil(ctx, 3*time.Minute, time.Second, func() (bool, error) {
		doc, err := h.Status(ctx)
		if err != nil {
			return false, err
		}
		for _, s := range doc.Scanners {
			if s.Cycle < 1 {
				return false, nil
			}
		}
		run.EventsOn = doc.KeyEvents != nil && doc.KeyEvents.On
		return len(doc.Scanners) == len(ffScanners), nil
	}); err != nil {
		return run, fmt.Errorf("%s, %s: waiting for every scanner's first sweep: %w", run.Target, run.Mode, err)
	}
	time.Sleep(2 * time.Second)
	if strings.Contains(timingModeExtra(run.Mode), "auto") && !run.EventsOn {
		return run, fmt.Errorf("%s, %s: the new-key events are not on", run.Target, run.Mode)
	}
	count := func() (map[string]int64, error) {
		sum := map[string]int64{}
		for _, a := range addrs {
			info, err := measure.RawInfo(a, "commandstats")
			if err != nil {
				return nil, err
			}
			for k, v := range measure.ParseCommandStats(info) {
				sum[k] += v
			}
		}
		return sum, nil
	}
	c0, err := count()
	if err != nil {
		return run, err
	}
	t0 := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return run, ctx.Err()
	}
	c1, err := count()
	if err != nil {
		return run, err
	}
	run.Window = time.Since(t0)
	run.ByCommand = map[string]int64{}
	for k, v := range c1 {
		if k == "info" {
			continue
		}
		if d := v - c0[k]; d > 0 {
			run.ByCommand[k] = d
			run.Commands += d
		}
	}
	b.logf("timing: idle, %s, %s: %.1f commands/s", run.Target, run.Mode, run.rate())
	return run, nil
}

func timingModeExtra(name string) string {
	for _, m := range allTimingModes {
		if m.Name == name {
			return m.Extra
		}
	}
	return ""
}

func (r timingIdle) rate() float64 { return float64(r.Commands) / r.Window.Seconds() }

// waitUntil polls done every 20 ms for at most limit.
func waitUntil(ctx context.Context, limit time.Duration, done func() (bool, error)) error {
	return pollUntil(ctx, limit, 20*time.Millisecond, done)
}

// pollUntil polls done every period for at most limit.
func pollUntil(ctx context.Context, limit, period time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", limit)
		}
		select {
		case <-time.After(period):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// countNot counts the executions whose field is not want; countIs those
// whose field is want.
func countNot(ctx context.Context, c valkey.Client, ids []keys.ExecutionID, field, want string) (int, error) {
	n, err := countIs(ctx, c, ids, field, want)
	return len(ids) - n, err
}

func countIs(ctx context.Context, c valkey.Client, ids []keys.ExecutionID, field, want string) (int, error) {
	vals, err := seed.Fields(ctx, c, ids, field)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range vals {
		if v[0] == want {
			n++
		}
	}
	return n, nil
}

// stampLatency returns the distribution of to - from over the executions
// (millisecond stamps in their core), and how many lack either.
func stampLatency(ctx context.Context, c valkey.Client, ids []keys.ExecutionID, from, to string) (measure.Dist, int, error) {
	vals, err := seed.Fields(ctx, c, ids, from, to)
	if err != nil {
		return measure.Dist{}, 0, err
	}
	var lat []time.Duration
	missing := 0
	for _, v := range vals {
		a, err1 := strconv.ParseInt(v[0], 10, 64)
		z, err2 := strconv.ParseInt(v[1], 10, 64)
		if err1 != nil || err2 != nil {
			missing++
			continue
		}
		lat = append(lat, time.Duration(z-a)*time.Millisecond)
	}
	return measure.Distribution(lat), missing, nil
}

func (r *timingResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("11. TIMING (issue 34): the host binary in polling mode (scheduler.wakeups false, key_events off)")
	p("    and with due-time wake-ups and new-key events (the defaults), side by side")
	sections := []struct {
		title, noun, missing string
		runs                 []latencyRun
	}{
		{fmt.Sprintf("reclaim: leases claimed %s..%s before they expire, lease_expiry at its %s interval; expiry -> marked", r.Lead, r.Lead+r.Spread, r.Interval),
			"leases", "unmarked", r.Reclaim},
		{fmt.Sprintf("due -> promoted: delayed executions created >= one interval before they are due, delayed_promoter at %s", r.PromoteInterval),
			"executions", "unpromoted", r.Promote},
		{"deadline -> expired: executions created >= 750 ms before their deadline, never claimed, execution_deadline at its default interval",
			"executions", "unexpired", r.Deadline},
		{fmt.Sprintf("attempt timeout -> expired: executions claimed >= one interval before their attempt times out, attempt_timeout at %s", attemptTimeoutInterval),
			"executions", "unexpired", r.Attempt},
	}
	for _, sec := range sections {
		if len(sec.runs) > 0 {
			printLatencies(p, sec.title, sec.noun, sec.missing, sec.runs)
		}
	}
	printDrains(p, r.Drain)
	printIdle(p, r.Idle)
	for _, n := range r.Notes {
		p("   %s", n)
	}
}

// median is the middle value of xs (the mean of the two middle ones for an
// even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// printLatencies prints one latency measure: each mode's distribution,
// and the due-time mode's verdict against the 100 ms target.
func printLatencies(p func(string, ...any), title, noun, missing string, runs []latencyRun) {
	p("   %s", title)
	for _, run := range runs {
		p("     %-9s %5d %s: %s; %s %d; load %s", run.Mode, run.Items, noun, run.Latency, missing, run.Unmarked, run.Load)
	}
	for _, d := range runs {
		if d.Mode == "due-time" {
			p("     due-time p99 %s (target <= 100 ms: %s)", measure.Ms(d.Latency.P99), verdict(d.Unmarked == 0 && d.Latency.P99 <= 100*time.Millisecond))
		}
	}
}

// printDrains prints the drains, run by run, and each mode's throughput
// against polling's (the ratio of the medians).
func printDrains(p func(string, ...any), drains []timingDrain) {
	if len(drains) == 0 {
		return
	}
	p("   drain: a backlog of expired leases planted before the host starts, marked by it (lease_expiry at %s), first marking to last", clusterInterval)
	rates := map[string][]float64{}
	for _, d := range drains {
		rate := float64(d.Leases) / d.Span.Seconds()
		rates[d.Mode] = append(rates[d.Mode], rate)
		p("     %-9s %7d leases in %8s = %8.0f/s; load %s", d.Mode, d.Leases, d.Span.Round(time.Millisecond), rate, d.Load)
	}
	for _, mode := range []string{"due-time", "wakeups-only", "events-only"} {
		poll, other := rates["polling"], rates[mode]
		if len(poll) == 0 || len(poll) != len(other) {
			continue
		}
		var each []string
		for i := range poll {
			each = append(each, fmt.Sprintf("%.2f", other[i]/poll[i]))
		}
		p("     %s/polling throughput %.2f (median of %d runs each; run by run %s)", mode, median(other)/median(poll), len(poll), strings.Join(each, ", "))
	}
}

// printIdle prints the idle runs with their commands, and the verdicts
// against the targets.
func printIdle(p func(string, ...any), runs []timingIdle) {
	if len(runs) == 0 {
		return
	}
	p("   idle: all %d scanners at their default intervals, %d empty flow partitions", len(ffScanners), 256)
	for _, run := range runs {
		var names []string
		for k := range run.ByCommand {
			names = append(names, k)
		}
		sort.Slice(names, func(i, j int) bool { return run.ByCommand[names[i]] > run.ByCommand[names[j]] })
		var parts []string
		for _, k := range names {
			parts = append(parts, fmt.Sprintf("%s %.1f", strings.ToUpper(k), float64(run.ByCommand[k])/run.Window.Seconds()))
		}
		p("     %-16s %-9s %7.1f commands/s over %s (events on: %v) (%s)", run.Target, run.Mode, run.rate(),
			run.Window.Round(100*time.Millisecond), run.EventsOn, strings.Join(parts, ", "))
	}
	for _, run := range runs {
		if run.Target == "3-master cluster" && run.Mode == "due-time" {
			p("     cluster, events on: %.1f commands/s (target <= 100: %s)", run.rate(), verdict(run.rate() <= 100))
		}
	}
	var one [2]float64
	for _, run := range runs {
		if run.Target == "one node" {
			switch run.Mode {
			case "polling":
				one[0] = run.rate()
			case "due-time":
				one[1] = run.rate()
			}
		}
	}
	if one[0] > 0 && one[1] > 0 {
		p("     one node: due-time %.1f vs polling %.1f commands/s (target no higher: %s)", one[1], one[0], verdict(one[1] <= one[0]))
	}
}
