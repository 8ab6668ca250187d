package main

// The Postgres benchmarks (issue 14): a drain of lapsed attempt leases
// through pg_attempt_timeout, as a plugin and linked in, against a raw Go
// loop making the same per-row function calls; and the idle cost of the
// eleven Postgres reconcilers over 256 empty partitions.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/internal/pgtest"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// pgPool is the size of the database pool every mode uses (the host's
// default postgres.pool_size).
const pgPool = 8

type pgRun struct {
	Mode             string
	Rep              int
	Rows             int
	Elapsed          time.Duration
	Cycles           int
	HostCPU, ServCPU time.Duration // this process + plugin; PostgreSQL's processes
}

type pgDrainResult struct {
	Rows       int
	Partitions int
	SeedTime   time.Duration
	Runs       []pgRun
	Server     string
}

type pgIdleResult struct {
	Window      time.Duration
	Scanners    int
	Xacts       float64 // database transactions per second (every statement of ours is one)
	HostCPU     float64 // share of one core: host + plugin
	ServerCPU   float64 // share of one core: PostgreSQL
	ServerAlone float64 // the same before the host started
	FFComputed  float64 // FlowFabric's candidate queries per second at its defaults (postgres.md §5)
}

var pgModes = []string{"plugin", "in-process", "raw"}

// startPostgres starts a throwaway PostgreSQL with FlowFabric's schema
// (ffscan's own) and library in database "bench".
func startPostgres(ctx context.Context, settings ...string) (*pgtest.Server, *pgxpool.Pool, string, error) {
	srv, err := pgtest.StartWith(settings...)
	if err != nil {
		return nil, nil, "", err
	}
	dsn, err := srv.CreateDatabase(ctx, "bench")
	if err != nil {
		srv.Stop()
		return nil, nil, "", err
	}
	// The bench's own connections are named (pgProcessKind); the DSN is
	// a URL with parameters already.
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn + "&application_name=" + benchAppName, PoolSize: pgPool})
	if err != nil {
		srv.Stop()
		return nil, nil, "", err
	}
	fail := func(err error) (*pgtest.Server, *pgxpool.Pool, string, error) {
		pool.Close()
		srv.Stop()
		return nil, nil, "", err
	}
	if _, err := postgres.CreateSchema(ctx, pool); err != nil {
		return fail(err)
	}
	if _, err := postgres.InstallLibrary(ctx, pool); err != nil {
		return fail(err)
	}
	return srv, pool, dsn, nil
}

// pgServerCPU is the CPU the server's processes used: the postmaster, its
// children alive now, and those it reaped.
func pgServerCPU(pid int) time.Duration { return treeCPU(pid) }

// treeCPU is the CPU a process and its descendants used: those alive now
// (each with what it reaped) and those it reaped itself. A host's plugins
// are its children; a server's backends the postmaster's.
func treeCPU(pid int) time.Duration {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			if parent, err := strconv.Atoi(f[1]); err == nil {
				children[parent] = append(children[parent], child)
			}
		}
	}
	var total time.Duration
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], children[p]...)
		total += procCPUWithChildren(p)
	}
	return total
}

// procCPUWithChildren is utime+stime+cutime+cstime of pid.
func procCPUWithChildren(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ 100
}

// seedLapses plants n active executions spread over 256 partitions whose
// attempt 0's lease lapsed a second ago, with no retry policy (each ends
// with an 'expired' completion and a lease event: the heaviest path).
func seedLapses(ctx context.Context, pool *pgxpool.Pool, n int) error {
	_, err := seedLapsesAt(ctx, pool, n, -1000, true)
	return err
}

// seedLapsesAt is seedLapses with the leases lapsing at inMs from now
// (negative: lapsed already), after emptying the tables when clean. Every
// lease lapses at the same instant, which it returns: read once from the
// database's clock before the insert. (Read per row, the lapses spread
// over the insert's own time: 90-210 ms with one idle host beside it,
// 220-640 ms with three, so that a host woke a partition several times
// for items a moment apart, and how often depended on how slow the
// insert was.)
func seedLapsesAt(ctx context.Context, pool *pgxpool.Pool, n int, inMs int64, clean bool) (time.Time, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("seed: %w", err)
	}
	defer conn.Release()
	if clean {
		if err := execOn(ctx, conn, []string{"DELETE FROM ff_exec_core", "DELETE FROM ff_attempt", "DELETE FROM ff_completion_event",
			"DELETE FROM ff_lease_event", "VACUUM ff_exec_core, ff_attempt, ff_completion_event, ff_lease_event"}); err != nil {
			return time.Time{}, fmt.Errorf("seed: %w", err)
		}
	}
	var at int64
	if err := conn.QueryRow(ctx, "SELECT ffscan.now_ms() + $1::bigint", inMs).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("seed: %w", err)
	}
	// Flushed last (execOn's last statement): the seeding's transactions
	// are counted before the caller's count starts.
	if err := execOn(ctx, conn, []string{fmt.Sprintf(`WITH e AS (INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
			eligibility_state, public_state, attempt_state, created_at_ms, raw_fields) SELECT (i %% 256)::smallint, gen_random_uuid(), 'default',
			'active', 'leased', 'not_applicable', 'running', 'running_attempt', 1, '{"namespace": "bench"}' FROM generate_series(1, %d) AS i
			RETURNING partition_key, execution_id)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch, lease_expires_at_ms)
			SELECT partition_key, execution_id, 0, 'w', 'w-1', 1, %d FROM e`, n, at),
		"ANALYZE ff_exec_core, ff_attempt", "SELECT pg_stat_force_next_flush()"}); err != nil {
		return time.Time{}, fmt.Errorf("seed: %w", err)
	}
	return time.UnixMilli(at), nil
}

// execFlushed runs sqls on one connection and has the server count their
// transactions in pg_stat_database before it returns. A VACUUM or ANALYZE
// of a partitioned table runs a transaction per child (an ANALYZE of
// ff_exec_core and ff_attempt: 514), and a backend that flushed its
// counts less than a second before going idle sends them only 10 s later
// (PostgreSQL 15's PGSTAT_IDLE_INTERVAL): without the forced flush, a
// seeding's ~1,500 transactions landed in a count that started 2 s after
// it, in some drains and not in others. The flush happens before the
// server reports the statement done (it is part of going idle), so when
// this returns, a read of pg_stat_database from any session sees them.
func execFlushed(ctx context.Context, pool *pgxpool.Pool, sqls []string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return execOn(ctx, conn, append(sqls, "SELECT pg_stat_force_next_flush()"))
}

// execOn runs sqls on conn, in order.
func execOn(ctx context.Context, conn *pgxpool.Conn, sqls []string) error {
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) runPGDrain(ctx context.Context, n, reps int) (*pgDrainResult, error) {
	srv, pool, _, err := startPostgres(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	defer pool.Close()
	res := &pgDrainResult{Rows: n, Partitions: 256}
	_ = pool.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&res.Server)
	for rep := 0; rep < reps; rep++ {
		for k := range pgModes {
			mode := pgModes[(k+rep)%len(pgModes)]
			t0 := time.Now()
			if err := seedLapses(ctx, pool, n); err != nil {
				return nil, err
			}
			res.SeedTime = time.Since(t0)
			run, err := b.pgDrainOnce(ctx, pool, srv.Pid(), mode, n)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mode, err)
			}
			var left int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM ff_exec_core WHERE lifecycle_phase <> 'terminal'").Scan(&left); err != nil {
				return nil, err
			}
			if left != 0 {
				return nil, fmt.Errorf("%s: %d of %d executions not ended afterwards", mode, left, n)
			}
			run.Rep = rep + 1
			res.Runs = append(res.Runs, run)
			b.logf("pgdrain: %-10s rep %d: %d in %s = %.0f/s, host-side CPU %.2f s, PostgreSQL CPU %.2f s", mode, run.Rep, run.Rows,
				run.Elapsed.Round(time.Millisecond), float64(run.Rows)/run.Elapsed.Seconds(), run.HostCPU.Seconds(), run.ServCPU.Seconds())
		}
	}
	return res, nil
}

func (b *bench) pgDrainOnce(ctx context.Context, pool *pgxpool.Pool, pgPid int, mode string, n int) (pgRun, error) {
	run := pgRun{Mode: mode}
	var (
		cycle     func() (int64, error)
		pluginPid int
	)
	if mode == "raw" {
		cycle = func() (int64, error) { return rawExpire(ctx, pool) }
	} else {
		svc := callbacks.New(b.lib, nil)
		svc.SetPostgres(pool, scannerapi.Filter{})
		var (
			sc   scannerapi.Scanner
			host scannerapi.Host
		)
		if mode == "plugin" {
			p, err := b.launchPlugin(ctx, launcher.Config{Scanner: pgreconcilers.AttemptTimeoutName, Binary: "pgreconcilers", Postgres: true}, svc)
			if err != nil {
				return run, err
			}
			defer p.close()
			sc, host, pluginPid = p.scanner, p.host, p.pid
		} else {
			sc = pluginhost.Linked(pgreconcilers.NewAttemptTimeout(), nil)
			pol, _ := callbacks.PolicyFromInfo(sc.Info(), false)
			host = svc.Bind(pgreconcilers.AttemptTimeoutName, pol)
		}
		r := scheduler.New(scheduler.Config{Name: pgreconcilers.AttemptTimeoutName, Partitions: b.parts, Concurrency: b.concurrency,
			CallTimeout: 60 * time.Second, NoJitter: true, Postgres: pool,
			Client: b.client, Target: staticTarget{sc}, Host: host, Recorder: metrics.New(), Logger: b.log.Named("scheduler")})
		cycle = func() (int64, error) {
			sum, err := r.Cycle(ctx, scheduler.CycleOptions{})
			if err == nil && sum.ErrorTotal() > 0 {
				err = fmt.Errorf("cycle errors: %v", sum.Errors)
			}
			return sum.Processed, err
		}
	}
	self0, _ := measure.ProcCPU(os.Getpid())
	plug0 := time.Duration(0)
	if pluginPid > 0 {
		plug0, _ = measure.ProcCPU(pluginPid)
	}
	srv0 := pgServerCPU(pgPid)
	t0 := time.Now()
	for run.Rows < n {
		done, err := cycle()
		if err != nil {
			return run, err
		}
		run.Cycles++
		run.Rows += int(done)
		if done == 0 {
			return run, fmt.Errorf("cycle %d ended nothing with %d of %d done", run.Cycles, run.Rows, n)
		}
	}
	run.Elapsed = time.Since(t0)
	self1, _ := measure.ProcCPU(os.Getpid())
	run.HostCPU = self1 - self0
	if pluginPid > 0 {
		p1, _ := measure.ProcCPU(pluginPid)
		run.HostCPU += p1 - plug0
	}
	run.ServCPU = pgServerCPU(pgPid) - srv0
	return run, nil
}

// rawExpire is the reference loop: one candidate read for all partitions,
// then expire_lapsed_lease for every row, pgPool calls at a time (the
// host's pool size), with nothing else: no plugin, no scheduler, no checks.
func rawExpire(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	parts := make([]uint16, 256)
	for i := range parts {
		parts[i] = uint16(i)
	}
	rows, err := postgres.ReadCandidates(ctx, pool, "lapsed_leases", parts, nil, 256, 1000, scannerapi.Filter{})
	if err != nil {
		return 0, err
	}
	var (
		done atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
		next = make(chan postgres.Candidate)
	)
	for range pgPool {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				eid, att, _ := strings.Cut(c.Member, "/")
				out, err := postgres.Call(ctx, pool, "expire_lapsed_lease", []string{strconv.Itoa(int(c.Partition)), eid, att}, scannerapi.Filter{})
				if err != nil {
					mu.Lock()
					ferr = err
					mu.Unlock()
					continue
				}
				if len(out) > 1 && out[1] != nil && slices.Contains([]string{"retried", "terminal"}, *out[1]) {
					done.Add(1)
				}
			}
		}()
	}
	for _, c := range rows {
		next <- c
	}
	close(next)
	wg.Wait()
	return done.Load(), ferr
}

func (r *pgDrainResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("9. POSTGRES DRAIN: %d lapsed attempt leases over %d partitions through pg_attempt_timeout (PostgreSQL %s)", r.Rows, r.Partitions, r.Server)
	p("   each ends its execution (no retry policy): attempt, execution, completion event and lease event per row,")
	p("   one transaction each; pool of %d connections in every mode; raw = one candidate query, then the same calls", pgPool)
	p("   mode         rep      time     rows/s  cycles  CPU s: host side | PostgreSQL")
	med := map[string][]float64{}
	cpu := map[string][]float64{}
	for _, run := range r.Runs {
		rate := float64(run.Rows) / run.Elapsed.Seconds()
		med[run.Mode] = append(med[run.Mode], rate)
		cpu[run.Mode] = append(cpu[run.Mode], run.HostCPU.Seconds()/float64(run.Rows)*10000)
		p("   %-10s %5d %9s %10.0f %7d  %.2f | %.2f", run.Mode, run.Rep, run.Elapsed.Round(time.Millisecond), rate, run.Cycles, run.HostCPU.Seconds(), run.ServCPU.Seconds())
	}
	m := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		s := slices.Clone(xs)
		slices.Sort(s)
		if len(s)%2 == 1 {
			return s[len(s)/2]
		}
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	p("   medians: plugin %.0f/s, in-process %.0f/s, raw %.0f/s; host-side CPU per 10k rows: plugin %.3f s, in-process %.3f s, raw %.3f s",
		m(med["plugin"]), m(med["in-process"]), m(med["raw"]), m(cpu["plugin"]), m(cpu["in-process"]), m(cpu["raw"]))
	if raw := m(med["raw"]); raw > 0 {
		p("   plugin/raw throughput = %.3f; in-process/raw = %.3f", m(med["plugin"])/raw, m(med["in-process"])/raw)
	}
}

// pgIdleScanners are the eleven Postgres reconcilers at their defaults.
var pgIdleScanners = []string{pgreconcilers.AttemptTimeoutName, pgreconcilers.LeaseExpiryName, pgreconcilers.SuspensionTimeoutName,
	pgreconcilers.ExecutionDeadlineName, pgreconcilers.DelayedPromoterName, pgreconcilers.PendingWPExpiryName, pgreconcilers.BudgetResetName,
	pgreconcilers.DependencyName, pgreconcilers.EdgeCancelDispatcherName, pgreconcilers.EdgeCancelReconcilerName, pgreconcilers.WorkerRegistrySweepName}

// runPGIdle runs the real host with the eleven Postgres reconcilers at
// their default intervals over an empty database and counts the
// database's transactions per second (every candidate read, clock read and
// action is one), against FlowFabric's computed 440 candidate queries/s.
func (b *bench) runPGIdle(ctx context.Context, window time.Duration) (*pgIdleResult, error) {
	srv, pool, dsn, err := startPostgres(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	defer pool.Close()
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	// The server's own background work (autovacuum looking at thousands of
	// partitions, the checkpointer) over the same window, without ffscan.
	base0, baseT := pgServerCPU(srv.Pid()), time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(window):
	}
	baseline := (pgServerCPU(srv.Pid()) - base0).Seconds() / time.Since(baseT).Seconds()
	var scanners []hostproc.Scanner
	for _, s := range pgIdleScanners {
		scanners = append(scanners, hostproc.Scanner{Name: s})
	}
	level := "warn"
	if b.verbose {
		level = "info"
	}
	h, err := hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir, ValkeyAddr: b.srv.Addr,
		Scanners: scanners, LogLevel: level, Log: os.Stderr, Extra: fmt.Sprintf("postgres:\n  dsn: %q\n", dsn)}, 60*time.Second)
	if err != nil {
		return nil, err
	}
	defer h.Stop()
	st, err := h.Scanner(ctx, pgreconcilers.AttemptTimeoutName)
	if err != nil {
		return nil, err
	}
	// Start-up work (boot, library check, first cycles) passes first.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(5 * time.Second):
	}
	stats, err := pgxpool.New(ctx, srv.DSN) // the "postgres" database: not counted
	if err != nil {
		return nil, err
	}
	defer stats.Close()
	xacts := func() (float64, error) {
		var n float64
		err := stats.QueryRow(ctx, "SELECT pg_stat_clear_snapshot(), xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'bench'").Scan(nil, &n)
		return n, err
	}
	x0, err := xacts()
	if err != nil {
		return nil, err
	}
	host0, _ := measure.ProcCPU(h.Pid())
	plug0, _ := measure.ProcCPU(st.Pid)
	srv0 := pgServerCPU(srv.Pid())
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(window):
	}
	elapsed := time.Since(t0).Seconds()
	x1, err := xacts()
	if err != nil {
		return nil, err
	}
	host1, _ := measure.ProcCPU(h.Pid())
	plug1, _ := measure.ProcCPU(st.Pid)
	res := &pgIdleResult{Window: window, Scanners: len(pgIdleScanners), Xacts: (x1 - x0) / elapsed,
		HostCPU:   ((host1 - host0) + (plug1 - plug0)).Seconds() / elapsed,
		ServerCPU: (pgServerCPU(srv.Pid()) - srv0).Seconds() / elapsed, ServerAlone: baseline, FFComputed: 440}
	return res, nil
}

func (r *pgIdleResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("10. POSTGRES IDLE: the %d Postgres reconcilers at their default intervals, 256 empty partitions, %s window", r.Scanners, r.Window)
	p("   database transactions/s (every candidate read, clock read and action is one): %.1f", r.Xacts)
	p("   FlowFabric, computed (postgres.md §5: one candidate query per partition per tick): %.0f queries/s", r.FFComputed)
	p("   ffscan/FlowFabric = %.3f; host + plugin %.2f%% of a core; PostgreSQL %.2f%% of a core (%.2f%% over the same window before the host started)",
		r.Xacts/r.FFComputed, 100*r.HostCPU, 100*r.ServerCPU, 100*r.ServerAlone)
}
