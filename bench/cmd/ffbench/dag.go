package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/host/depexec"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/flowtest"
)

// DAG modes.
const (
	dagHostListener  = "listener (host)"
	dagBenchListener = "listener (bench)"
	dagReconciler    = "reconciler only"
)

const (
	reconcilerScanner = "dependency_reconciler"
	reconcilerBinary  = "depreconciler"
)

// dagMode is one way of resolving edges and what it measured.
type dagMode struct {
	Name     string
	Note     string
	Levels   int
	Chains   int
	Parallel bool
	Hops     []time.Duration   // every hop of every chain
	PerLevel [][]time.Duration // PerLevel[i]: hop A(i+1) -> A(i+2)
	Totals   []time.Duration   // per chain: A1 completed -> A(levels) eligible
	Wall     []time.Duration   // per chain: wall clock of the whole chain
	Skipped  string            // why the mode did not run
}

type dagResult struct {
	Modes      []*dagMode
	LoadBefore string
	LoadAfter  string
}

// runDAG measures chains A1 -> ... -> A(levels): a worker claims and
// completes each member as soon as it is eligible, and each hop's latency
// is read from the server's own timestamps: the parent's completed_at
// (ff_complete_execution) and the child's deps_meta
// last_dependency_update_at (the now of the ff_resolve_dependency that
// released it).
func (b *bench) runDAG(ctx context.Context, levels, runs int, offLevels, offChains int) (*dagResult, error) {
	res := &dagResult{LoadBefore: measure.Load()}
	defer func() { res.LoadAfter = measure.Load() }()

	// Listener on: the host's own completion listener when the host binary
	// has one (completions.enabled), else a SUBSCRIBE loop in this process
	// driving sdk/depresolve's Cascade, as the listener does.
	on := &dagMode{Name: dagHostListener, Levels: levels, Chains: runs}
	res.Modes = append(res.Modes, on)
	if err := b.flush(ctx); err != nil {
		return res, err
	}
	h, err := b.startDAGHost(ctx, true)
	if err != nil {
		on.Name = dagBenchListener
		on.Note = fmt.Sprintf("host/completions is not in this host binary (%v); the bench runs its own SUBSCRIBE loop driving sdk/depresolve Cascade instead", err)
		b.logf("dag: %s", on.Note)
		stop, err := b.benchListener(ctx)
		if err != nil {
			return res, err
		}
		err = b.dagChains(ctx, on)
		stop()
		if err != nil {
			return res, err
		}
	} else {
		err = b.dagChains(ctx, on)
		h.Stop()
		if err != nil {
			return res, err
		}
	}

	// Listener off: the dependency_reconciler plugin alone, at its default
	// interval, all chains at once (each hop waits for a cycle).
	off := &dagMode{Name: dagReconciler, Levels: offLevels, Chains: offChains, Parallel: true}
	res.Modes = append(res.Modes, off)
	if _, err := os.Stat(b.pluginDir + "/" + reconcilerBinary); err != nil {
		off.Skipped = "no " + reconcilerBinary + " plugin in " + b.pluginDir
		return res, nil
	}
	if err := b.flush(ctx); err != nil {
		return res, err
	}
	h, err = b.startDAGHost(ctx, false)
	if err != nil {
		off.Skipped = fmt.Sprintf("host with %s did not start: %v", reconcilerScanner, err)
		return res, nil
	}
	defer h.Stop()
	return res, b.dagChains(ctx, off)
}

// startDAGHost runs the host binary with the completion listener
// (listener) or the dependency_reconciler plugin alone (!listener). A
// host that does not know the completions key exits at once with a
// configuration error; the error returned then carries its message.
func (b *bench) startDAGHost(ctx context.Context, listener bool) (*hostproc.Proc, error) {
	start := func(o hostproc.Options) (*hostproc.Proc, error) {
		var out syncBuffer
		if o.Log == nil {
			o.Log = &out
		}
		h, err := hostproc.Start(ctx, o, 20*time.Second)
		if err != nil {
			if msg := strings.TrimSpace(out.String()); msg != "" {
				err = fmt.Errorf("%w: %s", err, strings.ReplaceAll(msg, "\n", " "))
			}
		}
		return h, err
	}
	o := hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir, ValkeyAddr: b.srv.Addr}
	if b.verbose {
		o.Log, o.LogLevel = os.Stderr, "info"
	}
	if listener {
		o.Extra = "completions:\n  enabled: true\n"
		return start(o)
	}
	o.Scanners = []hostproc.Scanner{{Name: reconcilerScanner, Plugin: reconcilerBinary}}
	o.Extra = "completions:\n  enabled: false\n"
	if h, err := start(o); err == nil {
		return h, nil
	}
	// A host without a completion listener does not know the key.
	o.Extra = ""
	return start(o)
}

// syncBuffer collects a child's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.buf)
}

// benchListener subscribes to ff:dag:completions on a dedicated client
// and runs depresolve's Cascade for every message, up to 16 at a time.
func (b *bench) benchListener(ctx context.Context) (stop func(), err error) {
	sub, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{b.srv.Addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return nil, err
	}
	res := depresolve.New(depexec.LibraryExecutor(b.lib), depresolve.Options{})
	lctx, cancel := context.WithCancel(ctx)
	msgs := make(chan string, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(msgs)
		_ = sub.Receive(lctx, sub.B().Subscribe().Channel(keys.DagCompletionsChannel).Build(), func(m valkey.PubSubMessage) {
			msgs <- m.Message
		})
	}()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				c, err := depresolve.ParseCompletion([]byte(m))
				if err != nil {
					b.logf("dag: bad completion message %q: %v", m, err)
					continue
				}
				if _, err := res.Cascade(lctx, c); err != nil && lctx.Err() == nil {
					b.logf("dag: cascade of %s: %v", c.Execution, err)
				}
			}
		}()
	}
	stop = func() { cancel(); wg.Wait(); sub.Close() }
	// Wait until the subscription is in place.
	for i := 0; ; i++ {
		n, err := b.client.Do(ctx, b.client.B().PubsubNumsub().Channel(keys.DagCompletionsChannel).Build()).AsIntMap()
		if err == nil && n[keys.DagCompletionsChannel] > 0 {
			return stop, nil
		}
		if i > 200 {
			stop()
			return nil, errors.New("bench listener did not subscribe")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dagChains builds m.Chains chains and drives them, one after the other or
// all at once, then reads the timestamps.
func (b *bench) dagChains(ctx context.Context, m *dagMode) error {
	cl, err := client.New(ctx, b.client, client.Options{Partitions: b.parts, Library: b.lib, Namespace: "bench"})
	if err != nil {
		return err
	}
	chains := make([][]keys.ExecutionID, m.Chains)
	for i := range chains {
		if chains[i], err = b.buildChain(ctx, cl, m.Levels); err != nil {
			return err
		}
	}
	m.PerLevel = make([][]time.Duration, m.Levels-1)
	// A reconciler hop can take a whole interval (15 s by default) plus
	// the cycle; a listener hop milliseconds.
	hopLimit := 45 * time.Second
	walls := make([]time.Duration, len(chains))
	var failed atomic.Value
	drive := func(i int) {
		t0 := time.Now()
		if err := b.driveChain(ctx, chains[i], hopLimit); err != nil {
			failed.CompareAndSwap(nil, err)
		}
		walls[i] = time.Since(t0)
	}
	if m.Parallel {
		var wg sync.WaitGroup
		for i := range chains {
			wg.Add(1)
			go func() { defer wg.Done(); drive(i) }()
		}
		wg.Wait()
	} else {
		for i := range chains {
			drive(i)
		}
	}
	if err, ok := failed.Load().(error); ok {
		return err
	}
	m.Wall = walls
	for _, ch := range chains {
		hops, err := b.hopLatencies(ctx, ch)
		if err != nil {
			return err
		}
		var total time.Duration
		for j, h := range hops {
			m.Hops = append(m.Hops, h)
			m.PerLevel[j] = append(m.PerLevel[j], h)
			total += h
		}
		m.Totals = append(m.Totals, total)
	}
	b.logf("dag: %s: hops %s", m.Name, measure.Distribution(m.Hops))
	return nil
}

// buildChain creates a flow with levels members and the edges
// A1 -> A2 -> ... with the producer client.
func (b *bench) buildChain(ctx context.Context, cl *client.Client, levels int) ([]keys.ExecutionID, error) {
	f, err := cl.CreateFlow(ctx, client.CreateFlowRequest{})
	if err != nil {
		return nil, err
	}
	ids := make([]keys.ExecutionID, levels)
	for i := range ids {
		r, err := cl.CreateExecution(ctx, client.CreateRequest{Flow: &f.ID, Lane: "default", Kind: "bench-dag"})
		if err != nil {
			return nil, err
		}
		ids[i] = r.ID
		if i > 0 {
			if _, err := cl.AddDependency(ctx, client.DependencyRequest{Flow: f.ID, Upstream: ids[i-1], Downstream: ids[i]}); err != nil {
				return nil, err
			}
		}
	}
	return ids, nil
}

// driveChain plays the worker: wait until the next member is eligible
// (polled every millisecond), claim it, complete it.
func (b *bench) driveChain(ctx context.Context, ids []keys.ExecutionID, hopLimit time.Duration) error {
	for _, id := range ids {
		deadline := time.Now().Add(hopLimit)
		for {
			st, err := b.client.Do(ctx, b.client.B().Hget().Key(keys.Exec(id).Core()).Field("eligibility_state").Build()).ToString()
			if err != nil {
				return err
			}
			if st == "eligible_now" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s still %s after %s", id, st, hopLimit)
			}
			time.Sleep(time.Millisecond)
		}
		if err := flowtest.Succeed(ctx, b.lib, id, nil); err != nil {
			return err
		}
	}
	return nil
}

// hopLatencies reads completed_at of each parent and the release time of
// each child.
func (b *bench) hopLatencies(ctx context.Context, ids []keys.ExecutionID) ([]time.Duration, error) {
	var cmds valkey.Commands
	for i := range ids {
		cmds = append(cmds, b.client.B().Hget().Key(keys.Exec(ids[i]).Core()).Field("completed_at").Build(),
			b.client.B().Hget().Key(keys.Exec(ids[i]).DepsMeta()).Field("last_dependency_update_at").Build())
	}
	rs := b.client.DoMulti(ctx, cmds...)
	completed := make([]int64, len(ids))
	released := make([]int64, len(ids))
	for i := range ids {
		c, err := rs[2*i].ToString()
		if err != nil {
			return nil, fmt.Errorf("completed_at of %s: %w", ids[i], err)
		}
		completed[i], _ = strconv.ParseInt(c, 10, 64)
		if i > 0 {
			r, err := rs[2*i+1].ToString()
			if err != nil {
				return nil, fmt.Errorf("release time of %s: %w", ids[i], err)
			}
			released[i], _ = strconv.ParseInt(r, 10, 64)
		}
	}
	hops := make([]time.Duration, len(ids)-1)
	for i := 1; i < len(ids); i++ {
		hops[i-1] = time.Duration(released[i]-completed[i-1]) * time.Millisecond
	}
	return hops, nil
}

func (r *dagResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("4. DAG LATENCY: chains A1->...->An; a worker completes each member as soon as it is eligible;")
	p("   hop = parent completed_at -> child released (deps_meta last_dependency_update_at), server ms; load %s -> %s",
		r.LoadBefore, r.LoadAfter)
	for _, m := range r.Modes {
		how := "one after the other"
		if m.Parallel {
			how = "all at once"
		}
		if m.Skipped != "" {
			p("   %s: not run (%s)", m.Name, m.Skipped)
			continue
		}
		p("   %s: %d chains of %d levels, %s", m.Name, m.Chains, m.Levels, how)
		if m.Note != "" {
			p("     note: %s", m.Note)
		}
		p("     per hop: %s", measure.Distribution(m.Hops))
		p("     total (sum of %d hops): %s", m.Levels-1, measure.Distribution(m.Totals))
		p("     chain wall clock (worker polling and claims included): %s", measure.Distribution(m.Wall))
		line := "     per-level p50:"
		for i, l := range m.PerLevel {
			line += fmt.Sprintf(" A%d>A%d %s", i+1, i+2, strconv.FormatInt(measure.Distribution(l).P50.Milliseconds(), 10))
		}
		p("%s (ms)", line)
	}
}
