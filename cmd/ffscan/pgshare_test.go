package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/internal/pgtest"
)

// pgShareSchema is a database with ffscan's schema and library, copied for
// each test that runs hosts on one database.
var pgShareSchema = pgtest.NewTemplate("pgshare", func(ctx context.Context, dsn string) error {
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

// pgPlugins is a plugin directory holding pgreconcilers, built once.
var pgPlugins struct {
	once sync.Once
	dir  string
	err  error
}

func pgPluginDir(t *testing.T) string {
	t.Helper()
	pgPlugins.once.Do(func() {
		dir := filepath.Join(filepath.Dir(ffscanBin), "pgplugins")
		if pgPlugins.err = os.Mkdir(dir, 0o755); pgPlugins.err != nil {
			return
		}
		bin := filepath.Join(dir, "pgreconcilers")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/ffscan/ffscan/plugins/pgreconcilers/cmd/pgreconcilers").CombinedOutput()
		if err != nil {
			pgPlugins.err = fmt.Errorf("build pgreconcilers: %v\n%s", err, out)
			return
		}
		pgPlugins.err = os.Chmod(bin, 0o755)
		pgPlugins.dir = dir
	})
	require.NoError(t, pgPlugins.err)
	return pgPlugins.dir
}

// The partitions of the hosts in these tests: 24 in all.
const (
	shareFlow, shareBudget, shareQuota = 16, 4, 4
	sharePartitions                    = shareFlow + shareBudget + shareQuota
)

// shareHost is one `ffscan run` on the shared database.
type shareHost struct {
	name string
	hp   *hostProc
	id   string
}

// claim is a host's fencing view as its status gave it: the partitions it
// owned at at, valid until until without another renewal.
type claim struct {
	host    string
	members []string // sorted
	at      time.Time
	until   time.Time
	parts   map[string]bool // "flow:3"
}

// entry is one row of ffscan.share_owner.
type entry struct {
	host             string
	taken, expires   int64
	family, position string
}

// shareMonitor checks the share continuously while the hosts run: at each
// change of ffscan.share_owner's holders (a trigger the test adds notifies
// it) and at least every 250 ms (the hosts' views change at their own
// ticks, which nothing in the database announces), it reads every running
// host's fencing view and then the database, and records a violation when
// a host claims a partition that another host took before the claim's
// instant, or took from a stalled host before that host's last view ran
// out. A database row per partition is the database's own guarantee (its
// primary key); the views are checked against it.
type shareMonitor struct {
	t    *testing.T
	pool *pgxpool.Pool

	mu      sync.Mutex
	running map[string]*shareHost // by name
	frozen  []claim               // stalled hosts' last views
	bad     []string
	last    map[string]entry // the rows of the last round, by "family:index"
	views   map[string]claim // the running hosts' views of the last round, by name
	rounds  int
	checked int // claims checked against the database
	changes service.Changes
}

func (m *shareMonitor) run(ctx context.Context, dsn string) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		m.fail("monitor: %v", err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN test_share"); err != nil {
		m.fail("monitor: %v", err)
		return
	}
	for ctx.Err() == nil {
		m.round(ctx)
		wctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		_, _ = conn.WaitForNotification(wctx)
		cancel()
	}
}

func (m *shareMonitor) fail(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bad = append(m.bad, fmt.Sprintf(format, args...))
}

func (m *shareMonitor) round(ctx context.Context) {
	m.mu.Lock()
	hosts := make([]*shareHost, 0, len(m.running))
	for _, h := range m.running {
		hosts = append(hosts, h)
	}
	frozen := append([]claim(nil), m.frozen...)
	m.mu.Unlock()

	// The views first, then the database: a view that names a partition
	// was true at its instant, and whoever holds the partition in the
	// database now must have taken it after that instant.
	views := map[string]claim{}
	for _, h := range hosts {
		st, err := getStatus(h.hp.addr)
		if err != nil || st.Sharing == nil {
			continue // starting, stopping, or between two requests
		}
		views[h.name] = claimOf(h.id, st.Sharing)
	}
	rows, err := m.pool.Query(ctx, `SELECT family, partition_index::text, host_id, taken_at_ms, expires_at_ms FROM ffscan.share_owner WHERE share_group = ''`)
	if err != nil {
		if ctx.Err() == nil {
			m.fail("monitor: read the share: %v", err)
		}
		return
	}
	entries := map[string]entry{}
	for rows.Next() {
		var e entry
		if err := rows.Scan(&e.family, &e.position, &e.host, &e.taken, &e.expires); err != nil {
			m.fail("monitor: %v", err)
		}
		entries[e.family+":"+e.position] = e
	}
	rows.Close()
	if rows.Err() != nil {
		return
	}
	bad, n := checkShare(views, entries, frozen)
	m.mu.Lock()
	m.bad = append(m.bad, bad...)
	m.last, m.views = entries, views
	m.rounds++
	m.checked += n
	m.mu.Unlock()
	m.changes.Notify()
}

// checkShare checks the running hosts' views (by name) and the stalled
// hosts' last views against the database's entries read after them, and
// returns the violations and how many claims it checked.
func checkShare(views map[string]claim, entries map[string]entry, frozen []claim) (bad []string, checked int) {
	for name, c := range views {
		for p := range c.parts {
			checked++
			e, ok := entries[p]
			// 2 ms: the database rounds its clock to the millisecond.
			if ok && e.host != c.host && e.taken < c.at.UnixMilli()-2 {
				bad = append(bad, fmt.Sprintf("%s (%s) claimed %s at %s, but %s took it at %d", name, c.host, p, c.at.Format(time.StampMilli), e.host, e.taken))
			}
		}
	}
	for _, c := range frozen {
		for p := range c.parts {
			checked++
			if e, ok := entries[p]; ok && e.host != c.host && e.taken <= c.until.UnixMilli() {
				bad = append(bad, fmt.Sprintf("%s took %s at %d from the stalled host %s, whose view was valid until %s",
					e.host, p, e.taken, c.host, c.until.Format(time.StampMilli)))
			}
		}
	}
	return bad, checked
}

func claimOf(id string, s *httpapi.SharingStatus) claim {
	c := claim{host: id, members: append([]string(nil), s.Hosts...), at: s.At, parts: map[string]bool{}}
	sort.Strings(c.members)
	if s.ValidUntil != nil {
		c.until = *s.ValidUntil
	}
	for fam, idx := range s.Partitions {
		for _, i := range idx {
			c.parts[fmt.Sprintf("%s:%d", fam, i)] = true
		}
	}
	return c
}

// violations returns what the monitor found so far.
func (m *shareMonitor) violations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.bad...)
}

// waitFor waits, round after round of the monitor, until cond holds on
// the rows and views of a round, and returns how long that took.
func (m *shareMonitor) waitFor(what string, limit time.Duration, cond func(rows map[string]entry, views map[string]claim) bool) time.Duration {
	m.t.Helper()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	err := m.changes.WaitFor(ctx, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.rounds > 0 && cond(m.last, m.views)
	})
	require.NoError(m.t, err, "%s (violations: %v)", what, m.violations())
	require.Empty(m.t, m.violations())
	return time.Since(t0)
}

// settled: the running hosts named by names each see exactly each other
// as members, their views divide every partition among them, and the
// database names, for every partition, the host whose view holds it.
// (A view that lists every host as a member was taken after a tick that
// gave up the others' partitions, so views dividing every partition are
// the final division, not a moment of a hand-over.)
func (m *shareMonitor) settled(names ...string) func(map[string]entry, map[string]claim) bool {
	return func(rows map[string]entry, views map[string]claim) bool { return m.settledNow(names, rows, views) }
}

func (m *shareMonitor) settledNow(names []string, rows map[string]entry, views map[string]claim) bool {
	owner := map[string]string{}
	var ids []string
	for _, n := range names {
		v, ok := views[n]
		if !ok {
			return false
		}
		ids = append(ids, v.host)
	}
	sort.Strings(ids)
	for _, n := range names {
		v := views[n]
		if strings.Join(v.members, ",") != strings.Join(ids, ",") {
			return false
		}
		for p := range v.parts {
			if owner[p] != "" {
				return false
			}
			owner[p] = v.host
		}
	}
	if len(owner) != sharePartitions {
		return false
	}
	for p, h := range owner {
		if rows[p].host != h {
			return false
		}
	}
	return true
}

// lapses plants n active executions, spread over the flow partitions,
// whose attempt lease lapsed, with no retry policy (each is ended, with
// one completion event, by the one pg_attempt_timeout that acts on it),
// tagged batch in raw_fields.
func plantLapses(t *testing.T, pool *pgxpool.Pool, batch string, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `WITH e AS (
		INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
			public_state, attempt_state, created_at_ms, raw_fields)
		SELECT (i % $2)::smallint, gen_random_uuid(), 'default', 'active', 'leased', 'not_applicable', 'running', 'running_attempt', 1,
			jsonb_build_object('namespace', 'share', 'batch', $1::text)
		FROM generate_series(1, $3) AS i
		RETURNING partition_key, execution_id)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch, lease_expires_at_ms)
		SELECT partition_key, execution_id, 0, 'w', 'w-1', 1, ffscan.now_ms() - 100 FROM e`, batch, shareFlow, n)
	require.NoError(t, err)
}

// actedOnce: every lapse of batch ended, each fenced exactly once (its
// attempt's lease epoch went from 1 to 2) with exactly one completion
// event; a second action would have been refused (not active) and left
// both as they are, so this also shows none was acted on twice.
func actedOnce(t *testing.T, pool *pgxpool.Pool, batch string) (done bool) {
	t.Helper()
	var open, epochs, events int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE e.lifecycle_phase <> 'terminal'),
		count(*) FILTER (WHERE e.lifecycle_phase = 'terminal' AND a.lease_epoch <> 2),
		count(*) FILTER (WHERE e.lifecycle_phase = 'terminal' AND (SELECT count(*) FROM ff_completion_event c
			WHERE c.partition_key = e.partition_key AND c.execution_id = e.execution_id) <> 1)
		FROM ff_exec_core e JOIN ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id
		WHERE e.partition_key = ANY ($2) AND e.raw_fields ->> 'batch' = $1`, batch, flowKeys()).Scan(&open, &epochs, &events))
	require.Zero(t, epochs, "batch %s: a lapse fenced more than once", batch)
	require.Zero(t, events, "batch %s: a lapse ended with other than one completion event", batch)
	return open == 0
}

// flowKeys are the test's flow partitions, so that its reads are pruned
// to their children (a read over all 256 children of three tables costs
// PostgreSQL seconds to plan and, with JIT, a minute to compile).
func flowKeys() []int16 {
	ks := make([]int16, shareFlow)
	for i := range ks {
		ks[i] = int16(i)
	}
	return ks
}

// waitActed waits, at each completion the database announces, until every
// lapse of batch was acted on (exactly once), and returns how long that
// took.
func waitActed(t *testing.T, dsn, batch string, pool *pgxpool.Pool, limit time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "LISTEN ff_completion")
	require.NoError(t, err)
	for !actedOnce(t, pool, batch) {
		// Each action commits a completion event, which notifies.
		_, err := conn.WaitForNotification(ctx)
		require.NoError(t, err, "batch %s not all acted on within %s", batch, limit)
	}
	return time.Since(t0)
}

// Three hosts (real `ffscan run` processes with pg_attempt_timeout and the
// completion listener, no Valkey) on one PostgreSQL, through a host
// joining, one leaving cleanly, one killed with SIGKILL and one stalled
// with SIGSTOP: at every round of the monitor no host claims a partition
// another holds (and no partition of a stalled host is taken before its
// view ran out), every lapse planted is acted on exactly once, and a
// killed host's partitions are taken over within 15 s.
func TestThreeHostsShareOnePostgres(t *testing.T) {
	t.Parallel()
	dsn := pgShareSchema.Database(t)
	plugins := pgPluginDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// (JIT off: the test's own reads are small, and compiling their plans
	// over partitioned tables is not.)
	pool, err := pgxpool.New(ctx, dsn+"&jit=off")
	require.NoError(t, err)
	defer pool.Close()
	// The monitor's wake-up: a change of holder (not a renewal).
	_, err = pool.Exec(ctx, `CREATE FUNCTION test_share_changed() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF TG_OP = 'UPDATE' AND OLD.host_id = NEW.host_id THEN RETURN NULL; END IF;
			PERFORM pg_notify('test_share', '');
			RETURN NULL;
		END $$;
		CREATE TRIGGER test_share_changed AFTER INSERT OR UPDATE OR DELETE ON ffscan.share_owner
			FOR EACH ROW EXECUTE FUNCTION test_share_changed()`)
	require.NoError(t, err)

	m := &shareMonitor{t: t, pool: pool, running: map[string]*shareHost{}}
	all := map[string]*shareHost{}
	defer func() {
		if t.Failed() {
			for _, h := range all {
				t.Logf("host %s (%s):\n%s", h.name, h.id, h.hp.logs.String())
			}
		}
	}()
	done := make(chan struct{})
	go func() { defer close(done); m.run(ctx, dsn) }()
	defer func() { cancel(); <-done }()

	cfg := fmt.Sprintf(`postgres: {dsn: %q}
partitions: {flow: %d, budget: %d, quota: %d}
shutdown_timeout: 5s
scanners:
  pg_attempt_timeout: {interval: 500ms}
`, dsn, shareFlow, shareBudget, shareQuota)
	start := func(name string) *shareHost {
		hp := startHost(t, cfg, "--plugin-dir", plugins)
		st, err := getStatus(hp.addr)
		require.NoError(t, err)
		require.NotNil(t, st.Sharing, "a host without Valkey shares through its database")
		h := &shareHost{name: name, hp: hp, id: st.Sharing.HostID}
		all[name+"/"+h.id] = h
		m.mu.Lock()
		m.running[name] = h
		m.mu.Unlock()
		return h
	}
	forget := func(h *shareHost) {
		m.mu.Lock()
		delete(m.running, h.name)
		m.mu.Unlock()
	}
	batch := 0
	plantAndWait := func(what string) {
		t.Helper()
		batch++
		b := fmt.Sprint(batch)
		plantLapses(t, pool, b, 4*shareFlow)
		took := waitActed(t, dsn, b, pool, 60*time.Second)
		t.Logf("%s: %d lapses acted on once each in %s", what, 4*shareFlow, took.Round(time.Millisecond))
	}

	// One host owns everything.
	a := start("a")
	m.waitFor("a alone owns every partition", 30*time.Second, m.settled("a"))
	plantAndWait("one host")

	// Two join.
	b := start("b")
	c := start("c")
	took := m.waitFor("three hosts divide the partitions", 30*time.Second, m.settled("a", "b", "c"))
	t.Logf("join: settled %s after the third host started", took.Round(time.Millisecond))
	plantAndWait("three hosts")

	// c leaves cleanly: it releases its partitions, the others take them
	// at their next tick.
	forget(c)
	require.NoError(t, c.hp.cmd.Process.Signal(syscall.SIGTERM))
	<-c.hp.exited
	took = m.waitFor("a and b take c's partitions", 15*time.Second, m.settled("a", "b"))
	t.Logf("clean leave: c's partitions taken %s after it exited", took.Round(time.Millisecond))
	plantAndWait("after a clean leave")
	c = start("c")
	m.waitFor("c rejoined", 30*time.Second, m.settled("a", "b", "c"))

	// b is killed: its partitions stay its own in the database until
	// they lapse, then a and c take them. Lapses planted at once in every
	// partition are acted on as soon as each partition has an owner.
	forget(b)
	require.NoError(t, b.hp.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	<-b.hp.exited
	batch++
	plantLapses(t, pool, fmt.Sprint(batch), 4*shareFlow)
	m.waitFor("a and c take b's partitions", 30*time.Second, m.settled("a", "c"))
	takeover := time.Since(killed)
	waitActed(t, dsn, fmt.Sprint(batch), pool, 30*time.Second)
	acted := time.Since(killed)
	t.Logf("kill -9: b's partitions taken over %s after the kill, every lapse acted on %s after it", takeover.Round(time.Millisecond), acted.Round(time.Millisecond))
	require.LessOrEqual(t, takeover, 15*time.Second, "a killed host's partitions are taken over within 15 s")
	require.LessOrEqual(t, acted, 15*time.Second, "and the lapses in them acted on")

	b = start("b")
	m.waitFor("b rejoined", 30*time.Second, m.settled("a", "b", "c"))

	// a stalls. Its view, read last before the stop (the share is
	// settled, so no release is under way), must run out before anyone
	// takes one of its partitions.
	var last claim
	m.waitFor("a's view read while settled", 30*time.Second, func(rows map[string]entry, views map[string]claim) bool {
		if !m.settledNow([]string{"a", "b", "c"}, rows, views) {
			return false
		}
		last = views["a"]
		return true
	})
	require.NotEmpty(t, last.parts)
	m.mu.Lock()
	delete(m.running, "a")
	m.frozen = append(m.frozen, last)
	m.mu.Unlock()
	require.NoError(t, syscall.Kill(a.hp.cmd.Process.Pid, syscall.SIGSTOP))
	stopped := time.Now()
	batch++
	stallBatch := fmt.Sprint(batch)
	plantLapses(t, pool, stallBatch, 4*shareFlow)
	m.waitFor("b and c take the stalled host's partitions", 30*time.Second, m.settled("b", "c"))
	t.Logf("SIGSTOP: a's partitions taken %s after the stop (its view ran until %s after)", time.Since(stopped).Round(time.Millisecond),
		last.until.Sub(stopped).Round(time.Millisecond))
	waitActed(t, dsn, stallBatch, pool, 30*time.Second)

	// a resumes: it finds its partitions taken, owns none of them until
	// b and c release its share, and the three settle again.
	require.NoError(t, syscall.Kill(a.hp.cmd.Process.Pid, syscall.SIGCONT))
	m.mu.Lock()
	m.running["a"] = a
	m.mu.Unlock()
	took = m.waitFor("a back in the share", 30*time.Second, m.settled("a", "b", "c"))
	t.Logf("SIGCONT: settled again %s after", took.Round(time.Millisecond))
	plantAndWait("after the stall")
	require.Empty(t, m.violations())
	m.mu.Lock()
	rounds, checked := m.rounds, m.checked
	m.mu.Unlock()
	t.Logf("the monitor checked %d claims of the hosts' views against the database in %d rounds", checked, rounds)
	require.GreaterOrEqual(t, checked, rounds, "the rounds checked the views of hosts that owned partitions")

	// What the hosts counted agrees: every partition's lapses went to one
	// host, and the share's status and metrics name the database.
	st, err := getStatus(a.hp.addr)
	require.NoError(t, err)
	require.Equal(t, "postgres (filter none)", st.Sharing.Store)
	hostIDs := []string{a.id, b.id, c.id}
	sort.Strings(hostIDs)
	require.Equal(t, hostIDs, st.Sharing.Hosts)
	resp, err := http.Get("http://" + a.hp.addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), "ffscan_sharing_hosts 3")
	require.Contains(t, string(body), `ffscan_sharing_info{host_id="`+a.id+`",store="postgres (filter none)"} 1`)
}

// The monitor's check, on made-up views: a host that claims a partition
// another took before the claim's instant, and a partition taken from a
// stalled host before its view ran out, are violations; a partition taken
// after the claim's instant (released meanwhile) is not.
func TestShareMonitorCheck(t *testing.T) {
	at := time.UnixMilli(1_000_000)
	views := map[string]claim{"a": {host: "A", at: at, parts: map[string]bool{"flow:1": true, "flow:2": true, "flow:3": true}}}
	entries := map[string]entry{
		"flow:1": {host: "A", taken: 900_000},
		"flow:2": {host: "B", taken: 999_000}, // before the claim: two owners
		"flow:3": {host: "B", taken: 1_000_500},
		"flow:4": {host: "B", taken: 1_005_000}, // from the stalled C before its view ran out
		"flow:5": {host: "B", taken: 1_020_000},
	}
	frozen := []claim{{host: "C", until: time.UnixMilli(1_010_000), parts: map[string]bool{"flow:4": true, "flow:5": true}}}
	bad, n := checkShare(views, entries, frozen)
	require.Equal(t, 5, n)
	require.Len(t, bad, 2, "%v", bad)
	require.Contains(t, bad[0]+bad[1], "claimed flow:2")
	require.Contains(t, bad[0]+bad[1], "took flow:4")
}

// Hosts behind PgBouncer in transaction mode (postgres.pooling:
// transaction): the share's statements, the candidate reads and the
// actions go through the pooler, the completion listener keeps its
// session on postgres.listen_dsn (the database itself). Two hosts divide
// the partitions, every lapse is acted on once, and each completion is
// dispatched once, by the share's listener. A host told it is
// behind a transaction pooler with completions on and no listen_dsn is
// refused.
func TestHostsShareBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	dsn := pgShareSchema.Database(t)
	plugins := pgPluginDir(t)
	bouncer := pgtest.NewBouncer(t, pgShareSchema.Server(), "transaction")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn+"&jit=off")
	require.NoError(t, err)
	defer pool.Close()

	refused := writeConfig(t, fmt.Sprintf("postgres: {dsn: %q, pooling: transaction}\nscanners:\n  pg_attempt_timeout: {}\n", bouncer.DSN(dsn)))
	code, out := ffscan(t, "run", "--config", refused, "--plugin-dir", plugins)
	require.NotEqual(t, 0, code)
	require.Contains(t, out, "postgres.listen_dsn: is required with postgres.pooling: transaction while completions.enabled is on")

	m := &shareMonitor{t: t, pool: pool, running: map[string]*shareHost{}}
	done := make(chan struct{})
	go func() { defer close(done); m.run(ctx, dsn) }()
	defer func() { cancel(); <-done }()
	cfg := fmt.Sprintf(`postgres: {dsn: %q, pooling: transaction, listen_dsn: %q}
partitions: {flow: %d, budget: %d, quota: %d}
shutdown_timeout: 5s
scanners:
  pg_attempt_timeout: {interval: 500ms}
`, bouncer.DSN(dsn), dsn, shareFlow, shareBudget, shareQuota)
	var hosts []*shareHost
	for _, name := range []string{"a", "b"} {
		hp := startHost(t, cfg, "--plugin-dir", plugins)
		st, err := getStatus(hp.addr)
		require.NoError(t, err)
		h := &shareHost{name: name, hp: hp, id: st.Sharing.HostID}
		hosts = append(hosts, h)
		m.mu.Lock()
		m.running[name] = h
		m.mu.Unlock()
	}
	m.waitFor("two hosts behind the pooler divide the partitions", 30*time.Second, m.settled("a", "b"))
	plantLapses(t, pool, "pooled", 4*shareFlow)
	t.Logf("behind PgBouncer (transaction mode): %d lapses acted on once each in %s", 4*shareFlow,
		waitActed(t, dsn, "pooled", pool, 60*time.Second).Round(time.Millisecond))
	// Each lapse ended with a completion, dispatched once, by its
	// partition's owner (the counts follow the commits).
	last := ""
	ok := assert.Eventually(t, func() bool {
		var dispatched, again, listening, standby int64
		per := ""
		for _, h := range hosts {
			st, err := getStatus(h.hp.addr)
			if err != nil || st.Postgres == nil || st.Postgres.Completions == nil {
				last = fmt.Sprintf("host %s: no completion status (%v)", h.name, err)
				return false
			}
			c := st.Postgres.Completions
			dispatched, again = dispatched+c.Dispatched, again+c.AlreadyDone
			if c.Listening && !c.Standby {
				listening++
			}
			if c.Standby && !c.Listening {
				standby++
			}
			per += fmt.Sprintf("; host %s: %+v", h.name, *c)
		}
		last = fmt.Sprintf("dispatched %d, already done %d of %d, %d host(s) listening, %d on standby%s", dispatched, again, 4*shareFlow, listening, standby, per)
		return dispatched == 4*shareFlow && again == 0 && listening == 1 && standby == int64(len(hosts)-1)
	}, 30*time.Second, 100*time.Millisecond, "every completion dispatched once")
	if !ok {
		for _, h := range hosts {
			for _, l := range strings.Split(h.hp.logs.String(), "\n") {
				if strings.Contains(l, "completion") && (strings.Contains(l, "WARN") || strings.Contains(l, "ERROR")) {
					t.Logf("host %s: %s", h.name, l)
				}
			}
		}
		t.Fatalf("completions: %s", last)
	}
	require.Empty(t, m.violations())
}
