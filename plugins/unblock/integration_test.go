package unblock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/unblock"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// seen is what a scan did, in the terms both modes must agree on (the
// notes name execution ids, which differ between the modes' worlds).
type seen struct {
	Processed, Skipped int64
	Errors             []scannerapi.ErrorCount
	Execs, FCalls      int
}

// Each reason's decision on one partition, through requests the test
// builds from the blocked sets: a budget reset since (unblocked), a budget
// still at its limit (left), a capability a worker now advertises
// (unblocked), one none advertises (left), an entry of the budget set
// whose core says another reason (left), an entry whose core is gone
// (removed), a member that is not an execution id (counted, left). A dry
// run decides the same and changes nothing; the scan unblocks; a second
// scan finds only what stays blocked.
func reasonsScenario(t *testing.T, m scannertest.Mode) []seen {
	w := &world{scannertest.StartWorld(t, client.Options{Partitions: parts, Namespace: "e2e"})}
	cb := scannertest.NewCounter(scannertest.Callbacks(w.Valkey))
	s := m.Scanner(t, cb, unblock.Name)
	require.NoError(t, s.Configure(w.Ctx, map[string]string{}))
	const lane = "l"
	// The host records the deployment's partition counts at boot; budgets
	// and quotas are located by them.
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
	b1, b2 := budget("b0000000-0000-4000-8000-000000000011"), budget("b0000000-0000-4000-8000-000000000012")
	_, err := w.Client.ResetBudget(w.Ctx, b1)
	require.NoError(t, err)

	reset, atLimit, other := w.create(lane), w.create(lane), w.create(lane)
	gpu, tpu := w.create(lane, "gpu"), w.create(lane, "tpu")
	p := reset.Partition()
	for _, id := range []keys.ExecutionID{atLimit, other, gpu, tpu} {
		require.Equal(t, p, id.Partition(), "one lane, one partition")
	}
	pk := keys.FlowPart(p)
	w.block(reset, lane, "waiting_for_budget", pk.LaneBlockedBudget(lane), "budget_ids", b1.String())
	w.block(atLimit, lane, "waiting_for_budget", pk.LaneBlockedBudget(lane), "budget_ids", b1.String()+","+b2.String())
	// Blocked for a quota, but found in the budget set.
	w.block(other, lane, "waiting_for_quota", pk.LaneBlockedBudget(lane))
	w.block(gpu, lane, "waiting_for_capable_worker", pk.LaneBlockedRoute(lane))
	w.block(tpu, lane, "waiting_for_capable_worker", pk.LaneBlockedRoute(lane))
	w.worker("other-lane", "gpu-box", "gpu")
	gone, err := keys.ExecutionIDIn(p, keys.NewUUID())
	require.NoError(t, err)
	w.Do("ZADD", pk.LaneBlockedBudget(lane), "1", gone.String())
	w.Do("ZADD", pk.LaneBlockedQuota(lane), "1", "garbage")

	var cycle uint64
	scan := func(dryRun bool) *scannerapi.ScanResult {
		cycle++
		req := &scannerapi.ScanRequest{Scanner: unblock.Name, Partition: p, NowMs: w.NowMs(), Cycle: cycle, Batch: 100,
			Lanes: []string{lane}, DryRun: dryRun}
		for _, src := range []struct{ name, key string }{
			{"budget", pk.LaneBlockedBudget(lane)}, {"quota", pk.LaneBlockedQuota(lane)}, {"route", pk.LaneBlockedRoute(lane)},
		} {
			members, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Zrange().Key(src.key).Min("0").Max("-1").Build()).AsStrSlice()
			require.NoError(t, err)
			for _, mb := range members {
				req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: src.name, Key: src.key, Lane: lane, Member: mb})
			}
		}
		cb.Reset()
		res, err := s.ScanPartition(w.Ctx, nil, req)
		require.NoError(t, err)
		return res
	}
	var out []seen
	observe := func(res *scannerapi.ScanResult) {
		execs, fcalls := cb.Reset()
		out = append(out, seen{Processed: res.Processed, Skipped: res.Skipped, Errors: res.Errors, Execs: execs, FCalls: fcalls})
	}
	invalid := []scannerapi.ErrorCount{{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1}}
	blocked := func(id keys.ExecutionID) string { return eligibility(t, w.Valkey, id) }

	res := scan(true)
	observe(res)
	assert.Equal(t, int64(2), res.Processed, "would unblock the reset budget's and the gpu execution: %+v", res)
	assert.Equal(t, int64(4), res.Skipped, "at its limit, no tpu worker, another reason, core gone")
	assert.Equal(t, invalid, res.Errors)
	assert.Contains(t, res.Notes, "would unblock "+reset.String()+" (budget)")
	assert.Contains(t, res.Notes, "would unblock "+gpu.String()+" (route)")
	assert.Zero(t, out[0].FCalls, "a dry run calls nothing")
	assert.Equal(t, "blocked_by_budget", blocked(reset), "a dry run changes nothing")
	assert.Equal(t, "blocked_by_route", blocked(gpu))
	n, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Zcard().Key(pk.LaneBlockedBudget(lane)).Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(4), n, "the entry whose core is gone stays in a dry run")

	res = scan(false)
	observe(res)
	assert.Equal(t, int64(2), res.Processed, "%+v", res)
	assert.Equal(t, int64(4), res.Skipped)
	assert.Equal(t, invalid, res.Errors)
	assert.Equal(t, 2, out[1].FCalls, "one ff_unblock_execution per unblocked execution")
	assert.Equal(t, "eligible_now", blocked(reset))
	assert.Equal(t, "eligible_now", blocked(gpu))
	assert.Equal(t, "blocked_by_budget", blocked(atLimit))
	assert.Equal(t, "blocked_by_route", blocked(tpu))

	res = scan(false)
	observe(res)
	assert.Zero(t, res.Processed, "%+v", res)
	assert.Equal(t, int64(3), res.Skipped, "what stays blocked; the gone entry was removed")
	assert.Equal(t, invalid, res.Errors, "the member that is not an id is left and counted again")
	assert.Zero(t, out[2].FCalls)
	return out
}

func TestReasonsLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, scannertest.Modes(pluginPkg, func(string) scannerapi.Scanner { return unblock.New() }), reasonsScenario)
}
