package main

// The statement log of a Postgres measure: the server logs every
// statement with its duration and backend pid (log_min_duration_statement
// = 0), the bench notes where the log stood when the measured round began
// and ended, and reads what the round's statements took. A library
// function's first call on a connection plans its statements (over every
// child partition for a generic plan: hundreds of milliseconds); the log
// says whether one happened in the round, and which statements were the
// slowest.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// enableStatementLog turns the server's log on (ALTER SYSTEM, then a
// reload): each statement that took minMs or more (0: every statement)
// with its duration, the backend's pid in each line, no bind parameters
// (the lines stay short), and autovacuum runs and lock waits, which
// would stall a round too.
func enableStatementLog(ctx context.Context, pool *pgxpool.Pool, minMs int) error {
	for _, s := range []string{
		fmt.Sprintf("ALTER SYSTEM SET log_min_duration_statement = %d", minMs),
		"ALTER SYSTEM SET log_line_prefix = '%m [%p] '",
		"ALTER SYSTEM SET log_parameter_max_length = 0",
		"ALTER SYSTEM SET log_autovacuum_min_duration = 0",
		"ALTER SYSTEM SET log_lock_waits = on",
		"SELECT pg_reload_conf()",
	} {
		if _, err := pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("statement log: %w", err)
		}
	}
	return nil
}

// stallThreshold is the duration from which a statement of the measured
// round counts as a stall: a first-use plan over 256 partitions took 170
// to 910 ms; a warm statement takes about a millisecond.
const stallThresholdMs = 50.0

// logSize is where the log ends now (the next round's lines follow).
func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// pgStatement is one logged statement.
type pgStatement struct {
	Pid      int
	Ms       float64
	Text     string   // "execute <name>: SELECT ...", "statement: ...", ...
	Calls    []string // ffscan's functions it calls
	FirstUse []string // of them, those its connection had not called before
}

// pgLogCheck is what the statement log says of a measured round.
type pgLogCheck struct {
	Read       bool // the log was read
	Statements int
	Slowest    []pgStatement // the five slowest, slowest first
	FirstUses  int           // statements that called a library function first on their connection
	Over       int           // statements over stallThresholdMs
	Autovacuum int           // autovacuum/autoanalyze runs logged in the round
	// AutovacuumBefore counts those between the host's start and the
	// round: a vacuum or analyze of any child partition invalidates every
	// plan over that table on every connection, which plans again at its
	// next run (a stall as long as a first use).
	AutovacuumBefore int
	LockWaits        int
}

// Stalled says whether the round had a first-use planning stall: a
// statement over the threshold that was a first call on its connection,
// or any statement over the threshold (a plan made later than its first
// call, as a plan cache's switch to a generic plan is, stalls as much).
func (c pgLogCheck) Stalled() bool { return c.Over > 0 }

var (
	// 2026-11-29 19:50:01.123 UTC [1234] LOG:  duration: 0.123 ms  execute stmtcache_1: SELECT ...
	pgLogLine   = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[(\d+)\] (\w+):  (.*)$`)
	pgDuration  = regexp.MustCompile(`^duration: ([0-9.]+) ms  (.*)$`)
	pgFunctions = regexp.MustCompile(`ffscan\.([a-z_]+)\s*\(`)
)

// benchStatement says a statement is the bench's own (seeding,
// clearing, reading its tables), not the host's.
func benchStatement(text string) bool {
	return strings.Contains(text, "bench_due") || strings.Contains(text, "bench_done")
}

// readPGLog reads the log's entries from 0 to end: those before start
// say which functions each connection has called, those from start are
// the round's; hostStart is where the log stood when the host started.
func readPGLog(path string, hostStart, start, end int64) (pgLogCheck, error) {
	f, err := os.Open(path)
	if err != nil {
		return pgLogCheck{}, err
	}
	defer f.Close()
	return checkPGLog(io.LimitReader(f, end), hostStart, start)
}

func checkPGLog(r io.Reader, hostStart, start int64) (pgLogCheck, error) {
	c := pgLogCheck{Read: true}
	seen := map[int]map[string]bool{}
	var stmts []pgStatement
	var entry []string
	var entryAt, off int64
	flush := func() {
		if len(entry) == 0 {
			return
		}
		m := pgLogLine.FindStringSubmatch(entry[0])
		text := strings.Join(append([]string{m[3]}, entry[1:]...), " ")
		entry = entry[:0]
		inRound := entryAt >= start
		pid, _ := strconv.Atoi(m[1])
		if strings.HasPrefix(text, "automatic ") {
			switch {
			case inRound:
				c.Autovacuum++
			case entryAt >= hostStart:
				c.AutovacuumBefore++
			}
		}
		if inRound && strings.Contains(text, "still waiting for") {
			c.LockWaits++
		}
		d := pgDuration.FindStringSubmatch(text)
		if m[2] != "LOG" || d == nil || benchStatement(text) {
			return
		}
		st := pgStatement{Pid: pid, Text: d[2]}
		st.Ms, _ = strconv.ParseFloat(d[1], 64)
		if seen[pid] == nil {
			seen[pid] = map[string]bool{}
		}
		for _, f := range pgFunctions.FindAllStringSubmatch(d[2], -1) {
			if !slices.Contains(st.Calls, f[1]) {
				st.Calls = append(st.Calls, f[1])
			}
		}
		// A parse or bind names the functions the execute that follows
		// runs (PL/pgSQL plans its statements as it runs them).
		runs := strings.HasPrefix(st.Text, "execute ") || strings.HasPrefix(st.Text, "statement: ")
		for _, fn := range st.Calls {
			if runs && !seen[pid][fn] {
				seen[pid][fn] = true
				st.FirstUse = append(st.FirstUse, fn)
			}
		}
		if !inRound {
			return
		}
		stmts = append(stmts, st)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadString('\n')
		if len(line) > 0 {
			at := off
			off += int64(len(line))
			line = strings.TrimRight(line, "\n")
			if pgLogLine.MatchString(line) {
				flush()
				entry, entryAt = append(entry, line), at
			} else if len(entry) > 0 {
				entry = append(entry, strings.TrimSpace(line))
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return c, err
		}
	}
	flush()
	c.Statements = len(stmts)
	for _, st := range stmts {
		if len(st.FirstUse) > 0 {
			c.FirstUses++
		}
		if st.Ms >= stallThresholdMs {
			c.Over++
		}
	}
	slices.SortStableFunc(stmts, func(a, b pgStatement) int {
		switch {
		case a.Ms > b.Ms:
			return -1
		case a.Ms < b.Ms:
			return 1
		}
		return 0
	})
	c.Slowest = stmts[:min(5, len(stmts))]
	return c, nil
}

// print says what the log showed of the round.
func (c pgLogCheck) print(p func(string, ...any), mode string) {
	if !c.Read {
		p("     %-9s statement log: not read", mode)
		return
	}
	stall := "none"
	if c.Stalled() {
		stall = fmt.Sprintf("YES (%d over %.0f ms)", c.Over, stallThresholdMs)
	}
	p("     %-9s statement log of the measured round: %d statements; first calls of a library function on a connection: %d; "+
		"statements over %.0f ms: %d; autovacuum runs: %d (%d since the host started); lock waits: %d; planning stall: %s",
		mode, c.Statements, c.FirstUses, stallThresholdMs, c.Over, c.Autovacuum, c.AutovacuumBefore, c.LockWaits, stall)
	for _, st := range c.Slowest {
		text := st.Text
		if len(text) > 110 {
			text = text[:110] + "..."
		}
		first := ""
		if len(st.FirstUse) > 0 {
			first = " [first call on its connection: " + strings.Join(st.FirstUse, ", ") + "]"
		}
		p("       %8.1f ms  pid %d  %s%s", st.Ms, st.Pid, text, first)
	}
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}
