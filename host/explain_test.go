package host

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/explain"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// The tests here plant a state, ask a scanner's plugin what its next
// cycle does with the execution (Session.Explain: the same plugin
// process, with the memory and failure backoff its cycles built), run
// that cycle on the execution's partition, and check that the cycle did
// what the verdict said: acted (counted processed and changed the
// execution) or did not.

// explainHost boots a host on srv with the scanners (plugin binaries of
// the package's plugin directory) and options given.
func explainHost(t *testing.T, addr string, scanners map[string]config.Scanner) *Host {
	t.Helper()
	cfg := testConfig(t, addr, config.Scanner{})
	for n, sc := range scanners {
		sc.Enabled = true
		if sc.Options == nil {
			sc.Options = map[string]string{}
		}
		scanners[n] = sc
	}
	cfg.Scanners = scanners
	h, err := Boot(context.Background(), cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	require.NoError(t, err)
	t.Cleanup(h.Close)
	return h
}

func session(t *testing.T, h *Host, name string) *Session {
	t.Helper()
	s, err := h.OpenSession(context.Background(), name, SessionOptions{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// agree explains id to s, then runs s's next cycle of id's partition and
// checks that it acted exactly when the verdict was "acts" (changed, read
// after the cycle, says whether the execution was acted on). It returns
// the verdict.
func agree(t *testing.T, s *Session, id keys.ExecutionID, want string, changed func() bool) explain.Verdict {
	t.Helper()
	ctx := context.Background()
	rep, err := s.Explain(ctx, id.String())
	require.NoError(t, err)
	require.Len(t, rep.Scanners, 1)
	v := rep.Scanners[0]
	require.Equal(t, want, v.Verdict, "explain of %s: %+v", id, v)
	require.NotEmpty(t, v.Detail)
	sum, err := s.Cycle(ctx, int(id.Partition().Index))
	require.NoError(t, err)
	if want == "acts" {
		assert.Equal(t, int64(1), sum.Processed, "explain said %s acts (%s) and the cycle did not: %+v", v.Scanner, v.Detail, sum)
		assert.True(t, changed(), "explain said %s acts and the execution did not change", v.Scanner)
	} else {
		assert.Zero(t, sum.Processed, "explain said %s %s (%s) and the cycle acted: %+v", v.Scanner, v.Verdict, v.Detail, sum)
		assert.False(t, changed(), "explain said %s %s and the execution changed", v.Scanner, v.Verdict)
	}
	return v
}

func coreField(c valkey.Client, id keys.ExecutionID, f string) string {
	v, _ := c.Do(context.Background(), c.B().Hget().Key(keys.Exec(id).Core()).Field(f).Build()).ToString()
	return v
}

func inIndex(c valkey.Client, key, member string) bool {
	return c.Do(context.Background(), c.B().Zscore().Key(key).Member(member).Build()).Error() == nil
}

// lease_expiry: a lease not due waits (with its due time), a lapsed one
// is marked, a marked one is left in place (by the function's rule, then
// by the scanner's memory), a lease entry of a terminal execution is
// flagged and dropped without acting, and a member whose calls keep
// failing is backed off.
func TestExplainLeaseExpiryAgreesWithTheNextCycle(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	h := explainHost(t, srv.Addr, map[string]config.Scanner{"lease_expiry": {Plugin: "leaseexpiry"}})
	s := session(t, h, "lease_expiry")
	w := scannertest.NewWorld(t, c, client.Options{Partitions: h.parts, Namespace: "ns"})
	leased := func(id keys.ExecutionID) func() bool {
		return func() bool { return coreField(c, id, "ownership_state") != "leased" }
	}
	p := keys.Partition{Family: keys.FamilyFlow, Index: 3}

	later := leaseFor(t, c, p, time.Hour)
	v := agree(t, s, later, "waits", leased(later))
	require.NotNil(t, v.DueAt)
	assert.InDelta(t, float64(time.Now().Add(time.Hour).UnixMilli()), float64(v.DueAt.UnixMilli()), float64(time.Minute.Milliseconds()))
	assert.Equal(t, "host", v.From, "not due: the host's own read decides")

	lapsed := leaseFor(t, c, p, 50*time.Millisecond)
	w.WaitPast(w.NowMs() + 50)
	v = agree(t, s, lapsed, "acts", leased(lapsed))
	assert.Equal(t, "scanner", v.From)
	assert.Equal(t, "marked_expired", v.Reason)
	assert.Equal(t, "lease_expired_reclaimable", coreField(c, lapsed, "ownership_state"))

	// Marked: the function leaves it; after that cycle the scanner
	// remembers the answer and does not call again.
	unchanged := func() bool { return coreField(c, lapsed, "ownership_state") != "lease_expired_reclaimable" }
	v = agree(t, s, lapsed, "skips", unchanged)
	assert.Equal(t, "already_expired", v.Reason)
	v = agree(t, s, lapsed, "skips", unchanged)
	assert.Equal(t, "left_in_place", v.Reason)

	// A lease entry of a terminal execution: inconsistent, and the
	// function drops the entry without acting.
	done, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Lane: "fin", Kind: "k"})
	require.NoError(t, err)
	task := w.Claim(w.Worker(client.WorkerOptions{WorkerID: "w", InstanceID: "explain-1", Lanes: []string{"fin"}}))
	require.Equal(t, done.ID, task.ID())
	_, err = task.Complete(w.Ctx, nil)
	require.NoError(t, err)
	idx := keys.FlowPart(done.ID.Partition()).LeaseExpiry()
	w.Do("ZADD", idx, "1", done.ID.String())
	rep, err := s.Explain(w.Ctx, done.ID.String())
	require.NoError(t, err)
	assert.Contains(t, fmt.Sprint(rep.Inconsistent), "holds a lease of a terminal execution")
	v = agree(t, s, done.ID, "skips", func() bool { return coreField(c, done.ID, "lifecycle_phase") != "terminal" })
	assert.Equal(t, "not_active", v.Reason)
	assert.False(t, inIndex(c, idx, done.ID.String()), "the function dropped the stale entry")

	// A member whose call fails every time (its core is not a hash):
	// tried and failed three cycles in a row, then backed off.
	poison, err := keys.ExecutionIDIn(p, keys.NewUUID())
	require.NoError(t, err)
	w.Do("SET", keys.Exec(poison).Core(), "not a hash")
	w.Do("ZADD", keys.FlowPart(p).LeaseExpiry(), "1", poison.String())
	never := func() bool { return false }
	for range scannerapiThreshold {
		v = agree(t, s, poison, "skips", never)
		assert.NotEqual(t, "backed_off", v.Reason)
	}
	v = agree(t, s, poison, "skips", never)
	assert.Equal(t, "backed_off", v.Reason)
	assert.NotZero(t, v.BackoffUntilCycle)
}

// scannerapiThreshold is the failure tracker's threshold (failed cycles
// before a backoff).
const scannerapiThreshold = 3

// A lease outside the scanner's namespace filter is skipped, and the
// cycle leaves it leased.
func TestExplainFilteredLeaseAgreesWithTheNextCycle(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	h := explainHost(t, srv.Addr, map[string]config.Scanner{"lease_expiry": {Plugin: "leaseexpiry", Options: map[string]string{"namespace": "other"}}})
	s := session(t, h, "lease_expiry")
	w := scannertest.NewWorld(t, c, client.Options{Partitions: h.parts})
	id := leaseFor(t, c, keys.Partition{Family: keys.FamilyFlow, Index: 5}, 50*time.Millisecond)
	w.WaitPast(w.NowMs() + 50)
	v := agree(t, s, id, "skips", func() bool { return coreField(c, id, "ownership_state") != "leased" })
	assert.Equal(t, "filtered", v.Reason)
}

// The timer scanners (one plugin binary): delayed_promoter and
// execution_deadline wait while not due and act once due.
func TestExplainTimersAgreeWithTheNextCycle(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	h := explainHost(t, srv.Addr, map[string]config.Scanner{
		"delayed_promoter": {Plugin: "timers"}, "execution_deadline": {Plugin: "timers"}})
	w := scannertest.NewWorld(t, c, client.Options{Partitions: h.parts, Namespace: "ns"})
	create := func(req client.CreateRequest) keys.ExecutionID {
		r, err := w.Client.CreateExecution(w.Ctx, req)
		require.NoError(t, err)
		return r.ID
	}
	field := func(id keys.ExecutionID, f, was string) func() bool {
		return func() bool { return coreField(c, id, f) != was }
	}

	dp := session(t, h, "delayed_promoter")
	later := create(client.CreateRequest{Lane: "default", Kind: "k", Delay: time.Hour})
	v := agree(t, dp, later, "waits", field(later, "eligibility_state", "not_eligible_until_time"))
	require.NotNil(t, v.DueAt)
	soon := create(client.CreateRequest{Lane: "default", Kind: "k", Delay: 50 * time.Millisecond})
	w.WaitPast(w.NowMs() + 50)
	v = agree(t, dp, soon, "acts", field(soon, "eligibility_state", "not_eligible_until_time"))
	assert.Equal(t, "ff_promote_delayed", v.Reason)
	assert.Equal(t, "eligible_now", coreField(c, soon, "eligibility_state"))
	// Once promoted, the entry is gone: nothing left to do.
	agree(t, dp, soon, "nothing", field(soon, "eligibility_state", "eligible_now"))

	ed := session(t, h, "execution_deadline")
	deadline := time.UnixMilli(w.NowMs() + 400)
	late := create(client.CreateRequest{Lane: "default", Kind: "k", Deadline: deadline})
	agree(t, ed, late, "waits", field(late, "lifecycle_phase", "runnable"))
	w.WaitPast(deadline.UnixMilli())
	agree(t, ed, late, "acts", field(late, "lifecycle_phase", "runnable"))
	assert.Equal(t, "terminal", coreField(c, late, "lifecycle_phase"))
}

// unblock: an execution parked for a capability no worker has is
// skipped (which capability), and acted on once a worker that has it
// registers.
func TestExplainUnblockAgreesWithTheNextCycle(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.PluginDir = ownPluginDir(t)
	copyFile(t, variant("unblock"), cfg.PluginDir+"/unblock")
	cfg.Scanners = map[string]config.Scanner{"unblock": {Enabled: true, Plugin: "unblock", Options: map[string]string{}}}
	h, err := Boot(context.Background(), cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	require.NoError(t, err)
	t.Cleanup(h.Close)
	s := session(t, h, "unblock")
	w := scannertest.NewWorld(t, c, client.Options{Partitions: h.parts, Namespace: "ns"})
	r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Lane: "route", Kind: "k", RequiredCapabilities: []string{"gpu"}})
	require.NoError(t, err)
	id := r.ID
	plain := w.Worker(client.WorkerOptions{WorkerID: "w", InstanceID: "plain", Lanes: []string{"route"}})
	for range scannertest.MaxClaimRounds {
		task, err := plain.ClaimNext(w.Ctx)
		require.NoError(t, err)
		require.Nil(t, task)
		if coreField(c, id, "eligibility_state") == "blocked_by_route" {
			break
		}
	}
	require.Equal(t, "blocked_by_route", coreField(c, id, "eligibility_state"))
	unblocked := func() bool { return coreField(c, id, "eligibility_state") != "blocked_by_route" }

	v := agree(t, s, id, "skips", unblocked)
	assert.Equal(t, "capability_missing", v.Reason)
	assert.Contains(t, v.Detail, `"gpu"`)

	w.Worker(client.WorkerOptions{WorkerID: "w", InstanceID: "gpu-box", Lanes: []string{"other"}, Capabilities: []string{"gpu"}})
	v = agree(t, s, id, "acts", unblocked)
	assert.Equal(t, "ff_unblock_execution", v.Reason)
	assert.Equal(t, "eligible_now", coreField(c, id, "eligibility_state"))
}

// index_reconciler (detect only): an execution in the index its state
// names is consistent; taken out of it, explain flags it and the next
// cycle reports it.
func TestExplainIndexReconcilerAgreesWithTheNextCycle(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.PluginDir = ownPluginDir(t)
	copyFile(t, variant("observers"), cfg.PluginDir+"/observers")
	cfg.Scanners = map[string]config.Scanner{"index_reconciler": {Enabled: true, Plugin: "observers", Options: map[string]string{}}}
	h, err := Boot(context.Background(), cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	require.NoError(t, err)
	t.Cleanup(h.Close)
	s := session(t, h, "index_reconciler")
	w := scannertest.NewWorld(t, c, client.Options{Partitions: h.parts, Namespace: "ns"})
	r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Lane: "default", Kind: "k"})
	require.NoError(t, err)
	id := r.ID
	ctx := context.Background()
	check := func(want, reason string, reported int64) {
		t.Helper()
		rep, err := s.Explain(ctx, id.String())
		require.NoError(t, err)
		v := rep.Scanners[0]
		require.Equal(t, want, v.Verdict, "%+v", v)
		assert.Equal(t, reason, v.Reason)
		sum, err := s.Cycle(ctx, int(id.Partition().Index))
		require.NoError(t, err)
		assert.Equal(t, reported, sum.Processed, "explain said %s (%s): %+v", v.Verdict, v.Detail, sum)
	}
	check("nothing", "consistent", 0)
	w.Do("ZREM", keys.FlowPart(id.Partition()).LaneEligible("default"), id.String())
	check("acts", "missing_from_index", 1)
	rep, err := s.Explain(ctx, id.String())
	require.NoError(t, err)
	assert.Contains(t, fmt.Sprint(rep.Inconsistent), "does not hold it")
}

// retention_trimmer: an execution that just ended waits (the host's
// floor, then its retention); one whose retention passed is purged.
func TestExplainRetentionAgreesWithTheNextCycle(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.PluginDir = ownPluginDir(t)
	copyFile(t, variant("retention"), cfg.PluginDir+"/retention")
	cfg.Scanners = map[string]config.Scanner{"retention_trimmer": {Enabled: true, Plugin: "retention",
		Options: map[string]string{"default_retention": "1h", "min_retention": "1h"}}}
	h, err := Boot(context.Background(), cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	require.NoError(t, err)
	t.Cleanup(h.Close)
	s := session(t, h, "retention_trimmer")
	w := scannertest.NewWorld(t, c, client.Options{Partitions: h.parts, Namespace: "ns"})
	ended := func(instance string) keys.ExecutionID {
		r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Lane: "default", Kind: "k"})
		require.NoError(t, err)
		task := w.Claim(w.Worker(client.WorkerOptions{WorkerID: "w", InstanceID: instance, Lanes: []string{"default"}}))
		require.Equal(t, r.ID, task.ID())
		_, err = task.Complete(w.Ctx, nil)
		require.NoError(t, err)
		return r.ID
	}
	gone := func(id keys.ExecutionID) func() bool {
		return func() bool { return coreField(c, id, "lifecycle_phase") == "" }
	}

	fresh := ended("r1")
	v := agree(t, s, fresh, "waits", gone(fresh))
	require.NotNil(t, v.DueAt)

	// Ended two hours ago (its completion time and index score planted).
	old := ended("r2")
	then := strconv.FormatInt(w.NowMs()-2*time.Hour.Milliseconds(), 10)
	w.Do("HSET", keys.Exec(old).Core(), "completed_at", then)
	w.Do("ZADD", keys.FlowPart(old.Partition()).LaneTerminal("default"), then, old.String())
	v = agree(t, s, old, "acts", gone(old))
	assert.Equal(t, "purge", v.Reason)
}

// dependency_reconciler: a child whose upstream has not finished waits;
// once the upstream finished with its completion missed (no listener
// runs here), the next cycle releases it, as explain said.
func TestExplainDependencyReconcilerAgreesWithTheNextCycle(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.PluginDir = ownPluginDir(t)
	copyFile(t, variant("depreconciler"), cfg.PluginDir+"/depreconciler")
	cfg.Scanners = map[string]config.Scanner{"dependency_reconciler": {Enabled: true, Plugin: "depreconciler", Options: map[string]string{}}}
	h, err := Boot(context.Background(), cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	require.NoError(t, err)
	t.Cleanup(h.Close)
	s := session(t, h, "dependency_reconciler")
	w := scannertest.NewWorld(t, c, client.Options{Partitions: h.parts, Namespace: "ns"})
	fid := keys.NewFlowID()
	_, err = w.Client.CreateFlow(w.Ctx, client.CreateFlowRequest{ID: fid})
	require.NoError(t, err)
	var ids []keys.ExecutionID
	for i := range 2 {
		r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Flow: &fid, Lane: "default", Payload: []byte("x")})
		require.NoError(t, err)
		ids = append(ids, r.ID)
		if i > 0 {
			_, err := w.Client.AddDependency(w.Ctx, client.DependencyRequest{Flow: fid, Upstream: ids[0], Downstream: ids[1]})
			require.NoError(t, err)
		}
	}
	child := ids[1]
	released := func() bool { return coreField(c, child, "eligibility_state") != "blocked_by_dependencies" }
	require.False(t, released())

	v := agree(t, s, child, "waits", released)
	assert.Equal(t, "upstream_not_terminal", v.Reason)

	require.NoError(t, flowtest.Succeed(w.Ctx, w.Lib, ids[0], []byte("a")))
	v = agree(t, s, child, "acts", released)
	assert.Equal(t, "resolve", v.Reason)
}

// A scanner whose plugin does not explain (the test plugin) is reported
// as such, with what the host knows.
func TestExplainOfAScannerThatDoesNotExplain(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	h := explainHost(t, srv.Addr, map[string]config.Scanner{"hostwork": {Plugin: "hostwork"}})
	s := session(t, h, "hostwork")
	id, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 1}, keys.NewUUID())
	require.NoError(t, err)
	// In none of its sources: a scan cannot act on it, whatever the
	// plugin would say.
	rep, err := s.Explain(context.Background(), id.String())
	require.NoError(t, err)
	require.Len(t, rep.Scanners, 1)
	assert.Equal(t, "nothing", rep.Scanners[0].Verdict)
	assert.Equal(t, "no_entry", rep.Scanners[0].Reason)
	assert.False(t, rep.Found)

	// Due in its source: the plugin is asked, and does not explain.
	c := srv.Client(t)
	require.NoError(t, c.Do(context.Background(), c.B().Zadd().Key(workKey(1)).ScoreMember().ScoreMember(1, id.String()).Build()).Error())
	rep, err = s.Explain(context.Background(), id.String())
	require.NoError(t, err)
	assert.Equal(t, explain.NotExplained, rep.Scanners[0].Verdict, "%+v", rep.Scanners[0])
	assert.Contains(t, rep.Scanners[0].Detail, "a cycle now hands it 1 entry")

	_, err = s.Explain(context.Background(), "not-an-id")
	require.ErrorIs(t, err, explain.ErrBadID)
}

// A Postgres reconciler: the candidate function's rows decide. An active
// execution past its deadline is acted on; one whose deadline is ahead is
// not a candidate, and the cycle leaves it.
func TestExplainPostgresAgreesWithTheNextCycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := postgrestest.SchemaDB(t, 2)
	insert := func(pk int, eid string, deadline string) {
		_, err := db.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
			eligibility_state, public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields)
			VALUES ($1, $2, 'default', 'active', 'leased', 'not_applicable', 'running', 'running_attempt', 1, `+deadline+`, '{}')`, pk, eid)
		require.NoError(t, err)
	}
	const past, ahead = "e1000000-0000-4000-8000-000000000001", "e1000000-0000-4000-8000-000000000002"
	insert(4, past, "ffscan.now_ms() - 1000")
	insert(6, ahead, "ffscan.now_ms() + 3600000")
	cfg := testConfig(t, "", config.Scanner{})
	cfg.Valkey.Addrs = nil
	cfg.Postgres.DSN = db.Config().ConnString()
	cfg.Scanners = map[string]config.Scanner{pgreconcilers.ExecutionDeadlineName: {Enabled: true, Options: map[string]string{}}}
	h, err := Boot(ctx, cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	defer h.Close()
	s, err := h.OpenSession(ctx, pgreconcilers.ExecutionDeadlineName, SessionOptions{Linked: pgreconcilers.NewExecutionDeadline()})
	require.NoError(t, err)
	defer s.Close()
	phase := func(eid string) string {
		var p string
		require.NoError(t, db.QueryRow(ctx, `SELECT lifecycle_phase FROM ff_exec_core WHERE execution_id = $1`, eid).Scan(&p))
		return p
	}
	pk := map[string]uint16{past: 4, ahead: 6}
	id := func(u string) keys.ExecutionID {
		uu, err := keys.ParseUUID(u)
		require.NoError(t, err)
		e, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: pk[u]}, uu)
		require.NoError(t, err)
		return e
	}
	v := agree(t, s, id(ahead), "nothing", func() bool { return phase(ahead) != "active" })
	assert.Equal(t, "not_a_candidate", v.Reason)
	v = agree(t, s, id(past), "acts", func() bool { return phase(past) != "active" })
	assert.Equal(t, "expire_execution_deadline", v.Reason)
	assert.Equal(t, "terminal", phase(past))
}
