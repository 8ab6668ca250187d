package observers_test

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/observers"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// flowIn is the first flow id homed on p of the series role names: fixed
// ids, so both modes' results (whose notes name them) compare equal.
func flowIn(t testing.TB, p keys.Partition, role int) keys.FlowID {
	for i := 1; ; i++ {
		fid := flowID(t, fmt.Sprintf("f%07d-0000-4000-8000-%012d", role, i))
		if parts.FlowPartition(fid) == p {
			return fid
		}
	}
}

// flow_projector on one partition, through requests the test builds from
// flow_index: a flow with a waiting and a completed member is open and
// stays indexed; a flow whose members all ended (one failed, one purged)
// is failed and retired; a flow with no members is skipped; an entry
// whose flow is gone is removed, and so is a member that is not a flow
// id (counted). A dry run decides the same and writes nothing; a second
// scan projects what is left.
func projectScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	w := scannertest.StartWorld(t, client.Options{Partitions: parts})
	cb := scannertest.NewCounter(scannertest.Callbacks(w.Valkey))
	s := m.Scanner(t, cb, observers.FlowProjectorName)
	require.NoError(t, s.Configure(w.Ctx, map[string]string{}))
	p := keys.Partition{Family: keys.FamilyFlow, Index: 5}
	pk := keys.FlowPart(p)

	open, finished, empty, gone := flowIn(t, p, 1), flowIn(t, p, 2), flowIn(t, p, 3), flowIn(t, p, 4)
	for _, fid := range []keys.FlowID{open, finished, empty, gone} {
		_, err := w.Client.CreateFlow(w.Ctx, client.CreateFlowRequest{ID: fid})
		require.NoError(t, err)
	}
	member := func(fid keys.FlowID) keys.ExecutionID {
		r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Flow: &fid, Lane: "default", Kind: "step"})
		require.NoError(t, err)
		return r.ID
	}
	member(open)
	require.NoError(t, flowtest.Succeed(w.Ctx, w.Lib, member(open), nil))
	purged := member(finished)
	require.NoError(t, flowtest.Succeed(w.Ctx, w.Lib, purged, nil))
	require.NoError(t, flowtest.Flunk(w.Ctx, w.Lib, member(finished), "boom"))
	w.Do("DEL", keys.Exec(purged).Core()) // retention purged it
	w.Do("DEL", keys.FlowIn(p, gone).Core())
	w.Do("SADD", pk.FlowIndex(), "garbage")

	var cycle uint64
	scan := func(dryRun bool) *scannerapi.ScanResult {
		e, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Sscan().Key(pk.FlowIndex()).Cursor(0).Count(100).Build()).AsScanEntry()
		require.NoError(t, err)
		require.Zero(t, e.Cursor, "one step holds the whole set")
		// A set's scan order is the server's hash order, which differs
		// between the modes' servers; the notes follow the candidates'.
		sort.Strings(e.Elements)
		cycle++
		req := &scannerapi.ScanRequest{Scanner: observers.FlowProjectorName, Partition: p, NowMs: w.NowMs(), Cycle: cycle,
			Batch: 100, DryRun: dryRun}
		for _, mb := range e.Elements {
			req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "flow_index", Key: pk.FlowIndex(), Member: mb})
		}
		cb.Reset()
		res, err := s.ScanPartition(w.Ctx, nil, req)
		require.NoError(t, err)
		return res
	}
	summary := func(fid keys.FlowID) map[string]string {
		v, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Hgetall().Key(keys.FlowIn(p, fid).Summary()).Build()).AsStrMap()
		require.NoError(t, err)
		return v
	}
	indexed := func(member string) bool {
		ok, err := w.Valkey.Do(w.Ctx, w.Valkey.B().Sismember().Key(pk.FlowIndex()).Member(member).Build()).AsBool()
		require.NoError(t, err)
		return ok
	}
	invalid := []scannerapi.ErrorCount{{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1}}
	var o scannertest.Observation

	res := scan(true)
	o.Add(cb, res)
	assert.Equal(t, int64(3), res.Processed, "would project two flows and remove the gone one: %+v", res)
	assert.Equal(t, int64(1), res.Skipped, "the flow without members")
	assert.Equal(t, invalid, res.Errors)
	assert.Contains(t, res.Notes, fmt.Sprintf("flow %s: open (2 of 2 members read)", open))
	assert.Contains(t, res.Notes, fmt.Sprintf("flow %s: failed (2 of 2 members read)", finished))
	assert.Empty(t, summary(open), "a dry run writes nothing")
	for _, mb := range []string{open.String(), finished.String(), gone.String(), "garbage"} {
		assert.True(t, indexed(mb), "%s stays indexed in a dry run", mb)
	}

	res = scan(false)
	o.Add(cb, res)
	assert.Equal(t, int64(3), res.Processed, "%+v", res)
	assert.Equal(t, int64(1), res.Skipped)
	assert.Equal(t, invalid, res.Errors)
	assert.Equal(t, "open", summary(open)["public_flow_state"])
	assert.Equal(t, "1", summary(open)["members_waiting"])
	assert.Equal(t, "failed", summary(finished)["public_flow_state"])
	assert.Equal(t, "2", summary(finished)["sampled_members"])
	assert.True(t, indexed(open.String()))
	assert.True(t, indexed(empty.String()))
	assert.False(t, indexed(finished.String()), "retired")
	assert.False(t, indexed(gone.String()), "removed")
	assert.False(t, indexed("garbage"), "removed")

	res = scan(false)
	o.Add(cb, res)
	assert.Equal(t, int64(1), res.Processed, "the open flow, projected again: %+v", res)
	assert.Equal(t, int64(1), res.Skipped)
	assert.Empty(t, res.Errors)
	assert.Zero(t, o.FCalls[0]+o.FCalls[1]+o.FCalls[2], "projection only: no library call")
	return o
}

func TestProjectLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, scannertest.Modes(pluginPkg, func(name string) scannerapi.Scanner {
		switch name {
		case observers.FlowProjectorName:
			return observers.NewFlowProjector()
		case observers.IndexReconcilerName:
			return observers.NewIndexReconciler()
		}
		return nil
	}), projectScenario)
}
