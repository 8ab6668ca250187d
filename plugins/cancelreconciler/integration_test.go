package cancelreconciler_test

import (
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/cancelreconciler"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/cancelreconciler/cmd/cancelreconciler"

// part is the partition every flow of a test lives on.
var part = keys.Partition{Family: keys.FamilyFlow, Index: 3}

// fixture creates flows through sdk/client on a real server and plays the
// host's part: the due head of the backlog, and command execution.
type fixture struct {
	*scannertest.Scenario
}

func newFixture(t *testing.T) *fixture {
	return &fixture{Scenario: scannertest.StartScenario(t, client.Options{})}
}

// flow creates a flow on part (its id is minted until it hashes there).
func (f *fixture) flow(ns string) keys.FlowID {
	f.T.Helper()
	for {
		id := keys.NewFlowID()
		if f.Client.Partitions().FlowPartition(id) != part {
			continue
		}
		r, err := f.Client.CreateFlow(f.Ctx, client.CreateFlowRequest{ID: id, Namespace: ns})
		require.NoError(f.T, err)
		return r.ID
	}
}

func (f *fixture) member(fid keys.FlowID, ns string) keys.ExecutionID {
	f.T.Helper()
	r, err := f.Client.CreateExecution(f.Ctx, client.CreateRequest{Flow: &fid, Lane: "default", Namespace: ns, Kind: "step"})
	require.NoError(f.T, err)
	require.Equal(f.T, part, r.ID.Partition())
	return r.ID
}

// cancelFlow cancels with grace 0: due for the reconciler at once.
func (f *fixture) cancelFlow(fid keys.FlowID) {
	f.T.Helper()
	zero := time.Duration(0)
	_, err := f.Client.CancelFlow(f.Ctx, fid, client.CancelFlowOptions{Reason: "test reason", Grace: &zero})
	require.NoError(f.T, err)
}

// rescore pins a backlog entry's score, so tests order flows exactly.
func (f *fixture) rescore(fid keys.FlowID, score int) {
	f.T.Helper()
	f.Do("ZADD", keys.FlowPart(part).CancelBacklog(), "XX", strconv.Itoa(score), fid.String())
}

func (f *fixture) core(id keys.ExecutionID) map[string]string {
	f.T.Helper()
	m, err := flowtest.Core(f.Ctx, f.Valkey, id)
	require.NoError(f.T, err)
	return m
}

func (f *fixture) phase(id keys.ExecutionID) string {
	f.T.Helper()
	c := f.core(id)
	return c["lifecycle_phase"] + "/" + c["terminal_outcome"]
}

func (f *fixture) pending(fid keys.FlowID) []string {
	f.T.Helper()
	m, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Smembers().Key(keys.FlowIn(part, fid).PendingCancels()).Build()).AsStrSlice()
	require.NoError(f.T, err)
	sort.Strings(m)
	return m
}

func (f *fixture) exists(key string) bool {
	f.T.Helper()
	n, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Exists().Key(key).Build()).AsInt64()
	require.NoError(f.T, err)
	return n == 1
}

func (f *fixture) inBacklog(member string) bool {
	f.T.Helper()
	err := f.Valkey.Do(f.Ctx, f.Valkey.B().Zscore().Key(keys.FlowPart(part).CancelBacklog()).Member(member).Build()).Error()
	if valkey.IsValkeyNil(err) {
		return false
	}
	require.NoError(f.T, err)
	return true
}

// request plays the host: server time, then the due head of the backlog.
func (f *fixture) request(batch int) *scannerapi.ScanRequest {
	f.T.Helper()
	now := scannertest.ServerNowMs(f.T, f.Valkey)
	return &scannerapi.ScanRequest{Partition: part, NowMs: now, Cycle: f.NextCycle(), Batch: batch,
		Candidates: scannertest.DueCandidates(f.T, f.Valkey, "cancel_backlog", keys.FlowPart(part).CancelBacklog(), now, batch)}
}

// observed is what the modes must agree on for one scan: the counts, the
// errors in a stable order, More, and the cost.
type observed struct {
	Processed, Skipped int64
	Errors             []scannerapi.ErrorCount
	More               bool
	Execs, FCalls      int
}

func (f *fixture) scan(s scannerapi.Scanner, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, observed) {
	f.T.Helper()
	f.Counter.Reset()
	res, err := s.ScanPartition(f.Ctx, nil, req)
	require.NoError(f.T, err)
	execs, fcalls := f.Counter.Reset()
	errs := append([]scannerapi.ErrorCount(nil), res.Errors...)
	sort.Slice(errs, func(i, j int) bool {
		return string(errs[i].Class)+errs[i].Code < string(errs[j].Class)+errs[j].Code
	})
	return res, observed{Processed: res.Processed, Skipped: res.Skipped, Errors: errs, More: res.More, Execs: execs, FCalls: fcalls}
}

// The main scenario of §10.2: a cancelled flow's eligible and active
// members are cancelled with the flow's reason, an already completed one and
// one whose core is gone are acknowledged as done (P6), a garbage member is
// dropped, another tenant's member stays pending; a vanished flow, a drained
// flow and an unparsable backlog entry leave the backlog. Then the flow,
// whose only pending member is filtered out, is remembered as stuck and
// costs nothing.
func basicScenario(t *testing.T, m scannertest.Mode) []observed {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, cancelreconciler.Name)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"namespace": "tenant-a"}))

	fid := f.flow("tenant-a")
	eligible := f.member(fid, "tenant-a")
	active := f.member(fid, "tenant-a")
	lease, err := flowtest.Claim(f.Ctx, f.Lib, active)
	require.NoError(t, err)
	completed := f.member(fid, "tenant-a")
	require.NoError(t, flowtest.Succeed(f.Ctx, f.Lib, completed, []byte("done")))
	other := f.member(fid, "tenant-b")
	f.cancelFlow(fid)
	ghost, err := keys.ExecutionIDIn(part, keys.NewUUID()) // no core at all
	require.NoError(t, err)
	fk := keys.FlowIn(part, fid)
	f.Do("SADD", fk.PendingCancels(), ghost.String(), "garbage")

	gone := f.flow("tenant-a")
	f.member(gone, "tenant-a")
	f.cancelFlow(gone)
	f.Do("DEL", keys.FlowIn(part, gone).Core())

	drained := f.flow("tenant-a")
	f.member(drained, "tenant-a")
	f.cancelFlow(drained)
	f.Do("DEL", keys.FlowIn(part, drained).PendingCancels())

	f.Do("ZADD", keys.FlowPart(part).CancelBacklog(), "1", "not-a-flow")

	var out []observed
	_, o := f.scan(s, f.request(50))
	out = append(out, o)
	assert.Equal(t, int64(5), o.Processed, "4 members acknowledged + the vanished flow: %+v", o)
	assert.Equal(t, int64(1), o.Skipped, "the other tenant's member")
	assert.Equal(t, []scannerapi.ErrorCount{
		{Class: scannerapi.ErrInvalid, Code: "invalid_flow_id", Count: 1},
		{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1},
	}, o.Errors)
	assert.False(t, o.More)
	assert.Equal(t, 4, o.Execs, "flow reads, member reads, cancels, acks")
	assert.Equal(t, 8, o.FCalls, "ack of garbage, 3 cancels, 4 acks")

	assert.Equal(t, "terminal/cancelled", f.phase(eligible))
	assert.Equal(t, "terminal/cancelled", f.phase(active))
	assert.Equal(t, "terminal/success", f.phase(completed))
	assert.Equal(t, "runnable/none", f.phase(other), "another tenant's member is left alone")
	c := f.core(eligible)
	assert.Equal(t, "test reason", c["cancellation_reason"])
	assert.Equal(t, cancelreconciler.Source, c["cancelled_by"])
	assert.False(t, f.exists(keys.Exec(active).LeaseCurrent()), "the active member's lease %s is released", lease.LeaseID)
	assert.Equal(t, []string{other.String()}, f.pending(fid))
	assert.True(t, f.inBacklog(fid.String()), "a member is still owed")
	assert.False(t, f.inBacklog(gone.String()))
	assert.False(t, f.exists(keys.FlowIn(part, gone).PendingCancels()))
	assert.False(t, f.inBacklog(drained.String()))
	assert.False(t, f.inBacklog("not-a-flow"))

	// Next cycle: only the filtered member is left, no progress: the flow
	// is remembered as stuck.
	_, o = f.scan(s, f.request(50))
	out = append(out, o)
	assert.Equal(t, observed{Skipped: 1, Execs: 2}, o)
	// And then skipped without a read.
	_, o = f.scan(s, f.request(50))
	out = append(out, o)
	assert.Equal(t, observed{Skipped: 1}, o)
	return out
}

func TestBasicLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), basicScenario)
}

// P3: flows whose members this scanner must leave alone (another tenant's)
// fill the host's window; the flows behind them are still reached, in the
// next scan, through the look-ahead. With the look-ahead off (FlowFabric's
// fixed window) they are not.
func headOfLineScenario(t *testing.T, m scannertest.Mode) []observed {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, cancelreconciler.Name)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"namespace": "tenant-a"}))
	score := 1000
	var foreign []keys.FlowID
	for range 5 {
		fid := f.flow("tenant-b")
		f.member(fid, "tenant-b")
		f.cancelFlow(fid)
		f.rescore(fid, score)
		score++
		foreign = append(foreign, fid)
	}
	var mine []keys.ExecutionID
	for range 2 {
		fid := f.flow("tenant-a")
		mine = append(mine, f.member(fid, "tenant-a"))
		f.cancelFlow(fid)
		f.rescore(fid, score)
		score++
	}

	var out []observed
	_, o := f.scan(s, f.request(3))
	out = append(out, o)
	assert.Equal(t, observed{Skipped: 3, Execs: 2}, o, "three foreign flows: no progress, no More")
	for _, id := range mine {
		assert.Equal(t, "runnable/none", f.phase(id))
	}

	_, o = f.scan(s, f.request(3))
	out = append(out, o)
	assert.Equal(t, int64(2), o.Processed, "%+v", o)
	assert.Equal(t, int64(3+2), o.Skipped, "3 stuck flows skipped, 2 more foreign members filtered")
	assert.True(t, o.More, "progress with a full window")
	assert.Equal(t, 5, o.Execs, "one look-ahead page, then the four stages")
	for _, id := range mine {
		assert.Equal(t, "terminal/cancelled", f.phase(id))
	}

	// The host comes back: everything due is stuck now, so no More.
	_, o = f.scan(s, f.request(3))
	out = append(out, o)
	assert.Equal(t, observed{Skipped: 5, Execs: 1}, o, "one look-ahead page, no reads")
	for _, fid := range foreign {
		assert.True(t, f.inBacklog(fid.String()))
	}

	// FlowFabric's behaviour: with the look-ahead off, a flow behind the
	// stuck window is never reached.
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"namespace": "tenant-a", "lookahead": "0"}))
	late := f.flow("tenant-a")
	lateMember := f.member(late, "tenant-a")
	f.cancelFlow(late)
	for range 3 {
		_, o = f.scan(s, f.request(3))
		out = append(out, o)
	}
	assert.Zero(t, o.Processed)
	assert.Equal(t, "runnable/none", f.phase(lateMember))
	return out
}

func TestHeadOfLineLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), headOfLineScenario)
}

// A flow with more pending members than one scan takes is drained over
// successive scans, each saying More until the last.
func TestLargeFlowDrainsWithMore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(cancelreconciler.New(), f.Counter)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"members_per_flow": "5"}))
	fid := f.flow("ns")
	var ids []keys.ExecutionID
	for range 12 {
		ids = append(ids, f.member(fid, "ns"))
	}
	f.cancelFlow(fid)
	var processed []int64
	var more []bool
	for range 3 {
		_, o := f.scan(s, f.request(50))
		processed = append(processed, o.Processed)
		more = append(more, o.More)
	}
	assert.Equal(t, []int64{5, 5, 2}, processed)
	assert.Equal(t, []bool{true, true, false}, more)
	for _, id := range ids {
		assert.Equal(t, "terminal/cancelled", f.phase(id))
	}
	assert.Empty(t, f.pending(fid))
	assert.False(t, f.inBacklog(fid.String()), "the last acknowledgement removes the flow")
}

// A member that keeps failing (a wrong-type core) is backed off after three
// failures without holding up the other members; a member whose core lost
// its lane is never cancelled with a guessed one. Once only such members
// are left, the flow is stuck and costs nothing.
func TestPoisonAndCorruptMembers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(cancelreconciler.New(), f.Counter)
	fid := f.flow("ns")
	good := f.member(fid, "ns")
	laneless := f.member(fid, "ns")
	f.cancelFlow(fid)
	f.Do("HDEL", keys.Exec(laneless).Core(), "lane_id")
	poison, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(t, err)
	f.Do("SET", keys.Exec(poison).Core(), "not a hash")
	f.Do("SADD", keys.FlowIn(part, fid).PendingCancels(), poison.String())

	var errs []int64
	for i := range 5 {
		_, o := f.scan(s, f.request(50))
		errs = append(errs, errTotal(o.Errors))
		switch i {
		case 0:
			assert.Equal(t, int64(1), o.Processed, "the good member is not held up")
			assert.Equal(t, []scannerapi.ErrorCount{
				{Class: scannerapi.ErrInvalid, Code: "missing_lane", Count: 1},
				{Class: scannerapi.ErrServer, Code: "core_read_WRONGTYPE", Count: 1},
			}, o.Errors)
		case 3:
			assert.Equal(t, observed{Skipped: 2, Execs: 1}, o, "both backed off (no member reads): the flow is stuck")
		case 4:
			assert.Equal(t, observed{Skipped: 1}, o, "stuck flow: no reads")
		}
	}
	assert.Equal(t, []int64{2, 2, 2, 0, 0}, errs)
	assert.Equal(t, "terminal/cancelled", f.phase(good))
	assert.Equal(t, "runnable/none", f.phase(laneless), "no guessed lane")
	assert.ElementsMatch(t, []string{laneless.String(), poison.String()}, f.pending(fid))
}

func errTotal(es []scannerapi.ErrorCount) int64 {
	var n int64
	for _, e := range es {
		n += e.Count
	}
	return n
}

// Dry run reads and predicts, and writes nothing.
func TestDryRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(cancelreconciler.New(), f.Counter)
	fid := f.flow("ns")
	eligible := f.member(fid, "ns")
	completed := f.member(fid, "ns")
	require.NoError(t, flowtest.Succeed(f.Ctx, f.Lib, completed, nil))
	f.cancelFlow(fid)
	f.Do("ZADD", keys.FlowPart(part).CancelBacklog(), "1", "not-a-flow")
	req := f.request(50)
	req.DryRun = true
	res, o := f.scan(s, req)
	assert.Equal(t, 0, o.FCalls)
	assert.Equal(t, int64(2), o.Processed)
	assert.False(t, o.More)
	assert.Contains(t, res.Notes, fmt.Sprintf("%s of flow %s: would_cancel", eligible, fid))
	assert.Contains(t, res.Notes, fmt.Sprintf("%s of flow %s: execution_not_active", completed, fid))
	assert.Contains(t, res.Notes, `would remove invalid flow id "not-a-flow" of `+keys.FlowPart(part).CancelBacklog())
	assert.Equal(t, "runnable/none", f.phase(eligible))
	assert.Len(t, f.pending(fid), 2)
	assert.True(t, f.inBacklog("not-a-flow"))
}

// More stuck flows than one look-ahead may read: the per-partition cursor
// carries the look-ahead past them over successive scans, so a flow behind
// them is still reached.
func TestLookaheadCursorPassesManyStuckFlows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(cancelreconciler.New(), f.Counter)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"namespace": "tenant-a", "lookahead": "3"}))
	for i := range 6 {
		fid := f.flow("tenant-b")
		f.member(fid, "tenant-b")
		f.cancelFlow(fid)
		f.rescore(fid, 100+i)
	}
	fid := f.flow("tenant-a")
	mine := f.member(fid, "tenant-a")
	f.cancelFlow(fid)
	f.rescore(fid, 200)

	var processed []int64
	for range 3 {
		_, o := f.scan(s, f.request(2))
		processed = append(processed, o.Processed)
	}
	assert.Equal(t, []int64{0, 0, 1}, processed, "window, then 3 past it, then the cursor goes on to the flow")
	assert.Equal(t, "terminal/cancelled", f.phase(mine))
	_, o := f.scan(s, f.request(2))
	assert.Zero(t, o.Processed)
	assert.False(t, o.More, "only stuck flows left")
}

// modes are the linked scanner and the plugin binary, for scenarios that
// build their own requests.
func modes() []scannertest.Mode {
	return scannertest.Modes(pluginPkg, func(string) scannerapi.Scanner { return cancelreconciler.New() })
}
