package pgcompletions_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/pgcompletions"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/service/servicetest"
	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/host/sharing/pgstore"
	"github.com/ffscan/ffscan/internal/pgtest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// schema is a database with ffscan's schema and library, copied for each
// test (NOTIFY is per database: the copies do not hear each other).
var schema = pgtest.NewTemplate("pgcompletions", func(ctx context.Context, dsn string) error {
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := postgres.CreateSchema(ctx, pool); err != nil {
		return err
	}
	_, err = postgres.InstallLibrary(ctx, pool)
	return err
})

func TestMain(m *testing.M) {
	code := m.Run()
	schema.Close()
	os.Exit(code)
}

// database returns a pool of 8 on a fresh copy of the schema.
func database(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return connect(t, schema.Database(t), false)
}

func connect(t *testing.T, dsn string, transaction bool) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Connect(context.Background(), postgres.Options{DSN: dsn, PoolSize: 8, Transaction: transaction})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func start(t *testing.T, pool *pgxpool.Pool) (*pgcompletions.Listener, *service.Changes) {
	t.Helper()
	return startWith(t, pgcompletions.Config{Pool: pool})
}

// startWith starts a listener, told of its changes on the Changes it
// returns.
func startWith(t *testing.T, o pgcompletions.Config) (*pgcompletions.Listener, *service.Changes) {
	t.Helper()
	o.Logger = hclog.NewNullLogger()
	o.Changes = &service.Changes{}
	l := pgcompletions.New(o)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, l.Stop(ctx))
	})
	select {
	case <-l.Listening():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not start listening")
	}
	assert.True(t, l.Stats().Listening, "its stats say it listens")
	return l, o.Changes
}

// waitFor waits until cond (a database read) holds, checking it at every
// dispatch's end, and returns how long that took.
func waitFor(t *testing.T, ch *service.Changes, what string, cond func() bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	servicetest.WaitFor(t, ch, 30*time.Second, cond, what)
	return time.Since(t0)
}

func phase(t *testing.T, pool *pgxpool.Pool, eid string) string {
	var s string
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT lifecycle_phase || '/' || eligibility_state || '/' || public_state FROM ff_exec_core WHERE execution_id = $1", eid).Scan(&s))
	return s
}

// A chain a -> b -> c: each completion releases the next step through the
// listener alone (no reconciler runs), in milliseconds; a failure skips
// the rest of the chain through the skipped completions the dispatch
// itself commits.
func TestChainAdvancesOnNotifications(t *testing.T) {
	t.Parallel()
	pool := database(t)
	l, ch := start(t, pool)
	const pk = 86
	a, b, c := "a0000000-0000-4000-8000-000000000001", "a0000000-0000-4000-8000-000000000002", "a0000000-0000-4000-8000-000000000003"
	postgrestest.DAG(t, pool, pk, "f1000000-0000-4000-8000-000000000001", nil, [][2]string{{a, b}, {b, c}})

	postgrestest.Complete(t, pool, pk, a, "success")
	hop1 := waitFor(t, ch, "b released", func() bool { return phase(t, pool, b) == "runnable/eligible_now/waiting" })
	postgrestest.Complete(t, pool, pk, b, "success")
	hop2 := waitFor(t, ch, "c released", func() bool { return phase(t, pool, c) == "runnable/eligible_now/waiting" })
	t.Logf("hops released in %s and %s (FlowFabric's reconciler alone: 15-30 s per hop)", hop1, hop2)

	x, y, z := "a0000000-0000-4000-8000-000000000011", "a0000000-0000-4000-8000-000000000012", "a0000000-0000-4000-8000-000000000013"
	postgrestest.DAG(t, pool, pk, "f1000000-0000-4000-8000-000000000002", nil, [][2]string{{x, y}, {y, z}})
	postgrestest.Complete(t, pool, pk, x, "failed")
	waitFor(t, ch, "z skipped by the cascade", func() bool { return phase(t, pool, z) == "terminal/not_applicable/skipped" })
	assert.Equal(t, "terminal/not_applicable/skipped", phase(t, pool, y))
	waitFor(t, ch, "every event dispatched", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL").Scan(&n))
		return n == 0
	})
	// The listener counts a dispatch after its transaction committed: the
	// count may trail what the database shows by a moment.
	waitFor(t, ch, "five dispatches counted", func() bool { return l.Stats().Dispatched >= 5 })
	st := l.Stats()
	assert.Equal(t, int64(5), st.Dispatched, "a, b, x and the two skipped completions")
	assert.Zero(t, st.Errors)
}

// Events committed while no listener ran are dispatched when one starts,
// read in the partitions this host owns only: another host's are left to
// it.
func TestCatchUpAndOwnership(t *testing.T) {
	t.Parallel()
	pool := database(t)
	const mine, theirs = 5, 6
	a, b := "b0000000-0000-4000-8000-000000000001", "b0000000-0000-4000-8000-000000000002"
	x, y := "b0000000-0000-4000-8000-000000000011", "b0000000-0000-4000-8000-000000000012"
	postgrestest.DAG(t, pool, mine, "f2000000-0000-4000-8000-000000000001", nil, [][2]string{{a, b}})
	postgrestest.DAG(t, pool, theirs, "f2000000-0000-4000-8000-000000000002", nil, [][2]string{{x, y}})
	postgrestest.Complete(t, pool, mine, a, "success")
	postgrestest.Complete(t, pool, theirs, x, "success")

	l, ch := startWith(t, pgcompletions.Config{Pool: pool, Partitions: 16, Owns: func(p keys.Partition) bool { return p.Index == mine }})
	waitFor(t, ch, "b released by the catch-up", func() bool { return phase(t, pool, b) == "runnable/eligible_now/waiting" })
	waitFor(t, ch, "b's dispatch counted", func() bool { return l.Stats().Dispatched == 1 })
	assert.Equal(t, "runnable/blocked_by_dependencies/waiting", phase(t, pool, y), "another host's partition")
	assert.Zero(t, l.Stats().Errors)
}

// Three hosts sharing the flow partitions (each owns those whose index
// mod 3 is its number): each completion is dispatched by the owner of its
// partition alone, read by its drain; no host looks an event up, and the
// other two dispatch nothing of it.
func TestSharingHostsDispatchEachEventOnce(t *testing.T) {
	t.Parallel()
	pool := database(t)
	var ls [3]*pgcompletions.Listener
	changes := &service.Changes{}
	for i := range ls {
		i := i
		ls[i] = pgcompletions.New(pgcompletions.Config{Pool: pool, Partitions: 16, Logger: hclog.NewNullLogger(), Changes: changes,
			Owns: func(p keys.Partition) bool { return int(p.Index)%3 == i }})
		require.NoError(t, ls[i].Start(context.Background()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			assert.NoError(t, ls[i].Stop(ctx))
		})
		select {
		case <-ls[i].Listening():
		case <-time.After(30 * time.Second):
			t.Fatal("a listener did not start listening")
		}
	}
	const n = 24
	perHost := [3]int64{}
	var downs []string
	for k := range n {
		pk := k % 16
		up, down := fmt.Sprintf("d0000000-0000-4000-8000-%012d", 2*k), fmt.Sprintf("d0000000-0000-4000-8000-%012d", 2*k+1)
		postgrestest.DAG(t, pool, pk, fmt.Sprintf("fd000000-0000-4000-8000-%012d", k), nil, [][2]string{{up, down}})
		postgrestest.Complete(t, pool, pk, up, "success")
		perHost[pk%3]++
		downs = append(downs, down)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, changes.WaitFor(ctx, func() bool {
		var dispatched int64
		for _, l := range ls {
			dispatched += l.Stats().Dispatched
		}
		return dispatched == n
	}), "every event dispatched once")
	for _, d := range downs {
		assert.Equal(t, "runnable/eligible_now/waiting", phase(t, pool, d))
	}
	for i, l := range ls {
		st := l.Stats()
		assert.Equal(t, int64(n), st.Notifications, "every host hears every completion")
		assert.Equal(t, perHost[i], st.Dispatched, "host %d dispatches its own partitions' events", i)
		assert.Zero(t, st.AlreadyDone, "no event dispatched twice")
		assert.Zero(t, st.Errors)
	}
}

// Behind PgBouncer in transaction mode: the pool goes through the pooler
// (the host's exec mode, no statement kept prepared), the listener keeps a
// direct session of its own, and completions advance as without the
// pooler. A listener given the pooler for its session does not listen: its
// check notification never comes back, and it says so and retries.
func TestBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := schema.Database(t)
	direct := connect(t, dsn, false)
	bouncer := pgtest.NewBouncer(t, schema.Server(), "transaction")
	pooled := connect(t, bouncer.DSN(dsn), true)

	listenCfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	l, ch := startWith(t, pgcompletions.Config{Pool: pooled, Listen: listenCfg, Partitions: 16,
		Owns: func(keys.Partition) bool { return true }})
	const pk = 3
	a, b := "e0000000-0000-4000-8000-000000000001", "e0000000-0000-4000-8000-000000000002"
	postgrestest.DAG(t, direct, pk, "fe000000-0000-4000-8000-000000000001", nil, [][2]string{{a, b}})
	postgrestest.Complete(t, direct, pk, a, "success")
	waitFor(t, ch, "b released through the pooler", func() bool { return phase(t, direct, b) == "runnable/eligible_now/waiting" })
	waitFor(t, ch, "dispatched", func() bool { return l.Stats().Dispatched == 1 })
	assert.Zero(t, l.Stats().Errors)

	bounced, err := pgx.ParseConfig(bouncer.DSN(dsn) + "&default_query_exec_mode=exec")
	require.NoError(t, err)
	o := pgcompletions.Config{Pool: pooled, Listen: bounced, CheckTimeout: 500 * time.Millisecond, Logger: hclog.NewNullLogger(), Changes: &service.Changes{}}
	wrong := pgcompletions.New(o)
	require.NoError(t, wrong.Start(ctx))
	defer func() { assert.NoError(t, wrong.Stop(ctx)) }()
	waitFor(t, o.Changes, "the check failed and the listener reconnects", func() bool { return wrong.Stats().Reconnects >= 2 })
	select {
	case <-wrong.Listening():
		t.Fatal("a listener behind a transaction pooler must not report listening")
	default:
	}
	assert.False(t, wrong.Stats().Listening, "nor say so in its stats")
}

// A host filtered to one namespace dispatches its tenant's completions and
// leaves another tenant's, in the same partition, undispatched for that
// tenant's host.
func TestFilteredListener(t *testing.T) {
	t.Parallel()
	pool := database(t)
	const pk = 9
	a, b := "c0000000-0000-4000-8000-000000000001", "c0000000-0000-4000-8000-000000000002"
	x, y := "c0000000-0000-4000-8000-000000000011", "c0000000-0000-4000-8000-000000000012"
	flowA, flowB := "f3000000-0000-4000-8000-000000000001", "f3000000-0000-4000-8000-000000000002"
	postgrestest.DAG(t, pool, pk, flowA, nil, [][2]string{{a, b}})
	postgrestest.DAG(t, pool, pk, flowB, nil, [][2]string{{x, y}})
	for flow, ns := range map[string]string{flowA: "a", flowB: "b"} {
		_, err := pool.Exec(context.Background(), "UPDATE ff_exec_core SET raw_fields = jsonb_build_object('namespace', $2::text) WHERE flow_id = $1", flow, ns)
		require.NoError(t, err)
	}
	l, ch := startWith(t, pgcompletions.Config{Pool: pool, Filter: scannerapi.Filter{Namespace: "a"}})
	postgrestest.Complete(t, pool, pk, x, "success")
	postgrestest.Complete(t, pool, pk, a, "success")
	// a's event was dispatched by a drain that read after it was
	// committed, so after x's: that drain left x's event.
	waitFor(t, ch, "b released", func() bool { return phase(t, pool, b) == "runnable/eligible_now/waiting" })
	waitFor(t, ch, "a's dispatch counted", func() bool { return l.Stats().Dispatched == 1 })
	assert.Equal(t, "runnable/blocked_by_dependencies/waiting", phase(t, pool, y), "another tenant's flow")
	var undispatched bool
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT dispatched_at_ms IS NULL FROM ff_completion_event WHERE execution_id = $1", x).Scan(&undispatched))
	assert.True(t, undispatched, "left for its own host")
}

// Two hosts sharing the partitions through the database (real
// coordinators on ffscan's share tables), one of which stalls for longer
// than its view lasts (its fencing clock is moved past it: a GC pause, a
// SIGSTOP, renewals slower than the view under load). Completions are
// committed in every partition meanwhile and both listeners hear them:
// the other host dispatches its own partitions' events at once, the
// stalled host's are left (it may not act on them, and no one else may
// either), and once a renewal confirms its view again it dispatches
// them: every event dispatched exactly once, none left to the 15 s
// reconciler. (A decision taken from the notification alone, as routing
// each event by the partitions' owners was, drops those events for good.)
func TestEventsOfAStalledOwnerAreDispatchedWhenItsViewReturns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := database(t)
	parts := keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}
	store := pgstore.New(pool, scannerapi.Filter{}, parts)
	clocks := [2]*clock.Manual{clock.NewManual(time.Unix(1_000_000, 0)), clock.NewManual(time.Unix(1_000_000, 0))}
	var cos [2]*sharing.Coordinator
	for i := range cos {
		cos[i] = sharing.New(store, sharing.Config{ID: fmt.Sprintf("host-%d", i), Partitions: parts, Clock: clocks[i]})
	}
	// Both join, then each gives up what the other is due and takes its
	// own (the coordinators tick when told to: their clocks are manual).
	for _, i := range []int{0, 1, 0, 1} {
		require.NoError(t, cos[i].Tick(ctx))
	}
	owner := map[uint16]int{}
	for i, co := range cos {
		for _, p := range co.Status().Partitions {
			if p.Family == keys.FamilyFlow {
				owner[p.Index] = i
			}
		}
	}
	require.Len(t, owner, 16, "the two hosts divide the flow partitions")

	changes := &service.Changes{}
	var ls [2]*pgcompletions.Listener
	for i := range ls {
		ls[i] = pgcompletions.New(pgcompletions.Config{Pool: pool, Partitions: 16, Owns: cos[i].Owns, Gains: cos[i].Gains,
			Logger: hclog.NewNullLogger(), Changes: changes})
		require.NoError(t, ls[i].Start(ctx))
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			assert.NoError(t, ls[i].Stop(sctx))
		})
		select {
		case <-ls[i].Listening():
		case <-time.After(30 * time.Second):
			t.Fatal("a listener did not start listening")
		}
	}

	// Host 0 stalls past its view: it owns nothing now, by its own clock,
	// while its entries stand in the database.
	clocks[0].Advance(10 * time.Second)
	require.Empty(t, cos[0].Status().Partitions, "host 0's view ran out")
	downs := map[uint16]string{}
	perHost := [2]int64{}
	for k := range uint16(16) {
		up, down := fmt.Sprintf("e1000000-0000-4000-8000-%012d", 2*k), fmt.Sprintf("e1000000-0000-4000-8000-%012d", 2*k+1)
		postgrestest.DAG(t, pool, int(k), fmt.Sprintf("fe100000-0000-4000-8000-%012d", k), nil, [][2]string{{up, down}})
		postgrestest.Complete(t, pool, int(k), up, "success")
		downs[k] = down
		perHost[owner[k]]++
	}
	require.Positive(t, perHost[0])
	require.Positive(t, perHost[1])
	waitFor(t, changes, "both hosts heard every completion, host 1 dispatched its own", func() bool {
		return ls[0].Stats().Notifications == 16 && ls[1].Stats().Notifications == 16 && ls[1].Stats().Dispatched == perHost[1]
	})
	for k, down := range downs {
		want := "runnable/eligible_now/waiting"
		if owner[k] == 0 {
			want = "runnable/blocked_by_dependencies/waiting"
		}
		assert.Equal(t, want, phase(t, pool, down), "partition %d of host %d", k, owner[k])
	}
	assert.Zero(t, ls[0].Stats().Dispatched, "a host whose view ran out acts on nothing")

	// A renewal confirms host 0's view again: its partitions' events are
	// dispatched, by it.
	require.NoError(t, cos[0].Tick(ctx))
	require.NotEmpty(t, cos[0].Status().Partitions, "host 0's view is valid again")
	waitFor(t, changes, "host 0 dispatched its partitions' events once its view returned", func() bool {
		return ls[0].Stats().Dispatched == perHost[0]
	})
	for k, down := range downs {
		assert.Equal(t, "runnable/eligible_now/waiting", phase(t, pool, down), "partition %d of host %d", k, owner[k])
	}
	var pending int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL").Scan(&pending))
	assert.Zero(t, pending)
	for i, l := range ls {
		st := l.Stats()
		assert.Equal(t, perHost[i], st.Dispatched, "host %d dispatched its own partitions' events", i)
		assert.Zero(t, st.AlreadyDone, "no event dispatched twice")
		assert.Zero(t, st.Errors)
	}
}

// Completions of one partition committed together, all advancing one
// edge group (a 24-way fan-in): the drain dispatches them one after the
// other, so none conflicts with another (under SERIALIZABLE, dispatches
// of one group side by side fail on each other's update and are rolled
// back and retried): the database counts no rollback, and the downstream
// is released once every upstream is.
func TestDispatchesOfOnePartitionDoNotConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := database(t)
	const pk, n = 12, 24
	down := "f0000000-0000-4000-8000-000000000999"
	var edges [][2]string
	var ups []string
	for i := range n {
		up := fmt.Sprintf("f0000000-0000-4000-8000-%012d", i)
		ups = append(ups, up)
		edges = append(edges, [2]string{up, down})
	}
	postgrestest.DAG(t, pool, pk, "ff000000-0000-4000-8000-000000000001", nil, edges)
	l, ch := start(t, pool)
	rollbacks := func() int64 {
		// Each of the pool's sessions hands its counts over now (forced),
		// then they are read.
		var conns []*pgxpool.Conn
		for range pool.Config().MaxConns {
			c, err := pool.Acquire(ctx)
			require.NoError(t, err)
			conns = append(conns, c)
			_, err = c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
			require.NoError(t, err)
		}
		for _, c := range conns {
			c.Release()
		}
		var r int64
		require.NoError(t, pool.QueryRow(ctx, "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&r))
		return r
	}
	before := rollbacks()
	_, err := pool.Exec(ctx, `WITH d AS (UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'completed'
		WHERE partition_key = $1 AND execution_id = ANY ($2::uuid[]) RETURNING partition_key, execution_id, flow_id)
		INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, occurred_at_ms)
		SELECT partition_key, execution_id, flow_id, 'success', 1 FROM d`, pk, ups)
	require.NoError(t, err)
	waitFor(t, ch, "every completion dispatched", func() bool { return l.Stats().Dispatched == n })
	assert.Equal(t, "runnable/eligible_now/waiting", phase(t, pool, down))
	assert.Zero(t, rollbacks()-before, "no dispatch was rolled back")
	assert.Zero(t, l.Stats().AlreadyDone)
	assert.Zero(t, l.Stats().Errors)
}

// Each dispatch holds one of the host's action slots (shared with its
// scanners' PGCALLs): with the only slot taken, a completion's dispatch
// waits at the slots with nothing written, and goes through once the slot
// is given back.
func TestADispatchWaitsForAnActionSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := database(t)
	slots := postgres.NewActionSlots(1, nil)
	_, ch := startWith(t, pgcompletions.Config{Pool: pool, Slots: slots})
	const pk = 87
	a, b := "a0000000-0000-4000-8000-000000000051", "a0000000-0000-4000-8000-000000000052"
	postgrestest.DAG(t, pool, pk, "f1000000-0000-4000-8000-000000000051", nil, [][2]string{{a, b}})
	release, err := slots.Acquire(ctx)
	require.NoError(t, err)
	waiting := phase(t, pool, b)
	postgrestest.Complete(t, pool, pk, a, "success")
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, slots.WaitForWaiters(wctx, 1), "the dispatch never reached the slots")
	assert.Equal(t, waiting, phase(t, pool, b), "b not released while the slot is taken")
	var undispatched int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL").Scan(&undispatched))
	assert.Equal(t, 1, undispatched)
	release()
	waitFor(t, ch, "b released once the slot came back", func() bool { return phase(t, pool, b) == "runnable/eligible_now/waiting" })
}
