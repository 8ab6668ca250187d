package client_test

import (
	"testing"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func (e *flowEnv) budget(t *testing.T, interval time.Duration, dims ...client.BudgetDimension) keys.BudgetID {
	t.Helper()
	r, err := e.c.CreateBudget(e.ctx, client.CreateBudgetRequest{ScopeType: "lane", ScopeID: "default",
		ResetInterval: interval, Dimensions: dims})
	require.NoError(t, err)
	require.False(t, r.Existed)
	return r.ID
}

func (e *flowEnv) report(t *testing.T, bid keys.BudgetID, key string, deltas ...client.UsageDelta) client.UsageResult {
	t.Helper()
	r, err := e.c.ReportUsage(e.ctx, client.UsageReport{Budget: bid, Deltas: deltas, IdempotencyKey: key})
	require.NoError(t, err)
	return r
}

func (e *flowEnv) used(t *testing.T, bid keys.BudgetID, dim string) int64 {
	t.Helper()
	s, err := e.c.ReadBudget(e.ctx, bid)
	require.NoError(t, err)
	d, _ := s.Dimension(dim)
	return d.Used
}

func TestCreateAndReadBudget(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	bid := keys.NewBudgetID()
	req := client.CreateBudgetRequest{ID: bid, ScopeType: "lane", ScopeID: "default", ResetInterval: time.Hour,
		Dimensions: []client.BudgetDimension{{Name: "tokens", Hard: 1000, Soft: 800}, {Name: "cost", Hard: 50}}}
	r, err := e.c.CreateBudget(e.ctx, req)
	require.NoError(t, err)
	assert.Equal(t, client.CreateBudgetResult{ID: bid}, r)

	// Re-creating keeps the first definition, whatever the new limits.
	req.Dimensions[0].Hard = 900
	again, err := e.c.CreateBudget(e.ctx, req)
	require.NoError(t, err)
	assert.True(t, again.Existed)

	s, err := e.c.ReadBudget(e.ctx, bid)
	require.NoError(t, err)
	assert.Equal(t, "lane", s.ScopeType)
	assert.Equal(t, "default", s.ScopeID)
	assert.Equal(t, client.DefaultBudgetEnforcement, s.Enforcement)
	assert.Equal(t, client.DefaultBudgetOnHardLimit, s.OnHardLimit)
	assert.Equal(t, client.DefaultBudgetOnSoftLimit, s.OnSoftLimit)
	assert.Equal(t, time.Hour, s.ResetInterval)
	assert.Equal(t, time.Hour, s.NextResetAt.Sub(s.CreatedAt))
	assert.Equal(t, []client.BudgetUsage{{Name: "cost", Hard: 50}, {Name: "tokens", Hard: 1000, Soft: 800}}, s.Dimensions)

	bk := keys.Budget(e.c.Partitions(), bid)
	score, scheduled := e.zscore(t, bk.Partition().BudgetResets(), bid.String())
	require.True(t, scheduled)
	assert.Equal(t, float64(s.NextResetAt.UnixMilli()), score)
	assert.Equal(t, []string{bid.String()}, e.members(t, bk.Partition().BudgetPolicies()))

	_, err = e.c.ReadBudget(e.ctx, keys.NewBudgetID())
	assert.ErrorIs(t, err, client.ErrBudgetNotFound)
}

func TestBudgetSoftAndHardBreach(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	bid := e.budget(t, 0, client.BudgetDimension{Name: "tokens", Hard: 100, Soft: 80}, client.BudgetDimension{Name: "cost", Hard: 10})
	tokens := func(n int64) client.UsageDelta { return client.UsageDelta{Dimension: "tokens", Delta: n} }
	cost := func(n int64) client.UsageDelta { return client.UsageDelta{Dimension: "cost", Delta: n} }

	r := e.report(t, bid, "", tokens(50), cost(2))
	assert.Equal(t, client.UsageResult{Status: client.UsageOK}, r)
	assert.True(t, r.Applied())

	// Crossing the soft limit is applied and reported.
	r = e.report(t, bid, "", tokens(40))
	assert.Equal(t, client.UsageResult{Status: client.UsageSoftBreach, Dimension: "tokens", Current: 90, Limit: 80}, r)
	assert.True(t, r.Applied())
	assert.Equal(t, int64(90), e.used(t, bid, "tokens"))

	// Crossing a hard limit applies nothing, in any dimension.
	r = e.report(t, bid, "", tokens(1), cost(9))
	assert.Equal(t, client.UsageResult{Status: client.UsageHardBreach, Dimension: "cost", Current: 2, Limit: 10}, r)
	assert.False(t, r.Applied())
	assert.Equal(t, int64(90), e.used(t, bid, "tokens"))
	assert.Equal(t, int64(2), e.used(t, bid, "cost"))

	// Exactly at the hard limit is allowed.
	r = e.report(t, bid, "", tokens(10))
	assert.Equal(t, client.UsageSoftBreach, r.Status)
	assert.Equal(t, int64(100), r.Current)

	s, err := e.c.ReadBudget(e.ctx, bid)
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.BreachCount)
	assert.Equal(t, int64(2), s.SoftBreachCount)
	assert.Equal(t, "cost", s.LastBreachDimension)
	assert.False(t, s.LastBreachAt.IsZero())
}

func TestUsageReportIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	bid := e.budget(t, 0, client.BudgetDimension{Name: "tokens", Hard: 100})
	d := client.UsageDelta{Dimension: "tokens", Delta: 30}

	assert.Equal(t, client.UsageOK, e.report(t, bid, "req-1", d).Status)
	again := e.report(t, bid, "req-1", d)
	assert.Equal(t, client.UsageResult{Status: client.UsageAlreadyApplied}, again)
	assert.False(t, again.Applied())
	assert.Equal(t, int64(30), e.used(t, bid, "tokens"))

	// The dedup record is the full key on the budget's partition, for 24 h.
	dedup := keys.BudgetPart(e.c.Partitions().BudgetPartition(bid)).UsageDedup("req-1")
	ttl, err := e.vk.Do(e.ctx, e.vk.B().Pttl().Key(dedup).Build()).AsInt64()
	require.NoError(t, err)
	assert.InDelta(t, float64(24*time.Hour/time.Millisecond), float64(ttl), float64(time.Minute/time.Millisecond))

	// Another key counts; a hard-breached report is not remembered, so its
	// retry is judged again.
	assert.Equal(t, client.UsageOK, e.report(t, bid, "req-2", d).Status)
	big := client.UsageDelta{Dimension: "tokens", Delta: 50}
	assert.Equal(t, client.UsageHardBreach, e.report(t, bid, "req-3", big).Status)
	assert.Equal(t, client.UsageHardBreach, e.report(t, bid, "req-3", big).Status)
	assert.Equal(t, int64(60), e.used(t, bid, "tokens"))
}

func TestResetBudget(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	bid := e.budget(t, time.Minute, client.BudgetDimension{Name: "tokens", Hard: 100}, client.BudgetDimension{Name: "cost", Soft: 5})
	e.report(t, bid, "", client.UsageDelta{Dimension: "tokens", Delta: 70}, client.UsageDelta{Dimension: "cost", Delta: 6})
	assert.Equal(t, client.UsageHardBreach, e.report(t, bid, "", client.UsageDelta{Dimension: "tokens", Delta: 31}).Status)
	before, err := e.c.ReadBudget(e.ctx, bid)
	require.NoError(t, err)

	next, err := e.c.ResetBudget(e.ctx, bid)
	require.NoError(t, err)
	s, err := e.c.ReadBudget(e.ctx, bid)
	require.NoError(t, err)
	assert.Equal(t, int64(0), e.used(t, bid, "tokens"))
	assert.Equal(t, int64(0), e.used(t, bid, "cost"))
	assert.Equal(t, int64(1), s.ResetCount)
	assert.Equal(t, time.Minute, next.Sub(s.LastResetAt))
	assert.Equal(t, next, s.NextResetAt)
	assert.False(t, next.Before(before.NextResetAt), "next %v, before %v", next, before.NextResetAt)
	assert.True(t, s.LastBreachAt.IsZero())
	assert.Empty(t, s.LastBreachDimension)
	assert.Equal(t, int64(1), s.BreachCount) // history is kept
	score, ok := e.zscore(t, keys.Budget(e.c.Partitions(), bid).Partition().BudgetResets(), bid.String())
	require.True(t, ok)
	assert.Equal(t, float64(next.UnixMilli()), score)

	// After the reset the full hard limit is available again.
	assert.Equal(t, client.UsageOK, e.report(t, bid, "", client.UsageDelta{Dimension: "tokens", Delta: 100}).Status)

	// A budget without interval is reset now and not scheduled.
	once := e.budget(t, 0, client.BudgetDimension{Name: "tokens", Hard: 10})
	next, err = e.c.ResetBudget(e.ctx, once)
	require.NoError(t, err)
	assert.True(t, next.IsZero())
	_, ok = e.zscore(t, keys.Budget(e.c.Partitions(), once).Partition().BudgetResets(), once.String())
	assert.False(t, ok)
}

func TestBudgetRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	bid := e.budget(t, 0, client.BudgetDimension{Name: "tokens", Hard: 10})
	before := e.keyspace(t)

	missing := keys.NewBudgetID()
	_, err := e.c.ReportUsage(e.ctx, client.UsageReport{Budget: missing, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: 1}}})
	assert.ErrorIs(t, err, client.ErrBudgetNotFound)
	_, err = e.c.ResetBudget(e.ctx, missing)
	assert.ErrorIs(t, err, client.ErrBudgetNotFound)

	for name, rep := range map[string]client.UsageReport{
		"no deltas":      {Budget: bid},
		"duplicate dim":  {Budget: bid, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: 1}, {Dimension: "tokens", Delta: 2}}},
		"empty dim":      {Budget: bid, Deltas: []client.UsageDelta{{Delta: 1}}},
		"reserved dim":   {Budget: bid, Deltas: []client.UsageDelta{{Dimension: "breached_at", Delta: 1}}},
		"control in key": {Budget: bid, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: 1}}, IdempotencyKey: "a\nb"},
	} {
		_, err := e.c.ReportUsage(e.ctx, rep)
		assert.ErrorIs(t, err, client.ErrInvalidArgument, name)
	}
	for name, req := range map[string]client.CreateBudgetRequest{
		"no dimensions": {},
		"negative":      {Dimensions: []client.BudgetDimension{{Name: "t", Hard: -1}}},
		"soft > hard":   {Dimensions: []client.BudgetDimension{{Name: "t", Hard: 5, Soft: 6}}},
		"duplicate":     {Dimensions: []client.BudgetDimension{{Name: "t"}, {Name: "t"}}},
		"sub-ms reset":  {ResetInterval: time.Microsecond, Dimensions: []client.BudgetDimension{{Name: "t"}}},
	} {
		_, err := e.c.CreateBudget(e.ctx, req)
		assert.ErrorIs(t, err, client.ErrInvalidArgument, name)
	}
	e.sameKeyspace(t, before)
}

// Spend attributed to executions can be taken back per execution: the
// ledger of one is subtracted (never below zero), the other's stays.
func TestRecordAndReleaseSpend(t *testing.T) {
	t.Parallel()
	e := newFlowEnv(t)
	ctx := testCtx(t)
	bid := e.budget(t, 0, client.BudgetDimension{Name: "tokens", Hard: 1000, Soft: 800})
	a, b := keys.NewSoloExecutionID(e.c.Partitions(), "default"), keys.NewSoloExecutionID(e.c.Partitions(), "default")
	tokens := func(n int64) []client.UsageDelta { return []client.UsageDelta{{Dimension: "tokens", Delta: n}} }

	r, err := e.c.RecordSpend(ctx, client.UsageReport{Budget: bid, Deltas: tokens(500), IdempotencyKey: "spend-a"}, a)
	require.NoError(t, err)
	assert.Equal(t, client.UsageOK, r.Status)
	r, err = e.c.RecordSpend(ctx, client.UsageReport{Budget: bid, Deltas: tokens(500), IdempotencyKey: "spend-a"}, a)
	require.NoError(t, err)
	assert.Equal(t, client.UsageAlreadyApplied, r.Status)
	r, err = e.c.RecordSpend(ctx, client.UsageReport{Budget: bid, Deltas: tokens(400)}, b)
	require.NoError(t, err)
	assert.Equal(t, client.UsageResult{Status: client.UsageSoftBreach, Dimension: "tokens", Current: 900, Limit: 800}, r)
	r, err = e.c.RecordSpend(ctx, client.UsageReport{Budget: bid, Deltas: tokens(200)}, b)
	require.NoError(t, err)
	assert.Equal(t, client.UsageHardBreach, r.Status)

	released, err := e.c.ReleaseSpend(ctx, bid, a)
	require.NoError(t, err)
	assert.True(t, released)
	assert.Equal(t, int64(400), e.used(t, bid, "tokens"), "only a's 500 taken back")
	released, err = e.c.ReleaseSpend(ctx, bid, a)
	require.NoError(t, err)
	assert.False(t, released, "nothing left to release")

	var ve *client.ValidationError
	_, err = e.c.RecordSpend(ctx, client.UsageReport{Budget: bid}, a)
	require.ErrorAs(t, err, &ve)
}
