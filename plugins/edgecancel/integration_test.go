package edgecancel_test

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/plugins/edgecancel"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// seen is what a scan did, in the terms both modes must agree on (the
// notes name flow and execution ids, which differ between the modes'
// worlds).
type seen struct {
	Processed, Skipped int64
	Errors             []scannerapi.ErrorCount
	More               bool
	Execs, FCalls      int
}

// edge_cancel_dispatcher on the partition of a decided any_of group,
// through requests the test builds from pending_cancel_groups, with a
// member that is not a tuple beside it. A dry run predicts and changes
// nothing; the scan cancels the running and the waiting sibling and
// drains the group, and removes the member that is not a tuple (counted);
// a second scan finds the set empty.
func dispatchScenario(t *testing.T, m scannertest.Mode) []seen {
	w := scannertest.StartWorld(t, client.Options{Partitions: parts, Namespace: "e2e"})
	cb := scannertest.NewCounter(scannertest.Callbacks(w.Valkey))
	s := m.Scanner(t, cb, edgecancel.DispatcherName)
	require.NoError(t, s.Configure(w.Ctx, map[string]string{}))
	race := &siblingRace{policy: client.EdgeGroupPolicy{Variant: "any_of", OnSatisfied: "cancel_remaining"}}
	race.setup(t, w.Valkey)
	p := parts.FlowPartition(race.fid)
	index := pendingGroups(race)
	w.Do("SADD", index, "garbage")

	var cycle uint64
	var out []seen
	scan := func(dryRun bool) *scannerapi.ScanResult {
		e, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Sscan().Key(index).Cursor(0).Count(100).Build()).AsScanEntry()
		require.NoError(t, err)
		require.Zero(t, e.Cursor, "one step holds the whole set")
		sort.Strings(e.Elements)
		cycle++
		req := &scannerapi.ScanRequest{Scanner: edgecancel.DispatcherName, Partition: p, NowMs: w.NowMs(), Cycle: cycle,
			Batch: 50, DryRun: dryRun}
		for _, mb := range e.Elements {
			req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "pending_cancel_groups", Key: index, Member: mb})
		}
		cb.Reset()
		res, err := s.ScanPartition(w.Ctx, nil, req)
		require.NoError(t, err)
		execs, fcalls := cb.Reset()
		out = append(out, seen{Processed: res.Processed, Skipped: res.Skipped, Errors: res.Errors, More: res.More, Execs: execs, FCalls: fcalls})
		return res
	}
	invalid := []scannerapi.ErrorCount{{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1}}
	tuple := race.fid.String() + "|" + race.d.String()

	res := scan(true)
	assert.Equal(t, int64(1), res.Processed, "would drain the group: %+v", res)
	assert.Equal(t, invalid, res.Errors)
	assert.Contains(t, res.Notes, tuple+": would drain after 2 sibling(s)")
	assert.Zero(t, out[0].FCalls, "a dry run calls nothing")
	assert.True(t, race.pending(t, w.Valkey), "a dry run changes nothing")
	assert.Equal(t, "active/none", state(t, w.Valkey, race.b), "the running sibling still runs")

	res = scan(false)
	assert.Equal(t, int64(3), res.Processed, "two siblings cancelled, the group drained: %+v", res)
	assert.Equal(t, invalid, res.Errors)
	assert.Equal(t, 3, out[1].FCalls, "two cancels, one drain")
	assert.Equal(t, "terminal/cancelled", state(t, w.Valkey, race.b))
	assert.Equal(t, "terminal/cancelled", state(t, w.Valkey, race.c))
	assert.Equal(t, "terminal/success", state(t, w.Valkey, race.a), "the finished sibling is left")
	assert.False(t, race.pending(t, w.Valkey), "drained")
	is, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Sismember().Key(index).Member("garbage").Build()).AsBool()
	require.NoError(t, err)
	assert.False(t, is, "the member that is not a tuple is removed")

	res = scan(false)
	assert.Zero(t, res.Processed, "%+v", res)
	assert.Empty(t, res.Errors)
	assert.Zero(t, out[2].FCalls)
	return out
}

func TestDispatchLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, scannertest.Modes(pluginPkg, func(name string) scannerapi.Scanner {
		switch name {
		case edgecancel.DispatcherName:
			return edgecancel.NewDispatcher()
		case edgecancel.ReconcilerName:
			return edgecancel.NewReconciler()
		}
		return nil
	}), dispatchScenario)
}
