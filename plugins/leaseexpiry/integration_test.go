package leaseexpiry_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/leaseexpiry/cmd/leaseexpiry"

var part = keys.Partition{Family: keys.FamilyFlow, Index: 5}

const lane = "default"

// fixture plants executions and leases with the library's own functions,
// and plays the host's part: candidate fetch and command execution.
type fixture struct {
	*scannertest.Scenario
}

func newFixture(t *testing.T) *fixture {
	return &fixture{Scenario: scannertest.StartScenario(t, client.Options{})}
}

func (f *fixture) fcall(fn string, ks []string, args ...string) scannerapi.FunctionReply {
	f.T.Helper()
	replies, err := scannertest.Exec(f.Ctx, f.Valkey, []scannerapi.Command{scannerapi.FCall(fn, ks, args...)})
	require.NoError(f.T, err)
	r, err := scannerapi.ParseFunctionReply(replies[0])
	require.NoError(f.T, err, fn)
	require.True(f.T, r.Success, "%s: %+v", fn, r)
	return r
}

func (f *fixture) create(namespace string) keys.ExecutionID {
	f.T.Helper()
	id, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(f.T, err)
	k, pk := keys.Exec(id), keys.FlowPart(part)
	f.fcall("ff_create_execution",
		[]string{k.Core(), k.Payload(), k.Policy(), k.Tags(), pk.LaneEligible(lane), pk.Noop(), pk.ExecutionDeadline(), pk.AllExecutions()},
		id.String(), namespace, lane, "test", "0", "test", "", "", "", "", "", "", strconv.Itoa(int(part.Index)))
	return id
}

type lease struct{ id, epoch, attemptID string }

// claim grants and claims the execution with a lease of ttl.
func (f *fixture) claim(id keys.ExecutionID, ttl time.Duration) lease {
	f.T.Helper()
	k, pk := keys.Exec(id), keys.FlowPart(part)
	f.fcall("ff_issue_claim_grant", []string{k.Core(), k.ClaimGrant(), pk.LaneEligible(lane)},
		id.String(), "worker-1", "wi-1", lane, "", "10000", "", "", "")
	leaseID, attemptID := keys.NewUUID().String(), keys.NewUUID().String()
	r := f.fcall("ff_claim_execution",
		[]string{k.Core(), k.ClaimGrant(), pk.LaneEligible(lane), pk.LeaseExpiry(), pk.WorkerLeases("wi-1"),
			k.Attempt(0), k.AttemptUsage(0), k.AttemptPolicy(0), k.Attempts(), k.LeaseCurrent(), k.LeaseHistory(),
			pk.LaneActive(lane), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		id.String(), "worker-1", "wi-1", lane, "", leaseID, strconv.FormatInt(ttl.Milliseconds(), 10),
		strconv.FormatInt(ttl.Milliseconds()*2/3, 10), attemptID, "", "", "")
	return lease{id: leaseID, epoch: r.Field(1), attemptID: attemptID}
}

func (f *fixture) renew(id keys.ExecutionID, l lease, ttl time.Duration) {
	f.T.Helper()
	k := keys.Exec(id)
	f.fcall("ff_renew_lease", []string{k.Core(), k.LeaseCurrent(), k.LeaseHistory(), keys.FlowPart(part).LeaseExpiry()},
		id.String(), "0", l.attemptID, l.id, l.epoch, strconv.FormatInt(ttl.Milliseconds(), 10), "0")
}

func (f *fixture) owner(id keys.ExecutionID) string {
	f.T.Helper()
	v, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Hget().Key(keys.Exec(id).Core()).Field("ownership_state").Build()).ToString()
	require.NoError(f.T, err)
	return v
}

func (f *fixture) score(member string) float64 {
	f.T.Helper()
	v, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Zscore().Key(keys.FlowPart(part).LeaseExpiry()).Member(member).Build()).AsFloat64()
	require.NoError(f.T, err)
	return v
}

func (f *fixture) inIndex(member string) bool {
	f.T.Helper()
	err := f.Valkey.Do(f.Ctx, f.Valkey.B().Zscore().Key(keys.FlowPart(part).LeaseExpiry()).Member(member).Build()).Error()
	if valkey.IsValkeyNil(err) {
		return false
	}
	require.NoError(f.T, err)
	return true
}

// request plays the host: server time, then the due head of the index.
func (f *fixture) request(batch int) *scannerapi.ScanRequest {
	f.T.Helper()
	now := scannertest.ServerNowMs(f.T, f.Valkey)
	return &scannerapi.ScanRequest{Partition: part, NowMs: now, Cycle: f.NextCycle(), Batch: batch,
		Candidates: scannertest.DueCandidates(f.T, f.Valkey, "lease_expiry", keys.FlowPart(part).LeaseExpiry(), now, batch)}
}

// The main scenario of §7.1: an expired lease is marked, a lease renewed
// after the host read it is not, stale entries are cleaned, a garbage
// member is removed, an execution of another namespace is left alone, and
// a marked lease is not re-FCALLed on the next scan.
func basicScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, leaseexpiry.Name)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"namespace": "tenant-a"}))

	expired := f.create("tenant-a")
	f.claim(expired, 300*time.Millisecond)
	renewed := f.create("tenant-a")
	renewedLease := f.claim(renewed, 300*time.Millisecond)
	staleScore := f.score(renewed.String())
	f.renew(renewed, renewedLease, time.Minute) // before expiry, but after the host's (stale) read below
	otherTenant := f.create("tenant-b")
	f.claim(otherTenant, 300*time.Millisecond)
	notActive := f.create("tenant-a") // runnable, never claimed: a stale index entry
	f.Do("ZADD", keys.FlowPart(part).LeaseExpiry(), "1", notActive.String())
	gone, err := keys.ExecutionIDIn(part, keys.NewUUID()) // no core at all
	require.NoError(t, err)
	f.Do("ZADD", keys.FlowPart(part).LeaseExpiry(), "2", gone.String())
	f.Do("ZADD", keys.FlowPart(part).LeaseExpiry(), "3", "garbage")
	f.Do("ZADD", keys.FlowPart(part).LeaseExpiry(), "4", "{fp:05}:6f1c2d3e-4a5b-4c6d-8e7f-001122334455")

	// Both short leases expire; the renewed one, a minute away, does not.
	f.WaitPast(int64(max(f.score(expired.String()), f.score(otherTenant.String()))))
	req := f.request(50)
	require.Len(t, req.Candidates, 6)
	// The host read the index before the renewal landed: it still offers
	// the old entry.
	req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "lease_expiry",
		Key: keys.FlowPart(part).LeaseExpiry(), Member: renewed.String(), Score: staleScore})
	f.Counter.Reset()

	var out scannertest.Observation
	res := f.Scan(s, req)
	execs, fcalls := f.Counter.Reset()
	out.Results, out.FCalls, out.Execs = append(out.Results, timeless(t, res)), append(out.FCalls, fcalls), append(out.Execs, execs)

	assert.Equal(t, int64(1), res.Processed, "%+v", res)
	// renewed (not yet expired), notActive and gone (cleaned), otherTenant,
	// notActive... filtered: the filter skips otherTenant and the coreless one.
	assert.Equal(t, "lease_expired_reclaimable", f.owner(expired))
	assert.Equal(t, "leased", f.owner(renewed))
	assert.Equal(t, "leased", f.owner(otherTenant), "another namespace is left alone")
	assert.True(t, f.inIndex(expired.String()), "a marked lease stays in the index until reclaim")
	assert.False(t, f.inIndex(notActive.String()), "stale entry cleaned")
	assert.False(t, f.inIndex("garbage"), "garbage member removed")
	assert.True(t, f.inIndex(otherTenant.String()), "filtered entries stay")
	assert.ElementsMatch(t, []scannerapi.ErrorCount{
		{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1},
		{Class: scannerapi.ErrInvalid, Code: "non_canonical_member", Count: 1},
	}, res.Errors)
	assert.Equal(t, 2, execs, "filter reads, then one batch of FCALLs")
	assert.Equal(t, 3, fcalls, "expired, renewed, notActive (the coreless id fails the namespace filter)")

	// Next cycle: the mark is read back (already_expired) with one FCALL,
	// and only then remembered; a mark is never trusted unread.
	res = f.Scan(s, f.request(50))
	execs, fcalls = f.Counter.Reset()
	out.Results, out.FCalls, out.Execs = append(out.Results, timeless(t, res)), append(out.FCalls, fcalls), append(out.Execs, execs)
	assert.Equal(t, int64(0), res.Processed)
	assert.Equal(t, 1, fcalls, "%+v", res)

	// The cycle after: the marked lease is known stuck: no FCALL for it.
	res = f.Scan(s, f.request(50))
	execs, fcalls = f.Counter.Reset()
	out.Results, out.FCalls, out.Execs = append(out.Results, timeless(t, res)), append(out.FCalls, fcalls), append(out.Execs, execs)
	assert.Equal(t, int64(0), res.Processed)
	assert.Equal(t, 0, fcalls, "%+v", res)
	return out
}

// A mark lost by the store (a failover to a replica that had not received
// it, a restored snapshot) leaves the lease leased with the same score.
// The scanner must mark it again, not skip it from memory (issue: 2044 of
// 20000 leases stayed unmarked after a failover). We play the lost write by
// putting the lease back as it was before the mark.
func TestLostMarkIsMarkedAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(leaseexpiry.New(), f.Counter)
	require.NoError(t, s.Configure(f.Ctx, nil))
	id := f.create("ns")
	f.claim(id, 100*time.Millisecond)
	f.waitDue()
	score := f.score(id.String())

	res := f.Scan(s, f.request(10))
	require.Equal(t, int64(1), res.Processed)
	require.Equal(t, "lease_expired_reclaimable", f.owner(id))

	// The store loses the mark: ownership back to leased, same score.
	f.Do("HSET", keys.Exec(id).Core(), "ownership_state", "leased")
	require.Equal(t, score, f.score(id.String()))

	res = f.Scan(s, f.request(10))
	assert.Equal(t, int64(1), res.Processed, "marked again: %+v", res)
	assert.Equal(t, "lease_expired_reclaimable", f.owner(id))

	// Once the function has answered already_expired it is remembered;
	// losing the mark then is found within stuckTTL cycles at worst, and
	// at once after a failed callback (the memory is dropped). Here: read
	// back, remembered, then lost again and re-verified after a failure.
	res = f.Scan(s, f.request(10))
	assert.Equal(t, int64(0), res.Processed)
	f.Counter.Reset()
	f.Scan(s, f.request(10))
	_, fcalls := f.Counter.Reset()
	assert.Zero(t, fcalls, "remembered after it was read back")
	f.Do("HSET", keys.Exec(id).Core(), "ownership_state", "leased")
	failing := scannerapi.HostFunc(func(context.Context, []scannerapi.Command) ([]scannerapi.Reply, error) {
		return nil, errors.New("connection reset")
	})
	req := f.request(10)
	req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "lease_expiry", Key: keys.FlowPart(part).LeaseExpiry(), Member: "garbage", Score: 1})
	_, err := s.ScanPartition(f.Ctx, failing, req)
	require.Error(t, err, "a scan whose only callback failed fails")
	res = f.Scan(s, f.request(10))
	assert.Equal(t, int64(1), res.Processed, "the memory was dropped with the failed callback: %+v", res)
	assert.Equal(t, "lease_expired_reclaimable", f.owner(id))
}

func TestBasicLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	var results []scannertest.Observation
	for _, m := range modes() {
		t.Run(m.Name, func(t *testing.T) { results = append(results, basicScenario(t, m)) })
	}
	require.Len(t, results, 2)
	assert.Equal(t, results[0], results[1], "linked and plugin runs observe the same")
}

// P3: a head window full of marked leases must not hide leases that expire
// later. With the look-ahead the new ones are marked in one scan; with it
// off (FlowFabric's behaviour) they are not.
func headOfLineScenario(t *testing.T, m scannertest.Mode) scannertest.Observation {
	f := newFixture(t)
	s := m.Scanner(t, f.Counter, leaseexpiry.Name)
	var stuck []keys.ExecutionID
	for i := 0; i < 8; i++ {
		id := f.create("ns")
		f.claim(id, 200*time.Millisecond)
		stuck = append(stuck, id)
	}
	f.waitDue()
	for i := 0; i < 3; i++ { // mark them; batch 5 with look-ahead marks all
		f.Scan(s, f.request(5))
	}
	for _, id := range stuck {
		require.Equal(t, "lease_expired_reclaimable", f.owner(id))
	}
	var fresh []keys.ExecutionID
	for i := 0; i < 3; i++ {
		id := f.create("ns")
		f.claim(id, 200*time.Millisecond)
		fresh = append(fresh, id)
	}
	f.waitDue()
	f.Counter.Reset()

	var out scannertest.Observation
	req := f.request(5)
	for _, c := range req.Candidates {
		for _, id := range fresh {
			require.NotEqual(t, id.String(), c.Member, "the host's window holds only stuck entries")
		}
	}
	res := f.Scan(s, req)
	execs, fcalls := f.Counter.Reset()
	out.Results, out.FCalls, out.Execs = append(out.Results, timeless(t, res)), append(out.FCalls, fcalls), append(out.Execs, execs)
	assert.Equal(t, int64(3), res.Processed, "%+v", res)
	assert.Equal(t, 3, fcalls, "only the fresh leases are FCALLed")
	for _, id := range fresh {
		assert.Equal(t, "lease_expired_reclaimable", f.owner(id))
	}

	// Turning the look-ahead off, which would bring back FlowFabric's
	// fixed window that never reaches a newer lease, is refused.
	require.Error(t, s.Configure(f.Ctx, map[string]string{"lookahead": "0"}))
	return out
}

func TestHeadOfLineLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	var results []scannertest.Observation
	for _, m := range modes() {
		t.Run(m.Name, func(t *testing.T) { results = append(results, headOfLineScenario(t, m)) })
	}
	require.Len(t, results, 2)
	assert.Equal(t, results[0], results[1])
}

// A burst deeper than the look-ahead is drained over successive scans
// through the cursor, and More asks the host to come back meanwhile.
func TestDeepBurstDrainsThroughCursor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(leaseexpiry.New(), f.Counter)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"lookahead": "12"}))
	var ids []keys.ExecutionID
	for i := 0; i < 30; i++ {
		id := f.create("ns")
		f.claim(id, 100*time.Millisecond)
		ids = append(ids, id)
	}
	f.waitDue()
	total := int64(0)
	scans := 0
	for ; scans < 10 && total < 30; scans++ {
		res := f.Scan(s, f.request(3))
		total += res.Processed
		if total < 30 {
			assert.True(t, res.More, "scan %d: still finding work", scans)
		}
	}
	assert.Equal(t, int64(30), total)
	assert.LessOrEqual(t, scans, 5, "3 + 12, then 6 per scan past the cursor")
	for _, id := range ids {
		assert.Equal(t, "lease_expired_reclaimable", f.owner(id))
	}
	// The marks are read back (already_expired) and remembered within a
	// few scans; from then on stuck entries cost nothing.
	f.Counter.Reset()
	var res *scannerapi.ScanResult
	fcalls := -1
	for i := 0; i < 5 && fcalls != 0; i++ {
		res = f.Scan(s, f.request(3))
		_, fcalls = f.Counter.Reset()
		assert.Zero(t, res.Processed)
	}
	assert.False(t, res.More, "only stuck entries left: no rescan")
	assert.Zero(t, fcalls, "stuck entries cost no FCALL")
}

// Dry run reads and predicts, and writes nothing.
func TestDryRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(leaseexpiry.New(), f.Counter)
	id := f.create("ns")
	f.claim(id, 100*time.Millisecond)
	f.Do("ZADD", keys.FlowPart(part).LeaseExpiry(), "1", "garbage")
	f.waitDue()
	f.Counter.Reset()
	req := f.request(50)
	req.DryRun = true
	res := f.Scan(s, req)
	_, fcalls := f.Counter.Reset()
	assert.Equal(t, 0, fcalls)
	assert.Equal(t, int64(1), res.Processed)
	assert.Contains(t, res.Notes, fmt.Sprintf("would mark %s expired", id))
	assert.Contains(t, res.Notes, `would remove invalid member "garbage" of `+keys.FlowPart(part).LeaseExpiry())
	assert.Equal(t, "leased", f.owner(id))
	assert.True(t, f.inIndex("garbage"))
}

// A key that keeps failing (a wrong-type core) is backed off after three
// failures and does not block the others.
func TestPoisonEntryBacksOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(leaseexpiry.New(), f.Counter)
	poison, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(t, err)
	f.Do("SET", keys.Exec(poison).Core(), "not a hash")
	f.Do("ZADD", keys.FlowPart(part).LeaseExpiry(), "1", poison.String())
	good := f.create("ns")
	f.claim(good, 100*time.Millisecond)
	f.waitDue()

	var errs []int64
	for i := 0; i < 5; i++ {
		res := f.Scan(s, f.request(50))
		errs = append(errs, res.ErrorTotal())
		if i == 0 {
			assert.Equal(t, int64(1), res.Processed, "the poison entry does not block the good one")
			require.Len(t, res.Errors, 1)
			assert.Equal(t, scannerapi.ErrServer, res.Errors[0].Class)
		}
	}
	assert.Equal(t, []int64{1, 1, 1, 0, 0}, errs, "three failures, then backoff")
	assert.Equal(t, "lease_expired_reclaimable", f.owner(good))
}

// modes are the linked scanner and the plugin binary, for scenarios that
// build their own requests.
func modes() []scannertest.Mode {
	return scannertest.Modes(pluginPkg, func(string) scannerapi.Scanner { return leaseexpiry.New() })
}

// An execution id of another partition in this partition's index can
// never be acted on from here (its keys are in another slot): it is
// removed and counted, without an FCALL the host would refuse as
// cross-slot.
func TestForeignMemberRemoved(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(leaseexpiry.New(), f.Counter)
	other := keys.Partition{Family: keys.FamilyFlow, Index: part.Index + 1}
	foreign, err := keys.ExecutionIDIn(other, keys.NewUUID())
	require.NoError(t, err)
	f.Do("ZADD", keys.FlowPart(part).LeaseExpiry(), "1", foreign.String())
	f.Counter.Reset()
	res := f.Scan(s, f.request(50))
	_, fcalls := f.Counter.Reset()
	assert.Zero(t, fcalls)
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrInvalid, Code: "foreign_member", Count: 1}}, res.Errors)
	assert.False(t, f.inIndex(foreign.String()), "foreign member removed")
}

// waitDue waits until the server's clock has passed every score in the
// partition's lease index (the leases' expiry is the server's business).
func (f *fixture) waitDue() {
	f.T.Helper()
	zs, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Zrange().Key(keys.FlowPart(part).LeaseExpiry()).Min("-1").Max("-1").Withscores().Build()).AsZScores()
	require.NoError(f.T, err)
	if len(zs) == 0 {
		return
	}
	f.WaitPast(int64(zs[0].Score))
}

// Marked leases stay in the index until a worker reclaims them; the scan
// reports them settled, and its lag covers only what is still to do, so
// the host's backlog and lag gauges fall to zero once the drain is done
// instead of growing with leases nobody reclaims.
func TestMarkedLeasesAreSettledNotBacklog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(leaseexpiry.New(), f.Counter)
	require.NoError(t, s.Configure(f.Ctx, nil))
	for range 5 {
		f.claim(f.create("ns"), 20*time.Millisecond)
	}
	f.waitDue()

	res := f.Scan(s, f.request(50))
	require.Equal(t, int64(5), res.Processed)
	assert.Zero(t, res.Settled, "a mark is not settled before it is read back")
	assert.True(t, res.HasLag)
	assert.Positive(t, res.Lag, "they were due before they were marked")

	res = f.Scan(s, f.request(50))
	assert.Zero(t, res.Processed)
	assert.Equal(t, int64(5), res.Settled, "read back: settled")
	assert.True(t, res.HasLag)
	assert.Zero(t, res.Lag, "nothing left to do")

	f.Counter.Reset()
	res = f.Scan(s, f.request(50))
	_, fcalls := f.Counter.Reset()
	assert.Zero(t, fcalls)
	assert.Equal(t, int64(5), res.Settled)
	assert.Zero(t, res.Lag)

	// A new expiry is work again, and is the lag.
	f.claim(f.create("ns"), 20*time.Millisecond)
	f.waitDue()
	res = f.Scan(s, f.request(50))
	assert.Equal(t, int64(1), res.Processed)
	assert.Equal(t, int64(5), res.Settled)
	assert.Positive(t, res.Lag)
	assert.Less(t, res.Lag, time.Minute)
}

// timeless checks a result's lag is plausible and returns a copy without
// it: the lag depends on when the scan ran, so two runs (linked and
// plugin) compare equal only without it.
func timeless(t *testing.T, res *scannerapi.ScanResult) *scannerapi.ScanResult {
	t.Helper()
	assert.True(t, res.HasLag)
	assert.GreaterOrEqual(t, res.Lag, time.Duration(0))
	assert.Less(t, res.Lag, time.Minute)
	out := *res
	out.Lag = 0
	return &out
}

// An FCALL that marked the lease and then stopped at a key a slot
// migration had already moved answers with the server's "non local key"
// error, class transport: the lease is not counted then, nor backed off,
// and when the next scan's call answers already_expired, the mark is
// counted as this scanner's (processed equals what was marked). We play
// the migration's error by running the FCALL on the server and handing the
// scanner that error in place of its reply.
func TestMarkStoppedAtAMigratedKeyIsCountedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(leaseexpiry.New(), f.Counter)
	require.NoError(t, s.Configure(f.Ctx, nil))
	id := f.create("ns")
	f.claim(id, 100*time.Millisecond)
	f.waitDue()

	stopped := scannerapi.HostFunc(func(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		replies, err := f.Counter.Exec(ctx, leaseexpiry.Name, cmds)
		if err != nil {
			return nil, err
		}
		for i, c := range cmds {
			if c[0] == "FCALL" {
				replies[i] = scannerapi.Reply{Kind: scannerapi.KindError, ErrClass: scannerapi.ErrTransport,
					Err: "Script attempted to access a non local key in a cluster node script: ff_mark_lease_expired_if_due, on @user_function:178."}
			}
		}
		return replies, nil
	})
	res, err := s.ScanPartition(f.Ctx, stopped, f.request(10))
	require.NoError(t, err)
	assert.Zero(t, res.Processed)
	require.Len(t, res.Errors, 1, "%+v", res)
	assert.Equal(t, scannerapi.ErrTransport, res.Errors[0].Class)
	assert.Equal(t, "non_local_key", res.Errors[0].Code)
	require.Equal(t, "lease_expired_reclaimable", f.owner(id), "the call marked it before it stopped")

	res = f.Scan(s, f.request(10))
	assert.Equal(t, int64(1), res.Processed, "already_expired after the stopped call: its mark: %+v", res)
	assert.Zero(t, res.Skipped)
	res = f.Scan(s, f.request(10))
	assert.Zero(t, res.Processed, "counted once: %+v", res)
}
