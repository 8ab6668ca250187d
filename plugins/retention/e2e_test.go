package retention_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/retention"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// aged is state made through sdk/client (a producer and a worker), then
// aged by rewriting completion times: one execution ended longer ago than
// the default retention, one with a shorter per-execution retention, a
// younger one, and an old execution that is not terminal.
type aged struct {
	parts                      keys.PartitionConfig
	old, young, short, pending keys.ExecutionID
}

func (f *aged) setup(t testing.TB, vk valkey.Client) {
	world := scannertest.NewWorld(t, vk, client.Options{Partitions: f.parts, Namespace: "e2e"})
	ctx, c := world.Ctx, world.Client
	w := world.Worker(client.WorkerOptions{WorkerID: "e2e", InstanceID: "e2e-1", Lanes: []string{"default"}})
	create := func() keys.ExecutionID {
		r, err := c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Kind: "job", Payload: []byte("in"),
			Tags: map[string]string{"app.k": "v"}})
		require.NoError(t, err)
		return r.ID
	}
	run := func() keys.ExecutionID {
		id := create()
		task, err := w.ClaimNext(ctx)
		require.NoError(t, err)
		require.Equal(t, id, task.ID())
		_, err = task.Complete(ctx, []byte("out"))
		require.NoError(t, err)
		return id
	}
	f.old, f.young, f.short = run(), run(), run()
	f.pending = create() // runnable, never claimed
	old, young, short, pending := f.old, f.young, f.short, f.pending

	// sdk/client writes no stream policy; a FlowFabric producer can. Set
	// the override on the stored policy as such a producer would have.
	ek := keys.Exec(short)
	raw, err := vk.Do(ctx, vk.B().Get().Key(ek.Policy()).Build()).ToString()
	require.NoError(t, err)
	var pol map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &pol))
	pol["stream_policy"] = map[string]any{"retention_ttl_ms": (2 * time.Hour).Milliseconds()}
	b, err := json.Marshal(pol)
	require.NoError(t, err)
	require.NoError(t, vk.Do(ctx, vk.B().Set().Key(ek.Policy()).Value(string(b)).Build()).Error())

	// Age them: the terminal index score is the completion time, and
	// completed_at mirrors it. Rewrite both rather than wait a day; the
	// index entries change in one ZADD, so the scanner sees them all at
	// once. The runnable execution gets a stale terminal entry a day and a
	// half old, the only way it could ever become a candidate.
	tm, err := vk.Do(ctx, vk.B().Time().Build()).AsIntSlice()
	require.NoError(t, err)
	now := tm[0]*1000 + tm[1]/1000
	ago := func(d time.Duration) string { return strconv.FormatInt(now-d.Milliseconds(), 10) }
	ages := map[keys.ExecutionID]string{old: ago(25 * time.Hour), young: ago(2 * time.Hour), short: ago(3 * time.Hour)}
	for id, at := range ages {
		require.NoError(t, vk.Do(ctx, vk.B().Hset().Key(keys.Exec(id).Core()).FieldValue().FieldValue("completed_at", at).Build()).Error())
	}
	pk := keys.FlowPart(old.Partition())
	require.Equal(t, old.Partition(), pending.Partition(), "solo executions of one lane share a partition")
	require.NoError(t, vk.Do(ctx, vk.B().Arbitrary("ZADD", pk.LaneTerminal("default"),
		ages[old], old.String(), ages[young], young.String(), ages[short], short.String(),
		ago(36*time.Hour), pending.String()).Build()).Error())

	require.NotEmpty(t, keysOf(t, vk, old))
}

// keysOf lists every key that names the execution.
func keysOf(t testing.TB, vk valkey.Client, id keys.ExecutionID) []string {
	var out []string
	var cur uint64
	for {
		e, err := vk.Do(context.Background(), vk.B().Scan().Cursor(cur).Match("*"+id.UUID().String()+"*").Count(1000).Build()).AsScanEntry()
		require.NoError(t, err)
		out = append(out, e.Elements...)
		if e.Cursor == 0 {
			return out
		}
		cur = e.Cursor
	}
}

// The scanner linked and as the real plugin binary, through an ffscan host
// (the test kit): the expired executions disappear entirely, the younger
// one stays, and the old execution that is not terminal is never touched,
// not even its stale index entry.
func TestHostPurgesExpiredExecutionsEndToEnd(t *testing.T) {
	t.Parallel()
	f := &aged{parts: keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}}
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner:     hosttest.Runner{},
		New:        func() scannerapi.Scanner { return retention.New() },
		Binary:     scannertest.PluginBinary(t, pluginPkg),
		Partitions: f.parts,
		Setup:      f.setup,
		Cycles:     3,
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			ctx := context.Background()
			t.Log(r)
			assert.Equal(t, int64(2), r.Processed, "old and short purged")
			assert.Empty(t, r.Refused)
			pk := keys.FlowPart(f.old.Partition())
			member := func(key string, id keys.ExecutionID) bool {
				err := vk.Do(ctx, vk.B().Zscore().Key(key).Member(id.String()).Build()).Error()
				if valkey.IsValkeyNil(err) {
					return false
				}
				require.NoError(t, err)
				return true
			}
			inAll := func(id keys.ExecutionID) bool {
				n, err := vk.Do(ctx, vk.B().Sismember().Key(pk.AllExecutions()).Member(id.String()).Build()).AsInt64()
				require.NoError(t, err)
				return n == 1
			}
			for _, id := range []keys.ExecutionID{f.old, f.short} {
				assert.Empty(t, keysOf(t, vk, id), "no key of %s is left", id)
				assert.False(t, member(pk.LaneTerminal("default"), id))
				assert.False(t, inAll(id))
			}
			phase := func(id keys.ExecutionID) string {
				v, err := vk.Do(ctx, vk.B().Hget().Key(keys.Exec(id).Core()).Field("lifecycle_phase").Build()).ToString()
				require.NoError(t, err)
				return v
			}
			assert.Equal(t, "terminal", phase(f.young))
			res, err := vk.Do(ctx, vk.B().Get().Key(keys.Exec(f.young).Result()).Build()).ToString()
			require.NoError(t, err)
			assert.Equal(t, "out", res)
			assert.True(t, inAll(f.young))
			assert.Equal(t, "runnable", phase(f.pending), "a non-terminal execution is never touched")
			assert.True(t, member(pk.LaneTerminal("default"), f.pending), "not even its stale entry")
			assert.True(t, inAll(f.pending))
			assert.Contains(t, keysOf(t, vk, f.pending), keys.Exec(f.pending).Payload())
		},
	})
	scannertest.Same(t, linked, plugin)
}
