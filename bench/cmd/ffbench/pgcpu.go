package main

// The server's CPU over a drain, by what its processes serve: which of the
// hosts' connections (their reads by candidate function, their pools'
// actions), autovacuum, the server's own background processes. The
// total says the server is where more hosts cost more; this says which
// of its work grows.

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// benchAppName names the bench's own connections (seeding, progress
// reads), so that their CPU is not counted as the hosts'.
const benchAppName = "ffbench"

// pgProcess is a server process at one instant: what it serves and the
// CPU it has used.
type pgProcess struct {
	kind string
	cpu  time.Duration
}

// pgProcesses reads every server process's kind and CPU. A host's read
// connection is "reads <function>" by the last statement it ran (each
// candidate function is pinned to one connection); the hosts' other
// client connections are "hosts' pools"; a server process that is no
// client's is named by its backend_type.
func pgProcesses(ctx context.Context, stats *pgxpool.Pool) (map[int]pgProcess, error) {
	rows, err := stats.Query(ctx, `SELECT pid, coalesce(backend_type, ''), coalesce(datname, ''), coalesce(application_name, ''), coalesce(query, '')
		FROM pg_stat_activity`)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_activity: %w", err)
	}
	defer rows.Close()
	out := map[int]pgProcess{}
	for rows.Next() {
		var pid int
		var backend, db, app, query string
		if err := rows.Scan(&pid, &backend, &db, &app, &query); err != nil {
			return nil, err
		}
		out[pid] = pgProcess{kind: pgProcessKind(backend, db, app, query), cpu: procCPUWithChildren(pid)}
	}
	return out, rows.Err()
}

// afterRead finds the function a clock read follows.
var afterRead = regexp.MustCompile(`/\* after (\w+) \*/`)

// pgProcessKind names what a server process serves.
func pgProcessKind(backend, db, app, query string) string {
	switch {
	case backend != "client backend":
		return backend
	case db != "bench" || app == benchAppName:
		return "the bench's reads"
	case app == "ffscan reads":
		// A read with the clock ends with "SELECT ffscan.now_ms() /*
		// after <function> */" (postgres.ReadWithClock); the others call
		// their function.
		if m := afterRead.FindStringSubmatch(query); m != nil {
			return "reads " + m[1]
		}
		if m := pgFunctionRe.FindStringSubmatch(query); m != nil {
			return "reads " + m[1]
		}
		return "reads (none yet)"
	default:
		return "hosts' pools"
	}
}

// pgCPUBy is the CPU each kind of server process used between two
// snapshots; total is the server's over the same span (pgServerCPU), of
// which what no snapshot holds (processes that ended in between:
// autovacuum workers mostly, and the postmaster) is "ended".
func pgCPUBy(before, after map[int]pgProcess, total time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	var seen time.Duration
	for pid, p := range after {
		d := p.cpu
		if b, ok := before[pid]; ok {
			d -= b.cpu
		}
		if d > 0 {
			out[p.kind] += d
			seen += d
		}
	}
	if rest := total - seen; rest > 0 {
		out["ended, and the postmaster"] += rest
	}
	return out
}

// cpuByLine lists the largest shares of a CPU split, per item.
func cpuByLine(by map[string]time.Duration, items int, most int) string {
	type kc struct {
		kind string
		cpu  time.Duration
	}
	var ks []kc
	for k, c := range by {
		ks = append(ks, kc{k, c})
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].cpu > ks[j].cpu || ks[i].cpu == ks[j].cpu && ks[i].kind < ks[j].kind })
	var parts []string
	var rest time.Duration
	for i, k := range ks {
		if i >= most {
			rest += k.cpu
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f us", k.kind, 1e6*k.cpu.Seconds()/float64(items)))
	}
	if rest > 0 {
		parts = append(parts, fmt.Sprintf("the rest %.0f us", 1e6*rest.Seconds()/float64(items)))
	}
	return strings.Join(parts, ", ")
}
