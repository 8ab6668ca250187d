package depreconciler_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/depreconciler"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/depreconciler/cmd/depreconciler"

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// part is the flow partition the integration scenarios use.
var part = keys.Partition{Family: keys.FamilyFlow, Index: 5}

const lane = "default"

func TestMain(m *testing.M) {
	code := m.Run()
	scannertest.Cleanup()
	os.Exit(code)
}

// fixture is a server with the library, a client that builds flows, and
// the host's part: the rotating candidate read and command execution.
type fixture struct {
	*scannertest.Scenario
	cursor map[string]int
}

func newFixture(t *testing.T) *fixture {
	return &fixture{Scenario: scannertest.StartScenario(t, client.Options{Partitions: parts}), cursor: map[string]int{}}
}

// flowIn creates a flow homed on p (and so are its members).
func (f *fixture) flowIn(p keys.Partition, ns string) keys.FlowID {
	f.T.Helper()
	for {
		fid := keys.NewFlowID()
		if parts.FlowPartition(fid) != p {
			continue
		}
		_, err := f.Client.CreateFlow(f.Ctx, client.CreateFlowRequest{ID: fid, Namespace: ns})
		require.NoError(f.T, err)
		return fid
	}
}

func (f *fixture) member(fid keys.FlowID, ns string) keys.ExecutionID {
	f.T.Helper()
	r, err := f.Client.CreateExecution(f.Ctx, client.CreateRequest{Flow: &fid, Lane: lane, Namespace: ns, Payload: []byte("p")})
	require.NoError(f.T, err)
	return r.ID
}

func (f *fixture) edge(fid keys.FlowID, up, down keys.ExecutionID) {
	f.T.Helper()
	_, err := f.Client.AddDependency(f.Ctx, client.DependencyRequest{Flow: fid, Upstream: up, Downstream: down})
	require.NoError(f.T, err)
}

// chain creates members linked one after the other.
func (f *fixture) chain(fid keys.FlowID, n int) []keys.ExecutionID {
	f.T.Helper()
	ids := make([]keys.ExecutionID, n)
	for i := range ids {
		ids[i] = f.member(fid, "")
		if i > 0 {
			f.edge(fid, ids[i-1], ids[i])
		}
	}
	return ids
}

func (f *fixture) succeed(id keys.ExecutionID) {
	f.T.Helper()
	require.NoError(f.T, flowtest.Succeed(f.Ctx, f.Lib, id, []byte("r")))
}

func (f *fixture) flunk(id keys.ExecutionID) {
	f.T.Helper()
	require.NoError(f.T, flowtest.Flunk(f.Ctx, f.Lib, id, "boom"))
}

func (f *fixture) state(id keys.ExecutionID) string {
	f.T.Helper()
	core, err := flowtest.Core(f.Ctx, f.Valkey, id)
	require.NoError(f.T, err)
	return core["public_state"]
}

func (f *fixture) eligible(id keys.ExecutionID) bool {
	f.T.Helper()
	err := f.Valkey.Do(f.Ctx, f.Valkey.B().Zscore().Key(keys.FlowPart(id.Partition()).LaneEligible(lane)).Member(id.String()).Build()).Error()
	if valkey.IsValkeyNil(err) {
		return false
	}
	require.NoError(f.T, err)
	return true
}

func (f *fixture) blockedKey() string { return keys.FlowPart(part).LaneBlockedDependencies(lane) }

func (f *fixture) blocked() []string {
	f.T.Helper()
	m, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Zrange().Key(f.blockedKey()).Min("0").Max("-1").Build()).AsStrSlice()
	require.NoError(f.T, err)
	return m
}

// request plays the host's zset_rotate read: the next window of batch
// members by rank, the cursor advancing by a full window and wrapping
// after a short one.
func (f *fixture) request(batch int) *scannerapi.ScanRequest {
	f.T.Helper()
	key := f.blockedKey()
	start := f.cursor[key]
	zs, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Zrange().Key(key).Min(strconv.Itoa(start)).Max(strconv.Itoa(start+batch-1)).Withscores().Build()).AsZScores()
	require.NoError(f.T, err)
	if len(zs) < batch {
		f.cursor[key] = 0
	} else {
		f.cursor[key] = start + batch
	}
	req := &scannerapi.ScanRequest{Scanner: depreconciler.Name, Partition: part, NowMs: f.NowMs(), Cycle: f.NextCycle(), Batch: batch, Lanes: []string{lane}}
	for _, z := range zs {
		req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "blocked_dependencies", Key: key, Lane: lane, Member: z.Member, Score: z.Score})
	}
	return req
}

// The main scenario of 8.3, with no completion listener running: a child
// whose parent completed is released; a failed parent skips its child and,
// through the cascade, the grandchild; an all_of child waits until every
// parent finished; a child of a running parent is left alone; garbage and
// foreign members are handled.
func mainScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, depreconciler.Name)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{}))
	fid := f.flowIn(part, "")
	ok := f.chain(fid, 3)    // A -> B -> C
	bad := f.chain(fid, 3)   // D -> E -> G
	stuck := f.chain(fid, 2) // K -> L, K never finishes
	h, i, j := f.member(fid, ""), f.member(fid, ""), f.member(fid, "")
	f.edge(fid, h, j)
	f.edge(fid, i, j)
	f.succeed(ok[0])
	f.flunk(bad[0])
	f.succeed(h)
	f.Do("ZADD", f.blockedKey(), "1", "garbage")
	other, err := keys.ParseExecutionID("{fp:9}:6f1c2d3e-4a5b-4c6d-8e7f-001122334455")
	require.NoError(t, err)
	f.Do("ZADD", f.blockedKey(), "2", other.String())
	require.Equal(t, "waiting_children", f.state(ok[1]), "no listener: the push never happened")

	var o scannertest.Observation
	f.Counter.Reset()
	res := f.Scan(s, f.request(50))
	o.Add(f.Counter, res)
	// A->B satisfied, D->E impossible (E skipped) and, cascaded, E->G
	// impossible (G skipped), H->J satisfied.
	assert.Equal(t, int64(4), res.Processed, "%+v", res)
	// Waiting edges: B->C, E->G as read before E was skipped, I->J, K->L.
	assert.Equal(t, int64(4), res.Skipped)
	assert.ElementsMatch(t, []scannerapi.ErrorCount{
		{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1},
		{Class: scannerapi.ErrInvalid, Code: "foreign_member", Count: 1},
	}, res.Errors)
	assert.False(t, res.More)
	assert.Equal(t, 4, o.FCalls[0])
	assert.LessOrEqual(t, o.Execs[0], 9, "four round trips for all children, four per cascade level, one for the last")

	assert.Equal(t, "waiting", f.state(ok[1]))
	assert.True(t, f.eligible(ok[1]))
	assert.Equal(t, "waiting_children", f.state(ok[2]), "its parent B has not run")
	assert.Equal(t, "skipped", f.state(bad[1]))
	assert.Equal(t, "skipped", f.state(bad[2]), "the skip cascades")
	assert.Equal(t, "waiting_children", f.state(j), "all_of: I has not finished")
	assert.Equal(t, "waiting_children", f.state(stuck[1]))
	assert.NotContains(t, f.blocked(), "garbage")
	assert.Contains(t, f.blocked(), other.String(), "foreign member left for an operator")

	// I finishes: the next pass releases J, nothing else changes.
	f.succeed(i)
	res = f.Scan(s, f.request(50))
	o.Add(f.Counter, res)
	assert.Equal(t, int64(1), res.Processed, "%+v", res)
	assert.Equal(t, "waiting", f.state(j))
	assert.True(t, f.eligible(j))
	return o
}

func TestMainLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), mainScenario)
}

// Rotation (P3): with batch 1 an old child stuck behind a running parent
// does not keep a newer resolvable child waiting: the window moves on.
func rotationScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, depreconciler.Name)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{}))
	fid := f.flowIn(part, "")
	old := f.chain(fid, 2)
	f.WaitPast(f.NowMs()) // blocked sets are scored by created_at (ms): the next chain is a millisecond newer
	fresh := f.chain(fid, 2)
	require.Equal(t, []string{old[1].String(), fresh[1].String()}, f.blocked(), "the stuck child is the oldest")
	f.succeed(fresh[0])

	var o scannertest.Observation
	scans := 0
	for ; scans < 3 && !f.eligible(fresh[1]); scans++ {
		res := f.Scan(s, f.request(1))
		o.Add(f.Counter, res)
	}
	assert.True(t, f.eligible(fresh[1]))
	assert.LessOrEqual(t, scans, 2)
	assert.Equal(t, "waiting_children", f.state(old[1]))
	return o
}

func TestRotationLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), rotationScenario)
}

// Poison children (a wrong-type unresolved set; an upstream whose core is
// not a hash) are counted, do not stop the healthy child in the same
// batch, and are backed off after three failing scans.
func poisonScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, depreconciler.Name)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{}))
	fid := f.flowIn(part, "")
	a := f.chain(fid, 2)
	b := f.chain(fid, 2)
	good := f.chain(fid, 2)
	f.Do("DEL", keys.Exec(a[1]).DepsUnresolved())
	f.Do("SET", keys.Exec(a[1]).DepsUnresolved(), "not a set")
	f.Do("RENAME", keys.Exec(b[0]).Core(), keys.Exec(b[0]).Core()+":moved")
	f.Do("SET", keys.Exec(b[0]).Core(), "not a hash")

	var o scannertest.Observation
	var errs, skipped []int64
	for n := 0; n < 5; n++ {
		if n == 1 {
			f.succeed(good[0])
		}
		res := f.Scan(s, f.request(50))
		o.Add(f.Counter, res)
		errs = append(errs, res.ErrorTotal())
		skipped = append(skipped, res.Skipped)
	}
	assert.Equal(t, []int64{2, 2, 2, 0, 0}, errs, "three failures each, then backoff")
	assert.Equal(t, int64(2), skipped[4], "both backed off")
	assert.True(t, f.eligible(good[1]), "the healthy child was released meanwhile")
	return o
}

func TestPoisonLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), poisonScenario)
}

// The filter applies to the downstream execution: a child of another
// namespace is left blocked.
func TestFilterAppliesToDownstream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(depreconciler.New(), f.Counter)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"namespace": "tenant-a"}))
	mine := f.flowIn(part, "tenant-a")
	theirs := f.flowIn(part, "tenant-b")
	m := []keys.ExecutionID{f.member(mine, "tenant-a"), f.member(mine, "tenant-a")}
	f.edge(mine, m[0], m[1])
	th := []keys.ExecutionID{f.member(theirs, "tenant-b"), f.member(theirs, "tenant-b")}
	f.edge(theirs, th[0], th[1])
	f.succeed(m[0])
	f.succeed(th[0])
	res := f.Scan(s, f.request(50))
	assert.Equal(t, int64(1), res.Processed, "%+v", res)
	assert.Equal(t, int64(1), res.Skipped)
	assert.True(t, f.eligible(m[1]))
	assert.Equal(t, "waiting_children", f.state(th[1]))
}

// A dry run reads, predicts and writes nothing.
func TestDryRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(depreconciler.New(), f.Counter)
	fid := f.flowIn(part, "")
	c := f.chain(fid, 2)
	f.succeed(c[0])
	f.Do("ZADD", f.blockedKey(), "1", "garbage")
	f.Counter.Reset()
	req := f.request(50)
	req.DryRun = true
	res := f.Scan(s, req)
	_, fcalls := f.Counter.Reset()
	assert.Zero(t, fcalls)
	assert.Equal(t, int64(1), res.Processed)
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1}}, res.Errors)
	require.NotEmpty(t, res.Notes)
	assert.Contains(t, res.Notes[len(res.Notes)-1], "would call ff_resolve_dependency on "+c[1].String())
	assert.Equal(t, "waiting_children", f.state(c[1]))
	assert.Contains(t, f.blocked(), "garbage")
}

// A full window that resolved something asks the host to come back. The
// released children leave the set, so the host's next window (by rank)
// starts past the rest; it wraps and finds them on the following scan.
func TestFullWindowSaysMore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(depreconciler.New(), f.Counter)
	fid := f.flowIn(part, "")
	var kids []keys.ExecutionID
	for range 3 {
		c := f.chain(fid, 2)
		f.succeed(c[0])
		kids = append(kids, c[1])
	}
	res := f.Scan(s, f.request(2))
	assert.Equal(t, int64(2), res.Processed)
	assert.True(t, res.More)
	var total int64
	for n := 0; n < 2; n++ {
		res = f.Scan(s, f.request(2))
		total += res.Processed
		assert.False(t, res.More)
	}
	assert.Equal(t, int64(1), total)
	for _, k := range kids {
		assert.True(t, f.eligible(k))
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	info := depreconciler.New().Info()
	require.NoError(t, scannerapi.ValidateInfo(info))
	assert.Equal(t, depreconciler.Name, info.Name)
	assert.Equal(t, 15*time.Second, info.DefaultInterval)
	assert.Equal(t, 50, info.DefaultBatch)
	assert.Equal(t, scannerapi.SourceZSetRotate, info.Sources[0].Kind)
	assert.ElementsMatch(t, []string{"TIME", "HGET", "HMGET", "SMEMBERS", "ZREM"}, info.Commands)
	assert.Error(t, depreconciler.New().Configure(context.Background(), map[string]string{"lookahead": "1"}))
}

// modes are the linked scanner and the plugin binary, for scenarios that
// build their own requests.
func modes() []scannertest.Mode {
	return scannertest.Modes(pluginPkg, func(string) scannerapi.Scanner { return depreconciler.New() })
}
