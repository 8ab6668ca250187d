package quota_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/quota"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/quota/cmd/quota"

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

func TestMain(m *testing.M) {
	code := m.Run()
	scannertest.Cleanup()
	os.Exit(code)
}

// An execution that ended without releasing its admission stops holding
// a concurrency slot (the running one keeps its slot); a window past its
// length is trimmed; an id whose definition is gone is pruned, and so is
// a member that is not a quota id (counted as invalid).
func TestQuotaReconciler(t *testing.T) {
	t.Parallel()
	var capped, windowed client.CreateQuotaResult
	// Fixed ids: the linked and the plugin run place them on the same
	// partitions (random ones would make the runs' keys differ by chance).
	qid := func(s string) keys.QuotaID {
		q, err := keys.ParseQuotaID(s)
		require.NoError(t, err)
		return q
	}
	orphan := qid("d0000000-0000-4000-8000-0000000000ff")
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New: func() scannerapi.Scanner { return quota.New() },
		Setup: func(t testing.TB, vk valkey.Client) {
			w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts})
			ctx, lib, c := w.Ctx, w.Lib, w.Client
			var err error
			capped, err = c.CreateQuotaPolicy(ctx, client.CreateQuotaRequest{ID: qid("d0000000-0000-4000-8000-000000000001"),
				Window: time.Hour, MaxConcurrent: 2})
			require.NoError(t, err)
			windowed, err = c.CreateQuotaPolicy(ctx, client.CreateQuotaRequest{ID: qid("d0000000-0000-4000-8000-000000000002"),
				Window: time.Second, MaxRequests: 5})
			require.NoError(t, err)
			create := func() keys.ExecutionID {
				r, err := c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Kind: "k"})
				require.NoError(t, err)
				return r.ID
			}
			running, leaked := create(), create()
			for _, id := range []keys.ExecutionID{running, leaked} {
				a, err := c.Admit(ctx, capped.ID, id)
				require.NoError(t, err)
				require.True(t, a.Admitted)
			}
			// The leaked one ends without ff_release_admission.
			require.NoError(t, flowtest.Succeed(ctx, lib, leaked, nil))
			a, err := c.Admit(ctx, windowed.ID, create())
			require.NoError(t, err)
			require.True(t, a.Admitted)
			at := w.NowMs()
			pk := keys.QuotaPart(parts.QuotaPartition(orphan))
			require.NoError(t, vk.Do(ctx, vk.B().Sadd().Key(pk.QuotaPolicies()).Member(orphan.String()).Build()).Error())
			require.NoError(t, vk.Do(ctx, vk.B().Sadd().Key(pk.QuotaPolicies()).Member("garbage").Build()).Error())
			w.WaitPast(at + 1000)
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			ctx := context.Background()
			assert.Equal(t, int64(3), r.Processed, "counter corrected, window trimmed, orphan pruned: %v", r)
			assert.Equal(t, map[string]int64{"invalid/invalid_member": 1}, r.Errors)
			qk := keys.Quota(parts, capped.ID)
			n, err := vk.Do(ctx, vk.B().Get().Key(qk.Concurrency()).Build()).ToString()
			require.NoError(t, err)
			assert.Equal(t, "1", n, "only the running execution holds a slot")
			members, err := vk.Do(ctx, vk.B().Scard().Key(qk.AdmittedSet()).Build()).AsInt64()
			require.NoError(t, err)
			assert.Equal(t, int64(1), members)
			w, err := vk.Do(ctx, vk.B().Zcard().Key(keys.Quota(parts, windowed.ID).Window("requests_per_window")).Build()).AsInt64()
			require.NoError(t, err)
			assert.Zero(t, w, "the window past its length is empty")
			pk := keys.QuotaPart(parts.QuotaPartition(orphan))
			is, err := vk.Do(ctx, vk.B().Sismember().Key(pk.QuotaPolicies()).Member(orphan.String()).Build()).AsInt64()
			require.NoError(t, err)
			assert.Zero(t, is, "pruned")
			is, err = vk.Do(ctx, vk.B().Sismember().Key(pk.QuotaPolicies()).Member("garbage").Build()).AsInt64()
			require.NoError(t, err)
			assert.Zero(t, is, "the member that is not an id is removed")
		},
	})
	scannertest.Same(t, linked, plugin)
}
