package main

// The "pgtiming" benchmark (issue 34, item 4) is "timing" for a Postgres
// host: the real host binary serving a throwaway PostgreSQL alone, in
// polling mode (scheduler.wakeups false) and with due-time wake-ups, side
// by side in one run, timed from each item's due instant to the commit of
// the reconciler's action on it:
//
//   - due -> promoted: delayed executions created at least one
//     pg_delayed_promoter interval (750 ms) before they are due;
//   - expiry -> expired: attempt leases that lapse at least one
//     pg_attempt_timeout interval (2 s) after they were written.
//
// The action's commit time is stamped by a trigger of the bench's own on
// ff_exec_core (the database clock, the one the reconcilers judge by).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
)

// pgTimingModes are the two ways of running the Postgres host.
var pgTimingModes = []timingMode{
	{"polling", "scheduler:\n  wakeups: false\n"},
	{"due-time", "scheduler:\n  wakeups: true\n"},
}

type pgTimingResult struct {
	Server          string
	PromoteInterval time.Duration // pg_delayed_promoter's
	ExpireInterval  time.Duration // pg_attempt_timeout's
	PromoteLead     time.Duration // first due, after creation
	ExpireLead      time.Duration
	Spread          time.Duration // of the due instants (promote); ExpireSpread for leases
	ExpireSpread    time.Duration
	Promote         []latencyRun
	Expire          []latencyRun
	PromoteLog      []pgLogCheck // the statement log of each Promote run's measured round
	ExpireLog       []pgLogCheck
}

// pgTimingSQL is the bench's own instrumentation: each item's due instant
// (written with it) and the commit of its handling, stamped by a trigger.
const pgTimingSQL = `
CREATE TABLE IF NOT EXISTS bench_due (execution_id uuid PRIMARY KEY, due_ms bigint NOT NULL);
CREATE TABLE IF NOT EXISTS bench_done (execution_id uuid PRIMARY KEY, done_ms bigint NOT NULL);
CREATE OR REPLACE FUNCTION bench_note_done() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	IF (OLD.eligibility_state = 'not_eligible_until_time' AND NEW.eligibility_state = 'eligible_now')
		OR (OLD.lifecycle_phase <> 'terminal' AND NEW.lifecycle_phase = 'terminal') THEN
		INSERT INTO bench_done VALUES (NEW.execution_id, ffscan.now_ms()) ON CONFLICT DO NOTHING;
	END IF;
	RETURN NULL;
END
$fn$;
CREATE OR REPLACE TRIGGER bench_done AFTER UPDATE ON ff_exec_core FOR EACH ROW EXECUTE FUNCTION bench_note_done();
`

func (b *bench) runPGTiming(ctx context.Context, sz sizes) (*pgTimingResult, error) {
	srv, pool, dsn, err := startPostgres(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	defer pool.Close()
	if err := enableStatementLog(ctx, pool, 0); err != nil {
		return nil, err
	}
	logPath := srv.LogPath()
	if b.pgLogDir != "" {
		defer func() {
			if err := copyFile(logPath, filepath.Join(b.pgLogDir, "pgtiming.log")); err != nil {
				b.logf("pgtiming: keep the server's log: %v", err)
			}
		}()
	}
	res := &pgTimingResult{PromoteInterval: 750 * time.Millisecond, ExpireInterval: 2 * time.Second,
		PromoteLead: 2 * time.Second, Spread: time.Second, ExpireLead: 4 * time.Second, ExpireSpread: 3 * time.Second}
	_ = pool.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&res.Server)
	if _, err := pool.Exec(ctx, pgTimingSQL); err != nil {
		return res, fmt.Errorf("instrument: %w", err)
	}
	expireN, promoteN := 2000, 500
	if sz.DrainLeases < fullSizes.DrainLeases {
		expireN, promoteN = 500, 100
	}
	for _, m := range pgTimingModes {
		run, lc, err := b.pgTimed(ctx, pool, dsn, logPath, m, pgreconcilers.DelayedPromoterName, promoteN, res.PromoteLead, res.Spread, seedDelays)
		if err != nil {
			return res, fmt.Errorf("promote, %s: %w", m.Name, err)
		}
		res.Promote, res.PromoteLog = append(res.Promote, run), append(res.PromoteLog, lc)
	}
	for _, m := range pgTimingModes {
		run, lc, err := b.pgTimed(ctx, pool, dsn, logPath, m, pgreconcilers.AttemptTimeoutName, expireN, res.ExpireLead, res.ExpireSpread, seedLeases)
		if err != nil {
			return res, fmt.Errorf("expire, %s: %w", m.Name, err)
		}
		res.Expire, res.ExpireLog = append(res.Expire, run), append(res.ExpireLog, lc)
	}
	return res, nil
}

// seedDelays writes n delayed executions over 256 partitions, due lead to
// lead+spread from now, evenly.
func seedDelays(ctx context.Context, pool *pgxpool.Pool, n int, lead, spread time.Duration) error {
	_, err := pool.Exec(ctx, `WITH s AS (SELECT gen_random_uuid() AS eid, (i % 256)::smallint AS pk,
			ffscan.now_ms() + $2::bigint + (i * $3::bigint / $1::bigint) AS due FROM generate_series(0, $1::bigint - 1) AS i),
		e AS (INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
			public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields)
			SELECT pk, eid, 'default', 'runnable', 'unowned', 'not_eligible_until_time', 'delayed', 'pending_first_attempt',
				ffscan.now_ms(), due, '{"namespace": "bench"}' FROM s)
		INSERT INTO bench_due SELECT eid, due FROM s`, n, lead.Milliseconds(), spread.Milliseconds())
	return err
}

// seedLeases writes n active executions over 256 partitions whose attempt
// 0's lease lapses lead to lead+spread from now, evenly, with no retry
// policy (each ends terminal). The due instant is the lease's expiry.
func seedLeases(ctx context.Context, pool *pgxpool.Pool, n int, lead, spread time.Duration) error {
	_, err := pool.Exec(ctx, `WITH s AS (SELECT gen_random_uuid() AS eid, (i % 256)::smallint AS pk,
			ffscan.now_ms() + $2::bigint + (i * $3::bigint / $1::bigint) AS due FROM generate_series(0, $1::bigint - 1) AS i),
		e AS (INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
			public_state, attempt_state, created_at_ms, raw_fields)
			SELECT pk, eid, 'default', 'active', 'leased', 'not_applicable', 'running', 'running_attempt', 1, '{"namespace": "bench"}' FROM s),
		a AS (INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch, lease_expires_at_ms)
			SELECT pk, eid, 0, 'w', 'w-1', 1, due FROM s)
		INSERT INTO bench_due SELECT eid, due FROM s`, n, lead.Milliseconds(), spread.Milliseconds())
	return err
}

// pgTimed runs the host with scanner in mode m, waits for its first
// sweep, seeds n items due lead..lead+spread from then, waits until every
// one was handled and returns due -> handled.
func (b *bench) pgTimed(ctx context.Context, pool *pgxpool.Pool, dsn, logPath string, m timingMode, scanner string, n int, lead, spread time.Duration,
	seed func(context.Context, *pgxpool.Pool, int, time.Duration, time.Duration) error) (latencyRun, pgLogCheck, error) {
	run, lc := latencyRun{Mode: m.Name, Items: n}, pgLogCheck{}
	for _, sql := range []string{"DELETE FROM ff_exec_core", "DELETE FROM ff_attempt", "DELETE FROM ff_completion_event",
		"DELETE FROM ff_lease_event", "TRUNCATE bench_due, bench_done",
		"VACUUM ANALYZE ff_exec_core, ff_attempt, ff_completion_event, ff_lease_event"} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return run, lc, err
		}
	}
	level := "warn"
	if b.verbose {
		level = "info"
	}
	hostStart := logSize(logPath)
	h, err := hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir,
		Scanners: []hostproc.Scanner{{Name: scanner}}, LogLevel: level, Log: io.Writer(os.Stderr),
		Extra: fmt.Sprintf("postgres:\n  dsn: %q\n  pool_size: %d\ncompletions:\n  enabled: false\n", dsn, pgPool) + m.Extra}, 60*time.Second)
	if err != nil {
		return run, lc, err
	}
	defer h.Stop()
	// The host holds every partition (it shares them through the
	// database with any other host) and is past the first sweep (which
	// comes after a random part of the interval), so that every item is
	// first read by a later one.
	want := int(b.parts.Flow)
	if scanner == pgreconcilers.BudgetResetName {
		want = int(b.parts.Budget)
	}
	if err := pollUntil(ctx, time.Minute, 100*time.Millisecond, func() (bool, error) {
		doc, err := h.Status(ctx)
		if err != nil {
			return false, err
		}
		if doc.Sharing == nil || doc.Sharing.Owned["flow"] < want {
			return false, nil
		}
		for _, s := range doc.Scanners {
			if s.Name == scanner && s.Cycle >= 1 {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return run, lc, fmt.Errorf("waiting for %s's first sweep: %w", scanner, err)
	}
	// A warm-up round, not measured: every connection of the host's pool
	// has planned the functions (a PL/pgSQL function's plan is made at its
	// first call on a connection, tens of milliseconds over 256 children)
	// before the measured items come due.
	if err := b.pgRound(ctx, pool, n, lead, spread, seed); err != nil {
		return run, lc, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := pool.Exec(ctx, "TRUNCATE bench_due, bench_done"); err != nil {
		return run, lc, err
	}
	logStart := logSize(logPath)
	if err := b.pgRound(ctx, pool, n, lead, spread, seed); err != nil {
		return run, lc, err
	}
	if lc, err = readPGLog(logPath, hostStart, logStart, logSize(logPath)); err != nil {
		b.logf("pgtiming: the statement log: %v", err)
	}
	rows, err := pool.Query(ctx, "SELECT d.done_ms - u.due_ms FROM bench_due u LEFT JOIN bench_done d USING (execution_id)")
	if err != nil {
		return run, lc, err
	}
	var lat []time.Duration
	for rows.Next() {
		var ms *int64
		if err := rows.Scan(&ms); err != nil {
			rows.Close()
			return run, lc, err
		}
		if ms == nil {
			run.Unmarked++
			continue
		}
		lat = append(lat, time.Duration(*ms)*time.Millisecond)
	}
	if err := rows.Err(); err != nil {
		return run, lc, err
	}
	run.Latency, run.Load = measure.Distribution(lat), measure.Load()
	b.logf("pgtiming: %s, %s: %s", scanner, m.Name, run.Latency)
	if doc, err := h.Status(ctx); err == nil {
		for _, s := range doc.Scanners {
			if s.Name == scanner {
				b.logf("pgtiming: %s, %s: %d sweeps (the last took %s), %d wake-ups, %d processed, %d errors", scanner, m.Name,
					s.Cycle, s.LastCycleDuration, s.Wakeups, s.Processed, s.Errors)
			}
		}
	}
	return run, lc, nil
}

// pgRound seeds n items due lead..lead+spread from now and waits until
// every item seeded so far was handled.
func (b *bench) pgRound(ctx context.Context, pool *pgxpool.Pool, n int, lead, spread time.Duration,
	seed func(context.Context, *pgxpool.Pool, int, time.Duration, time.Duration) error) error {
	if err := seed(ctx, pool, n, lead, spread); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	// The wait polls 50 times a second beside the host it measures, on a
	// machine of two cores, so its query must cost next to nothing: two
	// counts. A join of the two tables was planned, once per connection,
	// while bench_done was empty or held only the last round's dead rows,
	// as a loop over bench_done for every due row: 200-370 ms a poll, one
	// core of the two taken from the host all through the round. Every
	// execution in bench_done is one of bench_due's (the tables are
	// emptied together, with the executions, before each run), and the
	// results' join (after the wait) counts any item never marked.
	return waitUntil(ctx, lead+spread+time.Minute, func() (bool, error) {
		var left int
		err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM bench_due) - (SELECT count(*) FROM bench_done)").Scan(&left)
		return left <= 0, err
	})
}

func (r *pgTimingResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("11b. PG TIMING (issue 34, item 4): the host binary serving PostgreSQL %s alone, in polling mode", r.Server)
	p("    (scheduler.wakeups false) and with due-time wake-ups (the default), side by side; due -> the action's commit")
	printLatencies(p, fmt.Sprintf("due -> promoted: delayed executions due %s..%s after they were written, pg_delayed_promoter at %s",
		r.PromoteLead, r.PromoteLead+r.Spread, r.PromoteInterval), "executions", "unhandled", r.Promote)
	printLatencies(p, fmt.Sprintf("expiry -> expired: attempt leases lapsing %s..%s after they were written, pg_attempt_timeout at %s",
		r.ExpireLead, r.ExpireLead+r.ExpireSpread, r.ExpireInterval), "leases", "unhandled", r.Expire)
	p("   the PostgreSQL statement log of each measured round (log_min_duration_statement = 0; the five slowest statements):")
	for i, lc := range r.PromoteLog {
		p("     due -> promoted:")
		lc.print(p, r.Promote[i].Mode)
	}
	for i, lc := range r.ExpireLog {
		p("     expiry -> expired:")
		lc.print(p, r.Expire[i].Mode)
	}
}
