// Package scheduler drives one scanner: each interval it reads Valkey's
// clock once, fetches the candidates of every partition of the scanner's
// family in pipelined batches (with the backlog counts in the same
// pipeline), calls ScanPartition only for partitions that have candidates,
// with bounded concurrency and a deadline per call, rescans promptly the
// partitions that report more work, and records what happened.
//
// Compared with FlowFabric's runner (one TIME and one range read per
// partition, sequential, no jitter), an idle sweep of 256 partitions costs
// one TIME and a couple of pipelines instead of 512 round trips, and zero
// plugin calls.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Target yields the scanner to call. The supervisor implements it: the
// scanner behind it changes when a plugin restarts, and is unavailable
// while it restarts.
type Target interface {
	Current() (scannerapi.Scanner, scannerapi.Info, error)
}

// Lease is one call's hold on a scanner instance (see Acquirer).
type Lease struct {
	Scanner scannerapi.Scanner
	Info    scannerapi.Info
	// Host is the instance's own Host; nil means the runner's.
	Host scannerapi.Host
	// Release ends the lease once the call returned; nil is allowed.
	Release func()
}

// Acquirer is a Target that hands out the scanner per call instead of per
// cycle. The host's supervisors implement it, so that a hot swap switches
// between two partition calls of a cycle and the old plugin only has to
// finish the calls it already has.
type Acquirer interface {
	Target
	Acquire() (Lease, error)
}

// Recorder receives metrics (host/metrics implements it).
type Recorder interface {
	Cycle(scanner string, d time.Duration)
	Items(scanner string, processed, skipped int64)
	Errors(scanner string, class scannerapi.ErrorClass, code string, n int64)
	Partitions(scanner, outcome string, n int)
	Backlog(scanner string, v int64)
	Lag(scanner string, d time.Duration)
	RPC(scanner, method string, d time.Duration)
}

// Config tunes one scanner's runner.
type Config struct {
	// Name is the scanner name (metric label, request field).
	Name string
	// Interval overrides Info.DefaultInterval when non-zero.
	Interval time.Duration
	// Batch overrides Info.DefaultBatch when non-zero.
	Batch int
	// Partitions are the deployment's partition counts.
	Partitions keys.PartitionConfig
	// Lanes expand "{lane}" sources.
	Lanes []string
	// LanesFunc, when set, is asked for the lanes at every cycle instead
	// (the host refreshes them from ff:idx:lanes as producers add lanes).
	LanesFunc func() []string
	// Concurrency bounds concurrent ScanPartition calls (default 8).
	Concurrency int
	// CallTimeout is the deadline of one plugin call (default 5s).
	CallTimeout time.Duration
	// CallParent is the parent of every plugin call's context; the host
	// cancels it at the shutdown deadline. Calls do not derive from Run's
	// context, so that stopping dispatch does not abort scans in flight.
	// Nil means context.Background().
	CallParent context.Context
	// MaxFollowUps bounds the prompt rescans of partitions that report
	// More within one cycle (default 8), so a scanner that always says
	// More cannot starve the sleep.
	MaxFollowUps int
	// NoJitter starts the first cycle at once instead of after a random
	// delay within the interval (tests, scan-once).
	NoJitter bool
}

// Tuning is the part of Config that can change while the runner runs
// (a configuration reload). Interval and Batch apply from the next cycle,
// Concurrency and CallTimeout from the next call.
type Tuning struct {
	Interval    time.Duration
	Batch       int
	Concurrency int
	CallTimeout time.Duration
}

// Runner runs one scanner. Its methods are safe for concurrent use; Run
// and Cycle must not overlap.
type Runner struct {
	cfg    Config
	tunMu  sync.Mutex
	tun    Tuning
	wake   chan struct{} // Retune wakes Run's sleep
	client valkey.Client
	target Target
	host   scannerapi.Host
	rec    Recorder
	log    hclog.Logger

	cycle uint64 // cycles started; owned by the Run/Cycle goroutine

	curMu   sync.Mutex
	cursors map[string]uint64 // per concrete key: rank offset or SSCAN cursor

	stMu   sync.Mutex
	status Status
}

// Status is the runner's view for /v1/status.
type Status struct {
	Cycle        uint64
	LastCycleAt  time.Time
	LastDuration time.Duration
	Processed    int64
	Skipped      int64
	Errors       int64
	Backlog      int64
	BacklogKnown bool
	LastError    string
	// Failed counts partitions whose fetch or call failed, over all
	// cycles.
	Failed int64
	// CycleErrors counts cycles that could not run at all (scanner
	// unavailable, no server time).
	CycleErrors int64
}

// New returns a runner. host is passed to ScanPartition (a linked scanner
// uses it; a plugin client ignores it and calls back through the broker).
func New(cfg Config, client valkey.Client, target Target, host scannerapi.Host, rec Recorder, log hclog.Logger) *Runner {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	if cfg.MaxFollowUps <= 0 {
		cfg.MaxFollowUps = 8
	}
	if cfg.CallParent == nil {
		cfg.CallParent = context.Background()
	}
	if rec == nil {
		rec = nopRecorder{}
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Runner{
		cfg: cfg, client: client, target: target, host: host, rec: rec, log: log,
		cursors: map[string]uint64{},
		tun:     Tuning{Interval: cfg.Interval, Batch: cfg.Batch, Concurrency: cfg.Concurrency, CallTimeout: cfg.CallTimeout},
		wake:    make(chan struct{}, 1),
	}
}

// Retune changes the runner's tuning while it runs; zero Concurrency and
// CallTimeout keep their defaults. A sleeping runner wakes to re-plan its
// next cycle with the new interval.
func (r *Runner) Retune(t Tuning) {
	if t.Concurrency <= 0 {
		t.Concurrency = 8
	}
	if t.CallTimeout <= 0 {
		t.CallTimeout = 5 * time.Second
	}
	r.tunMu.Lock()
	r.tun = t
	r.tunMu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Tuning returns the current tuning.
func (r *Runner) Tuning() Tuning {
	r.tunMu.Lock()
	defer r.tunMu.Unlock()
	return r.tun
}

// Status returns a snapshot of the runner's counters.
func (r *Runner) Status() Status {
	r.stMu.Lock()
	defer r.stMu.Unlock()
	return r.status
}

func (r *Runner) lanes() []string {
	if r.cfg.LanesFunc != nil {
		return r.cfg.LanesFunc()
	}
	return r.cfg.Lanes
}

func (r *Runner) interval(info scannerapi.Info) time.Duration {
	iv := r.Tuning().Interval
	if iv == 0 {
		iv = info.DefaultInterval
	}
	return max(iv, 100*time.Millisecond)
}

func (r *Runner) batch(info scannerapi.Info) int {
	if b := r.Tuning().Batch; b > 0 {
		return b
	}
	if info.DefaultBatch > 0 {
		return info.DefaultBatch
	}
	return 50
}

// Run sweeps until ctx is done: a random start delay within the interval
// (so scanners started together do not hit partition 0 in step), then one
// cycle, then sleep for the rest of the interval (none if the sweep
// overran). While the plugin is unavailable it polls every 200 ms instead.
func (r *Runner) Run(ctx context.Context) {
	jittered := r.cfg.NoJitter
	for ctx.Err() == nil {
		_, info, err := r.target.Current()
		if err != nil {
			r.log.Debug("scanner unavailable, waiting", "error", err)
			sleep(ctx, unavailablePoll)
			continue
		}
		if !jittered {
			// Once, when the scanner first becomes available: plugins of
			// one host come up at about the same moment.
			jittered = true
			if !sleep(ctx, rand.N(r.interval(info))) {
				return
			}
		}
		start := time.Now()
		sum, err := r.Cycle(ctx, CycleOptions{})
		if err != nil && ctx.Err() == nil {
			r.log.Warn("scan cycle failed", "error", err)
		} else if sum.Processed > 0 || sum.ErrorTotal() > 0 {
			r.log.Info("scan cycle complete", "cycle", sum.Cycle, "scanned", sum.Scanned, "processed", sum.Processed, "errors", sum.ErrorTotal(), "elapsed", sum.Duration)
		} else {
			r.log.Trace("scan cycle complete", "cycle", sum.Cycle, "elapsed", sum.Duration)
		}
		if !r.sleepUntilNext(ctx, start) {
			return
		}
	}
}

// sleepUntilNext sleeps until the next cycle is due: one interval after
// start, re-planned when Retune changes the interval meanwhile.
func (r *Runner) sleepUntilNext(ctx context.Context, start time.Time) bool {
	for {
		iv := r.interval(r.currentInfo())
		d := time.Until(start.Add(iv))
		if d <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
			return true
		case <-r.wake:
			t.Stop()
		}
	}
}

// currentInfo is the scanner's Info for planning, or the zero Info when it
// is unavailable (the interval then falls back to the configured one).
func (r *Runner) currentInfo() scannerapi.Info {
	_, info, err := r.target.Current()
	if err != nil {
		return scannerapi.Info{}
	}
	return info
}

// unavailablePoll is how often Run looks again while the scanner is not
// running (starting, restarting): a mutex check, so it can be short and
// the first cycle follows the plugin's start closely.
const unavailablePoll = 200 * time.Millisecond

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// CycleOptions narrow a cycle (scan-once).
type CycleOptions struct {
	// Partitions limits the cycle to these indexes; nil means all.
	Partitions []uint16
	// DryRun is passed to the scanner in every request.
	DryRun bool
}

// ErrorKey identifies an error count.
type ErrorKey struct {
	Class scannerapi.ErrorClass
	Code  string
}

// Summary is what one cycle did.
type Summary struct {
	Cycle      uint64
	NowMs      int64
	Partitions int // partitions visited
	Scanned    int // ScanPartition calls that succeeded
	Empty      int // partitions skipped with nothing to do
	Failed     int // partitions whose call failed
	// Deferred counts partitions left for the next cycle because a hot
	// swap switched to a scanner whose sources or family differ from
	// those the cycle fetched with.
	Deferred     int
	FollowUps    int // prompt rescans of partitions that said More
	Processed    int64
	Skipped      int64
	Errors       map[ErrorKey]int64
	Backlog      int64
	BacklogKnown bool // every partition was sampled
	Lag          time.Duration
	Duration     time.Duration
	Notes        []string // scanners' notes, prefixed with the partition
}

// ErrorTotal sums all error counts.
func (s *Summary) ErrorTotal() int64 {
	var n int64
	for _, v := range s.Errors {
		n += v
	}
	return n
}

func (s *Summary) addErr(class scannerapi.ErrorClass, code string, n int64) {
	if n > 0 {
		s.Errors[ErrorKey{class, code}] += n
	}
}

// partState is one partition's fetch result.
type partState struct {
	p          keys.Partition
	cands      []scannerapi.Candidate
	next       map[string]uint64 // cursors to commit once the partition is done
	backlog    int64
	sampled    bool // every host-side backlog read succeeded
	oldestDue  float64
	hasDue     bool
	fetchError bool
}

// Cycle runs one sweep and records it in metrics and status. A failure to
// read the clock fails the cycle; failures of single partitions are counted
// in the summary and do not stop the others.
func (r *Runner) Cycle(ctx context.Context, opts CycleOptions) (Summary, error) {
	start := time.Now()
	r.cycle++
	sum := Summary{Cycle: r.cycle, Errors: map[ErrorKey]int64{}}
	scanner, info, err := r.target.Current()
	if err != nil {
		r.cycleError()
		return sum, fmt.Errorf("scanner %s unavailable: %w", r.cfg.Name, err)
	}
	parts, err := r.partitions(info, opts.Partitions)
	if err != nil {
		r.cycleError()
		return sum, err
	}
	sum.Partitions = len(parts)
	batch := r.batch(info)
	lanes := r.lanes()

	nowMs, err := r.serverTime(ctx)
	if err != nil {
		sum.addErr(classify(err), "time", 1)
		r.finish(&sum, start, false)
		r.cycleError()
		return sum, fmt.Errorf("read server TIME: %w", err)
	}
	sum.NowMs = nowMs
	states := r.fetch(ctx, info, parts, lanes, nowMs, batch, &sum)

	// Backlog and lag are only meaningful when every partition of the
	// family was read: a partial sum would under-report (P8).
	complete := opts.Partitions == nil
	var lagMs float64
	for _, st := range states {
		if !st.sampled {
			complete = false
		}
		if st.hasDue {
			lagMs = max(lagMs, float64(nowMs)-st.oldestDue)
		}
	}
	sum.Lag = time.Duration(lagMs * float64(time.Millisecond))

	more, pluginBacklog := r.scanAll(ctx, scanner, info, states, lanes, nowMs, batch, opts.DryRun, false, &sum)
	if opts.DryRun {
		// A dry run changes nothing, so a rescan would see the same batch.
		more = nil
	}
	if !r.backlog(ctx, scanner, info, states, pluginBacklog, &sum) {
		complete = false
	}
	sum.BacklogKnown = complete && hasBacklog(info)

	// Follow-up passes: partitions that said More are refetched and scanned
	// again now rather than an interval later.
	for pass := 0; pass < r.cfg.MaxFollowUps && len(more) > 0 && ctx.Err() == nil; pass++ {
		now2, err := r.serverTime(ctx)
		if err != nil {
			sum.addErr(classify(err), "time", 1)
			break
		}
		sub := r.fetch(ctx, info, more, lanes, now2, batch, &sum)
		sum.FollowUps += len(sub)
		more, _ = r.scanAll(ctx, scanner, info, sub, lanes, now2, batch, opts.DryRun, true, &sum)
	}

	r.finish(&sum, start, opts.Partitions == nil)
	if sum.BacklogKnown {
		r.rec.Backlog(r.cfg.Name, sum.Backlog)
	}
	if complete && hasDueSource(info) {
		r.rec.Lag(r.cfg.Name, sum.Lag)
	}
	return sum, nil
}

// finish records the cycle's metrics and status.
func (r *Runner) finish(sum *Summary, start time.Time, fullCycle bool) {
	sum.Duration = time.Since(start)
	if fullCycle {
		r.rec.Cycle(r.cfg.Name, sum.Duration)
	}
	r.rec.Items(r.cfg.Name, sum.Processed, sum.Skipped)
	for k, n := range sum.Errors {
		r.rec.Errors(r.cfg.Name, k.Class, k.Code, n)
	}
	r.rec.Partitions(r.cfg.Name, "scanned", sum.Scanned)
	r.rec.Partitions(r.cfg.Name, "empty", sum.Empty)
	r.rec.Partitions(r.cfg.Name, "failed", sum.Failed)
	r.stMu.Lock()
	defer r.stMu.Unlock()
	r.status.Cycle = sum.Cycle
	r.status.LastCycleAt = start
	r.status.LastDuration = sum.Duration
	r.status.Processed += sum.Processed
	r.status.Skipped += sum.Skipped
	r.status.Errors += sum.ErrorTotal()
	r.status.Failed += int64(sum.Failed)
	if sum.BacklogKnown {
		r.status.Backlog, r.status.BacklogKnown = sum.Backlog, true
	}
}

func (r *Runner) cycleError() {
	r.stMu.Lock()
	r.status.CycleErrors++
	r.stMu.Unlock()
}

func (r *Runner) partitions(info scannerapi.Info, only []uint16) ([]keys.Partition, error) {
	all := r.cfg.Partitions.Partitions(info.Family)
	if only == nil {
		return all, nil
	}
	out := make([]keys.Partition, 0, len(only))
	for _, i := range only {
		if int(i) >= len(all) {
			return nil, fmt.Errorf("partition %d out of range: family %s has %d partitions", i, info.Family, len(all))
		}
		out = append(out, all[i])
	}
	return out, nil
}

func (r *Runner) serverTime(ctx context.Context) (int64, error) {
	t, err := r.client.Do(ctx, r.client.B().Time().Build()).AsIntSlice()
	if err != nil {
		return 0, err
	}
	if len(t) != 2 {
		return 0, fmt.Errorf("TIME returned %d elements", len(t))
	}
	return t[0]*1000 + t[1]/1000, nil
}

// pipelineChunk bounds the commands of one DoMulti so a large partition
// count does not build one huge pipeline.
const pipelineChunk = 1024

// fetch reads candidates and backlog counts of the given partitions.
func (r *Runner) fetch(ctx context.Context, info scannerapi.Info, parts []keys.Partition, lanes []string, nowMs int64, batch int, sum *Summary) []*partState {
	type slot struct {
		st   *partState
		sk   sourceKey
		kind int // 0 read, 1 backlog
		cur  uint64
	}
	states := make([]*partState, len(parts))
	var cmds valkey.Commands
	var slots []slot
	r.curMu.Lock()
	for i, p := range parts {
		st := &partState{p: p, next: map[string]uint64{}, sampled: true}
		states[i] = st
		for _, sk := range expand(info.Sources, p, lanes) {
			cur := r.cursors[sk.key]
			cmds = append(cmds, readCmd(r.client, sk, nowMs, batch, cur))
			slots = append(slots, slot{st: st, sk: sk, kind: 0, cur: cur})
			if c, ok := backlogCmd(r.client, sk, nowMs); ok {
				cmds = append(cmds, c)
				slots = append(slots, slot{st: st, sk: sk, kind: 1})
			}
		}
	}
	r.curMu.Unlock()

	results := make([]valkey.ValkeyResult, 0, len(cmds))
	for i := 0; i < len(cmds); i += pipelineChunk {
		results = append(results, r.client.DoMulti(ctx, cmds[i:min(i+pipelineChunk, len(cmds))]...)...)
	}
	for i, res := range results {
		s := slots[i]
		st := s.st
		if s.kind == 1 {
			n, err := res.AsInt64()
			if err != nil {
				st.sampled = false
				sum.addErr(classify(err), "backlog", 1)
				continue
			}
			st.backlog += n
			continue
		}
		if err := r.parseRead(res, s.sk, s.cur, batch, st, nowMs); err != nil {
			st.fetchError = true
			st.sampled = false
			sum.addErr(classify(err), "fetch", 1)
			r.log.Debug("candidate fetch failed", "partition", st.p.Tag(), "key", s.sk.key, "error", err)
		}
	}
	return states
}

func (r *Runner) parseRead(res valkey.ValkeyResult, sk sourceKey, cur uint64, batch int, st *partState, nowMs int64) error {
	add := func(member string, score float64) {
		st.cands = append(st.cands, scannerapi.Candidate{Source: sk.src.Name, Key: sk.key, Lane: sk.lane, Member: member, Score: score})
	}
	switch sk.src.Kind {
	case scannerapi.SourceSetScan:
		e, err := res.AsScanEntry()
		if err != nil {
			return err
		}
		for _, m := range e.Elements {
			add(m, 0)
		}
		st.next[sk.key] = e.Cursor // 0 once the scan wrapped
	default:
		zs, err := res.AsZScores()
		if err != nil {
			return err
		}
		for _, z := range zs {
			add(z.Member, z.Score)
		}
		if sk.src.Kind == scannerapi.SourceZSetRotate {
			// A short window means the end was reached: wrap.
			if len(zs) < batch {
				st.next[sk.key] = 0
			} else {
				st.next[sk.key] = cur + uint64(batch)
			}
		} else if len(zs) > 0 {
			// Lag is measured against the source's own due bound.
			due := zs[0].Score - float64(sk.src.ScoreOffset.Milliseconds())
			if !st.hasDue || due < st.oldestDue {
				st.oldestDue, st.hasDue = due, true
			}
		}
	}
	return nil
}

// commitCursors advances a partition's cursors once its candidates were
// handled (or there were none); after a failed call they stay, so the
// same window is retried next cycle instead of being skipped.
func (r *Runner) commitCursors(st *partState) {
	if len(st.next) == 0 {
		return
	}
	r.curMu.Lock()
	for k, v := range st.next {
		r.cursors[k] = v
	}
	r.curMu.Unlock()
}

// scanAll calls ScanPartition for every partition with candidates, with
// bounded concurrency. It returns the partitions that said More and the
// backlogs the plugin reported in its results.
func (r *Runner) scanAll(ctx context.Context, scanner scannerapi.Scanner, info scannerapi.Info, states []*partState, lanes []string, nowMs int64, batch int, dryRun, followUp bool, sum *Summary) ([]keys.Partition, map[uint16]int64) {
	var work []*partState
	for _, st := range states {
		if len(st.cands) == 0 {
			// Follow-up passes revisit partitions already counted.
			switch {
			case st.fetchError && !followUp:
				sum.Failed++
			case !st.fetchError:
				if !followUp {
					sum.Empty++
				}
				r.commitCursors(st)
			}
			continue
		}
		work = append(work, st)
	}
	var (
		mu            sync.Mutex
		more          []keys.Partition
		pluginBacklog = map[uint16]int64{}
		wg            sync.WaitGroup
		next          = make(chan *partState)
	)
	workers := min(r.Tuning().Concurrency, len(work))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for st := range next {
				lease, err := r.lease(scanner, info)
				if err == nil && !sameSchedule(info, lease.Info) {
					release(lease)
					mu.Lock()
					sum.Deferred++
					mu.Unlock()
					continue
				}
				var res *scannerapi.ScanResult
				if err == nil {
					res, err = r.scanOne(lease, st, lanes, nowMs, batch, dryRun)
					release(lease)
				}
				mu.Lock()
				if err != nil {
					sum.Failed++
					sum.addErr(scannerapi.ErrTransport, rpcCode(err), 1)
					r.setLastError(fmt.Sprintf("%s: %v", st.p.Tag(), err))
					mu.Unlock()
					continue
				}
				sum.Scanned++
				sum.Processed += res.Processed
				sum.Skipped += res.Skipped
				for _, e := range res.Errors {
					sum.addErr(e.Class, e.Code, e.Count)
				}
				for _, n := range res.Notes {
					sum.Notes = append(sum.Notes, st.p.Tag()+": "+n)
				}
				if res.More {
					more = append(more, st.p)
				}
				if res.HasBacklog {
					pluginBacklog[st.p.Index] = res.Backlog
				}
				mu.Unlock()
				if !st.fetchError {
					r.commitCursors(st)
				}
			}
		}()
	}
	// Dispatch stops when ctx is done (shutdown); calls already running
	// finish under their own deadline.
dispatch:
	for _, st := range work {
		select {
		case next <- st:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(next)
	wg.Wait()
	sort.Slice(more, func(i, j int) bool { return more[i].Index < more[j].Index })
	return more, pluginBacklog
}

// lease returns the scanner for one call: per call from an Acquirer (a hot
// swap may switch instances between two calls), else the cycle's.
func (r *Runner) lease(scanner scannerapi.Scanner, info scannerapi.Info) (Lease, error) {
	if a, ok := r.target.(Acquirer); ok {
		l, err := a.Acquire()
		if err != nil {
			return Lease{}, fmt.Errorf("%w: %w", errUnavailable, err)
		}
		return l, nil
	}
	return Lease{Scanner: scanner, Info: info}, nil
}

func release(l Lease) {
	if l.Release != nil {
		l.Release()
	}
}

// errUnavailable marks calls that found no running scanner.
var errUnavailable = errors.New("scanner unavailable")

// sameSchedule reports whether candidates fetched for a cycle planned with
// a can be handed to a scanner whose Info is b.
func sameSchedule(a, b scannerapi.Info) bool {
	return a.Name == b.Name && a.Family == b.Family && slices.Equal(a.Sources, b.Sources)
}

func (r *Runner) scanOne(lease Lease, st *partState, lanes []string, nowMs int64, batch int, dryRun bool) (*scannerapi.ScanResult, error) {
	scanner, host := lease.Scanner, lease.Host
	if host == nil {
		host = r.host
	}
	ctx, cancel := context.WithTimeout(r.cfg.CallParent, r.Tuning().CallTimeout)
	defer cancel()
	req := &scannerapi.ScanRequest{
		Scanner:    r.cfg.Name,
		Partition:  st.p,
		NowMs:      nowMs,
		Cycle:      r.cycle,
		Batch:      batch,
		Lanes:      lanes,
		Candidates: st.cands,
		DryRun:     dryRun,
	}
	t0 := time.Now()
	res, err := scanner.ScanPartition(ctx, host, req)
	r.rec.RPC(r.cfg.Name, "scan_partition", time.Since(t0))
	if err == nil && res == nil {
		err = errors.New("scanner returned no result")
	}
	return res, err
}

// backlog totals the cycle's backlog: per partition the plugin's own
// number when its scan result carried one (it replaces the host's sample),
// otherwise the host's counts plus, for sources with plugin backlog, one
// batched SampleBacklog call for all remaining partitions. It returns false
// when some partition could not be sampled.
func (r *Runner) backlog(ctx context.Context, scanner scannerapi.Scanner, info scannerapi.Info, states []*partState, got map[uint16]int64, sum *Summary) bool {
	ok := true
	var ask []keys.Partition
	var askIdx []int
	for i, st := range states {
		if v, has := got[st.p.Index]; has {
			st.backlog = v
			continue
		}
		if needsPluginBacklog(info) {
			ask = append(ask, st.p)
			askIdx = append(askIdx, i)
		}
	}
	if len(ask) > 0 {
		vals, err := r.sampleBacklog(ctx, scanner, info, ask)
		if err != nil {
			sum.addErr(scannerapi.ErrTransport, "sample_backlog", 1)
			r.log.Debug("SampleBacklog failed", "error", err)
			ok = false
		} else {
			for j, v := range vals {
				states[askIdx[j]].backlog += v
			}
		}
	}
	for _, st := range states {
		sum.Backlog += st.backlog
	}
	return ok
}

func (r *Runner) sampleBacklog(ctx context.Context, scanner scannerapi.Scanner, info scannerapi.Info, ask []keys.Partition) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lease, err := r.lease(scanner, info)
	if err != nil {
		return nil, err
	}
	defer release(lease)
	// Launched and linked scanners always answer; a bare scanner that
	// measures nothing itself has no backlog to report between scans.
	sampler, ok := lease.Scanner.(scannerapi.BacklogSampler)
	if !ok {
		return nil, nil
	}
	host := lease.Host
	if host == nil {
		host = r.host
	}
	cctx, cancel := context.WithTimeout(r.cfg.CallParent, r.Tuning().CallTimeout)
	defer cancel()
	t0 := time.Now()
	vals, err := sampler.SampleBacklog(cctx, host, ask)
	r.rec.RPC(r.cfg.Name, "sample_backlog", time.Since(t0))
	if err != nil {
		return nil, err
	}
	if vals == nil {
		return nil, nil // not measured
	}
	if len(vals) != len(ask) {
		return nil, fmt.Errorf("SampleBacklog returned %d values for %d partitions", len(vals), len(ask))
	}
	return vals, nil
}

func (r *Runner) setLastError(s string) {
	r.stMu.Lock()
	r.status.LastError = s
	r.stMu.Unlock()
}

func needsPluginBacklog(info scannerapi.Info) bool {
	for _, s := range info.Sources {
		if s.Backlog == scannerapi.BacklogPlugin {
			return true
		}
	}
	return false
}

func hasBacklog(info scannerapi.Info) bool {
	for _, s := range info.Sources {
		if s.Backlog != scannerapi.BacklogNone {
			return true
		}
	}
	return false
}

func hasDueSource(info scannerapi.Info) bool {
	for _, s := range info.Sources {
		if s.Kind == scannerapi.SourceZSetDue {
			return true
		}
	}
	return false
}

// classify maps a valkey-go error to an error class.
func classify(err error) scannerapi.ErrorClass {
	if _, ok := valkey.IsValkeyErr(err); ok {
		return scannerapi.ErrServer
	}
	return scannerapi.ErrTransport
}

// rpcCode names a failed plugin call: the process died, a timeout, a
// cancellation (shutdown), or any other failure.
func rpcCode(err error) string {
	if errors.Is(err, errUnavailable) {
		return "plugin_unavailable"
	}
	if errors.Is(err, scannerapi.ErrPluginExited) {
		return "plugin_exited"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "rpc_timeout"
	}
	if errors.Is(err, context.Canceled) {
		return "rpc_canceled"
	}
	return "rpc_error"
}

type nopRecorder struct{}

func (nopRecorder) Cycle(string, time.Duration)                         {}
func (nopRecorder) Items(string, int64, int64)                          {}
func (nopRecorder) Errors(string, scannerapi.ErrorClass, string, int64) {}
func (nopRecorder) Partitions(string, string, int)                      {}
func (nopRecorder) Backlog(string, int64)                               {}
func (nopRecorder) Lag(string, time.Duration)                           {}
func (nopRecorder) RPC(string, string, time.Duration)                   {}
