package timers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/timers"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// delayed_promoter on one lane's delayed index, through requests the test
// builds from its due window: a delayed execution past its delay is
// promoted; one delayed for an hour is not in the window; an entry of an
// execution that is not delayed and one of an execution that does not
// exist are cleaned by the library; a member that is not an execution id
// is counted and removed. The second scan finds the window empty.
func promoteScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	w := &world{scannertest.StartWorld(t, client.Options{Partitions: parts, Namespace: "e2e"})}
	cb := scannertest.NewCounter(scannertest.Callbacks(w.Valkey))
	s := m.Scanner(t, cb, timers.DelayedPromoterName)
	require.NoError(t, s.Configure(w.Ctx, map[string]string{}))
	const lane = "l"

	due := w.create(client.CreateRequest{Lane: lane, Kind: "later", Delay: 300 * time.Millisecond})
	later := w.create(client.CreateRequest{Lane: lane, Kind: "later", Delay: time.Hour})
	eligible := w.create(client.CreateRequest{Lane: lane, Kind: "now"})
	p := due.Partition()
	require.Equal(t, p, later.Partition(), "one lane, one partition")
	require.Equal(t, p, eligible.Partition())
	missing, err := keys.ExecutionIDIn(p, keys.NewUUID())
	require.NoError(t, err)
	index := keys.FlowPart(p).LaneDelayed(lane)
	w.Do("ZADD", index, "1", eligible.String())
	w.Do("ZADD", index, "1", missing.String())
	w.Do("ZADD", index, "1", "garbage")
	w.WaitPast(w.NowMs() + 300)

	var cycle uint64
	scan := func() *scannerapi.ScanResult {
		cycle++
		now := w.NowMs()
		req := &scannerapi.ScanRequest{Scanner: timers.DelayedPromoterName, Partition: p, NowMs: now, Cycle: cycle, Batch: 50,
			Lanes: []string{lane}}
		for _, c := range scannertest.DueCandidates(t, w.Valkey, "delayed", index, now, 50) {
			c.Lane = lane
			req.Candidates = append(req.Candidates, c)
		}
		cb.Reset()
		res, err := s.ScanPartition(w.Ctx, nil, req)
		require.NoError(t, err)
		return res
	}
	var o scannertest.Observation

	res := scan()
	o.Add(cb, res)
	assert.Equal(t, int64(1), res.Processed, "promoted: %+v", res)
	assert.Equal(t, int64(2), res.Skipped, "the two stale entries, cleaned by the library")
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1}}, res.Errors)
	assert.Equal(t, 3, o.FCalls[0], "one ff_promote_delayed per execution id")
	assert.Equal(t, []string{"runnable", "eligible_now"}, core(t, w.Valkey, due, "lifecycle_phase", "eligibility_state"))
	assert.Equal(t, []string{"runnable", "not_eligible_until_time"}, core(t, w.Valkey, later, "lifecycle_phase", "eligibility_state"))
	for _, mb := range []string{due.String(), eligible.String(), missing.String(), "garbage"} {
		assert.False(t, zscore(t, w.Valkey, index, mb), "%s left the delayed index", mb)
	}
	assert.True(t, zscore(t, w.Valkey, index, later.String()))

	res = scan()
	o.Add(cb, res)
	assert.Zero(t, res.Processed, "%+v", res)
	assert.Zero(t, res.Skipped)
	assert.Empty(t, res.Errors)
	assert.Zero(t, o.FCalls[1])
	return o
}

func TestPromoteLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, scannertest.Modes(pluginPkg, func(string) scannerapi.Scanner { return timers.NewDelayedPromoter() }), promoteScenario)
}
