package pgcompletions_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/pgcompletions"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func start(t *testing.T, pool *pgxpool.Pool, owns func(keys.Partition) bool) (*pgcompletions.Listener, *service.Changes) {
	t.Helper()
	return startWith(t, pgcompletions.Config{Pool: pool, Owns: owns})
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
	pool := postgrestest.SchemaDB(t, 8)
	l, ch := start(t, pool, nil)
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

// Events committed while no listener ran are dispatched when one starts;
// partitions another host owns are left to it.
func TestCatchUpAndOwnership(t *testing.T) {
	t.Parallel()
	pool := postgrestest.SchemaDB(t, 8)
	const mine, theirs = 5, 6
	a, b := "b0000000-0000-4000-8000-000000000001", "b0000000-0000-4000-8000-000000000002"
	x, y := "b0000000-0000-4000-8000-000000000011", "b0000000-0000-4000-8000-000000000012"
	postgrestest.DAG(t, pool, mine, "f2000000-0000-4000-8000-000000000001", nil, [][2]string{{a, b}})
	postgrestest.DAG(t, pool, theirs, "f2000000-0000-4000-8000-000000000002", nil, [][2]string{{x, y}})
	postgrestest.Complete(t, pool, mine, a, "success")
	postgrestest.Complete(t, pool, theirs, x, "success")

	l, ch := start(t, pool, func(p keys.Partition) bool { return p.Index == mine })
	waitFor(t, ch, "b released by the catch-up", func() bool { return phase(t, pool, b) == "runnable/eligible_now/waiting" })
	waitFor(t, ch, "the other partition's event seen and left", func() bool { return l.Stats().NotOwned >= 1 })
	assert.Equal(t, "runnable/blocked_by_dependencies/waiting", phase(t, pool, y), "another host's partition")
}

// A host filtered to one namespace dispatches its tenant's completions and
// leaves another tenant's, in the same partition, undispatched for that
// tenant's host.
func TestFilteredListener(t *testing.T) {
	t.Parallel()
	pool := postgrestest.SchemaDB(t, 8)
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
