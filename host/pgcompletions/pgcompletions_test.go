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

	"github.com/ffscan/ffscan/host/pgcompletions"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/host/service"
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, ch.WaitFor(ctx, cond), what)
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

	l, ch := startWith(t, pgcompletions.Config{Pool: pool, Partitions: 16, Route: pgcompletions.RouteChannel("test"),
		Owns: func(p keys.Partition) bool { return p.Index == mine }})
	waitFor(t, ch, "b released by the catch-up", func() bool { return phase(t, pool, b) == "runnable/eligible_now/waiting" })
	waitFor(t, ch, "b's dispatch counted", func() bool { return l.Stats().Dispatched == 1 })
	assert.Equal(t, "runnable/blocked_by_dependencies/waiting", phase(t, pool, y), "another host's partition")
	assert.Zero(t, l.Stats().Errors)
}

// Three hosts sharing the flow partitions (each owns those whose index
// mod 3 is its number): each completion is looked up by one host only
// (the owner of flow partition event id mod 16), passed on the share's
// channel, and dispatched by the owner of its partition alone; the other
// two drop it without a query.
func TestSharingHostsRouteEachEventOnce(t *testing.T) {
	t.Parallel()
	pool := database(t)
	route := pgcompletions.RouteChannel("postgres (filter none)")
	var ls [3]*pgcompletions.Listener
	changes := &service.Changes{}
	for i := range ls {
		i := i
		ls[i] = pgcompletions.New(pgcompletions.Config{Pool: pool, Partitions: 16, Route: route, Logger: hclog.NewNullLogger(), Changes: changes,
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
		var routed, dispatched, dropped int64
		for _, l := range ls {
			st := l.Stats()
			routed, dispatched, dropped = routed+st.Routed, dispatched+st.Dispatched, dropped+st.NotOwned
		}
		return routed == n && dispatched == n && dropped == 2*n
	}), "every event routed once, dispatched once, dropped by the two others")
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
	l, ch := startWith(t, pgcompletions.Config{Pool: pooled, Listen: listenCfg, Partitions: 16, Route: pgcompletions.RouteChannel("pooled"),
		Owns: func(keys.Partition) bool { return true }})
	const pk = 3
	a, b := "e0000000-0000-4000-8000-000000000001", "e0000000-0000-4000-8000-000000000002"
	postgrestest.DAG(t, direct, pk, "fe000000-0000-4000-8000-000000000001", nil, [][2]string{{a, b}})
	postgrestest.Complete(t, direct, pk, a, "success")
	waitFor(t, ch, "b released through the pooler", func() bool { return phase(t, direct, b) == "runnable/eligible_now/waiting" })
	waitFor(t, ch, "routed and dispatched", func() bool { st := l.Stats(); return st.Routed == 1 && st.Dispatched == 1 })
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
	waitFor(t, ch, "b released", func() bool { return phase(t, pool, b) == "runnable/eligible_now/waiting" })
	waitFor(t, ch, "x's event seen and left", func() bool { return l.Stats().Filtered >= 1 })
	assert.Equal(t, "runnable/blocked_by_dependencies/waiting", phase(t, pool, y), "another tenant's flow")
	var undispatched bool
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT dispatched_at_ms IS NULL FROM ff_completion_event WHERE execution_id = $1", x).Scan(&undispatched))
	assert.True(t, undispatched, "left for its own host")
}
