package retention_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/retention"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/retention/cmd/retention"

// part is the partition every execution of a test lives on.
var part = keys.Partition{Family: keys.FamilyFlow, Index: 6}

const lane = "default"

// fixture creates executions through sdk/client and the library on a real
// server, ages them, and plays the host's part: the head of every lane's
// terminal index, and command execution.
type fixture struct {
	*scannertest.World
	cb    *countingCallbacks
	cycle uint64
	lanes []string
}

func newFixture(t *testing.T) *fixture {
	w := scannertest.StartWorld(t, client.Options{})
	return &fixture{World: w, cb: &countingCallbacks{inner: scannertest.Callbacks(w.Valkey)}, lanes: []string{lane}}
}

// countingCallbacks counts batches and checks every UNLINK's size on the
// way to the server.
type countingCallbacks struct {
	inner      pluginhost.Callbacks
	mu         sync.Mutex
	execs      int
	maxUnlink  int
	writeCalls int
	gets       int // GET commands (policy reads)
}

func (c *countingCallbacks) Exec(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	c.mu.Lock()
	c.execs++
	for _, cmd := range cmds {
		switch cmd[0] {
		case "UNLINK":
			c.maxUnlink = max(c.maxUnlink, len(cmd)-1)
			c.writeCalls++
		case "ZREM", "SREM", "DEL":
			c.writeCalls++
		case "GET":
			c.gets++
		}
	}
	c.mu.Unlock()
	return c.inner.Exec(ctx, scanner, cmds)
}

func (c *countingCallbacks) reset() (execs, writes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	execs, writes = c.execs, c.writeCalls
	c.execs, c.writeCalls = 0, 0
	return
}

// create makes an execution on part through sdk/client.
func (f *fixture) create(ns, onLane string) keys.ExecutionID {
	f.T.Helper()
	id, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(f.T, err)
	_, err = f.Client.CreateExecution(f.Ctx, client.CreateRequest{ID: id, Lane: onLane, Namespace: ns, Kind: "job",
		Payload: []byte("in"), Tags: map[string]string{"app.k": "v"}})
	require.NoError(f.T, err)
	return id
}

// finished creates an execution and runs it to success through the
// library (claim, complete): attempt, lease history, result and index
// entries as a worker leaves them.
func (f *fixture) finished(ns string) keys.ExecutionID {
	f.T.Helper()
	id := f.create(ns, lane)
	require.NoError(f.T, flowtest.Succeed(f.Ctx, f.Lib, id, []byte("out")))
	return id
}

// age makes a terminal execution look as if it ended d ago. The terminal
// index score is the completion time and completed_at mirrors it; both are
// rewritten (waiting a day is not an option in a test).
func (f *fixture) age(id keys.ExecutionID, d time.Duration) {
	f.T.Helper()
	at := strconv.FormatInt(f.NowMs()-d.Milliseconds(), 10)
	f.Do("ZADD", keys.FlowPart(part).LaneTerminal(lane), "XX", at, id.String())
	f.Do("HSET", keys.Exec(id).Core(), "completed_at", at)
}

// override sets stream_policy.retention_ttl_ms in the execution's policy,
// as a FlowFabric producer can (sdk/client does not write stream policies).
func (f *fixture) override(id keys.ExecutionID, d time.Duration) {
	f.T.Helper()
	raw, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Get().Key(keys.Exec(id).Policy()).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		raw, err = "{}", nil
	}
	require.NoError(f.T, err)
	var pol map[string]any
	require.NoError(f.T, json.Unmarshal([]byte(raw), &pol))
	pol["stream_policy"] = map[string]any{"retention_ttl_ms": d.Milliseconds()}
	b, err := json.Marshal(pol)
	require.NoError(f.T, err)
	f.Do("SET", keys.Exec(id).Policy(), string(b))
}

// decorate writes the keys FlowFabric's suspension, signal, stream and
// dependency functions leave on an execution (our library does not
// implement all of them yet), exactly where FlowFabric puts them. It
// returns the keys that do not carry the execution's uuid.
func (f *fixture) decorate(id keys.ExecutionID) []string {
	f.T.Helper()
	ek, pk := keys.Exec(id), keys.FlowPart(part)
	edge, wp, sig := keys.NewUUID(), keys.NewUUID(), keys.NewUUID()
	f.Do("SADD", ek.DepsAllEdges(), edge.String())
	f.Do("SADD", ek.DepsUnresolved(), edge.String())
	f.Do("HSET", ek.Dep(edge), "state", "satisfied")
	f.Do("HSET", ek.DepsMeta(), "unsatisfied_required_count", "0")
	f.Do("SADD", ek.Waitpoints(), wp.String())
	f.Do("HSET", pk.Waitpoint(wp), "state", "closed", "execution_id", id.String())
	f.Do("XADD", pk.WaitpointSignals(wp), "*", "signal_id", sig.String())
	f.Do("HSET", pk.WaitpointCondition(wp), "closed", "1")
	f.Do("ZADD", ek.Signals(), "1", sig.String())
	f.Do("HSET", pk.Signal(sig), "execution_id", id.String())
	f.Do("SET", pk.SignalPayload(sig), "payload")
	f.Do("HSET", ek.SuspensionCurrent(), "closed_at", "1")
	f.Do("SADD", ek.SuspensionSatisfiedSet(), "tok")
	f.Do("SADD", ek.SuspensionSatisfiedSignals(), sig.String())
	f.Do("HSET", ek.SuspensionMemberMap(), "wp:x:0", "0")
	f.Do("XADD", ek.Stream(0), "*", "frame", "1")
	f.Do("HSET", ek.StreamMeta(0), "closed_at", "1")
	f.Do("HSET", ek.AttemptSummary(0), "text", "s")
	return []string{pk.Waitpoint(wp), pk.WaitpointSignals(wp), pk.WaitpointCondition(wp), pk.Signal(sig), pk.SignalPayload(sig)}
}

// keysOf lists every key of the keyspace that names the execution's uuid.
func (f *fixture) keysOf(id keys.ExecutionID) []string {
	f.T.Helper()
	var out []string
	var cur uint64
	for {
		e, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Scan().Cursor(cur).Match("*"+id.UUID().String()+"*").Count(1000).Build()).AsScanEntry()
		require.NoError(f.T, err)
		out = append(out, e.Elements...)
		if e.Cursor == 0 {
			sort.Strings(out)
			return out
		}
		cur = e.Cursor
	}
}

func (f *fixture) existing(ks []string) []string {
	f.T.Helper()
	var out []string
	for _, k := range ks {
		if n, _ := f.Do("EXISTS", k).AsInt64(); n == 1 {
			out = append(out, k)
		}
	}
	return out
}

func (f *fixture) inTerminal(id string) bool {
	f.T.Helper()
	return !valkey.IsValkeyNil(f.Valkey.Do(f.Ctx, f.Valkey.B().Zscore().Key(keys.FlowPart(part).LaneTerminal(lane)).Member(id).Build()).Error())
}

func (f *fixture) inAll(id string) bool {
	f.T.Helper()
	n, err := f.Do("SISMEMBER", keys.FlowPart(part).AllExecutions(), id).AsInt64()
	require.NoError(f.T, err)
	return n == 1
}

// gone asserts nothing of the execution is left: no key naming its uuid,
// none of its waitpoint and signal keys, no index entry.
func (f *fixture) gone(id keys.ExecutionID, extra []string) {
	f.T.Helper()
	assert.Empty(f.T, f.keysOf(id), "keys of %s left", id)
	assert.Empty(f.T, f.existing(extra), "waitpoint/signal keys of %s left", id)
	assert.False(f.T, f.inTerminal(id.String()))
	assert.False(f.T, f.inAll(id.String()))
}

func (f *fixture) intact(id keys.ExecutionID) {
	f.T.Helper()
	assert.True(f.T, f.inAll(id.String()), "%s left in all_executions", id)
	ks := f.keysOf(id)
	assert.Contains(f.T, ks, keys.Exec(id).Core())
	assert.Contains(f.T, ks, keys.Exec(id).Payload())
}

// request plays the host: server time (plus skew, to let time pass for
// the scanner), then the head of each lane's terminal index older than
// the one-minute floor the scanner declares.
func (f *fixture) request(batch int, skew time.Duration) *scannerapi.ScanRequest {
	f.T.Helper()
	now := f.NowMs() + skew.Milliseconds()
	f.cycle++
	req := &scannerapi.ScanRequest{Partition: part, NowMs: now, Cycle: f.cycle, Batch: batch, Lanes: f.lanes}
	for _, l := range f.lanes {
		key := keys.FlowPart(part).LaneTerminal(l)
		zs, err := f.Valkey.Do(f.Ctx, f.Valkey.B().Zrange().Key(key).Min("-inf").Max(strconv.FormatInt(now-retention.Floor.Milliseconds(), 10)).
			Byscore().Limit(0, int64(batch)).Withscores().Build()).AsZScores()
		require.NoError(f.T, err)
		for _, z := range zs {
			req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "terminal", Key: key, Lane: l, Member: z.Member, Score: z.Score})
		}
	}
	return req
}

// observed is what one scan did, comparable across modes.
type observed struct {
	Processed, Skipped int64
	Errors             []scannerapi.ErrorCount
	More               bool
	Backlog            int64
	Execs, Writes      int
}

func (f *fixture) scan(s scannerapi.Scanner, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, observed) {
	f.T.Helper()
	f.cb.reset()
	res, err := s.ScanPartition(f.Ctx, nil, req)
	require.NoError(f.T, err)
	execs, writes := f.cb.reset()
	errs := append([]scannerapi.ErrorCount(nil), res.Errors...)
	sort.Slice(errs, func(i, j int) bool {
		return string(errs[i].Class)+errs[i].Code < string(errs[j].Class)+errs[j].Code
	})
	require.True(f.T, res.HasBacklog)
	return res, observed{Processed: res.Processed, Skipped: res.Skipped, Errors: errs, More: res.More, Backlog: res.Backlog, Execs: execs, Writes: writes}
}

// The main scenario of §8.2 with P4 fixed: an execution past the default
// retention is deleted entirely (every key, every index entry), a younger
// one stays, a shorter per-execution override is honoured (found by the
// walk, at once when already due and later from memory), a longer one
// keeps its execution, a non-terminal execution with a stale terminal
// entry is never touched, an entry whose core is gone leaves both indexes,
// a garbage member is removed, another tenant's execution stays.
func basicScenario(t *testing.T, m scannertest.Mode) []observed {
	f := newFixture(t)
	s := m.Scanner(t, f.cb, retention.Name)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"namespace": "tenant-a"}))

	old := f.finished("tenant-a")
	oldExtra := f.decorate(old)
	f.age(old, 25*time.Hour)
	young := f.finished("tenant-a")
	f.age(young, 2*time.Hour)
	short := f.finished("tenant-a")
	f.override(short, 2*time.Hour)
	f.age(short, 3*time.Hour)
	shortLater := f.finished("tenant-a")
	f.override(shortLater, 2*time.Hour)
	f.age(shortLater, 90*time.Minute)
	long := f.finished("tenant-a")
	f.override(long, 72*time.Hour)
	f.age(long, 30*time.Hour)
	running := f.create("tenant-a", lane) // runnable; a stale terminal entry points at it
	f.Do("ZADD", keys.FlowPart(part).LaneTerminal(lane), strconv.FormatInt(f.NowMs()-30*time.Hour.Milliseconds(), 10), running.String())
	ghost, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(t, err)
	f.Do("ZADD", keys.FlowPart(part).LaneTerminal(lane), strconv.FormatInt(f.NowMs()-30*time.Hour.Milliseconds(), 10), ghost.String())
	f.Do("SADD", keys.FlowPart(part).AllExecutions(), ghost.String())
	other := f.finished("tenant-b")
	f.age(other, 26*time.Hour)
	f.Do("ZADD", keys.FlowPart(part).LaneTerminal(lane), "1", "garbage")

	var out []observed
	_, o := f.scan(s, f.request(50, 0))
	out = append(out, o)
	assert.Equal(t, int64(3), o.Processed, "old, short, ghost: %+v", o)
	assert.Equal(t, int64(3), o.Skipped, "long (kept), running (not terminal), other (filtered)")
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrInvalid, Code: "invalid_member", Count: 1}}, o.Errors)
	assert.False(t, o.More)
	assert.Equal(t, int64(3), o.Backlog, "long, running and other are older than the default cutoff")
	assert.Equal(t, 5, o.Execs, "reads; policy reads + deletes; reads; deletes; final deletes")

	f.gone(old, oldExtra)
	f.gone(short, nil)
	assert.False(t, f.inTerminal(ghost.String()))
	assert.False(t, f.inAll(ghost.String()), "a vanished core's entry leaves all_executions too")
	assert.False(t, f.inTerminal("garbage"))
	f.intact(young)
	f.intact(shortLater)
	f.intact(long)
	f.intact(other)
	f.intact(running)
	assert.True(t, f.inTerminal(running.String()), "never touched")
	st, err := f.Client.GetExecution(f.Ctx, running)
	require.NoError(t, err)
	assert.Equal(t, "runnable", st.LifecyclePhase)

	// Next cycle: what is left in place is known and costs no reads.
	_, o = f.scan(s, f.request(50, 0))
	out = append(out, o)
	assert.Equal(t, observed{Skipped: 3, Backlog: 3, Execs: 1}, o)

	// 31 minutes later the remembered shorter override is due.
	_, o = f.scan(s, f.request(50, 31*time.Minute))
	out = append(out, o)
	assert.Equal(t, int64(1), o.Processed, "%+v", o)
	f.gone(shortLater, nil)
	f.intact(young)
	return out
}

func TestBasicLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), basicScenario)
}

// P3: entries a longer override keeps fill the host's window; the due
// entries behind them are reached through the look-ahead once the kept
// ones are known. With the look-ahead off (FlowFabric's fixed window) they
// are not.
func headOfLineScenario(t *testing.T, m scannertest.Mode) []observed {
	f := newFixture(t)
	s := m.Scanner(t, f.cb, retention.Name)
	var kept []keys.ExecutionID
	for i := range 5 {
		id := f.finished("ns")
		f.override(id, 30*24*time.Hour)
		f.age(id, 40*time.Hour-time.Duration(i)*time.Minute)
		kept = append(kept, id)
	}
	var due []keys.ExecutionID
	for range 2 {
		id := f.finished("ns")
		f.age(id, 25*time.Hour)
		due = append(due, id)
	}

	var out []observed
	_, o := f.scan(s, f.request(3, 0))
	out = append(out, o)
	assert.Equal(t, observed{Skipped: 3, Backlog: 7, Execs: 1}, o, "three kept: learnt in one read, no progress, no More")

	_, o = f.scan(s, f.request(3, 0))
	out = append(out, o)
	assert.Equal(t, int64(2), o.Processed, "%+v", o)
	assert.Equal(t, int64(3+2), o.Skipped)
	assert.Equal(t, int64(5), o.Backlog)
	for _, id := range due {
		f.gone(id, nil)
	}

	_, o = f.scan(s, f.request(3, 0))
	out = append(out, o)
	assert.Equal(t, observed{Skipped: 5, Backlog: 5, Execs: 1}, o, "a look-ahead page with the backlog count, no reads")
	for _, id := range kept {
		f.intact(id)
	}

	require.NoError(t, s.Configure(f.Ctx, map[string]string{"lookahead": "0"}))
	late := f.finished("ns")
	f.age(late, 25*time.Hour)
	for range 3 {
		_, o = f.scan(s, f.request(3, 0))
		out = append(out, o)
	}
	assert.Zero(t, o.Processed)
	f.intact(late)
	return out
}

func TestHeadOfLineLinkedAndPluginAgree(t *testing.T) {
	t.Parallel()
	scannertest.Agree(t, modes(), headOfLineScenario)
}

// P4's throughput cap is gone: a full window that made progress says More,
// so the host rescans at once until the due entries are exhausted.
func TestBacklogDrainsWithMore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(retention.New(), f.cb)
	var ids []keys.ExecutionID
	for range 12 {
		id := f.finished("ns")
		f.age(id, 25*time.Hour)
		ids = append(ids, id)
	}
	var processed []int64
	var more []bool
	for range 3 {
		_, o := f.scan(s, f.request(5, 0))
		processed = append(processed, o.Processed)
		more = append(more, o.More)
	}
	assert.Equal(t, []int64{5, 5, 2}, processed)
	assert.Equal(t, []bool{true, true, false}, more)
	for _, id := range ids {
		f.gone(id, nil)
	}
}

// A big execution is deleted in UNLINKs of at most 100 keys.
func TestLargeExecutionDeletedInChunks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(retention.New(), f.cb)
	id := f.finished("ns")
	ek, pk := keys.Exec(id), keys.FlowPart(part)
	var extra []string
	for range 300 {
		sig := keys.NewUUID()
		f.Do("ZADD", ek.Signals(), "1", sig.String())
		f.Do("HSET", pk.Signal(sig), "execution_id", id.String())
		f.Do("SET", pk.SignalPayload(sig), "p")
		extra = append(extra, pk.Signal(sig), pk.SignalPayload(sig))
	}
	f.age(id, 25*time.Hour)
	_, o := f.scan(s, f.request(50, 0))
	assert.Equal(t, int64(1), o.Processed)
	f.gone(id, extra)
	f.cb.mu.Lock()
	defer f.cb.mu.Unlock()
	assert.LessOrEqual(t, f.cb.maxUnlink, retention.DeleteChunk)
	assert.Greater(t, f.cb.maxUnlink, 50, "chunks are filled")
}

// A key that keeps failing (a wrong-type core) is backed off after three
// failures and does not block the others.
func TestPoisonEntryBacksOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(retention.New(), f.cb)
	poison, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(t, err)
	f.Do("SET", keys.Exec(poison).Core(), "not a hash")
	f.Do("ZADD", keys.FlowPart(part).LaneTerminal(lane), "1", poison.String())
	var errs []int64
	for i := range 5 {
		good := f.finished("ns")
		f.age(good, 25*time.Hour)
		_, o := f.scan(s, f.request(50, 0))
		errs = append(errs, errTotal(o.Errors))
		assert.Equal(t, int64(1), o.Processed, "scan %d: the poison entry does not block the good one", i)
		f.gone(good, nil)
	}
	assert.Equal(t, []int64{1, 1, 1, 0, 0}, errs, "three failures, then backoff")
	assert.True(t, f.inTerminal(poison.String()), "left in place")
}

func errTotal(es []scannerapi.ErrorCount) int64 {
	var n int64
	for _, e := range es {
		n += e.Count
	}
	return n
}

// Dry run reads and predicts, and deletes nothing.
func TestDryRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(retention.New(), f.cb)
	old := f.finished("ns")
	f.age(old, 25*time.Hour)
	f.Do("ZADD", keys.FlowPart(part).LaneTerminal(lane), "1", "garbage")
	req := f.request(50, 0)
	req.DryRun = true
	res, o := f.scan(s, req)
	assert.Zero(t, o.Writes)
	assert.Equal(t, int64(1), o.Processed)
	assert.False(t, o.More)
	found := false
	for _, n := range res.Notes {
		found = found || strings.HasPrefix(n, fmt.Sprintf("would purge %s (", old))
	}
	assert.True(t, found, "%q", res.Notes)
	assert.Contains(t, res.Notes, fmt.Sprintf("would remove invalid member %q of %s", "garbage", keys.FlowPart(part).LaneTerminal(lane)))
	f.intact(old)
	assert.True(t, f.inTerminal("garbage"))
}

// A purge cut short after some keys were deleted, the core still there, is
// redone from the start; one cut short after the core leaves only index
// entries, which are removed.
func TestInterruptedPurgesResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(retention.New(), f.cb)
	half := f.finished("ns")
	extra := f.decorate(half)
	f.age(half, 25*time.Hour)
	f.Do("UNLINK", keys.Exec(half).Payload(), keys.Exec(half).Result(), extra[0])
	afterCore := f.finished("ns")
	f.age(afterCore, 25*time.Hour)
	for _, k := range f.keysOf(afterCore) {
		f.Do("UNLINK", k)
	}
	_, o := f.scan(s, f.request(50, 0))
	assert.Equal(t, int64(2), o.Processed)
	f.gone(half, extra)
	f.gone(afterCore, nil)
}

// The walk reads each entry between the two cutoffs once, a budget at a
// time, and says More until it has caught up: shorter overrides among them
// are purged as they are found, default ones are left to the head.
func TestWalkVisitsEachEntryOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := pluginhost.Linked(retention.New(), f.cb)
	require.NoError(t, s.Configure(f.Ctx, map[string]string{"lookahead": "3"}))
	var short, young []keys.ExecutionID
	for i := range 2 {
		id := f.finished("ns")
		f.override(id, 2*time.Hour)
		f.age(id, 3*time.Hour-time.Duration(i)*time.Minute)
		short = append(short, id)
	}
	for i := range 5 {
		id := f.finished("ns")
		f.age(id, 2*time.Hour-time.Duration(i)*time.Minute)
		young = append(young, id)
	}
	var processed []int64
	var more []bool
	var gets []int
	for range 4 {
		f.cb.mu.Lock()
		f.cb.gets = 0
		f.cb.mu.Unlock()
		_, o := f.scan(s, f.request(50, 0))
		processed = append(processed, o.Processed)
		more = append(more, o.More)
		f.cb.mu.Lock()
		gets = append(gets, f.cb.gets)
		f.cb.mu.Unlock()
	}
	assert.Equal(t, []int64{2, 0, 0, 0}, processed)
	assert.Equal(t, []bool{true, true, false, false}, more)
	assert.Equal(t, []int{3 + 2, 3, 1, 0}, gets, "3 walked (2 of them read again to purge), 3, 1, then nothing new")
	for _, id := range short {
		f.gone(id, nil)
	}
	for _, id := range young {
		f.intact(id)
	}
}

// modes are the linked scanner and the plugin binary, for scenarios that
// build their own requests.
func modes() []scannertest.Mode {
	return scannertest.Modes(pluginPkg, func(string) scannerapi.Scanner { return retention.New() })
}
