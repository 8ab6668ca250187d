package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/internal/pgtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// shared is the server and database the function tests share: creating
// the schema costs a few seconds of a core, and the tests work on rows of
// their own (partitions and ids no other test uses).
var shared struct {
	once sync.Once
	srv  *pgtest.Server
	pool *pgxpool.Pool
	err  error
}

// TestMain stops the shared server after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.pool != nil {
		shared.pool.Close()
	}
	if shared.srv != nil {
		shared.srv.Stop()
	}
	os.Exit(code)
}

// sharedDB returns a pool on the shared database holding ffscan's schema
// and library (skipping the test, as pgtest.New does, when PostgreSQL is
// not installed and not required).
func sharedDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	shared.once.Do(func() {
		ctx := context.Background()
		if shared.srv, shared.err = pgtest.Start(); shared.err != nil {
			return
		}
		dsn, err := shared.srv.CreateDatabase(ctx, "ffscan")
		if err != nil {
			shared.err = err
			return
		}
		if shared.pool, shared.err = postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 8}); shared.err != nil {
			return
		}
		if _, shared.err = postgres.CreateSchema(ctx, shared.pool); shared.err != nil {
			return
		}
		_, shared.err = postgres.InstallLibrary(ctx, shared.pool)
	})
	if errors.Is(shared.err, pgtest.ErrNoPostgres) && os.Getenv("FFSCAN_TEST_REQUIRE_POSTGRES") == "" {
		t.Skip(shared.err.Error())
	}
	require.NoError(t, shared.err)
	return shared.pool
}

// dropAll drops every function of the schema ffscan (a test then installs
// an older library in their place).
const dropAll = "DO $d$ DECLARE f regprocedure; BEGIN FOR f IN SELECT p.oid::regprocedure FROM pg_proc p " +
	"JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'ffscan' LOOP EXECUTE 'DROP FUNCTION ' || f::text; END LOOP; END $d$"

func TestInstallLibrary(t *testing.T) {
	t.Parallel()
	// A database of its own: the test changes the library record others
	// rely on.
	pool := postgrestest.SchemaDB(t, 4)
	ctx := context.Background()
	// The subtests run in order on one database, each from the state the
	// one before left (the current library).

	t.Run("installed once, then current", func(t *testing.T) {
		action, err := postgres.InstallLibrary(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, postgres.LibraryCurrent, action)
		var v int
		var sum string
		require.NoError(t, pool.QueryRow(ctx, "SELECT version, sha256 FROM ffscan.library").Scan(&v, &sum))
		assert.Equal(t, postgres.LibraryVersion, v)
		assert.Equal(t, postgres.LibraryDigest(), sum)
	})
	t.Run("an older version is replaced", func(t *testing.T) {
		_, err := pool.Exec(ctx, "UPDATE ffscan.library SET version = 0, sha256 = 'old'; DROP FUNCTION ffscan.lapsed_leases")
		require.NoError(t, err)
		action, err := postgres.InstallLibrary(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, postgres.LibraryUpgraded, action)
		_, err = pool.Exec(ctx, "SELECT * FROM ffscan.lapsed_leases('{1}', 1, 256)")
		assert.NoError(t, err, "the functions are back")
	})
	t.Run("version 1, whose functions had no filter arguments, is replaced without leaving an overload", func(t *testing.T) {
		v1, err := os.ReadFile("testdata/library-v1.sql")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, dropAll)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, string(v1))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "UPDATE ffscan.library SET version = 1, sha256 = 'v1'")
		require.NoError(t, err)
		action, err := postgres.InstallLibrary(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, postgres.LibraryUpgraded, action)
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace "+
			"WHERE s.nspname = 'ffscan' AND proname = 'expire_lapsed_lease'").Scan(&n))
		assert.Equal(t, 1, n, "one expire_lapsed_lease, the new one")
		require.NoError(t, pool.QueryRow(ctx, "SELECT pronargs FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace "+
			"WHERE s.nspname = 'ffscan' AND proname = 'expire_lapsed_lease'").Scan(&n))
		assert.Equal(t, 6, n)
	})
	t.Run("version 2, whose worker sweep read every registry child per partition, is upgraded in place", func(t *testing.T) {
		v2, err := os.ReadFile("testdata/library-v2.sql")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, dropAll)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, string(v2))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "UPDATE ffscan.library SET version = 2, sha256 = 'v2'")
		require.NoError(t, err)
		action, err := postgres.InstallLibrary(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, postgres.LibraryUpgraded, action)
		var src string
		require.NoError(t, pool.QueryRow(ctx, "SELECT prosrc FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace "+
			"WHERE s.nspname = 'ffscan' AND proname = 'workers_expired'").Scan(&src))
		assert.NotContains(t, src, "IN (SELECT g FROM generate_series", "the new worker read")
		var v int
		require.NoError(t, pool.QueryRow(ctx, "SELECT version FROM ffscan.library").Scan(&v))
		assert.Equal(t, postgres.LibraryVersion, v)

		// The partition share's tables came with version 3; an upgrade
		// (here: of the same contents again) keeps their rows, so hosts
		// sharing the database keep their entries while one upgrades.
		var held []string
		require.NoError(t, pool.QueryRow(ctx, "SELECT array_agg(family || partition_index) FROM ffscan.share_hold('', 'h1', 60000, '{flow,flow}', '{1,2}')").Scan(&held))
		assert.ElementsMatch(t, []string{"flow1", "flow2"}, held)
		_, err = pool.Exec(ctx, "UPDATE ffscan.library SET version = 2, sha256 = 'v2'")
		require.NoError(t, err)
		action, err = postgres.InstallLibrary(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, postgres.LibraryUpgraded, action)
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM ffscan.share_owner WHERE host_id = 'h1'").Scan(&n))
		assert.Equal(t, 2, n, "the entries outlive the upgrade")
	})
	t.Run("version 3 is upgraded in place under a host reading it: its reads go on, the next-due reads come", func(t *testing.T) {
		v3, err := os.ReadFile("testdata/library-v3.sql")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, dropAll)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, string(v3))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "UPDATE ffscan.library SET version = 3, sha256 = 'v3'")
		require.NoError(t, err)
		// A live host of version 3: one connection, whose prepared
		// candidate reads were planned against version 3's functions.
		cfg := pool.Config().Copy()
		cfg.MaxConns = 1
		live, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer live.Close()
		const pk = 7
		eid := "07070707-0000-4000-8000-000000000001"
		plant(t, pool, lapse{pk: pk, eid: eid, flow: "f7000000-0000-4000-8000-000000000001", leaseAgoMs: 100})
		for fn := range postgres.CandidateFunctions {
			_, err := postgres.ReadCandidates(ctx, live, fn, []uint16{pk}, nil, 256, 10, scannerapi.Filter{})
			require.NoError(t, err, fn)
		}
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace "+
			"WHERE s.nspname = 'ffscan' AND proname LIKE '%\\_next'").Scan(&n))
		assert.Zero(t, n, "version 3 has no next-due functions")

		action, err := postgres.InstallLibrary(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, postgres.LibraryUpgraded, action)
		var v int
		require.NoError(t, pool.QueryRow(ctx, "SELECT version FROM ffscan.library").Scan(&v))
		assert.Equal(t, postgres.LibraryVersion, v, "upgraded to this version")
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace "+
			"WHERE s.nspname = 'ffscan' AND proname LIKE '%\\_next'").Scan(&n))
		assert.Equal(t, len(postgres.NextDueFunctions), n)

		// The version-3 host's reads, on the same connection and its
		// cached statements, go on with the same rows.
		for fn := range postgres.CandidateFunctions {
			rows, err := postgres.ReadCandidates(ctx, live, fn, []uint16{pk}, nil, 256, 10, scannerapi.Filter{})
			require.NoError(t, err, fn)
			if fn == "lapsed_leases" {
				require.Len(t, rows, 1)
				assert.Equal(t, eid+"/0", rows[0].Member)
			}
		}
		// And a version-4 host reads the next due entries beside them.
		now, err := postgres.Now(ctx, live)
		require.NoError(t, err)
		due, next, err := postgres.ReadCandidatesNext(ctx, live, "lapsed_leases", []uint16{pk}, 256, 10, now, scannerapi.Filter{})
		require.NoError(t, err)
		require.Len(t, due, 1)
		assert.Empty(t, next, "no lease to come in partition 7")
	})
	t.Run("version 6 brings the audit trail's table; an upgrade keeps its rows", func(t *testing.T) {
		regclass := func(name string) *string {
			t.Helper()
			var reg *string
			require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1)::text", name).Scan(&reg))
			return reg
		}
		// A database of version 5 had no such table.
		_, err := pool.Exec(ctx, "DROP TABLE ffscan.audit_entry; UPDATE ffscan.library SET version = 5, sha256 = 'v5'")
		require.NoError(t, err)
		action, err := postgres.InstallLibrary(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, postgres.LibraryUpgraded, action)
		for _, name := range []string{"ffscan.audit_entry", "ffscan.audit_entry_execution_at", "ffscan.audit_entry_at"} {
			assert.NotNil(t, regclass(name), "%s created", name)
		}
		var at time.Time
		require.NoError(t, pool.QueryRow(ctx, "INSERT INTO ffscan.audit_entry (kind, execution) VALUES ('scanner', '{fp:1}:x') RETURNING at").Scan(&at))
		assert.WithinDuration(t, time.Now(), at, time.Minute, "stamped with the database's clock")

		_, err = pool.Exec(ctx, "UPDATE ffscan.library SET version = 5, sha256 = 'v5'")
		require.NoError(t, err)
		action, err = postgres.InstallLibrary(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, postgres.LibraryUpgraded, action)
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM ffscan.audit_entry WHERE execution = '{fp:1}:x'").Scan(&n))
		assert.Equal(t, 1, n, "the trail outlives the upgrade")
	})
	t.Run("version 6 is upgraded in place under a host calling expire_lapsed_lease: its calls go on, the batch form comes", func(t *testing.T) {
		v6, err := os.ReadFile("testdata/library-v6.sql")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, dropAll)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, string(v6))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "UPDATE ffscan.library SET version = 6, sha256 = 'v6'")
		require.NoError(t, err)
		cfg := pool.Config().Copy()
		cfg.MaxConns = 1
		live, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer live.Close()
		const pk = 8
		eids := []string{"08080808-0000-4000-8000-000000000001", "08080808-0000-4000-8000-000000000002", "08080808-0000-4000-8000-000000000003"}
		for _, eid := range eids {
			plant(t, pool, lapse{pk: pk, eid: eid, leaseAgoMs: 100})
		}
		_, err = postgres.CallBatch(ctx, live, "expire_lapsed_lease", [][]string{{"8", eids[0], "0"}}, scannerapi.Filter{})
		require.Error(t, err, "version 6 has no batch form")
		out, err := postgres.Call(ctx, live, "expire_lapsed_lease", []string{"8", eids[0], "0"}, scannerapi.Filter{})
		require.NoError(t, err)
		assert.Equal(t, "terminal", *out[1])

		action, err := postgres.InstallLibrary(ctx, pool)
		require.NoError(t, err)
		assert.Equal(t, postgres.LibraryUpgraded, action)
		// The version-6 host's single calls go on, on the same connection.
		out, err = postgres.Call(ctx, live, "expire_lapsed_lease", []string{"8", eids[1], "0"}, scannerapi.Filter{})
		require.NoError(t, err)
		assert.Equal(t, "terminal", *out[1])
		// And a version-7 host's batches run beside them.
		got, err := postgres.CallBatch(ctx, live, "expire_lapsed_lease", [][]string{{"8", eids[2], "0"}, {"8", eids[0], "0"}}, scannerapi.Filter{})
		require.NoError(t, err)
		assert.Equal(t, "terminal", *got[0][1])
		assert.Equal(t, "lease_released", *got[1][1])
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM ff_completion_event WHERE partition_key = 8").Scan(&n))
		assert.Equal(t, 3, n, "each lapse ended once")
	})
	t.Run("a newer version is refused", func(t *testing.T) {
		_, err := pool.Exec(ctx, "UPDATE ffscan.library SET version = 99")
		require.NoError(t, err)
		_, err = postgres.InstallLibrary(ctx, pool)
		var le *postgres.LibraryError
		require.ErrorAs(t, err, &le)
		assert.Contains(t, err.Error(), fmt.Sprintf("the database holds version 99, newer than this ffscan's %d", postgres.LibraryVersion))
		_, err = pool.Exec(ctx, "UPDATE ffscan.library SET version = $1", postgres.LibraryVersion)
		require.NoError(t, err)
	})
	t.Run("the same version with other contents is refused", func(t *testing.T) {
		_, err := pool.Exec(ctx, "UPDATE ffscan.library SET sha256 = 'something else'")
		require.NoError(t, err)
		_, err = postgres.InstallLibrary(ctx, pool)
		var le *postgres.LibraryError
		require.ErrorAs(t, err, &le)
		assert.Contains(t, err.Error(), "changed without a new version")
	})
}

// lapse is an execution claimed by a worker whose lease lapsed, built as
// postgres.md §7.1 leaves a claimed row (attempt 0 leased by w1).
type lapse struct {
	pk     int16
	eid    string
	flow   string
	policy string // JSON or "" for NULL
	// leaseAgoMs: how long ago the lease lapsed (negative: still valid).
	leaseAgoMs int64
	phase      string
}

func plant(t *testing.T, pool *pgxpool.Pool, l lapse) {
	t.Helper()
	ctx := context.Background()
	if l.phase == "" {
		l.phase = "active"
	}
	var policy any
	if l.policy != "" {
		policy = l.policy
	}
	var flow any
	if l.flow != "" {
		flow = l.flow
	}
	_, err := pool.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, flow_id, lane_id, lifecycle_phase, ownership_state,
		eligibility_state, public_state, attempt_state, created_at_ms, policy, raw_fields, started_at_ms)
		VALUES ($1, $2, $3, 'default', $4, 'leased', 'not_applicable', 'running', 'running_attempt', 1000, $5::jsonb,
		'{"namespace": "ns1", "tags": {"cairn.instance_id": "inst-a"}}', 1000)`, l.pk, l.eid, flow, l.phase, policy)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
		lease_epoch, lease_expires_at_ms, started_at_ms) VALUES ($1, $2, 0, 'w1', 'w1-i1', 1, ffscan.now_ms() - $3, 1000)`,
		l.pk, l.eid, l.leaseAgoMs)
	require.NoError(t, err)
}

// reclaim makes the execution active again on attempt n, as a claim by
// another worker does, with a lease that lapsed already.
func reclaim(t *testing.T, pool *pgxpool.Pool, pk int16, eid string, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'active', ownership_state = 'leased',
		eligibility_state = 'not_applicable', attempt_state = 'running_attempt' WHERE partition_key = $1 AND execution_id = $2`, pk, eid)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
		lease_epoch, lease_expires_at_ms, started_at_ms) VALUES ($1, $2, $3, 'w2', 'w2-i1', 1, ffscan.now_ms() - 10, 2000)`, pk, eid, n)
	require.NoError(t, err)
}

func expire(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, pk int16, eid string, att int) []string {
	t.Helper()
	var out []string
	require.NoError(t, q.QueryRow(context.Background(), "SELECT ffscan.expire_lapsed_lease($1, $2, $3)", pk, eid, att).Scan(&out))
	return out
}

type execRow struct {
	Phase, Ownership, Eligibility, Public, AttemptState string
	AttemptIndex                                        int
	TerminalAt                                          *int64
	Raw                                                 map[string]any
}

func readExec(t *testing.T, pool *pgxpool.Pool, pk int16, eid string) execRow {
	t.Helper()
	var r execRow
	var raw []byte
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT lifecycle_phase, ownership_state, eligibility_state, public_state,
		attempt_state, attempt_index, terminal_at_ms, raw_fields FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`, pk, eid).
		Scan(&r.Phase, &r.Ownership, &r.Eligibility, &r.Public, &r.AttemptState, &r.AttemptIndex, &r.TerminalAt, &raw))
	require.NoError(t, json.Unmarshal(raw, &r.Raw))
	return r
}

type attemptRow struct {
	Outcome          *string
	Lease            *int64
	TerminalAt       *int64
	Epoch            int64
	Worker, Instance *string
}

func readAttempt(t *testing.T, pool *pgxpool.Pool, pk int16, eid string, n int) attemptRow {
	t.Helper()
	var r attemptRow
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT outcome, lease_expires_at_ms, terminal_at_ms, lease_epoch, worker_id,
		worker_instance_id FROM ff_attempt WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, pk, eid, n).
		Scan(&r.Outcome, &r.Lease, &r.TerminalAt, &r.Epoch, &r.Worker, &r.Instance))
	return r
}

// readExecPhase is "<phase>/<raw_fields>/<lease cleared>" of attempt 0.
func readExecPhase(t *testing.T, pool *pgxpool.Pool, eid string) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT e.lifecycle_phase || '/' || e.raw_fields::text || '/' || (a.lease_expires_at_ms IS NULL)
		FROM ff_exec_core e JOIN ff_attempt a USING (partition_key, execution_id) WHERE execution_id = $1 AND a.attempt_index = 0`, eid).Scan(&s))
	return s
}

// secondWaits runs sql (a function call answering text[]) on a second
// connection while first holds its row locks, waits until it blocks on
// them, commits first, and returns the second call's answer.
func secondWaits(t *testing.T, pool *pgxpool.Pool, first pgx.Tx, sql string, args ...any) []string {
	t.Helper()
	ctx := context.Background()
	second, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer second.Release()
	var pid uint32
	require.NoError(t, second.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	done := make(chan []string, 1)
	go func() {
		var out []string
		if err := second.QueryRow(ctx, sql, args...).Scan(&out); err != nil {
			out = []string{"error", err.Error()}
		}
		done <- out
	}()
	// The server says when the call is blocked on a lock: polled, as
	// PostgreSQL has no event for it.
	require.Eventually(t, func() bool {
		var waiting bool
		_ = pool.QueryRow(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		return waiting
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, first.Commit(ctx))
	return <-done
}

func TestExpireLapsedLease(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	ctx := context.Background()
	const pk int16 = 86

	t.Run("retry, then terminal (postgres.md §7.2), fenced", func(t *testing.T) {
		eid, flow := "0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d0001", "5d1c0a2e-1111-4c8e-9e0e-000000000001"
		plant(t, pool, lapse{pk: pk, eid: eid, flow: flow, policy: `{"retry_policy": {"max_retries": 1}}`, leaseAgoMs: 5000})

		var got []string
		rows, err := pool.Query(ctx, "SELECT member FROM ffscan.lapsed_leases($1, 10, 256) WHERE member LIKE $2", []int16{pk, 0}, eid+"%")
		require.NoError(t, err)
		got, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		assert.Equal(t, []string{eid + "/0"}, got, "the candidate read finds the lapsed lease")

		assert.Equal(t, []string{"1", "retried", "1"}, expire(t, pool, pk, eid, 0))
		e := readExec(t, pool, pk, eid)
		assert.Equal(t, execRow{Phase: "runnable", Ownership: "unowned", Eligibility: "eligible_now", Public: "running",
			AttemptState: "pending_retry_attempt", AttemptIndex: 1, Raw: e.Raw}, e)
		assert.Equal(t, "attempt_timeout", e.Raw["last_failure_message"])
		a := readAttempt(t, pool, pk, eid, 0)
		assert.Equal(t, "interrupted", *a.Outcome)
		assert.Nil(t, a.Lease)
		assert.NotNil(t, a.TerminalAt)
		assert.Equal(t, int64(2), a.Epoch, "the lost lease is fenced: epoch +1")
		assert.Equal(t, "w1", *a.Worker)
		assert.Nil(t, a.Instance, "and its worker instance cleared")
		assert.Equal(t, 0, one[int](t, pool, "SELECT count(*) FROM ff_completion_event WHERE execution_id = $1", eid))
		var ns, tag string
		require.NoError(t, pool.QueryRow(ctx, "SELECT namespace, instance_tag FROM ff_lease_event WHERE execution_id = $1 AND event_type = 'expired'", eid).Scan(&ns, &tag))
		assert.Equal(t, []string{"ns1", "inst-a"}, []string{ns, tag}, "filter columns copied from the execution")

		// Another worker claims attempt 1; its lease lapses too: 1 < 1 is
		// false, so the execution ends.
		reclaim(t, pool, pk, eid, 1)
		assert.Equal(t, []string{"1", "terminal"}, expire(t, pool, pk, eid, 1))
		e = readExec(t, pool, pk, eid)
		assert.Equal(t, []string{"terminal", "unowned", "not_applicable", "running", "attempt_terminal"},
			[]string{e.Phase, e.Ownership, e.Eligibility, e.Public, e.AttemptState})
		assert.Equal(t, 1, e.AttemptIndex)
		assert.NotNil(t, e.TerminalAt)
		var outcome, gotFlow string
		var nsNull, tagNull *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT outcome, flow_id::text, namespace, instance_tag FROM ff_completion_event WHERE partition_key = $1 AND execution_id = $2", pk, eid).
			Scan(&outcome, &gotFlow, &nsNull, &tagNull))
		assert.Equal(t, "expired", outcome)
		assert.Equal(t, flow, gotFlow)
		assert.Nil(t, nsNull)
		assert.Nil(t, tagNull)
		assert.Equal(t, 2, one[int](t, pool, "SELECT count(*) FROM ff_lease_event WHERE execution_id = $1", eid))

		// Acting again on the settled lapse is a no-op.
		assert.Equal(t, []string{"1", "lease_released"}, expire(t, pool, pk, eid, 1))
		assert.Equal(t, 1, one[int](t, pool, "SELECT count(*) FROM ff_completion_event WHERE execution_id = $1", eid))
	})

	t.Run("policies that allow no retry end on the first lapse", func(t *testing.T) {
		for i, policy := range []string{"", `{}`, `{"retry_policy": {}}`, `{"retry_policy": {"max_retries": "3"}}`,
			`{"retry_policy": {"max_retries": -1}}`, `{"retry_policy": {"max_retries": 1.5}}`, `{"retry_policy": {"max_retries": 0}}`} {
			eid := fmt.Sprintf("0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d01%02d", i)
			plant(t, pool, lapse{pk: pk, eid: eid, policy: policy, leaseAgoMs: 100})
			assert.Equal(t, []string{"1", "terminal"}, expire(t, pool, pk, eid, 0), "policy %q", policy)
		}
		eid := "0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d0199"
		plant(t, pool, lapse{pk: pk, eid: eid, policy: `{"retry_policy": {"max_retries": 18446744073709551615}}`, leaseAgoMs: 100})
		assert.Equal(t, []string{"1", "retried", "1"}, expire(t, pool, pk, eid, 0), "a u64 maximum is a number of retries")
		for i, policy := range []string{`"a string"`, `[1, 2]`, `{"retry_policy": [3]}`, `{"retry_policy": "3"}`, `null`} {
			eid := fmt.Sprintf("0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d01a%d", i)
			plant(t, pool, lapse{pk: pk, eid: eid, policy: policy, leaseAgoMs: 100})
			assert.Equal(t, []string{"1", "terminal"}, expire(t, pool, pk, eid, 0), "a policy of the wrong shape allows no retry: %s", policy)
		}
	})

	t.Run("an execution whose raw_fields is not an object is refused, unchanged", func(t *testing.T) {
		eid := "0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d0401"
		plant(t, pool, lapse{pk: pk, eid: eid, leaseAgoMs: 100})
		_, err := pool.Exec(ctx, `UPDATE ff_exec_core SET raw_fields = '"junk"', lifecycle_phase = 'active' WHERE execution_id = $1`, eid)
		require.NoError(t, err)
		assert.Equal(t, []string{"0", "malformed_raw_fields"}, expire(t, pool, pk, eid, 0))
		e := readExecPhase(t, pool, eid)
		assert.Equal(t, "active/\"junk\"/false", e)
	})

	t.Run("no-ops change nothing", func(t *testing.T) {
		const mine = "0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d02%"
		snapshot := func() string {
			var s string
			require.NoError(t, pool.QueryRow(ctx, `SELECT
				coalesce((SELECT json_agg(e ORDER BY execution_id)::text FROM ff_exec_core e WHERE execution_id::text LIKE $1), '')
				|| coalesce((SELECT json_agg(a ORDER BY execution_id, attempt_index)::text FROM ff_attempt a WHERE execution_id::text LIKE $1), '')
				|| (SELECT count(*) FROM ff_lease_event WHERE execution_id LIKE $1)::text
				|| (SELECT count(*) FROM ff_completion_event WHERE execution_id::text LIKE $1)::text`, mine).Scan(&s))
			return s
		}
		renewed := "0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d0201"
		plant(t, pool, lapse{pk: pk, eid: renewed, leaseAgoMs: -60000})
		released := "0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d0202"
		plant(t, pool, lapse{pk: pk, eid: released, leaseAgoMs: 100})
		_, err := pool.Exec(ctx, "UPDATE ff_attempt SET lease_expires_at_ms = NULL WHERE execution_id = $1", released)
		require.NoError(t, err)
		runnable := "0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d0203"
		plant(t, pool, lapse{pk: pk, eid: runnable, leaseAgoMs: 100, phase: "runnable"})
		orphan := "0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d0204"
		plant(t, pool, lapse{pk: pk, eid: orphan, leaseAgoMs: 100})
		_, err = pool.Exec(ctx, "DELETE FROM ff_exec_core WHERE execution_id = $1", orphan)
		require.NoError(t, err)

		before := snapshot()
		assert.Equal(t, []string{"1", "lease_renewed"}, expire(t, pool, pk, renewed, 0))
		assert.Equal(t, []string{"1", "lease_released"}, expire(t, pool, pk, released, 0))
		assert.Equal(t, []string{"1", "not_active"}, expire(t, pool, pk, runnable, 0))
		assert.Equal(t, []string{"1", "execution_not_found"}, expire(t, pool, pk, orphan, 0))
		assert.Equal(t, []string{"1", "attempt_not_found"}, expire(t, pool, pk, renewed, 7))
		assert.Equal(t, []string{"1", "attempt_not_found"}, expire(t, pool, 3, renewed, 0), "another partition")
		assert.Equal(t, before, snapshot())

		rows, err := pool.Query(ctx, "SELECT member FROM ffscan.lapsed_leases($1, 1000, 256) WHERE member LIKE $2", []int16{pk}, mine)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		assert.Empty(t, got, "the candidate read skips renewed, released and non-active leases, and attempts without an execution")
	})

	t.Run("two hosts racing on one lapse: one acts, the other finds it settled", func(t *testing.T) {
		eid := "0b4f4a51-9c1e-4a53-9d8c-7a1f2f7d0301"
		plant(t, pool, lapse{pk: pk, eid: eid, policy: `{"retry_policy": {"max_retries": 5}}`, leaseAgoMs: 100})

		first, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer first.Rollback(ctx)
		assert.Equal(t, []string{"1", "retried", "1"}, expire(t, first, pk, eid, 0))

		// The second call waits on the first one's row lock, then finds the
		// lapse settled.
		assert.Equal(t, []string{"1", "lease_released"},
			secondWaits(t, pool, first, "SELECT ffscan.expire_lapsed_lease($1, $2, 0)", pk, eid))
		assert.Equal(t, 1, one[int](t, pool, "SELECT count(*) FROM ff_lease_event WHERE execution_id = $1", eid), "acted once")
		assert.Equal(t, 1, readExec(t, pool, pk, eid).AttemptIndex, "one retry counted")
	})
}

// TestExpireLapsedLeases: the batch form decides each lapse exactly as
// expire_lapsed_lease does, in one transaction, one reply per call in the
// callers' order; a batch that fails applies nothing.
func TestExpireLapsedLeases(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	ctx := context.Background()
	const pk int16 = 87
	id := func(n int) string { return fmt.Sprintf("0b4f4a51-9c1e-4a53-9d8c-87000000%04d", n) }

	// One of each case, planted twice: once for single calls, once for
	// the batch.
	plantSet := func(base int) {
		plant(t, pool, lapse{pk: pk, eid: id(base + 1), policy: `{"retry_policy": {"max_retries": 2}}`, leaseAgoMs: 100}) // retried
		plant(t, pool, lapse{pk: pk, eid: id(base + 2), flow: "5d1c0a2e-1111-4c8e-9e0e-000000000087", leaseAgoMs: 100})   // terminal
		plant(t, pool, lapse{pk: pk, eid: id(base + 3), leaseAgoMs: -60000})                                              // renewed
		plant(t, pool, lapse{pk: pk, eid: id(base + 4), leaseAgoMs: 100, phase: "runnable"})                              // not active
		plant(t, pool, lapse{pk: pk, eid: id(base + 5), leaseAgoMs: 100})                                                 // malformed
		_, err := pool.Exec(ctx, `UPDATE ff_exec_core SET raw_fields = '"junk"' WHERE execution_id = $1`, id(base+5))
		require.NoError(t, err)
	}
	plantSet(0)
	plantSet(100)
	// The callers' order, not the execution order; one attempt that does
	// not exist.
	order := []int{5, 2, 4, 1, 3}
	var want [][]string
	for _, n := range order {
		want = append(want, expire(t, pool, pk, id(n), 0))
	}
	want = append(want, expire(t, pool, pk, id(1), 9))
	calls := [][]string{}
	for _, n := range order {
		calls = append(calls, []string{fmt.Sprint(pk), id(100 + n), "0"})
	}
	calls = append(calls, []string{fmt.Sprint(pk), id(101), "9"})
	got, err := postgres.CallBatch(ctx, pool, "expire_lapsed_lease", calls, scannerapi.Filter{})
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		var g []string
		for _, s := range got[i] {
			g = append(g, *s)
		}
		assert.Equal(t, want[i], g, "call %d", i)
	}
	assert.Equal(t, [][]string{{"0", "malformed_raw_fields"}, {"1", "terminal"}, {"1", "not_active"}, {"1", "retried", "1"},
		{"1", "lease_renewed"}, {"1", "attempt_not_found"}}, want)

	// The rows each wrote are the same, but for the ids and times.
	image := func(base int) string {
		var s string
		require.NoError(t, pool.QueryRow(ctx, `SELECT json_agg(json_build_array(right(e.execution_id::text, 2), e.lifecycle_phase, e.ownership_state,
				e.eligibility_state, e.public_state, e.attempt_state, e.attempt_index, e.terminal_at_ms IS NULL, e.raw_fields,
				a.outcome, a.lease_expires_at_ms IS NULL, a.lease_epoch, a.worker_instance_id,
				(SELECT count(*) FROM ff_completion_event c WHERE c.execution_id = e.execution_id AND c.outcome = 'expired'),
				(SELECT count(*) FROM ff_lease_event l WHERE l.execution_id = e.execution_id::text AND l.event_type = 'expired'))
				ORDER BY e.execution_id)::text
			FROM ff_exec_core e JOIN ff_attempt a USING (partition_key, execution_id)
			WHERE e.partition_key = $1 AND e.execution_id::text LIKE $2`, pk, fmt.Sprintf("0b4f4a51-9c1e-4a53-9d8c-87000000%02d%%", base/100)).Scan(&s))
		return s
	}
	assert.Equal(t, image(0), image(100))
	assert.Contains(t, image(100), `"02", "terminal"`)

	t.Run("a batch that fails applies nothing", func(t *testing.T) {
		plant(t, pool, lapse{pk: pk, eid: id(201), leaseAgoMs: 100})
		_, err := postgres.CallBatch(ctx, pool, "expire_lapsed_lease", [][]string{
			{fmt.Sprint(pk), id(201), "0"}, {fmt.Sprint(pk), "not-a-uuid", "0"}}, scannerapi.Filter{})
		require.Error(t, err)
		assert.Equal(t, "active", readExec(t, pool, pk, id(201)).Phase)
		_, err = postgres.CallBatch(ctx, pool, "expire_lapsed_lease", [][]string{
			{fmt.Sprint(pk), id(201), "0"}, {"3", id(201), "0"}}, scannerapi.Filter{})
		assert.ErrorContains(t, err, "of one partition")
		_, err = postgres.CallBatch(ctx, pool, "promote_delayed", [][]string{{fmt.Sprint(pk), id(201)}}, scannerapi.Filter{})
		assert.ErrorContains(t, err, "no batch form")
	})

	t.Run("the host's filter applies to each call", func(t *testing.T) {
		plant(t, pool, lapse{pk: pk, eid: id(301), leaseAgoMs: 100})
		got, err := postgres.CallBatch(ctx, pool, "expire_lapsed_lease", [][]string{{fmt.Sprint(pk), id(301), "0"}},
			scannerapi.Filter{Namespace: "another"})
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, "filtered", *got[0][1])
		assert.Equal(t, "active", readExec(t, pool, pk, id(301)).Phase)
	})
}
