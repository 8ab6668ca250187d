package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/keyevents"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// linked is a scanner run in the test's process.
type linked struct{ s scannerapi.Scanner }

func (l linked) Current() (scannerapi.Scanner, scannerapi.Info, error) {
	return l.s, l.s.Info(), nil
}

// pgWakeInterval is the interval of the Postgres wake-up tests: so long
// that only a wake-up can act within a test.
const pgWakeInterval = 10 * time.Minute

// pgRunner starts a runner of a real Postgres reconciler, linked, on a
// manual clock and a database of its own, and returns once its first
// interval sweep ran.
func pgRunner(t *testing.T, pool *pgxpool.Pool, s scannerapi.Scanner, pollOnly bool, opts ...func(*Config)) (*Runner, *clock.Manual, *service.Changes) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.Configure(ctx, map[string]string{}))
	info := s.Info()
	svc := callbacks.New(nil, nil)
	svc.SetPostgres(pool, scannerapi.Filter{})
	pol, _ := callbacks.PolicyFromInfo(info, false)
	svc.Register(info.Name, pol)
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	ch := &service.Changes{}
	cfg := Config{
		Name: info.Name, Interval: pgWakeInterval, Clock: clk, Changes: ch, Epoch: NewStoreEpoch(), PollOnly: pollOnly,
		Partitions: keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}, Lanes: []string{"default"}, NoJitter: true,
		Postgres: pool,
	}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Target, cfg.Host = linked{s}, svc.HostFor(info.Name)
	r := New(cfg)
	rctx, cancel := context.WithCancel(ctx)
	require.NoError(t, r.Start(rctx))
	t.Cleanup(func() {
		cancel()
		require.NoError(t, r.Stop(context.Background()))
	})
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	require.NoError(t, ch.WaitFor(wctx, func() bool { return r.Status().Cycle >= 1 }))
	return r, clk, ch
}

func pgNow(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var ms int64
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT ffscan.now_ms()").Scan(&ms))
	return ms
}

// waitDBPast returns once the database's clock is past ms (what is due is
// judged by it), however loaded the machine.
func waitDBPast(t *testing.T, pool *pgxpool.Pool, ms int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		now := pgNow(t, pool)
		if now > ms {
			return
		}
		require.True(t, time.Now().Before(deadline), "the database's clock did not pass %d", ms)
		<-time.After(time.Duration(ms-now+1) * time.Millisecond)
	}
}

func pgExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// A Postgres reconciler with a 10-minute interval acts on an entry at its
// due time: the interval sweep's read revealed it (not due yet), the
// runner slept until then instead of the interval, and the wake-up read
// and scanned its partition alone.
func TestPostgresWakeupActsAtTheDueTime(t *testing.T) {
	t.Parallel()
	// What is planted falls due this long after it is planted (ms, on
	// the database's real clock, which no test can advance): time enough
	// for the first sweep to read it not due yet on a loaded machine,
	// where starting the runner and its first sweep can take seconds.
	const ahead = 6000
	for _, c := range []struct {
		name  string
		s     func() scannerapi.Scanner
		plant func(t *testing.T, pool *pgxpool.Pool, pk int, eid string) int64
		state string // the SQL reading the execution's state
		done  string // its state once acted on
	}{
		{
			name: "delayed execution promoted", s: func() scannerapi.Scanner { return pgreconcilers.NewDelayedPromoter() },
			plant: func(t *testing.T, pool *pgxpool.Pool, pk int, eid string) int64 {
				var due int64
				require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id,
					lifecycle_phase, ownership_state, eligibility_state, public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields)
					VALUES ($1, $2, 'default', 'runnable', 'unowned', 'not_eligible_until_time', 'delayed', 'pending_first_attempt', 1,
					ffscan.now_ms() + $3, '{}') RETURNING deadline_at_ms`, pk, eid, ahead).Scan(&due))
				return due
			},
			state: "SELECT eligibility_state FROM ff_exec_core WHERE execution_id = $1", done: "eligible_now",
		},
		{
			name: "lapsed lease expired", s: func() scannerapi.Scanner { return pgreconcilers.NewAttemptTimeout() },
			plant: func(t *testing.T, pool *pgxpool.Pool, pk int, eid string) int64 {
				pgExec(t, pool, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
					eligibility_state, public_state, attempt_state, created_at_ms, raw_fields)
					VALUES ($1, $2, 'default', 'active', 'leased', 'not_applicable', 'running', 'running_attempt', 1, '{}')`, pk, eid)
				var lease int64
				require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index,
					worker_id, worker_instance_id, lease_epoch, lease_expires_at_ms) VALUES ($1, $2, 0, 'w', 'w-1', 1, ffscan.now_ms() + $3)
					RETURNING lease_expires_at_ms`, pk, eid, ahead).Scan(&lease))
				return lease + 1 // lapsed once the clock is past it
			},
			state: "SELECT lifecycle_phase FROM ff_exec_core WHERE execution_id = $1", done: "terminal",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := postgrestest.SchemaDB(t, 4)
			const pk = 5
			eid := "5a5a5a5a-0000-4000-8000-000000000001"
			due := c.plant(t, pool, pk, eid)
			state := func() string {
				var s string
				require.NoError(t, pool.QueryRow(context.Background(), c.state, eid).Scan(&s))
				return s
			}
			before := state()
			r, clk, ch := pgRunner(t, pool, c.s(), false)
			require.Equal(t, before, state(), "not due at the first sweep")
			st := r.Status()
			require.Equal(t, 1, st.Scheduled, "the partition is scheduled from the first read")

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// The runner sleeps until the due time, not the interval.
			d, err := clk.WaitForTimerWithin(ctx, pgWakeInterval-time.Minute)
			require.NoError(t, err)
			waitDBPast(t, pool, due)
			clk.Advance(d)
			require.NoError(t, ch.WaitFor(ctx, func() bool { return r.Status().Wakeups >= 1 }))
			assert.Equal(t, c.done, state(), "acted on by the wake-up")
			st = r.Status()
			assert.Equal(t, uint64(1), st.Cycle, "no interval sweep ran")
			assert.Equal(t, int64(1), st.Processed)
			assert.Zero(t, st.Scheduled, "nothing more to come")
		})
	}
}

// Polling only, a Postgres scanner schedules nothing: the runner sleeps
// to the interval.
func TestPostgresPollOnlySchedulesNothing(t *testing.T) {
	t.Parallel()
	pool := postgrestest.SchemaDB(t, 4)
	pgExec(t, pool, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
		public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields) VALUES (5, '5b5b5b5b-0000-4000-8000-000000000001', 'default',
		'runnable', 'unowned', 'not_eligible_until_time', 'delayed', 'pending_first_attempt', 1, ffscan.now_ms() + 60000, '{}')`)
	r, clk, _ := pgRunner(t, pool, pgreconcilers.NewDelayedPromoter(), true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := clk.WaitForTimer(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, pgWakeInterval-time.Minute)
	assert.Zero(t, r.Status().Scheduled)
}

// Time-scored Postgres sources are scheduled, the others poll.
func TestPostgresWakeupsOnlyForTimeScoredFunctions(t *testing.T) {
	t.Parallel()
	r := &Runner{}
	for _, c := range []struct {
		s    scannerapi.Scanner
		want bool
	}{
		{pgreconcilers.NewAttemptTimeout(), true},
		{pgreconcilers.NewLeaseExpiry(), true},
		{pgreconcilers.NewExecutionDeadline(), true},
		{pgreconcilers.NewDelayedPromoter(), true},
		{pgreconcilers.NewPendingWPExpiry(), true},
		{pgreconcilers.NewSuspensionTimeout(), true},
		{pgreconcilers.NewBudgetReset(), true},
		{pgreconcilers.NewWorkerRegistrySweep(), true},
		{pgreconcilers.NewDependency(), false},
		{pgreconcilers.NewEdgeCancelDispatcher(), false},
		{pgreconcilers.NewEdgeCancelReconciler(), false},
	} {
		assert.Equal(t, c.want, r.wakesFor(c.s.Info()), c.s.Info().Name)
	}
}

// The errors a server sends as it drops or refuses connections are
// transport errors (a new store epoch, which drops the wake-ups); its
// other errors are its own.
func TestPostgresErrorClasses(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]scannerapi.ErrorClass{
		"57P01": scannerapi.ErrTransport, // admin shutdown
		"57P02": scannerapi.ErrTransport, // crash shutdown
		"57P03": scannerapi.ErrTransport, // cannot connect now
		"08006": scannerapi.ErrTransport, // connection failure
		"40001": scannerapi.ErrServer,
		"42883": scannerapi.ErrServer,
	} {
		assert.Equal(t, want, pgClass(&pgconn.PgError{Code: code}), code)
	}
	assert.Equal(t, scannerapi.ErrTransport, pgClass(errors.New("dial tcp: connection refused")))
}

// On a host that also serves Valkey with new-key events on, a Postgres
// scanner's partitions are never quiet: its sources are no keys, no event
// names them, and a partition read with nothing due is read again at the
// next sweep all the same.
func TestPostgresPartitionsAreNeverQuiet(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t, testserver.WithArgs("--notify-keyspace-events", "En"))
	client := srv.Client(t)
	feedCh := &service.Changes{}
	feed := keyevents.New(client, keyevents.Config{TopologyCheck: time.Hour, ConfigCheck: time.Hour, Changes: feedCh})
	require.NoError(t, feed.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, feed.Stop(context.Background())) })
	fctx, fcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer fcancel()
	require.NoError(t, feedCh.WaitFor(fctx, func() bool { on, _ := feed.Covered(); return on }), "feed: %+v", feed.State())

	pool := postgrestest.SchemaDB(t, 4)
	r, clk, ch := pgRunner(t, pool, pgreconcilers.NewDelayedPromoter(), false, func(c *Config) { c.Events = feed })
	// The bound on the runner's events starts once the set-up is done
	// (a database made from its template took most of a minute on a
	// busy machine, and left the runner none).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The first sweep read every partition empty; now one has work.
	const eid = "5c5c5c5c-0000-4000-8000-000000000001"
	pgExec(t, pool, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
		public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields) VALUES (5, $1, 'default',
		'runnable', 'unowned', 'not_eligible_until_time', 'delayed', 'pending_first_attempt', 1, ffscan.now_ms() - 10, '{}')`, eid)
	d, err := clk.WaitForTimer(ctx)
	require.NoError(t, err)
	clk.Advance(d)
	require.NoError(t, ch.WaitFor(ctx, func() bool { return r.Status().Cycle >= 2 }))
	st := r.Status()
	assert.Zero(t, st.Quiet, "no partition left out")
	assert.Equal(t, int64(1), st.Processed, "the second sweep read partition 5 and promoted it")
	var state string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT eligibility_state FROM ff_exec_core WHERE execution_id = $1", eid).Scan(&state))
	assert.Equal(t, "eligible_now", state)
}

// A read of the database that fails (here: the runner's pool is gone)
// starts a new store epoch, which drops the whole schedule: the partition
// woken is not read, and the other one scheduled is not woken either; the
// interval sweep is what comes next.
func TestPostgresWakeupsDroppedWhenAReadFails(t *testing.T) {
	t.Parallel()
	pool := postgrestest.SchemaDB(t, 2)
	for _, r := range []struct {
		pk  int
		eid string
		in  int64
	}{{5, "5d5d5d5d-0000-4000-8000-000000000001", 30_000}, {7, "5d5d5d5d-0000-4000-8000-000000000002", 90_000}} {
		pgExec(t, pool, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
			public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields) VALUES ($1, $2, 'default',
			'runnable', 'unowned', 'not_eligible_until_time', 'delayed', 'pending_first_attempt', 1, ffscan.now_ms() + $3, '{}')`, r.pk, r.eid, r.in)
	}
	// The runner's own pool, which the test closes.
	own, err := pgxpool.New(context.Background(), pool.Config().ConnString())
	require.NoError(t, err)
	defer own.Close()
	epoch := NewStoreEpoch()
	r, clk, _ := pgRunner(t, own, pgreconcilers.NewDelayedPromoter(), false, func(c *Config) { c.Epoch = epoch })
	// The bound on the runner's events starts once the set-up is done.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.Equal(t, 2, r.Status().Scheduled)
	before := epoch.Load()

	d, err := clk.WaitForTimerWithin(ctx, time.Minute)
	require.NoError(t, err, "the first wake-up, 30 s ahead")
	own.Close()
	clk.Advance(d)
	next, err := clk.WaitForTimer(ctx)
	require.NoError(t, err)
	assert.Greater(t, next, 5*time.Minute, "the sleep is the interval's: partition 7's wake-up went with the epoch")
	assert.Greater(t, epoch.Load(), before, "a new store epoch")
	assert.Zero(t, r.Status().Scheduled)
	assert.Zero(t, r.Status().Processed)
}

// A sweep whose read the host's stop cut short did not fail: it counts no
// error (the loop logs nothing for a cycle that ended with its context),
// and the cycle says why it ended.
func TestPostgresReadCutShortByAStopIsNotAFailure(t *testing.T) {
	t.Parallel()
	pool := postgrestest.SchemaDB(t, 2)
	r, _, _ := pgRunner(t, pool, pgreconcilers.NewDelayedPromoter(), false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sum, err := r.Cycle(ctx, CycleOptions{})
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, sum.ErrorTotal(), "errors counted: %v", sum.Errors)
}
