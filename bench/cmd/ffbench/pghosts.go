package main

// The Postgres hosts benchmark (issue 35): 1, 2 and 3 host processes
// without Valkey on one database, sharing its partitions through it
// (host/sharing/pgstore), with the eleven Postgres reconcilers and the
// completion listener. What it costs the database per item and when idle,
// against one host, and how long a killed host's partitions wait.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/keys"
)

// pgHostsLead is how long before the drain's leases lapse its
// transaction count starts.
const pgHostsLead = 3 * time.Second

// The drain's leases are seeded before its hosts start (pgHostsFresh),
// with their lapse far enough ahead that the hosts have started, divided
// the partitions and flushed their start-up counts by then: as long as
// the idle hosts took to get there (settled), half their start again,
// and pgHostsSeedMargin more. The seeding's ANALYZE of the two tables' 512
// children sends thousands of catalog invalidations, and every session
// open then is signalled to catch up on them, which an idle session does
// in a transaction of its own, counted when it next flushes its counts
// (after a statement that reads a table):
// seeded with the hosts running, those transactions of every idle session
// of theirs (about 15 a host) landed in the drain's count, more the more
// hosts (docs/performance.md).
const pgHostsSeedMargin = 5 * time.Second

func pgHostsSeedLead(settled time.Duration) time.Duration {
	return settled + (settled-pgStatsIdleFlush)/2 + pgHostsSeedMargin + pgHostsLead
}

// pgHostsMaxItems caps the drain (the Postgres drain's size, quick 2000,
// full 20 000): the hosts work at their default intervals, not back to
// back, and the run does it three times.
const pgHostsMaxItems = 5000

// pgHostsDrains is how many drains each count of hosts runs: the time
// and the transactions per item compared are their medians. One drain of
// about 2 s moved by half a second from run to run on a 2-core machine,
// more than the ratios' targets allow. (Autovacuum, which visits the
// database once a minute and then vacuums or analyzes up to several
// hundred of the tables' children, each a transaction of the database's,
// fell in about one count in three: one host's three drains of one run
// read 0.327, 0.294 and 0.457 transactions per item, the last with a
// visit of 587 tables in its count. It is off in this section's server
// now: runPGHosts.)
const pgHostsDrains = 3

// pgHostsDrainLimitPer1000 bounds a drain, per thousand items, before the
// run fails: a bound for a run that cannot finish, not a target (on a
// loaded machine one host has taken over 2 min for 2000).
const pgHostsDrainLimitPer1000 = 3 * time.Minute

// pgHostsRun is one count of hosts draining the same lapses.
type pgHostsRun struct {
	Hosts int
	Items int
	// Xacts are the database's transactions (commits and rollbacks) from
	// the seeding's end to the hosts' stop after the last completion
	// dispatched, the bench's own progress reads taken out.
	Xacts int64
	// Took is from the leases' lapse to the last completion dispatched.
	Took time.Duration
	// Counted is how long Xacts were counted, Idle the idle transactions/s
	// of the same hosts measured just before: Xacts hold Idle x Counted of
	// work that is not the items', more the longer a drain takes.
	Counted time.Duration
	Idle    float64
	// toEnd is from the count's start to the drain's end, stopping from
	// the drain's end to the hosts' sessions gone (the count's end).
	toEnd, stopping time.Duration
	// Calls are the calls of the library's functions over the same time,
	// by name (pg_stat_user_functions: with the time spent in each, its
	// callees included), Rollbacks the transactions rolled back
	// (serialization failures among them).
	Calls     map[string]pgFuncStat
	Rollbacks int64
	// Waits profile the database's sessions over the drain: every
	// pgSamplePeriod, each session of the bench database that is not idle
	// is counted under what it waits on (CPU: nothing) and the library
	// function its statement calls; Samples is the number of samples.
	Waits   map[string]int
	Samples int
	// medianPerItem and medianNet are the medians of the drains'
	// transactions per item, gross and less the idle (medianOf: set).
	medianOf                 bool
	medianPerItem, medianNet float64
	// ServerCPU and HostsCPU are the CPU the server's processes, and the
	// hosts' (their plugins included), used from the count's start to the
	// drain's end: on a machine they share, what one side uses the other
	// waits for.
	ServerCPU, HostsCPU time.Duration
	// ServerCPUBy splits ServerCPU by what the server's processes serve
	// (pgProcessKind).
	ServerCPUBy map[string]time.Duration
	// Statements are the calls of each statement (labelled) from the
	// count's start to the drain's end, Settle those from then to the
	// count's end, the hosts' stop (-pgstatements; nil without).
	Statements, Settle map[string]int64
	// Drains are every drain of this count of hosts (pgHostsDrains), in
	// their order: Took and the transactions per item of the run are
	// their medians; the rest is the drain of the median time's.
	Drains []pgHostsSample
}

// pgHostsSample is one drain's time and transactions per item.
type pgHostsSample struct {
	Took      time.Duration
	PerItem   float64
	Rollbacks int64
}

// medianDrain is the drain of the median time among drains, with the
// median transactions per item and every drain's figures.
func medianDrain(drains []pgHostsRun) pgHostsRun {
	byTime := slices.Clone(drains)
	slices.SortFunc(byTime, func(a, b pgHostsRun) int { return cmp.Compare(a.Took, b.Took) })
	run := byTime[len(byTime)/2]
	per := make([]float64, len(drains))
	net := make([]float64, len(drains))
	run.Drains = nil
	for i, d := range drains {
		run.Drains = append(run.Drains, pgHostsSample{Took: d.Took, PerItem: d.perItem(), Rollbacks: d.Rollbacks})
		per[i], net[i] = d.perItem(), d.perItemNet()
	}
	slices.Sort(per)
	slices.Sort(net)
	run.medianOf, run.medianPerItem, run.medianNet = true, per[len(per)/2], net[len(net)/2]
	return run
}

// pgFuncStat is a library function's calls and time (ms, callees
// included) over a count.
type pgFuncStat struct {
	Calls   int64
	TotalMs float64
}

// perItem is the database's transactions per item: the median of the
// drains' for a run of several.
func (r pgHostsRun) perItem() float64 {
	if r.medianOf {
		return r.medianPerItem
	}
	return float64(r.Xacts) / float64(r.Items)
}

// perItemNet is perItem less the hosts' idle transactions over the count:
// for a run of several drains the median of each drain's (not the drain
// of the median time's, which need not be the drain of the median
// transactions).
func (r pgHostsRun) perItemNet() float64 {
	if r.medianOf {
		return r.medianNet
	}
	return (float64(r.Xacts) - r.Idle*r.Counted.Seconds()) / float64(r.Items)
}

// pgHostsIdle is the idle cost of some hosts over empty partitions.
type pgHostsIdle struct {
	Hosts     int
	Xacts     float64 // transactions/s
	Scans     float64 // child-partition scans/s (sequential and index scans of the partitioned tables' children)
	ServerCPU float64 // share of one core
}

type pgHostsResult struct {
	// Raw is the raw loop of section 9 (one candidate read, then
	// expire_lapsed_lease per row from pgPool goroutines, no host) over the
	// same number of lapses, on the same database: the time the items'
	// expiry alone takes, completions written and not dispatched.
	Raw           time.Duration
	Scanners      int
	Runs          []pgHostsRun
	Idle          []pgHostsIdle
	Window        time.Duration
	Takeover      time.Duration
	TakeoverItems int
	Load          string
}

// startPGHosts starts n hosts with the eleven Postgres reconcilers on the
// database at dsn (no Valkey) and waits until they have divided the
// partitions.
func (b *bench) startPGHosts(ctx context.Context, dsn string, n int) ([]*hostproc.Proc, error) {
	var scanners []hostproc.Scanner
	for _, s := range pgIdleScanners {
		scanners = append(scanners, hostproc.Scanner{Name: s})
	}
	level := "warn"
	if b.verbose {
		level = "info"
	}
	var hs []*hostproc.Proc
	stop := func() {
		for _, h := range hs {
			h.Stop()
		}
	}
	for range n {
		h, err := hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir, Scanners: scanners,
			LogLevel: level, Log: os.Stderr, Extra: fmt.Sprintf("postgres:\n  dsn: %q\n", dsn)}, 60*time.Second)
		if err != nil {
			stop()
			return nil, err
		}
		hs = append(hs, h)
	}
	parts := keys.DefaultPartitionConfig()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		flow, budget, agreed := 0, 0, true
		for _, h := range hs {
			st, err := h.Status(ctx)
			if err != nil || st.Sharing == nil || len(st.Sharing.Hosts) != n {
				agreed = false
				break
			}
			flow += st.Sharing.Owned["flow"]
			budget += st.Sharing.Owned["budget"]
		}
		if agreed && flow == int(parts.Flow) && budget == int(parts.Budget) {
			return hs, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	return nil, fmt.Errorf("%d hosts did not divide the partitions within 60 s", n)
}

// pgXacts reads the bench database's transactions (from the "postgres"
// database, so that the read is not counted).
func pgXacts(ctx context.Context, stats *pgxpool.Pool) (int64, error) {
	var n int64
	err := stats.QueryRow(ctx, "SELECT pg_stat_clear_snapshot(), xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'bench'").Scan(nil, &n)
	return n, err
}

// pgRollbacks reads the bench database's rolled-back transactions.
func pgRollbacks(ctx context.Context, stats *pgxpool.Pool) (int64, error) {
	var n int64
	err := stats.QueryRow(ctx, "SELECT pg_stat_clear_snapshot(), xact_rollback FROM pg_stat_database WHERE datname = 'bench'").Scan(nil, &n)
	return n, err
}

// pgCalls reads the calls of the library's functions and their time (one
// transaction of the bench database; track_functions is on there).
func pgCalls(ctx context.Context, pool *pgxpool.Pool) (map[string]pgFuncStat, error) {
	rows, err := pool.Query(ctx, `SELECT funcname, sum(calls)::bigint, sum(total_time)::float8 FROM pg_stat_user_functions
		WHERE schemaname = 'ffscan' GROUP BY funcname`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]pgFuncStat{}
	for rows.Next() {
		var fn string
		var f pgFuncStat
		if err := rows.Scan(&fn, &f.Calls, &f.TotalMs); err != nil {
			return nil, err
		}
		out[fn] = f
	}
	return out, rows.Err()
}

// pgSamplePeriod is the period of the sessions' profile (pgSample).
const pgSamplePeriod = 20 * time.Millisecond

// pgFunctionRe finds the library function a statement calls.
var pgFunctionRe = regexp.MustCompile(`ffscan\.(\w+)`)

// pgSample profiles the bench database's sessions until ctx ends (from
// the "postgres" database, so that the samples are not counted): every
// pgSamplePeriod, each session that is not idle counts once under
// "<wait event or CPU> <state> <function>". It returns the counts and the
// number of samples.
func pgSample(ctx context.Context, stats *pgxpool.Pool) (map[string]int, int) {
	waits := map[string]int{}
	n := 0
	t := time.NewTicker(pgSamplePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return waits, n
		case <-t.C:
		}
		rows, err := stats.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), state, query FROM pg_stat_activity
			WHERE datname = 'bench' AND state <> 'idle' AND backend_type = 'client backend'`)
		if err != nil {
			continue
		}
		for rows.Next() {
			var wait, state, query string
			if rows.Scan(&wait, &state, &query) != nil {
				continue
			}
			fn := "-"
			if m := pgFunctionRe.FindStringSubmatch(query); m != nil {
				fn = m[1]
			} else if f := strings.Fields(query); len(f) > 0 {
				fn = strings.ToUpper(f[0])
			}
			waits[wait+" "+state+" "+fn]++
		}
		rows.Close()
		n++
	}
}

// pgChildScans reads the scans of the partitioned tables' children (one
// transaction of the bench database).
func pgChildScans(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0) FROM pg_stat_user_tables
		WHERE schemaname = 'public' AND relname ~ '_p[0-9]+$'`).Scan(&n)
	return n, err
}

// pgStatsSettle waits d for the backends to report their counts.
// PostgreSQL 15 flushes a backend's statistics at most once a second, and
// those of a backend that went idle within a second of its last flush
// only 10 s later (PGSTAT_IDLE_INTERVAL), or when it exits: a count's end
// stops the hosts and waits for their sessions to exit
// (pgHostSessionsGone); its start waits pgStatsIdleFlush after the hosts
// started (pgHostsFresh), so that their start-up counts are in before it,
// and the seeding flushes its own (execFlushed).
func pgStatsSettle(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// pgStatsIdleFlush is how long an idle backend may keep its counts.
const pgStatsIdleFlush = 11 * time.Second

// pgHostSessionsGone waits until no session of the bench database is left
// but the bench's own: a session's counts are flushed before it leaves
// pg_stat_activity.
func pgHostSessionsGone(ctx context.Context, stats *pgxpool.Pool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := stats.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = 'bench' AND backend_type = 'client backend' AND application_name <> $1`, benchAppName).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sessions of the stopped hosts still open 30 s after the stop", n)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// pgHostsFresh empties the tables and the share, seeds items lapses
// (none for 0) due in lead, starts k hosts, and waits pgStatsIdleFlush
// for their start-up counts (the library's warm-up, the share's first
// ticks) to be flushed before a count starts. It returns when the items
// lapse and how long the hosts took to get there from their start.
func (b *bench) pgHostsFresh(ctx context.Context, pool *pgxpool.Pool, dsn string, k, items int, lead time.Duration) (hs []*hostproc.Proc, stop func(), due time.Time, settled time.Duration, err error) {
	if err := pgHostsReset(ctx, pool); err != nil {
		return nil, nil, due, 0, err
	}
	if items > 0 {
		// Seeded before the hosts start: the seeding's catalog
		// invalidations reach no session of theirs (pgHostsSeedMargin).
		if due, err = seedLapsesAt(ctx, pool, items, lead.Milliseconds(), false); err != nil {
			return nil, nil, due, 0, err
		}
	}
	t0 := time.Now()
	hs, err = b.startPGHosts(ctx, dsn, k)
	if err != nil {
		return nil, nil, due, 0, err
	}
	stop = func() {
		for _, h := range hs {
			h.Stop()
		}
	}
	if err := pgStatsSettle(ctx, pgStatsIdleFlush); err != nil {
		stop()
		return nil, nil, due, 0, err
	}
	return hs, stop, due, time.Since(t0), nil
}

// pgHostsIdleOnce measures the idle cost of the running hosts over window.
func (b *bench) pgHostsIdleOnce(ctx context.Context, pool, stats *pgxpool.Pool, pgPid, hosts int, window time.Duration) (pgHostsIdle, error) {
	// Start-up work (the first cycles, the share's first ticks) passes first.
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return pgHostsIdle{}, err
	}
	s0, err := pgChildScans(ctx, pool)
	if err != nil {
		return pgHostsIdle{}, err
	}
	x0, err := pgXacts(ctx, stats)
	if err != nil {
		return pgHostsIdle{}, err
	}
	cpu0, t0 := pgServerCPU(pgPid), time.Now()
	if err := sleepCtx(ctx, window); err != nil {
		return pgHostsIdle{}, err
	}
	elapsed := time.Since(t0).Seconds()
	cpu1 := pgServerCPU(pgPid)
	x1, err := pgXacts(ctx, stats)
	if err != nil {
		return pgHostsIdle{}, err
	}
	s1, err := pgChildScans(ctx, pool)
	if err != nil {
		return pgHostsIdle{}, err
	}
	// The second scan read is not in the window; the first is (one
	// transaction).
	return pgHostsIdle{Hosts: hosts, Xacts: float64(x1-x0-1) / elapsed, Scans: float64(s1-s0) / elapsed,
		ServerCPU: (cpu1 - cpu0).Seconds() / elapsed}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// pgHostsDrain counts the database's transactions from pgHostsLead
// before the n lapses seeded for it are due until every one was acted on
// and its completion dispatched. The hosts are fresh (started for this
// drain after the seeding, their start-up counts flushed: pgHostsFresh)
// and stop is called at the drain's end:
// the count ends once their sessions are gone, each having flushed its
// counts as it exited. (Counted while the hosts ran on, the count's end
// had to wait pgStatsIdleFlush for their idle sessions' counts, and held
// those 11 s of the hosts' idle reads and share renewals: 0.014 per item
// with one host, 0.039 with three, at 5,000 items.)
func (b *bench) pgHostsDrain(ctx context.Context, pool, stats *pgxpool.Pool, pgPid int, hosts []*hostproc.Proc, stop func(), n int, due time.Time) (pgHostsRun, error) {
	run := pgHostsRun{Hosts: len(hosts), Items: n}
	hostsCPU := func() time.Duration {
		var total time.Duration
		for _, h := range hosts {
			total += treeCPU(h.Pid())
		}
		return total
	}
	// Every lease lapses at due, by the database's clock (the machine's:
	// the server runs here); the count starts pgHostsLead before.
	if err := sleepCtx(ctx, time.Until(due.Add(-pgHostsLead))); err != nil {
		return run, err
	}
	c0, err := pgCalls(ctx, pool)
	if err != nil {
		return run, err
	}
	r0, err := pgRollbacks(ctx, stats)
	if err != nil {
		return run, err
	}
	x0, err := pgXacts(ctx, stats)
	if err != nil {
		return run, err
	}
	if b.pgStatements {
		if err := pgStatementsReset(ctx, stats); err != nil {
			return run, err
		}
	}
	procs0, err := pgProcesses(ctx, stats)
	if err != nil {
		return run, err
	}
	serverCPU0, hostsCPU0 := pgServerCPU(pgPid), hostsCPU()
	t0 := time.Now()
	if !t0.Before(due) {
		return run, fmt.Errorf("%d hosts: the count started %s after the lapse (the hosts took longer to start than the seeding allowed for: pgHostsSeedLead)", len(hosts), t0.Sub(due))
	}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		run.Waits, run.Samples = pgSample(sctx, stats)
	}()
	defer func() {
		stopSampling()
		<-sampled
	}()
	var polls int64
	limit := time.Duration(max(n, 1000)/1000) * pgHostsDrainLimitPer1000
	deadline := due.Add(limit)
	for {
		var open, pending int
		polls++
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ff_exec_core WHERE lifecycle_phase <> 'terminal'),
			(SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL)`).Scan(&open, &pending); err != nil {
			return run, err
		}
		if open == 0 && pending == 0 && time.Now().After(due) {
			break
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("%d hosts: %d of %d lapses open, %d completions undispatched %s after the lapse", len(hosts), open, n, pending, limit)
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return run, err
		}
	}
	run.Took, run.toEnd = time.Since(due), time.Since(t0)
	run.ServerCPU, run.HostsCPU = pgServerCPU(pgPid)-serverCPU0, hostsCPU()-hostsCPU0
	procs1, err := pgProcesses(ctx, stats)
	if err != nil {
		return run, err
	}
	run.ServerCPUBy = pgCPUBy(procs0, procs1, run.ServerCPU)
	if b.pgStatements {
		if run.Statements, err = pgStatementCalls(ctx, stats); err != nil {
			return run, err
		}
	}
	stopSampling()
	<-sampled
	stopped := time.Now()
	stop()
	if err := pgHostSessionsGone(ctx, stats); err != nil {
		return run, err
	}
	run.stopping = time.Since(stopped)
	x1, err := pgXacts(ctx, stats)
	if err != nil {
		return run, err
	}
	if b.pgStatements {
		all, err := pgStatementCalls(ctx, stats)
		if err != nil {
			return run, err
		}
		run.Settle = minus(all, run.Statements)
	}
	r1, err := pgRollbacks(ctx, stats)
	if err != nil {
		return run, err
	}
	c1, err := pgCalls(ctx, pool)
	if err != nil {
		return run, err
	}
	// The second read of the calls is not in the count; the first is.
	run.Xacts, run.Counted, run.Rollbacks = x1-x0-polls-1, time.Since(t0), r1-r0
	run.Calls = map[string]pgFuncStat{}
	for fn, f := range c1 {
		if d := f.Calls - c0[fn].Calls; d > 0 {
			run.Calls[fn] = pgFuncStat{Calls: d, TotalMs: f.TotalMs - c0[fn].TotalMs}
		}
	}
	return run, nil
}

// pgHostsReset empties the tables the benchmark fills, and the share (no
// host runs). It vacuums and analyses them too, as autovacuum would
// (which is off in this section's server: runPGHosts), outside the
// counts.
func pgHostsReset(ctx context.Context, pool *pgxpool.Pool) error {
	if err := execFlushed(ctx, pool, []string{"DELETE FROM ffscan.share_owner", "DELETE FROM ffscan.share_member",
		"DELETE FROM ff_exec_core", "DELETE FROM ff_attempt", "DELETE FROM ff_completion_event", "DELETE FROM ff_lease_event",
		"VACUUM ANALYZE ff_exec_core, ff_attempt, ff_completion_event, ff_lease_event"}); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}

// runPGHosts measures 1, 2 and 3 hosts sharing one database: the
// transactions per item of the same drain (within 1.1 of one host's: no
// partition scanned, and no completion dispatched, by two hosts), the
// idle transactions and child-partition scans per second of 3 hosts
// against one, and the time a killed host's partitions wait.
func (b *bench) runPGHosts(ctx context.Context, n int, window time.Duration) (*pgHostsResult, error) {
	n = min(n, pgHostsMaxItems)
	// No autovacuum: the reset before each count vacuums and analyses
	// the tables instead. Left on, its visits (one a minute) fell in some
	// counts and not others, with one analyze transaction for each of
	// dozens of children the drain had changed, and the catch-up
	// transaction its invalidations cost every idle session of the hosts
	// (pgHostsSeedMargin): one drain of three hosts read 0.235, the next
	// 0.333 transactions per item. The catch-ups are a cost of each
	// analyze by the number of the hosts' sessions, not of the items
	// (docs/performance.md).
	settings := []string{"autovacuum=off"}
	if b.pgStatements {
		settings = append(settings, pgStatementsSettings...)
	}
	srv, pool, dsn, err := startPostgres(ctx, settings...)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	defer pool.Close()
	stats, err := pgxpool.New(ctx, srv.DSN) // the "postgres" database: not counted
	if err != nil {
		return nil, err
	}
	defer stats.Close()
	if b.pgStatements {
		if _, err := stats.Exec(ctx, "CREATE EXTENSION pg_stat_statements"); err != nil {
			return nil, err
		}
	}
	// Function call counts for every session the hosts open from here.
	if _, err := pool.Exec(ctx, "ALTER DATABASE bench SET track_functions = 'all'"); err != nil {
		return nil, err
	}
	if b.pgLogDir != "" {
		// Statements of 50 ms or more and autovacuum's runs, kept for
		// reading afterwards (every statement, as pgtiming logs, would
		// slow the drains it is kept for).
		if err := enableStatementLog(ctx, pool, 50); err != nil {
			return nil, err
		}
		defer func() {
			if err := copyFile(srv.LogPath(), filepath.Join(b.pgLogDir, "pghosts.log")); err != nil {
				b.logf("pghosts: keep the server's log: %v", err)
			}
		}()
	}
	res := &pgHostsResult{Scanners: len(pgIdleScanners), Window: window, Load: measure.Load()}
	// The reference: the same lapses ended by the raw loop, no host
	// running (the median of three).
	var raws []time.Duration
	for range 3 {
		if err := seedLapses(ctx, pool, n); err != nil {
			return nil, err
		}
		t0 := time.Now()
		for done := int64(0); done < int64(n); {
			d, err := rawExpire(ctx, pool)
			if err != nil {
				return nil, fmt.Errorf("raw loop: %w", err)
			}
			if d == 0 {
				return nil, fmt.Errorf("raw loop: ended nothing with %d of %d done", done, n)
			}
			done += d
		}
		raws = append(raws, time.Since(t0))
	}
	slices.Sort(raws)
	res.Raw = raws[1]
	b.logf("pghosts: raw loop: %d lapses ended in %s (median of %s)", n, res.Raw.Round(time.Millisecond), raws)
	for k := 1; k <= 3; k++ {
		// The idle cost, then each drain on hosts of its own (started
		// fresh, stopped at its end: pgHostsDrain).
		_, stop, _, settled, err := b.pgHostsFresh(ctx, pool, dsn, k, 0, 0)
		if err != nil {
			return nil, err
		}
		idle, err := b.pgHostsIdleOnce(ctx, pool, stats, srv.Pid(), k, window)
		stop()
		if err != nil {
			return nil, err
		}
		res.Idle = append(res.Idle, idle)
		b.logf("pghosts: %d host(s) idle: %.1f transactions/s, %.1f child-partition scans/s, PostgreSQL %.2f%% of a core",
			k, idle.Xacts, idle.Scans, 100*idle.ServerCPU)
		var drains []pgHostsRun
		for range pgHostsDrains {
			hs, stop, due, _, err := b.pgHostsFresh(ctx, pool, dsn, k, n, pgHostsSeedLead(settled))
			if err != nil {
				return nil, err
			}
			d, err := b.pgHostsDrain(ctx, pool, stats, srv.Pid(), hs, stop, n, due)
			stop() // (stopped already unless the drain failed first)
			if err != nil {
				return nil, err
			}
			d.Idle = idle.Xacts
			b.logf("pghosts: %d host(s): %d lapses acted on and their completions dispatched %s after the lapse; %.3f transactions per item",
				k, n, d.Took.Round(time.Millisecond), d.perItem())
			drains = append(drains, d)
		}
		res.Runs = append(res.Runs, medianDrain(drains))
		if k == 3 {
			// Takeover: one of the three killed; a lapse in every flow
			// partition right after.
			hs, stop, _, _, err := b.pgHostsFresh(ctx, pool, dsn, k, 0, 0)
			if err != nil {
				return nil, err
			}
			_ = syscall.Kill(-hs[2].Pid(), syscall.SIGKILL)
			killed := time.Now()
			parts := int(keys.DefaultPartitionConfig().Flow)
			if _, err := seedLapsesAt(ctx, pool, parts, -1, false); err != nil {
				stop()
				return nil, err
			}
			for {
				var open int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM ff_exec_core WHERE lifecycle_phase <> 'terminal'").Scan(&open); err != nil {
					stop()
					return nil, err
				}
				if open == 0 {
					break
				}
				if time.Since(killed) > time.Minute {
					stop()
					return nil, fmt.Errorf("takeover: %d lapses open a minute after the kill", open)
				}
				if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
					stop()
					return nil, err
				}
			}
			res.Takeover, res.TakeoverItems = time.Since(killed), parts
			b.logf("pghosts: kill -9 of one of three hosts: a lapse in every partition acted on %s after the kill", res.Takeover.Round(time.Millisecond))
			stop()
		}
	}
	return res, nil
}

func (r *pgHostsResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("12. POSTGRES HOSTS: 1, 2 and 3 host processes without Valkey on one database, sharing its partitions through it,")
	p("   the %d Postgres reconcilers at their defaults and the completion listener on one of them; autovacuum off (the tables are vacuumed and analyzed before each count); load %s", r.Scanners, r.Load)
	var one, oneNet float64
	var first pgHostsRun
	for _, run := range r.Runs {
		if run.Hosts == 1 {
			one, oneNet, first = run.perItem(), run.perItemNet(), run
		}
	}
	p("   raw loop (section 9's, no host, completions written and not dispatched): %d lapses in %s", first.Items, r.Raw.Round(time.Millisecond))
	for _, run := range r.Runs {
		ratio := run.perItem() / one
		p("   %d host(s): %d lapses (each ended with a completion event, dispatched) done %s after the lapse (median of %s);",
			run.Hosts, run.Items, run.Took.Round(time.Millisecond), run.drainsLine())
		p("     database transactions per item %.3f (%.3f of one host's; target <= 1.10: %s)", run.perItem(), ratio, verdict(ratio <= 1.10))
		p("     less the hosts' idle %.1f transactions/s over each drain's count (the median's: %s): %.3f per item, the median (%.3f of one host's)",
			run.Idle, run.Counted.Round(time.Second), run.perItemNet(), run.perItemNet()/oneNet)
		p("     the median drain: rolled back: %.3f per item; calls per item (ms per call, callees included): %s", float64(run.Rollbacks)/float64(run.Items), run.callsLine())
		p("     sessions over the median drain (%d samples, %s apart; mean sessions busy %.2f): %s", run.Samples, pgSamplePeriod, run.busy(), run.waitsLine())
		p("     CPU of the median drain, from the count's start to the drain's end (%s): PostgreSQL %.2f s, the hosts with their plugins %.2f s (%.2f s a host); per item %.0f and %.0f us",
			run.toEnd.Round(100*time.Millisecond), run.ServerCPU.Seconds(), run.HostsCPU.Seconds(), run.HostsCPU.Seconds()/float64(run.Hosts),
			1e6*run.ServerCPU.Seconds()/float64(run.Items), 1e6*run.HostsCPU.Seconds()/float64(run.Items))
		p("     PostgreSQL's CPU by what it served, per item: %s", cpuByLine(run.ServerCPUBy, run.Items, 12))
		if run.Statements != nil {
			p("     the median drain's statements, from the count's start to the drain's end (%s): %s",
				run.toEnd.Round(100*time.Millisecond), statementsLine(run.Statements, float64(run.Items), "per item", 12))
			p("     and over the %s after it, every item done, the hosts stopping (the count's end): %s",
				run.stopping.Round(10*time.Millisecond), statementsLine(run.Settle, float64(run.Items), "per item", 8))
		}
	}
	if first.Items > 0 {
		p("   targets, side by side:")
		p("     1 host: %s = %.2f x the raw loop's %s (target <= 3: %s)", first.Took.Round(time.Millisecond),
			first.Took.Seconds()/r.Raw.Seconds(), r.Raw.Round(time.Millisecond), verdict(first.Took <= 3*r.Raw))
		for _, run := range r.Runs {
			if run.Hosts == 1 {
				continue
			}
			t := run.Took.Seconds() / first.Took.Seconds()
			x := run.perItem() / one
			rb := run.rolledBack()
			p("     %d hosts / 1: time %.3f (target <= 1.10: %s), transactions per item %.3f (target <= 1.10: %s), rolled back per item, the most of a drain, %.3f (target < 0.05: %s)",
				run.Hosts, t, verdict(t <= 1.10), x, verdict(x <= 1.10), rb, verdict(rb < 0.05))
		}
		p("     1 host: rolled back per item %.3f (target < 0.05: %s)", first.rolledBack(), verdict(first.rolledBack() < 0.05))
	}
	var idle1 pgHostsIdle
	for _, i := range r.Idle {
		if i.Hosts == 1 {
			idle1 = i
		}
	}
	for _, i := range r.Idle {
		p("   idle, %d host(s), %s window: %.1f transactions/s (%.2f x one host), %.1f child-partition scans/s (%.2f x one host), PostgreSQL %.2f%% of a core",
			i.Hosts, r.Window, i.Xacts, i.Xacts/idle1.Xacts, i.Scans, i.Scans/idle1.Scans, 100*i.ServerCPU)
	}
	p("   kill -9 of one of three hosts -> a lapse in each of %d partitions acted on: %s after the kill (target <= 15 s: %s)",
		r.TakeoverItems, r.Takeover.Round(100*time.Millisecond), verdict(r.Takeover <= 15*time.Second))
}

// rolledBack is the most transactions rolled back per item in a drain.
func (r pgHostsRun) rolledBack() float64 {
	most := r.Rollbacks
	for _, d := range r.Drains {
		most = max(most, d.Rollbacks)
	}
	return float64(most) / float64(r.Items)
}

// drainsLine lists the drains' times and transactions per item.
func (r pgHostsRun) drainsLine() string {
	var parts []string
	for _, d := range r.Drains {
		parts = append(parts, fmt.Sprintf("%s %.3f/item", d.Took.Round(time.Millisecond), d.PerItem))
	}
	return strings.Join(parts, ", ")
}

// callsLine lists the library functions called during a drain, per item,
// the most called first.
func (r pgHostsRun) callsLine() string {
	type fc struct {
		fn string
		f  pgFuncStat
	}
	var fs []fc
	for fn, f := range r.Calls {
		fs = append(fs, fc{fn, f})
	}
	sort.Slice(fs, func(i, j int) bool {
		return fs[i].f.Calls > fs[j].f.Calls || fs[i].f.Calls == fs[j].f.Calls && fs[i].fn < fs[j].fn
	})
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%s %.3f (%.2f ms)", f.fn, float64(f.f.Calls)/float64(r.Items), f.f.TotalMs/float64(f.f.Calls)))
	}
	return strings.Join(parts, ", ")
}

// busy is the mean number of sessions not idle in a sample.
func (r pgHostsRun) busy() float64 {
	if r.Samples == 0 {
		return 0
	}
	n := 0
	for _, c := range r.Waits {
		n += c
	}
	return float64(n) / float64(r.Samples)
}

// waitsLine lists the profile's ten largest entries, as shares of the
// busy session samples.
func (r pgHostsRun) waitsLine() string {
	type wc struct {
		w string
		n int
	}
	var ws []wc
	total := 0
	for w, n := range r.Waits {
		ws = append(ws, wc{w, n})
		total += n
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].n > ws[j].n || ws[i].n == ws[j].n && ws[i].w < ws[j].w })
	var parts []string
	for i, w := range ws {
		if i == 10 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f%%", w.w, 100*float64(w.n)/float64(total)))
	}
	return strings.Join(parts, ", ")
}
