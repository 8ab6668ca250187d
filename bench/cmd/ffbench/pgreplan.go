package main

// The Postgres read-forms benchmark: what a wake-up's read of a few
// partitions costs in each of the candidate functions' two forms
// (library.sql: one query per partition, planned for its key; one query
// over every partition, with a generic plan kept per connection), in a
// steady state and right after a vacuum or analyze of one child, which
// invalidates every generic plan over its table (autovacuum does it all
// the time on a database that is written to).

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// pgReplanParts are the partitions a read asks for: a wake-up's handful.
var pgReplanParts = []uint16{3, 41, 97, 200}

// pgReplanFunction is the read measured: attempt_timeout's due read with
// its next-due companion, as a wake-up runs it (two functions, each over
// ff_attempt joined to ff_exec_core).
const pgReplanFunction = "lapsed_leases"

// pgReplanForm is one form's timings, each the median of its runs.
type pgReplanForm struct {
	Name string
	// Steady is a read with nothing invalidated since the last one.
	Steady time.Duration
	// Invalidated is the first read after a row was added to another
	// child of ff_attempt and that child analyzed (each time another),
	// and Worst the slowest of those.
	Invalidated, Worst time.Duration
}

type pgReplanResult struct {
	Runs  int
	Forms []pgReplanForm
}

// runPGReplan measures both forms on one connection of a throwaway
// database. The form is chosen by the number of partitions a call reads
// (ffscan.few_partitions()); to read the same partitions in the other
// form, the benchmark redefines that function on its own database.
func (b *bench) runPGReplan(ctx context.Context, runs int) (*pgReplanResult, error) {
	srv, setup, dsn, err := startPostgres(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	defer setup.Close()
	res := &pgReplanResult{Runs: runs}
	for _, form := range []struct {
		name string
		// redefine: the benchmark's own ffscan.few_partitions() (the
		// library's, 16, when empty).
		redefine string
	}{{"one query per partition", ""}, {"one query over all", "SELECT 0"}} {
		if form.redefine != "" {
			if _, err := setup.Exec(ctx, "CREATE OR REPLACE FUNCTION ffscan.few_partitions() RETURNS integer LANGUAGE sql IMMUTABLE AS $f$ "+form.redefine+" $f$"); err != nil {
				return nil, err
			}
		}
		f, err := b.pgReplanForm(ctx, dsn, runs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", form.name, err)
		}
		f.Name = form.name
		res.Forms = append(res.Forms, f)
		b.logf("pgreplan: %s: steady %s, after an analyze %s (worst %s)", f.Name, f.Steady, f.Invalidated, f.Worst)
	}
	return res, nil
}

// pgReplanForm times the reads on the host's read connections, all on one
// (warmed up as the host's are).
func (b *bench) pgReplanForm(ctx context.Context, dsn string, runs int) (pgReplanForm, error) {
	var f pgReplanForm
	reads, err := postgres.OpenReaders(ctx, postgres.Options{DSN: dsn}, 1)
	if err != nil {
		return f, err
	}
	defer reads.Close()
	pool := reads.For(pgReplanFunction)
	read := func() (time.Duration, error) {
		t0 := time.Now()
		_, _, err := postgres.ReadCandidatesNext(ctx, pool, pgReplanFunction, pgReplanParts, 256, 100, 0, scannerapi.Filter{})
		return time.Since(t0), err
	}
	var steady, after []time.Duration
	for range runs {
		d, err := read()
		if err != nil {
			return f, err
		}
		steady = append(steady, d)
	}
	for i := range runs {
		// A row in another partition each time, then an analyze of the
		// child it went to: its statistics change, which invalidates
		// the plans over the table.
		if err := pgReplanInvalidate(ctx, pool, uint16(120+i)); err != nil {
			return f, err
		}
		d, err := read()
		if err != nil {
			return f, err
		}
		after = append(after, d)
	}
	f.Steady, f.Invalidated, f.Worst = medianDuration(steady), medianDuration(after), slices.Max(after)
	return f, nil
}

// pgReplanInvalidate adds an attempt (no execution, a lease an hour
// away: no read finds it) in partition pk and analyzes the child of
// ff_attempt that holds it.
func pgReplanInvalidate(ctx context.Context, pool *pgxpool.Pool, pk uint16) error {
	var child string
	if err := pool.QueryRow(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
		lease_epoch, lease_expires_at_ms) VALUES ($1, gen_random_uuid(), 0, 'w', 'w-1', 1, ffscan.now_ms() + 3600000)
		RETURNING tableoid::regclass::text`, int16(pk)).Scan(&child); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{child}.Sanitize())
	return err
}

// medianDuration is the middle value of an odd count of durations.
func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}

func (r *pgReplanResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("11c. PG READ FORMS: a wake-up's read of %d partitions (%s with its next-due companion) in each form of the candidate", len(pgReplanParts), pgReplanFunction)
	p("    functions, on an idle server, one warmed connection; medians of %d reads each, steady and right after a row was added to", r.Runs)
	p("    another child of ff_attempt and the child analyzed (which invalidates every generic plan over the table, as autovacuum does)")
	p("   form                         steady     after an analyze   worst")
	for _, f := range r.Forms {
		p("   %-28s %-10s %-18s %s", f.Name, f.Steady.Round(10*time.Microsecond), f.Invalidated.Round(10*time.Microsecond), f.Worst.Round(10*time.Microsecond))
	}
	if len(r.Forms) == 2 && r.Forms[0].Steady > 0 && r.Forms[0].Invalidated > 0 {
		few, all := r.Forms[0], r.Forms[1]
		p("   over all / per partition: steady %.2f, after an analyze %.1f", all.Steady.Seconds()/few.Steady.Seconds(), all.Invalidated.Seconds()/few.Invalidated.Seconds())
	}
}
