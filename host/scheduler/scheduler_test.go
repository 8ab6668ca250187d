package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// testScanner is an in-process scanner that records its calls and runs a
// per-test function.
type testScanner struct {
	info scannerapi.Info
	fn   func(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error)

	mu       sync.Mutex
	calls    []*scannerapi.ScanRequest
	sampled  [][]keys.Partition
	sampleFn func(parts []keys.Partition) ([]int64, error)
}

func (s *testScanner) Info() scannerapi.Info                                 { return s.info }
func (s *testScanner) Configure(context.Context, map[string]string) error    { return nil }
func (s *testScanner) Current() (scannerapi.Scanner, scannerapi.Info, error) { return s, s.info, nil }

func (s *testScanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	s.mu.Lock()
	s.calls = append(s.calls, req)
	s.mu.Unlock()
	if s.fn == nil {
		return &scannerapi.ScanResult{Processed: int64(len(req.Candidates))}, nil
	}
	return s.fn(ctx, host, req)
}

func (s *testScanner) SampleBacklog(_ context.Context, _ scannerapi.Host, parts []keys.Partition) ([]int64, error) {
	s.mu.Lock()
	s.sampled = append(s.sampled, parts)
	s.mu.Unlock()
	if s.sampleFn == nil {
		return nil, nil
	}
	return s.sampleFn(parts)
}

func (s *testScanner) callsByPartition() map[uint16][]*scannerapi.ScanRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[uint16][]*scannerapi.ScanRequest{}
	for _, c := range s.calls {
		out[c.Partition.Index] = append(out[c.Partition.Index], c)
	}
	return out
}

// recRecorder records the gauges the runner writes.
type recRecorder struct {
	nopRecorder
	mu       sync.Mutex
	backlogs []int64
	lags     int
}

func (r *recRecorder) Backlog(_ string, v int64) {
	r.mu.Lock()
	r.backlogs = append(r.backlogs, v)
	r.mu.Unlock()
}

func (r *recRecorder) Lag(string, time.Duration) {
	r.mu.Lock()
	r.lags++
	r.mu.Unlock()
}

type env struct {
	addr   string
	client valkey.Client
	svc    *callbacks.Service
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := testserver.New(t)
	client := srv.Client(t)
	lib := lua.New(client, lua.Options{})
	return &env{addr: srv.Addr, client: client, svc: callbacks.New(lib, nil)}
}

func (e *env) runner(t *testing.T, s *testScanner, cfg Config, rec Recorder) *Runner {
	t.Helper()
	pol, _ := callbacks.PolicyFromInfo(s.info, false)
	e.svc.Register(s.info.Name, pol)
	if cfg.Name == "" {
		cfg.Name = s.info.Name
	}
	if cfg.Partitions == (keys.PartitionConfig{}) {
		cfg.Partitions = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}
	}
	if cfg.Lanes == nil {
		cfg.Lanes = []string{"default"}
	}
	cfg.NoJitter = true
	cfg.Client, cfg.Target, cfg.Host, cfg.Recorder = e.client, s, e.svc.HostFor(s.info.Name), rec
	return New(cfg)
}

func (e *env) do(t *testing.T, args ...string) {
	t.Helper()
	require.NoError(t, e.client.Do(context.Background(), e.client.B().Arbitrary(args[0]).Keys(args[1]).Args(args[2:]...).Build()).Error())
}

func leaseInfo() scannerapi.Info {
	return scannerapi.Info{
		Name: "lease", APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow, DefaultInterval: time.Second, DefaultBatch: 50,
		Sources:  []scannerapi.CandidateSource{{Name: "lease_expiry", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lease_expiry", Backlog: scannerapi.BacklogDue}},
		Commands: []string{"ZREM"},
	}
}

func leaseKey(p uint16) string {
	return keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: p}).LeaseExpiry()
}

func TestEmptyPartitionsCostNoCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	rec := &recRecorder{}
	r := e.runner(t, s, Config{}, rec)

	// Nothing anywhere: a full cycle calls the plugin zero times.
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, 16, sum.Empty)
	assert.Zero(t, sum.Scanned)
	assert.Empty(t, s.calls)
	assert.True(t, sum.BacklogKnown)
	assert.Zero(t, sum.Backlog)

	// Due items in partitions 3 and 7, a future one in 5.
	e.do(t, "ZADD", leaseKey(3), "1000", "a", "2000", "b")
	e.do(t, "ZADD", leaseKey(7), "1500", "c")
	e.do(t, "ZADD", leaseKey(5), strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), "later")
	sum, err = r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	calls := s.callsByPartition()
	require.Len(t, calls, 2, "only the partitions with due candidates are called")
	require.Len(t, calls[3], 1)
	require.Len(t, calls[7], 1)
	c3 := calls[3][0]
	assert.Equal(t, []scannerapi.Candidate{
		{Source: "lease_expiry", Key: leaseKey(3), Member: "a", Score: 1000},
		{Source: "lease_expiry", Key: leaseKey(3), Member: "b", Score: 2000},
	}, c3.Candidates)
	assert.Equal(t, "lease", c3.Scanner)
	assert.Equal(t, uint64(2), c3.Cycle, "the cycle number is passed")
	assert.Equal(t, 50, c3.Batch)
	assert.InDelta(t, time.Now().UnixMilli(), c3.NowMs, 60_000, "now is the server's clock in ms")
	assert.Equal(t, "c", calls[7][0].Candidates[0].Member)
	assert.Equal(t, 14, sum.Empty)
	assert.Equal(t, 2, sum.Scanned)
	assert.Equal(t, int64(3), sum.Processed)
	assert.Equal(t, int64(3), sum.Backlog, "due count only: the future item is not backlog")
	assert.True(t, sum.BacklogKnown)
	assert.Greater(t, sum.Lag, time.Hour, "oldest due item has score 1000 ms after the epoch")
	assert.Equal(t, []int64{0, 3}, rec.backlogs)
}

// A scanner that works through its candidates and says More while a full
// batch came back is called again in the same cycle until it is done.
func TestMoreTriggersPromptRescan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	s.fn = func(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		cmd := scannerapi.Command{"ZREM", leaseKey(req.Partition.Index)}
		for _, c := range req.Candidates {
			cmd = append(cmd, c.Member)
		}
		replies, err := host.Exec(ctx, []scannerapi.Command{cmd})
		if err != nil {
			return nil, err
		}
		return &scannerapi.ScanResult{Processed: replies[0].Int, More: len(req.Candidates) == req.Batch}, nil
	}
	r := e.runner(t, s, Config{Batch: 2}, nil)
	for i := range 5 {
		e.do(t, "ZADD", leaseKey(2), strconv.Itoa(100+i), "m"+strconv.Itoa(i))
	}
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(5), sum.Processed, "all five handled within one cycle")
	assert.Len(t, s.callsByPartition()[2], 3, "batches of 2, 2, 1")
	assert.GreaterOrEqual(t, sum.FollowUps, 2)
	n, err := e.client.Do(context.Background(), e.client.B().Zcard().Key(leaseKey(2)).Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// More is bounded: a scanner that always says More cannot hold the cycle.
func TestFollowUpsAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	s.fn = func(context.Context, scannerapi.Host, *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		return &scannerapi.ScanResult{More: true}, nil
	}
	r := e.runner(t, s, Config{MaxFollowUps: 3}, nil)
	e.do(t, "ZADD", leaseKey(1), "1", "stuck")
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Len(t, s.callsByPartition()[1], 4, "one scan plus three follow-ups")
	assert.Equal(t, 3, sum.FollowUps)
}

func TestFailingCallDoesNotStopOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	s.fn = func(ctx context.Context, _ scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		switch req.Partition.Index {
		case 1:
			return nil, errors.New("plugin exploded")
		case 2:
			<-ctx.Done() // hangs past the call deadline
			return nil, ctx.Err()
		}
		return &scannerapi.ScanResult{Processed: 1, Errors: []scannerapi.ErrorCount{{Class: scannerapi.ErrLua, Code: "execution_not_active", Count: 1}}}, nil
	}
	r := e.runner(t, s, Config{CallTimeout: 300 * time.Millisecond, Concurrency: 2}, nil)
	for _, p := range []uint16{1, 2, 3, 4, 5} {
		e.do(t, "ZADD", leaseKey(p), "1", "x")
	}
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, 3, sum.Scanned)
	assert.Equal(t, 2, sum.Failed)
	assert.Equal(t, int64(3), sum.Processed)
	assert.Equal(t, int64(1), sum.Errors[ErrorKey{scannerapi.ErrTransport, "rpc_error"}])
	assert.Equal(t, int64(1), sum.Errors[ErrorKey{scannerapi.ErrTransport, "rpc_timeout"}])
	assert.Equal(t, int64(3), sum.Errors[ErrorKey{scannerapi.ErrLua, "execution_not_active"}])
	assert.Contains(t, r.Status().LastError, "{fp:")
}

func TestRotateCursorAdvancesAndWraps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info := scannerapi.Info{
		Name: "rot", Family: keys.FamilyBudget, DefaultBatch: 2,
		Sources: []scannerapi.CandidateSource{{Name: "policies", Kind: scannerapi.SourceZSetRotate, Key: "ff:idx:{p}:rot", Backlog: scannerapi.BacklogSize}},
	}
	s := &testScanner{info: info}
	r := e.runner(t, s, Config{}, nil)
	for i := range 5 {
		e.do(t, "ZADD", "ff:idx:{b:1}:rot", strconv.Itoa(i), "m"+strconv.Itoa(i))
	}
	var windows [][]string
	for range 4 {
		sum, err := r.Cycle(context.Background(), CycleOptions{})
		require.NoError(t, err)
		assert.Equal(t, int64(5), sum.Backlog)
		calls := s.callsByPartition()[1]
		var w []string
		for _, c := range calls[len(calls)-1].Candidates {
			w = append(w, c.Member)
		}
		windows = append(windows, w)
	}
	assert.Equal(t, [][]string{{"m0", "m1"}, {"m2", "m3"}, {"m4"}, {"m0", "m1"}}, windows)
}

func TestSetScanCursorAdvancesAndWraps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info := scannerapi.Info{
		Name: "scan", Family: keys.FamilyQuota, DefaultBatch: 10,
		Sources: []scannerapi.CandidateSource{{Name: "policies", Kind: scannerapi.SourceSetScan, Key: "ff:idx:{p}:quota_policies", Backlog: scannerapi.BacklogSize}},
	}
	s := &testScanner{info: info}
	r := e.runner(t, s, Config{}, nil)
	key := keys.QuotaPart(keys.Partition{Family: keys.FamilyQuota, Index: 2}).QuotaPolicies()
	const total = 300 // large enough for a hashtable encoding, so SSCAN pages
	args := []string{"SADD", key}
	for i := range total {
		args = append(args, fmt.Sprintf("quota-%03d", i))
	}
	e.do(t, args...)

	seen := map[string]bool{}
	cycles := 0
	for len(seen) < total && cycles < 200 {
		sum, err := r.Cycle(context.Background(), CycleOptions{})
		require.NoError(t, err)
		assert.Equal(t, int64(total), sum.Backlog)
		cycles++
		calls := s.callsByPartition()[2]
		for _, c := range calls[len(calls)-1].Candidates {
			seen[c.Member] = true
		}
	}
	assert.Len(t, seen, total, "every member visited over successive cycles")
	assert.Greater(t, cycles, 5, "one SSCAN step per cycle, not the whole set at once")
	// After the wrap the scan starts over.
	cur := r.cursors.get(key)
	for cur != 0 && cycles < 400 {
		_, err := r.Cycle(context.Background(), CycleOptions{})
		require.NoError(t, err)
		cycles++
		cur = r.cursors.get(key)
	}
	assert.Zero(t, cur, "the cursor wrapped back to 0")
}

func TestLaneSourcesReadEveryLane(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info := scannerapi.Info{
		Name: "lanes", Family: keys.FamilyFlow, DefaultBatch: 10,
		Sources: []scannerapi.CandidateSource{{Name: "delayed", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lane:{lane}:delayed"}},
	}
	s := &testScanner{info: info}
	r := e.runner(t, s, Config{Lanes: []string{"default", "gpu"}}, nil)
	fp := keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: 4})
	e.do(t, "ZADD", fp.LaneDelayed("default"), "1", "x")
	e.do(t, "ZADD", fp.LaneDelayed("gpu"), "2", "y")
	_, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	calls := s.callsByPartition()[4]
	require.Len(t, calls, 1)
	lanes := map[string]string{}
	for _, c := range calls[0].Candidates {
		lanes[c.Member] = c.Lane
	}
	assert.Equal(t, map[string]string{"x": "default", "y": "gpu"}, lanes)
	assert.Equal(t, []string{"default", "gpu"}, calls[0].Lanes)
}

// P8: a partition that could not be sampled leaves the gauge alone instead
// of writing a partial sum. The failure here: the host's Valkey user may
// not read partition 0's keys (NOPERM), an error that says nothing about
// the data.
func TestBacklogNotWrittenWhenAPartitionFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do(t, "ACL", "SETUSER", "partial", "on", "nopass", "+@all", "~ff:idx:{fp:[1-9]*")
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{e.addr}, Username: "partial", ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	s := &testScanner{info: leaseInfo()}
	rec := &recRecorder{}
	r := e.runner(t, s, Config{}, rec)
	r.client = client
	e.do(t, "ZADD", leaseKey(0), "1", "w")
	e.do(t, "ZADD", leaseKey(9), "1", "x")
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.False(t, sum.BacklogKnown)
	assert.Empty(t, rec.backlogs, "gauge untouched")
	assert.Zero(t, rec.lags, "lag untouched as well")
	assert.Equal(t, int64(1), sum.Errors[ErrorKey{scannerapi.ErrServer, "fetch"}], "%v", sum.Errors)
	assert.Equal(t, 1, sum.Scanned, "the healthy partition was still scanned")
	assert.Equal(t, 1, sum.Failed)
}

// A source key holding another type (corrupt data no retry fixes) is
// counted as class invalid and skipped as empty: it does not freeze the
// scanner's backlog and lag gauges, which go on measuring the rest.
func TestWrongTypeSourceKeyDoesNotFreezeTheGauges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	rec := &recRecorder{}
	r := e.runner(t, s, Config{}, rec)
	e.do(t, "SET", leaseKey(0), "wrong type")
	e.do(t, "ZADD", leaseKey(9), "1", "x")
	e.do(t, "ZADD", leaseKey(3), "2", "y")
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.True(t, sum.BacklogKnown)
	assert.Equal(t, int64(2), sum.Backlog)
	assert.Equal(t, []int64{2}, rec.backlogs)
	assert.Equal(t, 1, rec.lags, "the lag gauge is written")
	assert.Equal(t, int64(1), sum.Errors[ErrorKey{scannerapi.ErrInvalid, "wrong_type_source"}], "%v", sum.Errors)
	assert.Zero(t, sum.Errors[ErrorKey{scannerapi.ErrServer, "fetch"}])
	assert.Equal(t, 2, sum.Scanned)
	assert.Contains(t, r.Status().LastError, leaseKey(0))
}

func TestPluginBacklogSampledInOneCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info := scannerapi.Info{
		Name: "pb", Family: keys.FamilyBudget, DefaultBatch: 10,
		Sources: []scannerapi.CandidateSource{{Name: "resets", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:budget_resets", Backlog: scannerapi.BacklogPlugin}},
	}
	s := &testScanner{info: info}
	s.fn = func(context.Context, scannerapi.Host, *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		return &scannerapi.ScanResult{Backlog: 100, HasBacklog: true}, nil
	}
	s.sampleFn = func(parts []keys.Partition) ([]int64, error) {
		out := make([]int64, len(parts))
		for i := range out {
			out[i] = 1
		}
		return out, nil
	}
	rec := &recRecorder{}
	r := e.runner(t, s, Config{}, rec)
	e.do(t, "ZADD", keys.BudgetPart(keys.Partition{Family: keys.FamilyBudget, Index: 2}).BudgetResets(), "1", "b")
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	require.Len(t, s.sampled, 1, "one batched call")
	var asked []int
	for _, p := range s.sampled[0] {
		asked = append(asked, int(p.Index))
	}
	sort.Ints(asked)
	assert.Equal(t, []int{0, 1, 3}, asked, "partition 2 reported its own backlog in the scan result")
	assert.Equal(t, int64(103), sum.Backlog)
	assert.Equal(t, []int64{103}, rec.backlogs)
}

func TestScanOnePartitionAndDryRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	rec := &recRecorder{}
	r := e.runner(t, s, Config{}, rec)
	e.do(t, "ZADD", leaseKey(3), "1", "a")
	e.do(t, "ZADD", leaseKey(4), "1", "b")
	sum, err := r.Cycle(context.Background(), CycleOptions{Partitions: []uint16{4}, DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, 1, sum.Partitions)
	calls := s.callsByPartition()
	require.Len(t, calls, 1)
	assert.True(t, calls[4][0].DryRun)
	assert.False(t, sum.BacklogKnown, "one partition is not the whole family")
	assert.Empty(t, rec.backlogs)
	_, err = r.Cycle(context.Background(), CycleOptions{Partitions: []uint16{16}})
	assert.Error(t, err, "out of range")
}

func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	r := e.runner(t, s, Config{Interval: 100 * time.Millisecond, Clock: clk}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, r.Start(ctx))
	// The start delay, then a sleep after each cycle: each is a timer the
	// test lets pass.
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	for r.Status().Cycle < 3 {
		d, err := clk.WaitForTimer(wctx)
		require.NoError(t, err, "the runner planned no sleep")
		clk.Advance(d)
	}
	cancel()
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sweep did not return after cancel")
	}
	require.NoError(t, r.Stop(context.Background()))
}

func TestCheckInfo(t *testing.T) {
	t.Parallel()
	ok := leaseInfo()
	require.NoError(t, CheckInfo(ok))
	bad := func(mut func(*scannerapi.Info)) error {
		i := leaseInfo()
		i.Sources = append([]scannerapi.CandidateSource{}, i.Sources...)
		mut(&i)
		return CheckInfo(i)
	}
	assert.ErrorContains(t, bad(func(i *scannerapi.Info) { i.Sources[0].Key = "other:{p}" }), "must start with")
	assert.ErrorContains(t, bad(func(i *scannerapi.Info) { i.Sources[0].Key = "ff:idx:x" }), "{p}")
	assert.ErrorContains(t, bad(func(i *scannerapi.Info) { i.Sources[0].Kind = "list" }), "unknown kind")
	assert.ErrorContains(t, bad(func(i *scannerapi.Info) { i.Family = 0 }), "family")
	assert.ErrorContains(t, bad(func(i *scannerapi.Info) {
		i.Sources[0].Kind, i.Sources[0].Backlog = scannerapi.SourceSetScan, scannerapi.BacklogDue
	}), "needs a zset source")
}

// Against a real 3-master cluster: the pipelined fetch spans slots and
// nodes, and the scanner's writes and FCALLs route through the callback
// service to the right node.
func TestClusterCycle(t *testing.T) {
	t.Parallel()
	cl := testserver.NewCluster(t, 3)
	client := cl.Client(t)
	lib := lua.New(client, lua.Options{})
	_, err := lib.Ensure(context.Background())
	require.NoError(t, err)
	e := &env{client: client, svc: callbacks.New(lib, nil)}
	info := leaseInfo()
	info.Functions = []string{"ff_version"}
	s := &testScanner{info: info}
	s.fn = func(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		cmds := []scannerapi.Command{{"FCALL", "ff_version", "1", leaseKey(req.Partition.Index)}}
		for _, c := range req.Candidates {
			cmds = append(cmds, scannerapi.Command{"ZREM", c.Key, c.Member})
		}
		replies, err := host.Exec(ctx, cmds)
		if err != nil {
			return nil, err
		}
		if replies[0].Str != "34" {
			return nil, fmt.Errorf("ff_version: %+v", replies[0])
		}
		res := &scannerapi.ScanResult{}
		for _, r := range replies[1:] {
			res.Processed += r.Int
		}
		return res, nil
	}
	r := e.runner(t, s, Config{}, nil)
	for p := range uint16(16) {
		e.do(t, "ZADD", leaseKey(p), "1", "m"+strconv.Itoa(int(p)))
	}
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, 16, sum.Scanned)
	assert.Equal(t, int64(16), sum.Processed)
	assert.Empty(t, sum.Errors)
	assert.True(t, sum.BacklogKnown)
	assert.Equal(t, int64(16), sum.Backlog)
}

// Lanes are asked for at every cycle, so a lane added after boot is read.
func TestLanesFuncIsReadEachCycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info := scannerapi.Info{
		Name: "lanes", Family: keys.FamilyFlow, DefaultBatch: 10,
		Sources: []scannerapi.CandidateSource{{Name: "delayed", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lane:{lane}:delayed"}},
	}
	s := &testScanner{info: info}
	lanes := []string{"default"}
	r := e.runner(t, s, Config{LanesFunc: func() []string { return lanes }}, nil)
	fp := keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: 1})
	e.do(t, "ZADD", fp.LaneDelayed("new"), "1", "x")
	_, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Empty(t, s.callsByPartition(), "lane not known yet")
	lanes = []string{"default", "new"}
	_, err = r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	require.Len(t, s.callsByPartition()[1], 1)
	assert.Equal(t, "new", s.callsByPartition()[1][0].Candidates[0].Lane)
}

// Entries a scan reports settled (handled, left in the index for another
// actor) leave the backlog, and a scan's own lag replaces the oldest
// candidate's: a drain that is done does not look like a stall.
func TestSettledEntriesLeaveBacklogAndLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	s.fn = func(_ context.Context, _ scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		switch req.Partition.Index {
		case 2: // everything settled
			return &scannerapi.ScanResult{Settled: int64(len(req.Candidates)), HasLag: true}, nil
		case 5: // one of three settled; the oldest pending was due 7 s ago
			return &scannerapi.ScanResult{Processed: 2, Settled: 1, Lag: 7 * time.Second, HasLag: true}, nil
		}
		return &scannerapi.ScanResult{}, nil
	}
	rec := &recRecorder{}
	r := e.runner(t, s, Config{}, rec)
	for i := range 4 {
		e.do(t, "ZADD", leaseKey(2), "1000", fmt.Sprint("old", i)) // due since 1970
	}
	for i := range 3 {
		e.do(t, "ZADD", leaseKey(5), "2000", fmt.Sprint("x", i))
	}
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	require.True(t, sum.BacklogKnown)
	assert.Equal(t, int64(2), sum.Backlog, "7 due, 5 settled")
	assert.Equal(t, 7*time.Second, sum.Lag, "not the decades of the settled entries")

	// A scanner that reports nothing keeps the host's own samples.
	s.fn = nil
	sum, err = r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(7), sum.Backlog)
	assert.Greater(t, sum.Lag, time.Hour)
}

// fakeCensus knows the lane keys it was given.
type fakeCensus struct {
	keys  map[string][]string
	known bool
}

func (f *fakeCensus) Keys(tag string) ([]string, bool) { return f.keys[tag], f.known }

// With a census that knows the partition, a lane-scoped source reads
// only the lanes whose key exists, and only lanes the host knows;
// without one (or while it does not know), every lane's key.
func TestCensusNarrowsLaneReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info := scannerapi.Info{
		Name: "lanes", Family: keys.FamilyFlow, DefaultBatch: 10,
		Sources: []scannerapi.CandidateSource{
			{Name: "delayed", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lane:{lane}:delayed"},
			{Name: "lease", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lease_expiry"},
		},
	}
	lanes := make([]string, 300)
	for i := range lanes {
		lanes[i] = fmt.Sprintf("l%d", i)
	}
	fp := keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: 4})
	cen := &fakeCensus{known: true, keys: map[string][]string{
		"{fp:4}": {fp.LaneDelayed("l7"), fp.LaneEligible("l7"), fp.LaneDelayed("unknown-lane")},
	}}
	s := &testScanner{info: info}
	r := e.runner(t, s, Config{Lanes: lanes, Census: cen}, nil)
	e.do(t, "ZADD", fp.LaneDelayed("l7"), "1", "x")
	e.do(t, "ZADD", fp.LaneDelayed("unknown-lane"), "1", "u")
	e.do(t, "ZADD", fp.LeaseExpiry(), "1", "l")
	// A key the census has not seen yet is not read this cycle.
	e.do(t, "ZADD", fp.LaneDelayed("l9"), "1", "y")

	before := commandCalls(t, e)
	_, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	narrowed := sumCalls(diffCalls(before, commandCalls(t, e)))
	calls := s.callsByPartition()[4]
	require.Len(t, calls, 1)
	var members []string
	for _, c := range calls[0].Candidates {
		members = append(members, c.Member)
	}
	assert.ElementsMatch(t, []string{"x", "l"}, members)

	// Once the census does not know, every lane is read again.
	cen.known = false
	before = commandCalls(t, e)
	_, err = r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	full := sumCalls(diffCalls(before, commandCalls(t, e)))
	calls = s.callsByPartition()[4]
	require.Len(t, calls, 2)
	members = nil
	for _, c := range calls[1].Candidates {
		members = append(members, c.Member)
	}
	assert.ElementsMatch(t, []string{"x", "y", "l"}, members)
	assert.Less(t, narrowed*10, full, "the census saves the reads of the empty lanes (%d vs %d commands)", narrowed, full)
}

// sumCalls totals per-command call counts.
func sumCalls(calls map[string]int64) int64 {
	var n int64
	for _, v := range calls {
		n += v
	}
	return n
}
