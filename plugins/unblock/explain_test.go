package unblock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/unblock"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// Explain answers each reason's decision with the scan's own, through the
// read-only host an explanation gets: a reset budget and a capability a
// worker advertises would be unblocked; a budget at its limit, a
// capability nobody advertises, an entry whose core names another reason
// or is gone are skipped (the last two flagged inconsistent); a member
// that is not an id is an invalid member; an execution in no blocked set
// is not blocked; one outside the filter is filtered. A check that fails
// (the partition counts missing) is skipped without being recorded, so
// asking again and again never backs the execution off.
func TestExplainSaysTheScansDecision(t *testing.T) {
	t.Parallel()
	w := &world{scannertest.StartWorld(t, client.Options{Partitions: parts, Namespace: "e2e"})}
	const lane = "l"
	w.Do(append([]string{"HSET", keys.ConfigPartitions}, parts.HashFields()...)...)
	budget := func(id string) keys.BudgetID {
		bid, err := keys.ParseBudgetID(id)
		require.NoError(t, err)
		_, err = w.Client.CreateBudget(w.Ctx, client.CreateBudgetRequest{ID: bid, ScopeType: "lane", ScopeID: lane,
			Dimensions: []client.BudgetDimension{{Name: "tokens", Hard: 100}}})
		require.NoError(t, err)
		_, err = w.Client.ReportUsage(w.Ctx, client.UsageReport{Budget: bid, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: 100}}})
		require.NoError(t, err)
		return bid
	}
	b1, b2 := budget("b0000000-0000-4000-8000-000000000021"), budget("b0000000-0000-4000-8000-000000000022")
	_, err := w.Client.ResetBudget(w.Ctx, b1)
	require.NoError(t, err)
	reset, atLimit, other, free := w.create(lane), w.create(lane), w.create(lane), w.create(lane)
	gpu, tpu := w.create(lane, "gpu"), w.create(lane, "tpu")
	p := reset.Partition()
	for _, id := range []keys.ExecutionID{atLimit, other, free, gpu, tpu} {
		require.Equal(t, p, id.Partition(), "one lane, one partition")
	}
	pk := keys.FlowPart(p)
	w.block(reset, lane, "waiting_for_budget", pk.LaneBlockedBudget(lane), "budget_ids", b1.String())
	w.block(atLimit, lane, "waiting_for_budget", pk.LaneBlockedBudget(lane), "budget_ids", b1.String()+","+b2.String())
	w.block(other, lane, "waiting_for_quota", pk.LaneBlockedBudget(lane))
	w.block(gpu, lane, "waiting_for_capable_worker", pk.LaneBlockedRoute(lane))
	w.block(tpu, lane, "waiting_for_capable_worker", pk.LaneBlockedRoute(lane))
	w.worker("other-lane", "gpu-box", "gpu")
	gone, err := keys.ExecutionIDIn(p, keys.NewUUID())
	require.NoError(t, err)
	w.Do("ZADD", pk.LaneBlockedBudget(lane), "1", gone.String())
	w.Do("ZADD", pk.LaneBlockedQuota(lane), "1", "garbage")

	host := pluginhost.ReadOnly(scannertest.Host(w.Valkey))
	sets := map[string]string{"budget": pk.LaneBlockedBudget(lane), "quota": pk.LaneBlockedQuota(lane), "route": pk.LaneBlockedRoute(lane)}
	// explain asks s about member as the host would: the entries of it in
	// the blocked sets are the candidates.
	explain := func(s *unblock.Scanner, member string, cycle uint64) *scannerapi.Explanation {
		req := &scannerapi.ExplainRequest{ExecutionID: member, Scan: scannerapi.ScanRequest{Scanner: unblock.Name,
			Partition: p, NowMs: w.NowMs(), Cycle: cycle, Batch: 100, Lanes: []string{lane}, DryRun: true}}
		for src, key := range sets {
			if err := w.Valkey.Do(w.Ctx, w.Valkey.B().Zscore().Key(key).Member(member).Build()).Error(); err == nil {
				req.Scan.Candidates = append(req.Scan.Candidates, scannerapi.Candidate{Source: src, Key: key, Lane: lane, Member: member})
			}
		}
		e, err := s.Explain(w.Ctx, host, req)
		require.NoError(t, err)
		return e
	}
	s := unblock.New()
	require.NoError(t, s.Configure(w.Ctx, map[string]string{}))
	for _, c := range []struct {
		member          string
		verdict         scannerapi.Verdict
		reason, detail  string
		inconsistencies int
	}{
		{reset.String(), scannerapi.VerdictActs, unblock.Function, "waiting_for_budget", 0},
		{gpu.String(), scannerapi.VerdictActs, unblock.Function, "waiting_for_capable_worker", 0},
		{atLimit.String(), scannerapi.VerdictSkips, "budget_breached", b2.String(), 0},
		{tpu.String(), scannerapi.VerdictSkips, "capability_missing", `"tpu"`, 0},
		{other.String(), scannerapi.VerdictSkips, "other_blocking_reason", `"waiting_for_quota"`, 1},
		{gone.String(), scannerapi.VerdictSkips, "core_gone", pk.LaneBlockedBudget(lane), 1},
		{"garbage", scannerapi.VerdictSkips, "invalid_member", "", 0},
		{free.String(), scannerapi.VerdictNothing, "not_blocked", "blocked:route", 0},
	} {
		e := explain(s, c.member, 1)
		assert.Equal(t, c.verdict, e.Verdict, "%s: %+v", c.member, e)
		assert.Equal(t, c.reason, e.Reason, "%s: %+v", c.member, e)
		assert.Contains(t, e.Detail, c.detail, c.member)
		assert.Len(t, e.Inconsistent, c.inconsistencies, "%s: %+v", c.member, e)
	}
	assert.Equal(t, "blocked_by_budget", eligibility(t, w.Valkey, reset), "explaining changes nothing")
	n, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Zcard().Key(pk.LaneBlockedBudget(lane)).Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(4), n, "the entry whose core is gone stays")

	filtered := unblock.New()
	require.NoError(t, filtered.Configure(w.Ctx, map[string]string{scannerapi.OptionNamespace: "elsewhere"}))
	e := explain(filtered, reset.String(), 1)
	assert.Equal(t, scannerapi.VerdictSkips, e.Verdict, "%+v", e)
	assert.Equal(t, "filtered", e.Reason)

	w.Do("DEL", keys.ConfigPartitions)
	for cycle := uint64(1); cycle <= 2*scannerapi.DefaultFailureThreshold; cycle++ {
		e := explain(s, atLimit.String(), cycle)
		assert.Equal(t, scannerapi.VerdictSkips, e.Verdict, "cycle %d: %+v", cycle, e)
		assert.Equal(t, "partition_config", e.Reason, "cycle %d: explaining records no failure", cycle)
	}
}
