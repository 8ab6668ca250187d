package unblock_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/unblock"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/unblock/cmd/unblock"

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// TestMain removes the plugin builds scannertest made.
func TestMain(m *testing.M) {
	code := m.Run()
	scannertest.Cleanup()
	os.Exit(code)
}

// world is state made through sdk/client for one scenario.
type world struct{ *scannertest.World }

func newWorld(t testing.TB, vk valkey.Client) *world {
	return &world{scannertest.NewWorld(t, vk, client.Options{Partitions: parts, Namespace: "e2e"})}
}

func (w *world) create(lane string, caps ...string) keys.ExecutionID {
	r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Lane: lane, Kind: "k", RequiredCapabilities: caps})
	require.NoError(w.T, err)
	return r.ID
}

// worker registers worker e2e on lane with capabilities caps.
func (w *world) worker(lane, instance string, caps ...string) *client.Worker {
	return w.Worker(client.WorkerOptions{WorkerID: "e2e", InstanceID: instance, Lanes: []string{lane}, Capabilities: caps})
}

// block parks an execution as FlowFabric's scheduler does
// (ff_block_execution_for_admission), after attaching what blocks it to
// its core the way FlowFabric's consumers do (budget_ids,
// quota_policy_id: fields nothing in FlowFabric writes itself).
func (w *world) block(id keys.ExecutionID, lane, reason, set string, fields ...string) {
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	if len(fields) > 0 {
		require.NoError(w.T, w.Valkey.Do(w.Ctx, w.Valkey.B().Arbitrary("HSET", ek.Core()).Args(fields...).Build()).Error())
	}
	v, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Fcall().Function("ff_block_execution_for_admission").Numkeys(3).
		Key(ek.Core(), pk.LaneEligible(lane), set).Arg(id.String(), reason, "e2e", strconv.FormatInt(time.Now().UnixMilli(), 10)).Build()).ToArray()
	require.NoError(w.T, err)
	n, _ := v[0].AsInt64()
	require.Equal(w.T, int64(1), n)
}

func eligibility(t testing.TB, vk valkey.Client, id keys.ExecutionID) string {
	v, err := vk.Do(context.Background(), vk.B().Hget().Key(keys.Exec(id).Core()).Field("eligibility_state").Build()).ToString()
	require.NoError(t, err)
	return v
}

// Each reason, made through sdk/client and FlowFabric's own contracts:
// an execution a worker could not run (blocked:route) is re-admitted once
// a worker with the capability registers, one that needs a capability no
// worker has stays; one blocked by a budget at its hard limit is
// re-admitted after the budget's reset, one still at its limit stays; one
// blocked by a full quota window is re-admitted once the window moved on,
// one blocked by a concurrency cap still in use stays.
func TestUnblockEachReason(t *testing.T) {
	t.Parallel()
	var gpu, tpu, reset, atLimit, windowed, capped keys.ExecutionID
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New:   func() scannerapi.Scanner { return unblock.New() },
		Lanes: []string{"route", "budget", "quota"},
		Setup: func(t testing.TB, vk valkey.Client) {
			w := newWorld(t, vk)
			// Route: a worker without capabilities meets both and parks
			// them; then a gpu worker registers.
			gpu, tpu = w.create("route", "gpu"), w.create("route", "tpu")
			plain := w.worker("route", "plain")
			for i := 0; i < 64; i++ {
				task, err := plain.ClaimNext(w.Ctx)
				require.NoError(t, err)
				require.Nil(t, task)
				if eligibility(t, vk, gpu) == "blocked_by_route" && eligibility(t, vk, tpu) == "blocked_by_route" {
					break
				}
			}
			require.Equal(t, "blocked_by_route", eligibility(t, vk, gpu))
			w.worker("other-lane", "gpu-box", "gpu")

			// Budget: two budgets at their hard limit; one is reset.
			// Fixed ids: the linked and the plugin run place them on the
			// same partitions (random ones would make the runs' keys
			// differ by chance).
			budget := func(id string) keys.BudgetID {
				bid, err := keys.ParseBudgetID(id)
				require.NoError(t, err)
				b, err := w.Client.CreateBudget(w.Ctx, client.CreateBudgetRequest{ID: bid, ScopeType: "lane", ScopeID: "budget",
					Dimensions: []client.BudgetDimension{{Name: "tokens", Hard: 100}}})
				require.NoError(t, err)
				_, err = w.Client.ReportUsage(w.Ctx, client.UsageReport{Budget: b.ID, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: 100}}})
				require.NoError(t, err)
				return b.ID
			}
			b1, b2 := budget("b0000000-0000-4000-8000-000000000001"), budget("b0000000-0000-4000-8000-000000000002")
			_, err := w.Client.ResetBudget(w.Ctx, b1)
			require.NoError(t, err)
			reset, atLimit = w.create("budget"), w.create("budget")
			w.block(reset, "budget", "waiting_for_budget", keys.FlowPart(reset.Partition()).LaneBlockedBudget("budget"), "budget_ids", b1.String())
			w.block(atLimit, "budget", "waiting_for_budget", keys.FlowPart(atLimit.Partition()).LaneBlockedBudget("budget"), "budget_ids", b1.String()+","+b2.String())

			// Quota: a 1-request window of 1 s, and a concurrency cap of 1.
			qid := func(s string) keys.QuotaID {
				q, err := keys.ParseQuotaID(s)
				require.NoError(t, err)
				return q
			}
			q1, err := w.Client.CreateQuotaPolicy(w.Ctx, client.CreateQuotaRequest{ID: qid("d0000000-0000-4000-8000-000000000001"),
				Window: time.Second, MaxRequests: 1})
			require.NoError(t, err)
			q2, err := w.Client.CreateQuotaPolicy(w.Ctx, client.CreateQuotaRequest{ID: qid("d0000000-0000-4000-8000-000000000002"),
				Window: time.Hour, MaxConcurrent: 1})
			require.NoError(t, err)
			first, holder := w.create("quota"), w.create("quota")
			a, err := w.Client.Admit(w.Ctx, q1.ID, first)
			require.NoError(t, err)
			require.True(t, a.Admitted)
			admittedAt := w.NowMs()
			a, err = w.Client.Admit(w.Ctx, q2.ID, holder)
			require.NoError(t, err)
			require.True(t, a.Admitted)
			windowed, capped = w.create("quota"), w.create("quota")
			w.block(windowed, "quota", "waiting_for_quota", keys.FlowPart(windowed.Partition()).LaneBlockedQuota("quota"), "quota_policy_id", q1.ID.String())
			w.block(capped, "quota", "waiting_for_quota", keys.FlowPart(capped.Partition()).LaneBlockedQuota("quota"), "quota_policy_id", q2.ID.String())
			// The window frees one second after the admission.
			w.WaitPast(admittedAt + 1000)
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(3), r.Processed, "%v", r)
			assert.Empty(t, r.Errors)
			assert.Empty(t, r.Refused)
			for _, id := range []keys.ExecutionID{gpu, reset, windowed} {
				assert.Equal(t, "eligible_now", eligibility(t, vk, id), "%s", id)
			}
			assert.Equal(t, "blocked_by_route", eligibility(t, vk, tpu))
			assert.Equal(t, "blocked_by_budget", eligibility(t, vk, atLimit))
			assert.Equal(t, "blocked_by_quota", eligibility(t, vk, capped))
		},
	})
	scannertest.Same(t, linked, plugin)
}

// A dry run decides as a real run would and changes nothing.
func TestUnblockDryRun(t *testing.T) {
	t.Parallel()
	var parked keys.ExecutionID
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts, DryRun: true,
		New:   func() scannerapi.Scanner { return unblock.New() },
		Lanes: []string{"budget"},
		Setup: func(t testing.TB, vk valkey.Client) {
			w := newWorld(t, vk)
			parked = w.create("budget")
			w.block(parked, "budget", "waiting_for_budget", keys.FlowPart(parked.Partition()).LaneBlockedBudget("budget"))
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(1), r.Processed, "no budget attached: it would be unblocked: %v", r)
			assert.Empty(t, r.Refused)
			assert.Equal(t, "blocked_by_budget", eligibility(t, vk, parked), "unchanged")
		},
	})
	scannertest.Same(t, linked, plugin)
}
