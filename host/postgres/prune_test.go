package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
)

// planNode is the part of an EXPLAIN (FORMAT JSON) plan node the pruning
// check reads.
type planNode struct {
	NodeType    string     `json:"Node Type"`
	Relation    string     `json:"Relation Name"`
	ActualLoops *float64   `json:"Actual Loops"`
	Plans       []planNode `json:"Plans"`
}

// explained collects the plans auto_explain reports to the client for
// every statement a call runs, nested ones included (the candidate
// functions are PL/pgSQL: a plain EXPLAIN of the call shows a Function
// Scan and nothing of the query inside).
type explained struct {
	mu    sync.Mutex
	plans []planNode
	bad   []string
}

func (e *explained) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := strings.IndexByte(n.Message, '{')
	if i < 0 {
		return
	}
	var doc struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(n.Message[i:]), &doc); err != nil {
		e.bad = append(e.bad, n.Message)
		return
	}
	e.plans = append(e.plans, doc.Plan)
}

func (e *explained) take() ([]planNode, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, b := e.plans, e.bad
	e.plans, e.bad = nil, nil
	return p, b
}

// scanned are the relations the plans read: every scan node that ran at
// least once (a child pruned at run time is in the plan, never executed).
func scanned(nodes []planNode) []string {
	var out []string
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Relation != "" && n.ActualLoops != nil && *n.ActualLoops > 0 {
			out = append(out, n.Relation)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return out
}

// childKeys maps each child of the partitioned tables the candidate
// functions read to the partition_key values it holds: PostgreSQL's own
// placement (the hash of the smallint key), which is not the child's
// suffix.
func childKeys(t *testing.T, conn *pgx.Conn) map[string][]int {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT c.relname, k.k
		FROM pg_partitioned_table pt
		JOIN pg_inherits i ON i.inhparent = pt.partrelid
		JOIN pg_class c ON c.oid = i.inhrelid
		LEFT JOIN generate_series(0, 255) AS k(k) ON satisfies_hash_partition(pt.partrelid, 256,
			(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'remainder (\d+)'))[1]::integer, k.k::smallint)
		WHERE pt.partrelid = ANY (ARRAY['ff_attempt', 'ff_exec_core', 'ff_waitpoint_pending', 'ff_suspension_current',
			'ff_budget_policy', 'ff_completion_event', 'ff_pending_cancel_groups', 'ff_worker_registry']::regclass[])`)
	require.NoError(t, err)
	out := map[string][]int{}
	for rows.Next() {
		var (
			child string
			k     *int
		)
		require.NoError(t, rows.Scan(&child, &k))
		// A child may hold none of the 256 keys (they land in 157
		// children): it is mapped, with no key.
		if _, ok := out[child]; !ok {
			out[child] = nil
		}
		if k != nil {
			out[child] = append(out[child], *k)
		}
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, out)
	return out
}

var childSuffix = regexp.MustCompile(`_p\d+$`)

// TestCandidateFunctionsPrune runs every candidate function under
// auto_explain (ANALYZE, nested statements) and checks, from the plans of
// what it ran, that it read only the children of its partitioned tables
// that hold the partitions it was asked for: no scan of all 256 children
// per partition, whatever PostgreSQL's generic plan looks like.
func TestCandidateFunctionsPrune(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	ctx := context.Background()
	ex := &explained{}
	cfg := pool.Config().ConnConfig.Copy()
	cfg.OnNotice = ex.notice
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	keysOf := childKeys(t, conn)
	for _, s := range []string{
		"LOAD 'auto_explain'",
		"SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_analyze = on",
		"SET auto_explain.log_timing = off",
		"SET auto_explain.log_nested_statements = on",
		"SET auto_explain.log_format = json",
		"SET auto_explain.log_level = notice",
	} {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}

	// Rows in the partitions read, so that every join's inner side runs
	// (an empty outer side would leave a non-pruned inner scan unrun).
	const flowCount = 64 // the worker registry's reads depend on it
	parts := []uint16{51, 52}
	for _, pk := range parts {
		eid := testUUID(9000+int(pk), 1)
		tenantExec(t, pool, int(pk), eid, "active", "not_applicable", `{"namespace": "a"}`, ms(-100))
		lapsedLease(t, pool, int(pk), eid)
		exec(t, pool, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms, committed_at_ms)
			VALUES ($1, $2, 'success', 1, ffscan.now_ms() - 60000)`, pk, eid)
		// Alive, so that no other test's sweep (registry partition pk +
		// 64 is also one of flow partition pk mod 16's) finds it dead:
		// the read of its child runs all the same.
		exec(t, pool, `INSERT INTO ff_worker_registry (partition_key, namespace, worker_instance_id, worker_id, lanes, capabilities_csv,
			last_heartbeat_ms, liveness_ttl_ms, registered_at_ms) VALUES ($1, 'a', $2, 'w', '{}', '', ffscan.now_ms(), 3600000, 1)`, int(pk)+flowCount, eid)
	}

	fns := make([]string, 0, len(postgres.CandidateFunctions)+len(postgres.NextDueFunctions))
	for fn := range postgres.CandidateFunctions {
		fns = append(fns, fn)
	}
	// The next-due companions, read from as_of_ms 0 so that the rows
	// planted (lapsed a moment ago) are theirs too.
	isNext := map[string]bool{}
	for _, next := range postgres.NextDueFunctions {
		fns = append(fns, next)
		isNext[next] = true
	}
	sort.Strings(fns)
	// Both forms of a read (ffscan.few_partitions()): the two partitions
	// planted, one query each; and with 40 more, one query over all.
	many := slices.Clone(parts)
	for pk := uint16(100); pk < 140; pk++ {
		many = append(many, pk)
	}
	require.Greater(t, len(many), one[int](t, pool, "SELECT ffscan.few_partitions()"))
	for _, asked := range [][]uint16{parts, many} {
		// The registry partitions flow partition i sweeps: i, i +
		// flowCount, ... up to 255.
		registry := map[int]bool{}
		for _, p := range asked {
			for w := int(p); w < 256; w += flowCount {
				registry[w] = true
			}
		}
		named := map[int]bool{}
		var pks []int16
		for _, p := range asked {
			named[int(p)] = true
			pks = append(pks, int16(p))
		}
		for _, fn := range fns {
			args := []any{pks, 50, flowCount}
			if isNext[fn] {
				args = []any{pks, flowCount, int64(0)}
			}
			for _, filter := range [][]any{{nil, nil, nil}, {"a", "k", "v"}} {
				name := fmt.Sprintf("%s %d partitions", fn, len(asked))
				if filter[0] != nil {
					name += " (filtered)"
				}
				t.Run(name, func(t *testing.T) {
					_, _ = ex.take()
					rows, err := conn.Query(ctx, "SELECT * FROM ffscan."+fn+"($1, $2, $3, $4, $5, $6)", append(slices.Clone(args), filter...)...)
					require.NoError(t, err)
					rows.Close()
					require.NoError(t, rows.Err())
					plans, bad := ex.take()
					require.Empty(t, bad, "plans that did not parse")
					require.NotEmpty(t, plans, "auto_explain reported the statements run")
					read := scanned(plans)
					children := 0
					for _, rel := range read {
						ks, ok := keysOf[rel]
						if !ok {
							require.False(t, childSuffix.MatchString(rel) && strings.HasPrefix(rel, "ff_"), "%s: a child this test does not map", rel)
							continue
						}
						children++
						want := named
						if strings.HasPrefix(rel, "ff_worker_registry_") {
							want = registry
						}
						holds := slices.ContainsFunc(ks, func(k int) bool { return want[k] })
						assert.True(t, holds, "%s read %s, which holds partitions %v, none of them asked for", fn, rel, ks)
					}
					assert.Positive(t, children, "%s read some child partition (%v)", fn, read)
					if isNext[fn] && fn != "workers_expired_next" {
						// The next entry is one probe of the index the due
						// read uses (the registry has none on its expiry).
						assert.Empty(t, seqScans(plans, keysOf), "%s scans a child sequentially instead of probing its index", fn)
					}
					// At most one child per named partition and table: a
					// statement that scanned every child fails above; this
					// bounds the count too.
					perTable := map[string]int{}
					for _, rel := range read {
						if _, ok := keysOf[rel]; ok {
							perTable[childSuffix.ReplaceAllString(rel, "")]++
						}
					}
					for table, n := range perTable {
						limit := len(asked)
						if table == "ff_worker_registry" {
							limit = len(registry)
						}
						assert.LessOrEqual(t, n, limit*reads(plans, table), fmt.Sprintf("%s: %d reads of %s's children", fn, n, table))
					}
				})
			}
		}
	}
}

// reads counts the statements of plans that read table at all: each may
// read the named children once (a function reading a table in two
// statements reads its children twice).
func reads(plans []planNode, table string) int {
	n := 0
	for _, p := range plans {
		for _, rel := range scanned([]planNode{p}) {
			if strings.HasPrefix(rel, table+"_p") {
				n++
				break
			}
		}
	}
	return max(n, 1)
}

// seqScans are the children of the candidate tables that the plans read
// with a sequential scan.
func seqScans(nodes []planNode, keysOf map[string][]int) []string {
	var out []string
	var walk func(n planNode)
	walk = func(n planNode) {
		if _, child := keysOf[n.Relation]; child && n.NodeType == "Seq Scan" && n.ActualLoops != nil && *n.ActualLoops > 0 {
			out = append(out, n.Relation)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return out
}
