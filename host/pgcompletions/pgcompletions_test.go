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

// launch starts a listener, told of its changes on the Changes it
// returns, and stops it at the test's end.
func launch(t *testing.T, o pgcompletions.Config) (*pgcompletions.Listener, *service.Changes) {
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
	return l, o.Changes
}

// startWith launches a listener that holds the listener's role, and waits
// until it listens.
func startWith(t *testing.T, o pgcompletions.Config) (*pgcompletions.Listener, *service.Changes) {
	t.Helper()
	l, ch := launch(t, o)
	select {
	case <-l.Listening():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not start listening")
	}
	assert.True(t, l.Stats().Listening, "its stats say it listens")
	return l, ch
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
// in every partition: the share's listener (the owner of flow partition
// ListenPartition) drains them all, whoever owns them. A host that does
// not own that partition is on standby: it neither listens nor drains.
func TestTheListenerDrainsEveryPartitionAndAStandbyNothing(t *testing.T) {
	t.Parallel()
	pool := database(t)
	const mine, theirs = 5, 6
	a, b := "b0000000-0000-4000-8000-000000000001", "b0000000-0000-4000-8000-000000000002"
	x, y := "b0000000-0000-4000-8000-000000000011", "b0000000-0000-4000-8000-000000000012"
	postgrestest.DAG(t, pool, mine, "f2000000-0000-4000-8000-000000000001", nil, [][2]string{{a, b}})
	postgrestest.DAG(t, pool, theirs, "f2000000-0000-4000-8000-000000000002", nil, [][2]string{{x, y}})
	postgrestest.Complete(t, pool, mine, a, "success")
	postgrestest.Complete(t, pool, theirs, x, "success")

	standby, _ := startStandby(t, pgcompletions.Config{Pool: pool, Partitions: 16, Owns: func(p keys.Partition) bool { return p.Index == mine }})
	l, ch := startWith(t, pgcompletions.Config{Pool: pool, Partitions: 16, Owns: func(p keys.Partition) bool { return p.Index == pgcompletions.ListenPartition }})
	waitFor(t, ch, "both released by the listener's catch-up", func() bool {
		return phase(t, pool, b) == "runnable/eligible_now/waiting" && phase(t, pool, y) == "runnable/eligible_now/waiting"
	})
	waitFor(t, ch, "both dispatches counted", func() bool { return l.Stats().Dispatched == 2 })
	assert.Zero(t, l.Stats().Errors)
	assert.False(t, l.Stats().Standby)
	// A completion now: the listener hears it, the standby does not.
	c, d := "b0000000-0000-4000-8000-000000000003", "b0000000-0000-4000-8000-000000000004"
	postgrestest.DAG(t, pool, mine, "f2000000-0000-4000-8000-000000000003", nil, [][2]string{{c, d}})
	postgrestest.Complete(t, pool, mine, c, "success")
	waitFor(t, ch, "the next completion dispatched on its notification", func() bool { return l.Stats().Dispatched == 3 && l.Stats().Notifications >= 1 })
	st := standby.Stats()
	assert.True(t, st.Standby)
	assert.False(t, st.Listening, "a standby keeps no listening session")
	assert.Zero(t, st.Notifications+st.Drains+st.Dispatched+st.Errors+st.Reconnects, "a standby does nothing: %+v", st)
}

// startStandby starts a listener that does not hold the listener's role,
// and waits until it says it is on standby.
func startStandby(t *testing.T, o pgcompletions.Config) (*pgcompletions.Listener, *service.Changes) {
	t.Helper()
	l, ch := launch(t, o)
	waitFor(t, ch, "on standby", func() bool { return l.Stats().Standby })
	return l, ch
}

// Three hosts sharing the flow partitions (each owns those whose index
// mod 3 is its number): the owner of ListenPartition, host 0, is the
// share's listener and dispatches every completion, once; the other two
// keep no listening session, so a completion costs the database one
// notification delivery and one drain however many hosts share it.
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
	}
	select {
	case <-ls[0].Listening():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not start listening")
	}
	servicetest.WaitFor(t, changes, 30*time.Second, func() bool { return ls[1].Stats().Standby && ls[2].Stats().Standby }, "hosts 1 and 2 on standby")
	const n = 24
	var downs []string
	for k := range n {
		pk := k % 16
		up, down := fmt.Sprintf("d0000000-0000-4000-8000-%012d", 2*k), fmt.Sprintf("d0000000-0000-4000-8000-%012d", 2*k+1)
		postgrestest.DAG(t, pool, pk, fmt.Sprintf("fd000000-0000-4000-8000-%012d", k), nil, [][2]string{{up, down}})
		postgrestest.Complete(t, pool, pk, up, "success")
		downs = append(downs, down)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, changes.WaitFor(ctx, func() bool { return ls[0].Stats().Dispatched == n }), "every event dispatched by the listener")
	for _, d := range downs {
		assert.Equal(t, "runnable/eligible_now/waiting", phase(t, pool, d))
	}
	st := ls[0].Stats()
	assert.Equal(t, int64(n), st.Notifications, "the listener hears every completion")
	assert.Zero(t, st.AlreadyDone, "no event dispatched twice")
	assert.Zero(t, st.Errors)
	for _, l := range ls[1:] {
		st := l.Stats()
		assert.True(t, st.Standby)
		assert.Zero(t, st.Notifications+st.Drains+st.Dispatched, "a standby hears and dispatches nothing: %+v", st)
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

// twoSharingHosts are two coordinators on ffscan's share tables, with
// manual clocks (they tick when told to), that have divided 16 flow
// partitions, and a listener on each. leader is the index of the host
// that owns ListenPartition (the share's listener).
type twoSharingHosts struct {
	pool    *pgxpool.Pool
	clocks  [2]*clock.Manual
	cos     [2]*sharing.Coordinator
	ls      [2]*pgcompletions.Listener
	changes *service.Changes
	leader  int
}

func startTwoSharingHosts(t *testing.T) *twoSharingHosts {
	t.Helper()
	ctx := context.Background()
	h := &twoSharingHosts{pool: database(t), changes: &service.Changes{}}
	parts := keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}
	store := pgstore.New(h.pool, scannerapi.Filter{}, parts)
	for i := range h.cos {
		h.clocks[i] = clock.NewManual(time.Unix(1_000_000, 0))
		h.cos[i] = sharing.New(store, sharing.Config{ID: fmt.Sprintf("host-%d", i), Partitions: parts, Clock: h.clocks[i]})
	}
	// Both join, then each gives up what the other is due and takes its
	// own.
	for _, i := range []int{0, 1, 0, 1} {
		require.NoError(t, h.cos[i].Tick(ctx))
	}
	flow := [2]int{}
	for i, co := range h.cos {
		for _, p := range co.Status().Partitions {
			if p.Family == keys.FamilyFlow {
				flow[i]++
				if p.Index == pgcompletions.ListenPartition {
					h.leader = i
				}
			}
		}
	}
	require.Equal(t, 16, flow[0]+flow[1], "the two hosts divide the flow partitions")
	require.Positive(t, flow[1-h.leader], "the standby owns partitions of its own")
	for i := range h.ls {
		h.ls[i] = pgcompletions.New(pgcompletions.Config{Pool: h.pool, Partitions: 16, Owns: h.cos[i].Owns, Gains: h.cos[i].Gains,
			LeadCheck: 10 * time.Millisecond, Logger: hclog.NewNullLogger(), Changes: h.changes})
		require.NoError(t, h.ls[i].Start(ctx))
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			assert.NoError(t, h.ls[i].Stop(sctx))
		})
	}
	select {
	case <-h.ls[h.leader].Listening():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not start listening")
	}
	h.wait(t, "the other host on standby", func() bool { return h.ls[1-h.leader].Stats().Standby })
	return h
}

func (h *twoSharingHosts) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	servicetest.WaitFor(t, h.changes, 30*time.Second, cond, what)
}

// complete commits a completion in each of the 16 partitions, each the
// upstream of an edge, and returns the downstream executions.
func (h *twoSharingHosts) complete(t *testing.T, batch int) []string {
	t.Helper()
	var downs []string
	for k := range 16 {
		up, down := fmt.Sprintf("e%d000000-0000-4000-8000-%012d", batch, 2*k), fmt.Sprintf("e%d000000-0000-4000-8000-%012d", batch, 2*k+1)
		postgrestest.DAG(t, h.pool, k, fmt.Sprintf("fe%d00000-0000-4000-8000-%012d", batch, k), nil, [][2]string{{up, down}})
		postgrestest.Complete(t, h.pool, k, up, "success")
		downs = append(downs, down)
	}
	return downs
}

func (h *twoSharingHosts) assertAllDispatched(t *testing.T, downs []string) {
	t.Helper()
	for _, d := range downs {
		assert.Equal(t, "runnable/eligible_now/waiting", phase(t, h.pool, d), "%s", d)
	}
	var pending int
	require.NoError(t, h.pool.QueryRow(context.Background(), "SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL").Scan(&pending))
	assert.Zero(t, pending)
	for i, l := range h.ls {
		st := l.Stats()
		assert.Zero(t, st.AlreadyDone, "host %d: no event dispatched twice", i)
		assert.Zero(t, st.Errors, "host %d", i)
	}
}

// The listener's host stalls for longer than its view lasts (its fencing
// clock is moved past it: a GC pause, a SIGSTOP, renewals slower than the
// view under load): it stops acting as the listener, and no host listens
// while its entries stand in the database. Completions committed in every
// partition meanwhile wait, and once a renewal confirms its view again it
// listens again and dispatches them all: every event exactly once, none
// left to the 15 s reconciler. The standby dispatches nothing throughout.
func TestEventsOfAStalledListenerAreDispatchedWhenItsViewReturns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := startTwoSharingHosts(t)
	leader, standby := h.ls[h.leader], h.ls[1-h.leader]

	h.clocks[h.leader].Advance(10 * time.Second)
	require.Empty(t, h.cos[h.leader].Status().Partitions, "the listener's view ran out")
	h.wait(t, "the stalled listener closed its session", func() bool { return leader.Stats().Standby && !leader.Stats().Listening })
	downs := h.complete(t, 1)
	for _, d := range downs {
		assert.Equal(t, "runnable/blocked_by_dependencies/waiting", phase(t, h.pool, d), "no host may dispatch while the role's view ran out")
	}

	require.NoError(t, h.cos[h.leader].Tick(ctx))
	require.NotEmpty(t, h.cos[h.leader].Status().Partitions, "its view is valid again")
	h.wait(t, "the listener dispatched every event once its view returned", func() bool { return leader.Stats().Dispatched == 16 })
	h.assertAllDispatched(t, downs)
	assert.Zero(t, leader.Stats().Reconnects, "losing the role is not a lost connection")
	assert.Zero(t, standby.Stats().Dispatched+standby.Stats().Notifications)
	assert.True(t, standby.Stats().Standby)
}

// The listener's host leaves (a shutdown, or its death once its entries
// lapse): the other host takes its partitions, ListenPartition among
// them, and with it the listener's role. Its first drain dispatches the
// completions committed while no host listened, and it dispatches the
// next ones on their notifications.
func TestTheListenersRoleMovesWithItsPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := startTwoSharingHosts(t)
	leader, standby := h.ls[h.leader], h.ls[1-h.leader]
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, leader.Stop(sctx))
	h.cos[h.leader].Leave(ctx)

	downs := h.complete(t, 2)
	require.NoError(t, h.cos[1-h.leader].Tick(ctx))
	require.True(t, h.cos[1-h.leader].Owns(keys.Partition{Family: keys.FamilyFlow, Index: pgcompletions.ListenPartition}), "the other host took the listener's partition")
	h.wait(t, "the new listener dispatched what was committed while no host listened", func() bool { return standby.Stats().Dispatched == 16 })
	h.assertAllDispatched(t, downs)
	assert.False(t, standby.Stats().Standby)
	assert.Zero(t, leader.Stats().Dispatched, "the old listener dispatched nothing of them")

	downs = h.complete(t, 3)
	h.wait(t, "the next completions dispatched on their notifications", func() bool {
		return standby.Stats().Dispatched == 32 && standby.Stats().Notifications >= 1
	})
	h.assertAllDispatched(t, downs)
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
