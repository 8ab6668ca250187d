package budget_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/budget"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/budget/cmd/budget"

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// part is the budget partition the integration scenarios use.
var part = keys.Partition{Family: keys.FamilyBudget, Index: 2}

func TestMain(m *testing.M) {
	code := m.Run()
	scannertest.Cleanup()
	os.Exit(code)
}

// fixture is a server with the library, a client to create budgets, and
// the host's part: candidate fetch and command execution (counted).
type fixture struct {
	*scannertest.Scenario
}

func newFixture(t *testing.T) *fixture {
	return &fixture{Scenario: scannertest.StartScenario(t, client.Options{Partitions: parts})}
}

// idIn mints a budget id homed on p.
func idIn(p keys.Partition) keys.BudgetID {
	for {
		id := keys.NewBudgetID()
		if parts.BudgetPartition(id) == p {
			return id
		}
	}
}

// budget creates a budget on part with one "tokens" dimension and reports
// used tokens through the client.
func (f *fixture) budget(every time.Duration, hard, used int64) keys.BudgetID {
	f.T.Helper()
	r, err := f.Client.CreateBudget(f.Ctx, client.CreateBudgetRequest{
		ID: idIn(part), ScopeType: "lane", ScopeID: "default", ResetInterval: every,
		Dimensions: []client.BudgetDimension{{Name: "tokens", Hard: hard, Soft: 0}},
	})
	require.NoError(f.T, err)
	if used > 0 {
		u, err := f.Client.ReportUsage(f.Ctx, client.UsageReport{Budget: r.ID, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: used}}})
		require.NoError(f.T, err)
		require.True(f.T, u.Applied(), "%+v", u)
	}
	return r.ID
}

func (f *fixture) keys(id keys.BudgetID) keys.BudgetKeys { return keys.BudgetIn(part, id) }

func (f *fixture) hget(key, field string) string {
	f.T.Helper()
	v, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Hget().Key(key).Field(field).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return ""
	}
	require.NoError(f.T, err)
	return v
}

func (f *fixture) resetScore(member string) (float64, bool) {
	f.T.Helper()
	v, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Zscore().Key(keys.BudgetPart(part).BudgetResets()).Member(member).Build()).AsFloat64()
	if valkey.IsValkeyNil(err) {
		return 0, false
	}
	require.NoError(f.T, err)
	return v, true
}

// waitDue waits until the server's clock has passed the next reset of
// every budget of ids (the reset index is scored by the server's time).
func (f *fixture) waitDue(ids ...keys.BudgetID) {
	f.T.Helper()
	var last float64
	for _, id := range ids {
		score, ok := f.resetScore(id.String())
		require.True(f.T, ok, "%s has no reset scheduled", id)
		last = max(last, score)
	}
	f.WaitPast(int64(last))
}

func (f *fixture) inPolicies(member string) bool {
	f.T.Helper()
	ok, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Sismember().Key(keys.BudgetPart(part).BudgetPolicies()).Member(member).Build()).AsBool()
	require.NoError(f.T, err)
	return ok
}

// resetRequest plays the host for budget_reset: server time, then the due
// head of the resets index.
func (f *fixture) resetRequest(batch int) *scannerapi.ScanRequest {
	f.T.Helper()
	return f.resetRequestAt(f.NowMs(), batch)
}

// resetRequestAt is resetRequest at the server time now.
func (f *fixture) resetRequestAt(now int64, batch int) *scannerapi.ScanRequest {
	f.T.Helper()
	return &scannerapi.ScanRequest{Scanner: budget.ResetName, Partition: part, NowMs: now, Cycle: f.NextCycle(), Batch: batch,
		Candidates: scannertest.DueCandidates(f.T, f.Valkey, "budget_resets", keys.BudgetPart(part).BudgetResets(), now, batch)}
}

// reconcileRequest plays the host for budget_reconciler: one SSCAN step
// from cursor 0 (the sets here are small: one step holds them all).
func (f *fixture) reconcileRequest(batch int) *scannerapi.ScanRequest {
	f.T.Helper()
	index := keys.BudgetPart(part).BudgetPolicies()
	e, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Sscan().Key(index).Cursor(0).Count(int64(batch)).Build()).AsScanEntry()
	require.NoError(f.T, err)
	require.Zero(f.T, e.Cursor, "one step holds the whole set")
	req := &scannerapi.ScanRequest{Scanner: budget.ReconcilerName, Partition: part, NowMs: f.NowMs(), Cycle: f.NextCycle(), Batch: batch}
	for _, m := range e.Elements {
		req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "budget_policies", Key: index, Member: m})
	}
	return req
}

// budget_reset (9.1): a due budget is reset and rescheduled, a budget not
// yet due is untouched, a due budget whose interval was set to 0 is reset
// and unscheduled, garbage and non-canonical members are removed (P3), an
// orphan id is reported and dropped, a wrong-type usage key fails and
// stays; all in one Exec.
func resetScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, budget.ResetName)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{}))
	index := keys.BudgetPart(part).BudgetResets()

	due := f.budget(200*time.Millisecond, 0, 7)
	notDue := f.budget(time.Hour, 0, 7)
	zero := f.budget(200*time.Millisecond, 0, 3)
	f.Do("HSET", f.keys(zero).Definition(), "reset_interval_ms", "0") // the operator turned resets off
	poison := f.budget(200*time.Millisecond, 0, 0)
	f.Do("DEL", f.keys(poison).Usage())
	f.Do("SET", f.keys(poison).Usage(), "not a hash")
	orphan := idIn(part)
	f.Do("ZADD", index, "3", orphan.String())
	f.Do("ZADD", index, "1", "garbage")
	f.Do("ZADD", index, "2", "6F1C2D3E-4A5B-4C6D-8E7F-001122334455")
	f.waitDue(due, zero, poison)

	var o scannertest.Observation
	req := f.resetRequest(20)
	require.Len(t, req.Candidates, 6)
	f.Counter.Reset()
	res := f.Scan(s, req)
	o.Add(f.Counter, res)
	assert.Equal(t, int64(2), res.Processed, "%+v", res)
	assert.ElementsMatch(t, []scannerapi.ErrorCount{
		{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1},
		{Class: scannerapi.ErrInvalid, Code: "non_canonical_member", Count: 1},
		{Class: scannerapi.ErrInvalid, Code: "definition_missing", Count: 1},
		{Class: scannerapi.ErrServer, Code: "wrongtype", Count: 1},
	}, res.Errors)
	assert.False(t, res.More)
	assert.Equal(t, []int{1}, o.Execs, "one batched Exec")
	assert.Equal(t, []int{4}, o.FCalls, "due, zero, orphan, poison")

	assert.Equal(t, "0", f.hget(f.keys(due).Usage(), "tokens"))
	assert.Equal(t, "1", f.hget(f.keys(due).Definition(), "reset_count"))
	score, ok := f.resetScore(due.String())
	assert.True(t, ok)
	assert.Greater(t, score, float64(req.NowMs), "rescheduled from the host's now")
	assert.Equal(t, strconv.FormatInt(req.NowMs, 10), f.hget(f.keys(due).Definition(), "last_reset_at"), "the host's server time is the reset time")

	assert.Equal(t, "7", f.hget(f.keys(notDue).Usage(), "tokens"), "not due: untouched")
	assert.Equal(t, "", f.hget(f.keys(notDue).Definition(), "reset_count"))

	assert.Equal(t, "0", f.hget(f.keys(zero).Usage(), "tokens"))
	_, ok = f.resetScore(zero.String())
	assert.False(t, ok, "interval 0: unscheduled by the library")

	_, ok = f.resetScore(poison.String())
	assert.True(t, ok, "a failing budget stays in the index")
	_, ok = f.resetScore(orphan.String())
	assert.False(t, ok, "orphan entry dropped (by the library, interval 0)")
	_, ok = f.resetScore("garbage")
	assert.False(t, ok)
	_, ok = f.resetScore("6F1C2D3E-4A5B-4C6D-8E7F-001122334455")
	assert.False(t, ok)

	// Next cycle, at the same server time: only the poison entry is due
	// (the reset budget's next reset, 200 ms on, is not, however long
	// this test took to get here); it fails again.
	res = f.Scan(s, f.resetRequestAt(req.NowMs, 20))
	o.Add(f.Counter, res)
	assert.Equal(t, int64(0), res.Processed)
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrServer, Code: "wrongtype", Count: 1}}, res.Errors)
	return o
}

func TestResetLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), resetScenario)
}

// A window full of entries backed off after repeated failures does not
// hide a due budget behind it: the look-ahead finds it. With the
// look-ahead off (FlowFabric's fixed window) it would wait forever.
func poisonScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, budget.ResetName)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{}))
	index := keys.BudgetPart(part).BudgetResets()
	var poison []keys.BudgetID
	for i := 0; i < 3; i++ {
		id := f.budget(time.Hour, 0, 0)
		f.Do("SET", f.keys(id).Usage(), "not a hash")
		f.Do("ZADD", index, strconv.Itoa(i+1), id.String()) // due long ago: the head
		poison = append(poison, id)
	}
	good := f.budget(100*time.Millisecond, 0, 5)
	f.waitDue(good)

	var o scannertest.Observation
	for i := 0; i < 3; i++ { // three failures back the head off
		res := f.Scan(s, f.resetRequest(2))
		o.Add(f.Counter, res)
		assert.Equal(t, int64(0), res.Processed)
		assert.Equal(t, int64(2), res.ErrorTotal())
	}
	assert.Equal(t, "5", f.hget(f.keys(good).Usage(), "tokens"), "hidden behind the window so far")
	res := f.Scan(s, f.resetRequest(2))
	o.Add(f.Counter, res)
	assert.Equal(t, int64(1), res.Processed, "%+v", res)
	assert.Equal(t, int64(2), res.Skipped, "the backed-off head")
	assert.Equal(t, "0", f.hget(f.keys(good).Usage(), "tokens"))
	assert.Equal(t, []int{2}, o.Execs[3:], "window, then the look-ahead's resets")
	for _, id := range poison {
		_, ok := f.resetScore(id.String())
		assert.True(t, ok)
	}
	return o
}

func TestPoisonHeadLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), poisonScenario)
}

// budget_reconciler (9.2): a lifetime budget over its hard limit is marked,
// a marked one back under is cleared, one exactly at its limit is left, a
// resetting budget is skipped, an orphan id is pruned from both indexes, a
// wrong-type usage key is counted and left, a garbage member is removed.
// All reads in one Exec, the writes in a second.
func reconcileScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, budget.ReconcilerName)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{}))
	bp := keys.BudgetPart(part)

	over := f.budget(0, 100, 100)
	f.Do("HINCRBY", f.keys(over).Usage(), "tokens", "5") // drift past the limit (e.g. a release lost on another partition)
	under := f.budget(0, 100, 10)
	f.Do("HSET", f.keys(under).Usage(), budget.BreachedAtField, "1")
	atLimit := f.budget(0, 100, 100)
	resetting := f.budget(time.Hour, 100, 100)
	f.Do("HINCRBY", f.keys(resetting).Usage(), "tokens", "50")
	wrong := f.budget(0, 100, 0)
	f.Do("SET", f.keys(wrong).Usage(), "not a hash")
	orphan := idIn(part)
	f.Do("SADD", bp.BudgetPolicies(), orphan.String())
	f.Do("ZADD", bp.BudgetResets(), "99", orphan.String())
	f.Do("SADD", bp.BudgetPolicies(), "garbage")

	var o scannertest.Observation
	req := f.reconcileRequest(100)
	require.Len(t, req.Candidates, 7)
	f.Counter.Reset()
	res := f.Scan(s, req)
	o.Add(f.Counter, res)
	assert.Equal(t, int64(3), res.Processed, "mark, clear, prune: %+v", res)
	assert.Equal(t, int64(1), res.Skipped, "the resetting budget")
	assert.ElementsMatch(t, []scannerapi.ErrorCount{
		{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1},
		{Class: scannerapi.ErrServer, Code: "wrongtype", Count: 1},
	}, res.Errors)
	assert.Equal(t, []int{2}, o.Execs, "reads, then writes")
	assert.Equal(t, []int{0}, o.FCalls)

	assert.Equal(t, strconv.FormatInt(req.NowMs, 10), f.hget(f.keys(over).Usage(), budget.BreachedAtField))
	assert.Equal(t, "", f.hget(f.keys(under).Usage(), budget.BreachedAtField))
	assert.Equal(t, "", f.hget(f.keys(atLimit).Usage(), budget.BreachedAtField), "> not >=")
	assert.Equal(t, "", f.hget(f.keys(resetting).Usage(), budget.BreachedAtField))
	assert.False(t, f.inPolicies(orphan.String()))
	_, ok := f.resetScore(orphan.String())
	assert.False(t, ok)
	assert.False(t, f.inPolicies("garbage"))
	assert.True(t, f.inPolicies(wrong.String()), "wrong-type budget left in place")
	typ, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Type().Key(f.keys(wrong).Usage()).Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "string", typ, "and its key untouched")
	snap, err := f.Client.ReadBudget(f.Ctx, over)
	require.NoError(t, err)
	assert.Equal(t, req.NowMs, snap.BreachedAt.UnixMilli(), "the client sees the marker")

	// A second pass changes nothing: one read Exec, no writes.
	res = f.Scan(s, f.reconcileRequest(100))
	o.Add(f.Counter, res)
	assert.Equal(t, int64(0), res.Processed)
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrServer, Code: "wrongtype", Count: 1}}, res.Errors)
	assert.Equal(t, 1, o.Execs[1])

	// Back under the limit (e.g. the drift was repaired): the marker goes.
	f.Do("HSET", f.keys(over).Usage(), "tokens", "90")
	res = f.Scan(s, f.reconcileRequest(100))
	o.Add(f.Counter, res)
	assert.Equal(t, int64(1), res.Processed)
	assert.Equal(t, "", f.hget(f.keys(over).Usage(), budget.BreachedAtField))
	return o
}

func TestReconcileLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), reconcileScenario)
}

// prune_orphans=false leaves an orphan id where it is.
func TestReconcilerPruneOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(budget.NewReconciler(), f.Counter)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{budget.OptionPruneOrphans: "false"}))
	orphan := idIn(part)
	f.Do("SADD", keys.BudgetPart(part).BudgetPolicies(), orphan.String())
	res := f.Scan(s, f.reconcileRequest(100))
	assert.Equal(t, int64(0), res.Processed)
	assert.Equal(t, int64(1), res.Skipped)
	assert.True(t, f.inPolicies(orphan.String()))
	assert.Error(t, s.Configure(f.Ctx, map[string]string{budget.OptionPruneOrphans: "maybe"}))
	assert.Error(t, s.Configure(f.Ctx, map[string]string{"namespace": "x"}))
}

// Dry runs read and predict, and write nothing.
func TestDryRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reset := pluginhost.Linked(budget.NewReset(), f.Counter)
	rec := pluginhost.Linked(budget.NewReconciler(), f.Counter)
	due := f.budget(100*time.Millisecond, 0, 4)
	over := f.budget(0, 10, 10)
	f.Do("HINCRBY", f.keys(over).Usage(), "tokens", "1")
	f.Do("ZADD", keys.BudgetPart(part).BudgetResets(), "1", "garbage")
	f.waitDue(due)
	f.Counter.Reset()

	req := f.resetRequest(20)
	req.DryRun = true
	res := f.Scan(reset, req)
	_, fcalls := f.Counter.Reset()
	assert.Zero(t, fcalls)
	assert.Equal(t, int64(1), res.Processed)
	assert.Contains(t, res.Notes, "would reset "+due.String()+" and reschedule it in 100ms")
	assert.Equal(t, "4", f.hget(f.keys(due).Usage(), "tokens"))
	_, ok := f.resetScore("garbage")
	assert.True(t, ok)

	req = f.reconcileRequest(100)
	req.DryRun = true
	res = f.Scan(rec, req)
	assert.Equal(t, int64(1), res.Processed)
	assert.Contains(t, res.Notes, "would mark "+over.String()+" breached")
	assert.Equal(t, "", f.hget(f.keys(over).Usage(), budget.BreachedAtField))
}

func TestInfoValid(t *testing.T) {
	t.Parallel()
	for _, s := range []scannerapi.Scanner{budget.NewReset(), budget.NewReconciler()} {
		require.NoError(t, scannerapi.ValidateInfo(s.Info()))
		assert.Equal(t, keys.FamilyBudget, s.Info().Family)
	}
	assert.Equal(t, 15*time.Second, budget.NewReset().Info().DefaultInterval)
	assert.Equal(t, 20, budget.NewReset().Info().DefaultBatch)
	assert.Equal(t, 30*time.Second, budget.NewReconciler().Info().DefaultInterval)
}

// modes are the linked scanner and the plugin binary, for scenarios that
// build their own requests.
func modes() []scannertest.Mode {
	return scannertest.Modes(pluginPkg, func(name string) scannerapi.Scanner {
		switch name {
		case budget.ResetName:
			return budget.NewReset()
		case budget.ReconcilerName:
			return budget.NewReconciler()
		}
		return nil
	})
}

// One binary serves both scanners, and its Info lists them.
func TestOneBinaryServesBothScanners(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	p := scannertest.Launch(t, scannertest.PluginBinary(t, pluginPkg), scannertest.Callbacks(srv.Client(t)))
	var names []string
	for _, s := range p.Scanners() {
		names = append(names, s.Info().Name)
	}
	assert.ElementsMatch(t, []string{budget.ResetName, budget.ReconcilerName}, names)
}
