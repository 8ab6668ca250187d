package main

// pghosts -pgstatements: the calls of every top-level statement over a
// drain's count, from pg_stat_statements, which the bench's server then
// loads. Its counts are kept in shared memory as each statement ends,
// not flushed late like the transaction counts, so they also split a
// count at the drain's end: what the hosts ran to act on the items, and
// what they ran idle over the wait for the statistics that follows.

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pgStatementsSettings load pg_stat_statements into the bench's server,
// counting top-level statements only (a library function's own
// statements are not the hosts').
var pgStatementsSettings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"}

// pgStatementsReset empties the counts (every database's).
func pgStatementsReset(ctx context.Context, stats *pgxpool.Pool) error {
	_, err := stats.Exec(ctx, "SELECT pg_stat_statements_reset()")
	return err
}

// pgStatementCalls reads the calls of the bench database's statements,
// summed by label (stmtLabel).
func pgStatementCalls(ctx context.Context, stats *pgxpool.Pool) (map[string]int64, error) {
	rows, err := stats.Query(ctx, `SELECT s.query, s.calls FROM pg_stat_statements s
		JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'bench'`)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var q string
		var calls int64
		if err := rows.Scan(&q, &calls); err != nil {
			return nil, err
		}
		out[stmtLabel(q)] += calls
	}
	return out, rows.Err()
}

var (
	insertInto  = regexp.MustCompile(`(?i)\binsert\s+into\s+(?:\w+\.)?(\w+)`)
	libraryCall = regexp.MustCompile(`ffscan\.(\w+)\s*\(`)
	spaces      = regexp.MustCompile(`\s+`)
)

// stmtLabel names a statement: the table it inserts into, else the
// first library function it calls, else its first words.
func stmtLabel(q string) string {
	if m := insertInto.FindStringSubmatch(q); m != nil {
		return "INSERT " + m[1]
	}
	if m := libraryCall.FindStringSubmatch(q); m != nil {
		return m[1]
	}
	q = spaces.ReplaceAllString(strings.TrimSpace(q), " ")
	if len(q) > 48 {
		q = q[:48] + "..."
	}
	return q
}

// minus is a's counts less b's, the labels left with none dropped.
func minus(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range a {
		if d := v - b[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// statementsLine lists the most called statements (at most top), each
// as calls per unit, and the total of all.
func statementsLine(calls map[string]int64, per float64, unit string, top int) string {
	type sc struct {
		label string
		n     int64
	}
	var ss []sc
	var total int64
	for l, n := range calls {
		ss = append(ss, sc{l, n})
		total += n
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].n > ss[j].n || ss[i].n == ss[j].n && ss[i].label < ss[j].label })
	parts := []string{fmt.Sprintf("all %.3f", float64(total)/per)}
	for i, s := range ss {
		if i == top {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.3f", s.label, float64(s.n)/per))
	}
	return strings.Join(parts, ", ") + " " + unit
}
