package quota_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/quota"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

var part = keys.Partition{Family: keys.FamilyQuota, Index: 2}

// fixture is a server with the library, a client to create quotas, and
// the host's part: candidate reads and command execution (counted).
type fixture struct {
	*scannertest.World
	cb    *scannertest.Counter
	cycle uint64
}

func newFixture(t *testing.T) *fixture {
	w := scannertest.StartWorld(t, client.Options{Partitions: parts})
	return &fixture{World: w, cb: scannertest.NewCounter(scannertest.Callbacks(w.Valkey))}
}

// quotaIn is the first quota id homed on p of the series role names:
// fixed ids, so both modes' results (whose notes name them) compare equal.
func quotaIn(t testing.TB, p keys.Partition, role int) keys.QuotaID {
	for i := 1; ; i++ {
		id, err := keys.ParseQuotaID(fmt.Sprintf("d%07d-0000-4000-8000-%012d", role, i))
		require.NoError(t, err)
		if parts.QuotaPartition(id) == p {
			return id
		}
	}
}

// quota creates a quota policy on part.
func (f *fixture) quota(role int, window time.Duration, maxRequests, maxConcurrent int) keys.QuotaID {
	f.T.Helper()
	r, err := f.Client.CreateQuotaPolicy(f.Ctx, client.CreateQuotaRequest{ID: quotaIn(f.T, part, role), Window: window,
		MaxRequests: maxRequests, MaxConcurrent: maxConcurrent})
	require.NoError(f.T, err)
	return r.ID
}

// admitted creates an execution and admits it under q.
func (f *fixture) admitted(q keys.QuotaID) keys.ExecutionID {
	f.T.Helper()
	r, err := f.Client.CreateExecution(f.Ctx, client.CreateRequest{Lane: "default", Kind: "k"})
	require.NoError(f.T, err)
	a, err := f.Client.Admit(f.Ctx, q, r.ID)
	require.NoError(f.T, err)
	require.True(f.T, a.Admitted)
	return r.ID
}

func (f *fixture) get(key string) string {
	f.T.Helper()
	v, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Get().Key(key).Build()).ToString()
	require.NoError(f.T, err)
	return v
}

func (f *fixture) card(cmd string, key string) int64 {
	f.T.Helper()
	n, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Arbitrary(cmd).Keys(key).Build()).AsInt64()
	require.NoError(f.T, err)
	return n
}

func (f *fixture) inPolicies(member string) bool {
	f.T.Helper()
	ok, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Sismember().Key(keys.QuotaPart(part).QuotaPolicies()).Member(member).Build()).AsBool()
	require.NoError(f.T, err)
	return ok
}

// request plays the host for quota_reconciler: one SSCAN step from cursor
// 0 (the set here is small: one step holds it all).
func (f *fixture) request(dryRun bool) *scannerapi.ScanRequest {
	f.T.Helper()
	index := keys.QuotaPart(part).QuotaPolicies()
	e, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Sscan().Key(index).Cursor(0).Count(100).Build()).AsScanEntry()
	require.NoError(f.T, err)
	require.Zero(f.T, e.Cursor, "one step holds the whole set")
	// A set's scan order is the server's hash order, which differs
	// between the modes' servers; the notes follow the candidates'.
	sort.Strings(e.Elements)
	f.cycle++
	req := &scannerapi.ScanRequest{Scanner: quota.Name, Partition: part, NowMs: f.NowMs(), Cycle: f.cycle, Batch: 100, DryRun: dryRun}
	for _, m := range e.Elements {
		req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "quota_policies", Key: index, Member: m})
	}
	return req
}

func (f *fixture) scan(s scannerapi.Scanner, req *scannerapi.ScanRequest) *scannerapi.ScanResult {
	f.T.Helper()
	res, err := s.ScanPartition(f.Ctx, nil, req)
	require.NoError(f.T, err)
	return res
}

// A capped quota one of whose admitted executions ended without releasing
// its slot, a rate window holding an admission past its length, an id
// whose definition is gone, a member that is not a quota id, and a quota
// whose bookkeeping is right. A dry run says what it would do and changes
// nothing; the scan corrects the counter, drops the ended admission, trims
// the window, prunes the id and removes the garbage, in the four waves of
// the package doc; a second scan finds nothing to do.
func reconcileScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	f := newFixture(t)
	s := m.Scanner(t, f.cb, quota.Name)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{}))
	qp := keys.QuotaPart(part)

	capped := f.quota(1, time.Hour, 0, 2)
	f.admitted(capped)
	leaked := f.admitted(capped)
	require.NoError(t, flowtest.Succeed(f.Ctx, f.Lib, leaked, nil)) // ends without ff_release_admission
	steady := f.quota(2, time.Hour, 0, 2)
	f.admitted(steady)
	windowed := f.quota(3, time.Second, 5, 0)
	f.admitted(windowed)
	at := f.NowMs()
	orphan := quotaIn(t, part, 4)
	f.Do("SADD", qp.QuotaPolicies(), orphan.String())
	f.Do("SADD", qp.QuotaPolicies(), "garbage")
	f.WaitPast(at + 1000) // the windowed admission is past its window
	ck, wk := keys.QuotaIn(part, capped), keys.QuotaIn(part, windowed)
	window := wk.Window("requests_per_window")

	var o scannertest.Observation
	f.cb.Reset()
	res := f.scan(s, f.request(true))
	o.Add(f.cb, res)
	assert.Equal(t, int64(2), res.Processed, "would fix the counter and prune the orphan: %+v", res)
	assert.Equal(t, int64(2), res.Skipped, "the steady and the windowed quota (no trim in a dry run)")
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1}}, res.Errors)
	assert.Contains(t, res.Notes, capped.String()+": would drop 1 ended admission(s) and set concurrency 2 -> 1")
	assert.Equal(t, "2", f.get(ck.Concurrency()), "a dry run changes nothing")
	assert.Equal(t, int64(2), f.card("SCARD", ck.AdmittedSet()))
	assert.Equal(t, int64(1), f.card("ZCARD", window))
	assert.True(t, f.inPolicies(orphan.String()))
	assert.True(t, f.inPolicies("garbage"))

	res = f.scan(s, f.request(false))
	o.Add(f.cb, res)
	assert.Equal(t, int64(3), res.Processed, "counter corrected, window trimmed, orphan pruned: %+v", res)
	assert.Equal(t, int64(1), res.Skipped, "the steady quota")
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1}}, res.Errors)
	assert.Equal(t, []int{4}, o.Execs[1:], "definitions; trims, admitted sets and counters; phases; fixes")
	assert.Equal(t, "1", f.get(ck.Concurrency()), "only the running execution holds a slot")
	assert.Equal(t, int64(1), f.card("SCARD", ck.AdmittedSet()))
	assert.Equal(t, "1", f.get(keys.QuotaIn(part, steady).Concurrency()), "right already: untouched")
	assert.Zero(t, f.card("ZCARD", window), "the window past its length is empty")
	assert.False(t, f.inPolicies(orphan.String()))
	assert.False(t, f.inPolicies("garbage"))

	res = f.scan(s, f.request(false))
	o.Add(f.cb, res)
	assert.Zero(t, res.Processed, "nothing left to do: %+v", res)
	assert.Equal(t, int64(3), res.Skipped)
	assert.Empty(t, res.Errors)
	assert.Zero(t, o.FCalls[0]+o.FCalls[1]+o.FCalls[2], "bookkeeping only: no library call")
	return o
}

func TestReconcileLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, scannertest.Modes(pluginPkg, func(string) scannerapi.Scanner { return quota.New() }), reconcileScenario)
}
