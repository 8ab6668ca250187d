package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// The host's serving pool (Options.Ready): when Connect returns, every
// connection of the pool is open and has run each function of ffscan's
// library the host calls on it once (so the planning of a first call is
// paid, not by a dispatch), nothing was written, and the pool keeps them
// all open (MinConns its size, no age limit). The candidate reads are not
// run there: they have connections of their own (Readers).
func TestReadyPoolConnectionsRanEveryFunctionThePoolServes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := postgrestest.SchemaDB(t, 1)
	const size = 3
	// The pool's sessions count their PL/pgSQL calls (a superuser's
	// setting, given at connect).
	t0 := time.Now()
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: admin.Config().ConnString() + "&track_functions=pl", PoolSize: size, Ready: true})
	require.NoError(t, err)
	defer pool.Close()
	t.Logf("%d connections opened and warmed up in %s", size, time.Since(t0).Round(time.Millisecond))
	assert.Equal(t, int32(size), pool.Stat().TotalConns(), "every connection open when Connect returns")
	assert.Equal(t, int32(size), pool.Config().MinConns, "the pool keeps them all")
	assert.Zero(t, pool.Config().MaxConnLifetime, "none is closed for its age")

	// Each connection hands its counts to the statistics at its next
	// statement's end (forced: not after a second).
	var conns []*pgxpool.Conn
	for range size {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
		require.NoError(t, err)
	}
	assert.Equal(t, int32(size), pool.Stat().TotalConns(), "no connection was opened for these")
	for _, c := range conns {
		c.Release()
	}
	calls := functionCalls(t, admin)
	names := map[string]bool{}
	for _, s := range postgres.WarmUpStatements() {
		for _, m := range regexp.MustCompile(`ffscan\.(\w+)\(`).FindAllStringSubmatch(s, -1) {
			names[m[1]] = true
		}
	}
	for _, fn := range mapsKeys(postgres.ActionFunctions) {
		assert.True(t, names[fn], "%s is warmed up", fn)
	}
	// The candidate reads run on Readers, which warm them up.
	for _, fn := range mapsKeys(postgres.CandidateFunctions) {
		assert.False(t, names[fn], "%s is not run on the pool", fn)
		if next, ok := postgres.NextDueFunctions[fn]; ok {
			assert.False(t, names[next], "%s is not run on the pool", next)
		}
	}
	for fn := range names {
		if fn == "share_leave" || fn == "now_ms" || fn == "few_partitions" {
			continue // SQL functions: track_functions=pl counts PL/pgSQL's
		}
		assert.GreaterOrEqual(t, calls[fn], int64(size), "%s ran once on each of the %d connections", fn, size)
	}
	var written int
	require.NoError(t, admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM ffscan.share_member) + (SELECT count(*) FROM ffscan.share_owner)").Scan(&written))
	assert.Zero(t, written, "the warm-up wrote nothing")
}

func mapsKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Neither a ready pool's connection nor a reader's makes a generic plan
// once handed out: each generic plan a reader uses (the candidate reads',
// made over every child partition, hundreds of milliseconds each) was
// made by its warm-up, and the actions' statements on the pool, which the
// warm-up's not-found calls never reach, are planned for their one
// partition at each call.
// The evidence is the session's own memory: a generic plan lives in a
// CachedPlan memory context named by its statement
// (pg_backend_memory_contexts) for as long as the session keeps it, a
// custom plan's context is freed after its run. On a session with
// PostgreSQL's default plan_cache_mode (auto), the same calls do make
// generic plans: the sixth run of each action statement on a connection.
func TestReadyPoolConnectionsMakeNoGenericPlanAfterTheHandOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := postgrestest.SchemaDB(t, 1)
	dsn := admin.Config().ConnString()

	// Per connection checked: 8 lapsed leases without a retry policy, 8
	// with one, 8 delayed executions due, over 24 partitions.
	seed := func(base int) (leases [][2]any, delays [][2]any) {
		for i := range 24 {
			pk, eid := int16(base+i), testUUID(base+i, base+i)
			switch {
			case i < 16:
				policy := "null"
				if i >= 8 {
					policy = `{"retry_policy": {"max_retries": 3}}`
				}
				_, err := admin.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
					eligibility_state, public_state, attempt_state, created_at_ms, policy, raw_fields)
					VALUES ($1, $2, 'default', 'active', 'leased', 'not_applicable', 'running', 'running_attempt', 1, $3::jsonb, '{"namespace": "ns"}')`,
					pk, eid, policy)
				require.NoError(t, err)
				_, err = admin.Exec(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
					lease_epoch, lease_expires_at_ms) VALUES ($1, $2, 0, 'w', 'w-1', 1, ffscan.now_ms() - 10)`, pk, eid)
				require.NoError(t, err)
				leases = append(leases, [2]any{pk, eid})
			default:
				_, err := admin.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
					eligibility_state, public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields)
					VALUES ($1, $2, 'default', 'runnable', 'unowned', 'not_eligible_until_time', 'delayed', 'pending_first_attempt', 1,
					ffscan.now_ms() - 10, '{"namespace": "ns"}')`, pk, eid)
				require.NoError(t, err)
				delays = append(delays, [2]any{pk, eid})
			}
		}
		return leases, delays
	}
	genericPlans := func(c *pgxpool.Conn) map[string]int {
		// Plans of statements on the tables (PL/pgSQL's simple
		// expressions, such as an IF's condition, have a generic plan
		// of their own, over no table, made at their first run).
		rows, err := c.Query(ctx, `SELECT ident FROM pg_backend_memory_contexts
			WHERE name = 'CachedPlan' AND ident ~* '((from|update|into|join)\s+ff_)|(ffscan\.\w+_in\()'`)
		require.NoError(t, err)
		out := map[string]int{}
		for rows.Next() {
			var ident string
			require.NoError(t, rows.Scan(&ident))
			out[ident]++
		}
		require.NoError(t, rows.Err())
		return out
	}
	// run calls what a host calls, through the host's own calls (the
	// argument shapes matter: PL/pgSQL compiles a function, and plans
	// its statements, once per input collation of its calls): each
	// candidate read, with its next-due companion, on the partitions
	// that hold the rows, seven times over (past the plan cache's five
	// custom plans), each action on a row it changes, and the clock.
	run := func(pool *pgxpool.Pool, reads *postgres.Readers, leases, delays [][2]any) {
		var parts []uint16
		for _, l := range append(leases, delays...) {
			parts = append(parts, uint16(l[0].(int16)))
		}
		// The reads in both forms (library.sql): 8 of these partitions,
		// one query each, and all 24, one query over all.
		for i := range 7 {
			f := scannerapi.Filter{}
			if i == 6 {
				f = scannerapi.Filter{Namespace: "ns"}
			}
			for _, ps := range [][]uint16{parts[:8], parts} {
				for fn := range postgres.CandidateFunctions {
					_, err := postgres.ReadCandidates(ctx, reads.For(fn), fn, ps, nil, 256, 10, f)
					require.NoError(t, err)
					_, err = postgres.CountCandidates(ctx, reads.For(fn), fn, ps, 256, f)
					require.NoError(t, err)
				}
				for fn := range postgres.NextDueFunctions {
					_, _, err := postgres.ReadCandidatesNext(ctx, reads.For(fn), fn, ps, 256, 10, 0, f)
					require.NoError(t, err)
				}
			}
			_, err := postgres.Now(ctx, pool)
			require.NoError(t, err)
		}
		for _, l := range leases {
			out, err := postgres.Call(ctx, pool, "expire_lapsed_lease", []string{fmt.Sprint(l[0]), l[1].(string), "0"}, scannerapi.Filter{})
			require.NoError(t, err)
			require.Equal(t, "1", *out[0])
			require.Contains(t, []string{"terminal", "retried"}, *out[1])
		}
		for _, d := range delays {
			out, err := postgres.Call(ctx, pool, "promote_delayed", []string{fmt.Sprint(d[0]), d[1].(string)}, scannerapi.Filter{})
			require.NoError(t, err)
			require.Equal(t, "promoted", *out[1])
		}
	}
	// check runs the calls, the actions on a pool of one connection, the
	// reads on readers of one connection, and returns the generic plans
	// each connection made meanwhile.
	check := func(pool *pgxpool.Pool, reads *postgres.Readers, base int) (actions, readers []string) {
		conns := []*pgxpool.Pool{pool, reads.For("lapsed_leases")}
		pids := make([]uint32, len(conns))
		before := make([]map[string]int, len(conns))
		for i, p := range conns {
			c, err := p.Acquire(ctx)
			require.NoError(t, err)
			pids[i], before[i] = c.Conn().PgConn().PID(), genericPlans(c)
			c.Release()
		}
		leases, delays := seed(base)
		run(pool, reads, leases, delays)
		made := make([][]string, len(conns))
		for i, p := range conns {
			c, err := p.Acquire(ctx)
			require.NoError(t, err)
			require.Equal(t, pids[i], c.Conn().PgConn().PID(), "the pool's one connection")
			for ident, n := range genericPlans(c) {
				if n > before[i][ident] {
					made[i] = append(made[i], ident)
				}
			}
			c.Release()
		}
		return made[0], made[1]
	}

	ready, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 1, Ready: true})
	require.NoError(t, err)
	defer ready.Close()
	reads, err := postgres.OpenReaders(ctx, postgres.Options{DSN: dsn}, 1)
	require.NoError(t, err)
	defer reads.Close()
	var mode string
	require.NoError(t, ready.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode))
	assert.Equal(t, "force_custom_plan", mode)
	c, err := reads.For("lapsed_leases").Acquire(ctx)
	require.NoError(t, err)
	assert.NotEmpty(t, genericPlans(c), "the readers' warm-up made the candidate reads' generic plans")
	c.Release()
	actions, readers := check(ready, reads, 0)
	assert.Empty(t, actions, "no generic plan was made on the pool after the hand-over")
	assert.Empty(t, readers, "no generic plan was made on the readers after their warm-up")

	// The same calls on a session with PostgreSQL's default.
	plain, err := postgres.Connect(ctx, postgres.Options{DSN: dsn + "&plan_cache_mode=auto", PoolSize: 1, Ready: true})
	require.NoError(t, err)
	defer plain.Close()
	made, _ := check(plain, reads, 100)
	assert.NotEmpty(t, made, "with plan_cache_mode auto the actions' statements get generic plans at their sixth run")
	t.Logf("generic plans made after the hand-over with plan_cache_mode auto: %d statements", len(made))
}
