package audit

// The trail on Postgres: one table of ffscan's own schema,
// ffscan.audit_entry, created with ffscan's function library
// (host/postgres/sql/library.sql), never one of FlowFabric's.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Table is the trail's table on Postgres.
const Table = "ffscan.audit_entry"

// NewPostgres returns a recorder writing to Postgres through pool, whose
// database holds ffscan's library (the table comes with it).
func NewPostgres(pool *pgxpool.Pool, cfg Config) *Recorder {
	cfg = cfg.withDefaults()
	return newRecorder(&pgStore{pool: pool, maxEntries: cfg.MaxEntries}, cfg)
}

// pgStore keeps the trail in ffscan.audit_entry. Each row's time is the
// database's clock at the insert (clock_timestamp()), as a stream
// entry's is the Valkey server's; its id (bigserial) orders rows written
// at the same time.
//
// The size bound is over the whole table (every host and every partition
// writing to the database), not per partition as on Valkey: a table has
// no streams to bound one by one, and a per-partition bound would cost a
// read of every partition's count. It is kept at every write, in the
// write's statement: rows whose id is at least maxEntries below the
// batch's last are deleted, an index range of the primary key, nearly
// always the few rows the batch pushed out. Ids that a failed insert
// used leave gaps (the table then holds a few fewer), and rows another
// host is inserting at the same moment are not yet visible to the
// DELETE (they go at the next write): like MAXLEN ~, the bound holds
// approximately, never by more than the batches in flight.
type pgStore struct {
	pool       *pgxpool.Pool
	maxEntries int64
}

// columns are the table's text columns, in the order of Entry's fields
// as row() gives them.
var columns = []string{"kind", "host", "action", "channel", "who", "scanner", "digest", "command", "execution", "key", "outcome", "detail"}

// row is e's text columns, in the order of columns.
func (e Entry) row() []string {
	return []string{e.Kind, e.Host, e.Action, e.Channel, e.Who, e.Scanner, e.Digest, e.Command, e.Execution, e.Key, e.Outcome, e.Detail}
}

// writeSQL inserts a batch, given as one array per column ($1..$12), and
// deletes the rows past the size bound ($13) in one statement: one round
// trip per batch. An empty text is stored as NULL (the execution index
// holds only the rows that name one).
var writeSQL = func() string {
	var sel, arrays []string
	for i, c := range columns {
		if c == "kind" {
			sel = append(sel, "u."+c)
		} else {
			sel = append(sel, "NULLIF(u."+c+", '')")
		}
		arrays = append(arrays, fmt.Sprintf("$%d::text[]", i+1))
	}
	return fmt.Sprintf(`WITH ins AS (
	INSERT INTO %s (%s)
	SELECT %s FROM unnest(%s) AS u(%s)
	RETURNING id)
DELETE FROM %s WHERE id <= (SELECT max(id) FROM ins) - $%d`,
		Table, strings.Join(columns, ", "), strings.Join(sel, ", "), strings.Join(arrays, ", "), strings.Join(columns, ", "), Table, len(columns)+1)
}()

// Name implements Store.
func (s *pgStore) Name() string { return "postgres" }

// Write appends a batch in one statement; it is written whole or not at
// all.
func (s *pgStore) Write(ctx context.Context, batch []Entry) (failed int, err error) {
	n := len(batch)
	// The statement's DELETE does not see the rows its INSERT adds (one
	// snapshot): those of a batch past the bound would stay until the
	// next write, so they are not sent (as if written and pushed out).
	if int64(len(batch)) > s.maxEntries {
		batch = batch[int64(len(batch))-s.maxEntries:]
	}
	args := make([]any, len(columns)+1)
	cols := make([][]string, len(columns))
	for _, e := range batch {
		for i, v := range e.row() {
			cols[i] = append(cols[i], v)
		}
	}
	for i := range cols {
		args[i] = cols[i]
	}
	args[len(columns)] = s.maxEntries
	if _, err := s.pool.Exec(ctx, writeSQL, args...); err != nil {
		return n, err
	}
	return 0, nil
}

// Trim deletes the rows older than before (through the index on the
// time).
func (s *pgStore) Trim(ctx context.Context, before time.Time) error {
	_, err := s.pool.Exec(ctx, "DELETE FROM "+Table+" WHERE at < $1", before)
	return err
}

// Query selects in the database. Only the conditions f sets are in the
// statement, so that each shape has a plan of its own: one execution's
// rows through the index on (execution, at), the others through the
// index on the time.
func (s *pgStore) Query(ctx context.Context, f Filter) ([]Entry, error) {
	var where []string
	var args []any
	cond := func(c string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(c, len(args)))
	}
	if f.Execution != "" {
		cond("execution = $%d", f.Execution)
	}
	if f.Scanner != "" {
		cond("scanner = $%d", f.Scanner)
	}
	if f.Kind != "" {
		cond("kind = $%d", f.Kind)
	}
	if !f.Since.IsZero() {
		cond("at >= $%d", f.Since)
	}
	sql := "SELECT id, at"
	for _, c := range columns {
		sql += ", coalesce(" + c + ", '')"
	}
	sql += " FROM " + Table
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, f.Limit)
	sql += fmt.Sprintf(" ORDER BY at DESC, id DESC LIMIT $%d", len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", Table, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
		var (
			id int64
			e  Entry
		)
		err := row.Scan(&id, &e.At, &e.Kind, &e.Host, &e.Action, &e.Channel, &e.Who, &e.Scanner, &e.Digest, &e.Command, &e.Execution, &e.Key, &e.Outcome, &e.Detail)
		e.ID = strconv.FormatInt(id, 10)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", Table, err)
	}
	return out, nil
}
