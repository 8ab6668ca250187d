package budget_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/budget"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// e2eBudgets mints n fixed budget ids (the linked and the plugin run place
// them on the same partitions), spread over the budget partitions.
func e2eBudgets(t testing.TB, kind, n int) []keys.BudgetID {
	ids := make([]keys.BudgetID, n)
	for i := range ids {
		id, err := keys.ParseBudgetID(fmt.Sprintf("b%07d-0000-4000-8000-%012d", kind, i+1))
		require.NoError(t, err)
		ids[i] = id
	}
	return ids
}

// e2eBudget creates budget id with one "tokens" dimension through the
// client and reports used tokens.
func e2eBudget(t testing.TB, w *scannertest.World, id keys.BudgetID, every time.Duration, hard, used int64) {
	t.Helper()
	_, err := w.Client.CreateBudget(w.Ctx, client.CreateBudgetRequest{ID: id, ResetInterval: every,
		Dimensions: []client.BudgetDimension{{Name: "tokens", Hard: hard}}})
	require.NoError(t, err)
	if used > 0 {
		_, err = w.Client.ReportUsage(w.Ctx, client.UsageReport{Budget: id, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: used}}})
		require.NoError(t, err)
	}
}

// budget_reset run by the host, linked and as the plugin's subprocess, on
// budgets created through sdk/client on every budget partition: a due
// budget is reset, one not yet due is untouched.
func TestHostRunsBudgetReset(t *testing.T) {
	t.Parallel()
	due, notDue := e2eBudgets(t, 1, 4), e2eBudgets(t, 2, 4)
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New: func() scannerapi.Scanner { return budget.NewReset() },
		Setup: func(t testing.TB, vk valkey.Client) {
			w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts})
			for i := range due {
				e2eBudget(t, w, due[i], 300*time.Millisecond, 0, 9)
				e2eBudget(t, w, notDue[i], time.Hour, 0, 9)
			}
			// Every due budget's first reset is at most 300 ms after now.
			w.WaitPast(w.NowMs() + 300)
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(len(due)), r.Processed, "the due budgets reset: %v", r)
			assert.Empty(t, r.Errors)
			assert.Empty(t, r.Refused)
			w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts})
			for _, id := range due {
				s, err := w.Client.ReadBudget(w.Ctx, id)
				require.NoError(t, err)
				u, _ := s.Dimension("tokens")
				assert.Zero(t, u.Used, "due budget %s reset", id)
				assert.Equal(t, int64(1), s.ResetCount)
			}
			for _, id := range notDue {
				s, err := w.Client.ReadBudget(w.Ctx, id)
				require.NoError(t, err)
				u, _ := s.Dimension("tokens")
				assert.Equal(t, int64(9), u.Used, "not due: untouched")
				assert.Zero(t, s.ResetCount)
			}
		},
	})
	scannertest.Same(t, linked, plugin)
}

// budget_reconciler run by the host, linked and as the plugin's
// subprocess, on budgets created through sdk/client on every budget
// partition: a lifetime budget over its hard limit gets breached_at, a
// marked one back under loses it, an orphan id is pruned and a wrong-type
// usage key is counted as an error and left.
func TestHostRunsBudgetReconciler(t *testing.T) {
	t.Parallel()
	over, under, wrong := e2eBudgets(t, 3, 4), e2eBudgets(t, 4, 4), e2eBudgets(t, 5, 4)
	orphan := e2eBudgets(t, 6, 1)[0]
	bk := func(id keys.BudgetID) keys.BudgetKeys { return keys.Budget(parts, id) }
	var nowMs int64
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New: func() scannerapi.Scanner { return budget.NewReconciler() },
		Setup: func(t testing.TB, vk valkey.Client) {
			w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts})
			for i := range over {
				e2eBudget(t, w, over[i], 0, 100, 100)
				w.Do("HINCRBY", bk(over[i]).Usage(), "tokens", "1")
				e2eBudget(t, w, under[i], 0, 100, 50)
				w.Do("HSET", bk(under[i]).Usage(), budget.BreachedAtField, "1")
				e2eBudget(t, w, wrong[i], 0, 100, 0)
				w.Do("SET", bk(wrong[i]).Usage(), "not a hash")
			}
			w.Do("SADD", bk(orphan).Partition().BudgetPolicies(), orphan.String())
			nowMs = w.NowMs()
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(len(over)+len(under)+1), r.Processed, "marked, cleared, pruned: %v", r)
			assert.Equal(t, map[string]int64{"server/wrongtype": int64(len(wrong))}, r.Errors)
			assert.Empty(t, r.Refused)
			w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts})
			ctx := context.Background()
			for _, id := range over {
				s, err := w.Client.ReadBudget(ctx, id)
				require.NoError(t, err)
				assert.GreaterOrEqual(t, s.BreachedAt.UnixMilli(), nowMs, "budget %s over its hard limit marked", id)
			}
			for _, id := range under {
				s, err := w.Client.ReadBudget(ctx, id)
				require.NoError(t, err)
				assert.True(t, s.BreachedAt.IsZero(), "marker of %s cleared", id)
			}
			is, err := vk.Do(ctx, vk.B().Sismember().Key(bk(orphan).Partition().BudgetPolicies()).Member(orphan.String()).Build()).AsBool()
			require.NoError(t, err)
			assert.False(t, is, "orphan pruned")
			for _, id := range wrong {
				typ, err := vk.Do(ctx, vk.B().Type().Key(bk(id).Usage()).Build()).ToString()
				require.NoError(t, err)
				assert.Equal(t, "string", typ, "wrong-type key left as it is")
				is, err := vk.Do(ctx, vk.B().Sismember().Key(bk(id).Partition().BudgetPolicies()).Member(id.String()).Build()).AsBool()
				require.NoError(t, err)
				assert.True(t, is)
			}
		},
	})
	scannertest.Same(t, linked, plugin)
}
