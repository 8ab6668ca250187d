package scheduler

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// swapTarget hands out leases; switchAfter calls into a cycle it starts
// handing out the next scanner, as a hot swap would.
type swapTarget struct {
	mu          sync.Mutex
	scanners    []*testScanner
	cur         int
	switchAfter int
	acquired    int
	outstanding atomic.Int64
	hosts       []scannerapi.Host
	fail        error
}

func (t *swapTarget) Current() (scannerapi.Scanner, scannerapi.Info, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.scanners[t.cur]
	return s, s.info, nil
}

func (t *swapTarget) Acquire() (Lease, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fail != nil {
		return Lease{}, t.fail
	}
	t.acquired++
	if t.switchAfter > 0 && t.acquired > t.switchAfter && t.cur+1 < len(t.scanners) {
		t.cur++
		t.switchAfter = 0
	}
	s := t.scanners[t.cur]
	t.outstanding.Add(1)
	var h scannerapi.Host
	if t.cur < len(t.hosts) {
		h = t.hosts[t.cur]
	}
	return Lease{Scanner: s, Info: s.info, Host: h, Release: func() { t.outstanding.Add(-1) }}, nil
}

// A swap in the middle of a cycle: the calls after the switch go to the
// new scanner with its own Host, no partition fails or is skipped, and
// every lease is released.
func TestLeasePerCallSwitchesMidCycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	oldS, newS := &testScanner{info: leaseInfo()}, &testScanner{info: leaseInfo()}
	var newHostCalls atomic.Int64
	newHost := scannerapi.HostFunc(func(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		newHostCalls.Add(1)
		return make([]scannerapi.Reply, len(cmds)), nil
	})
	newS.fn = func(ctx context.Context, h scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		_, err := h.Exec(ctx, []scannerapi.Command{{"ZREM", req.Candidates[0].Key, req.Candidates[0].Member}})
		return &scannerapi.ScanResult{Processed: 1}, err
	}
	tgt := &swapTarget{scanners: []*testScanner{oldS, newS}, switchAfter: 3, hosts: []scannerapi.Host{nil, newHost}}
	r := New(Config{Name: "lease", Partitions: keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}, Concurrency: 1, NoJitter: true, Client: e.client, Target: tgt})
	for p := range uint16(8) {
		e.do(t, "ZADD", leaseKey(p), "1000", "m")
	}
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, 8, sum.Scanned)
	assert.Zero(t, sum.Failed)
	assert.Zero(t, sum.Deferred)
	assert.Len(t, oldS.calls, 3)
	assert.Len(t, newS.calls, 5)
	assert.Equal(t, int64(5), newHostCalls.Load(), "the new instance's calls use its own Host")
	assert.Zero(t, tgt.outstanding.Load(), "every lease was released")
}

// When the new scanner's sources differ from those the cycle fetched
// with, its remaining partitions wait for the next cycle instead of
// receiving candidates of a source it may not know.
func TestLeaseWithOtherSourcesDefers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	oldS := &testScanner{info: leaseInfo()}
	ni := leaseInfo()
	ni.Sources = append(ni.Sources, scannerapi.CandidateSource{Name: "extra", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:extra"})
	newS := &testScanner{info: ni}
	tgt := &swapTarget{scanners: []*testScanner{oldS, newS}, switchAfter: 2}
	r := New(Config{Name: "lease", Partitions: keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}, Concurrency: 1, NoJitter: true, Client: e.client, Target: tgt})
	for p := range uint16(5) {
		e.do(t, "ZADD", leaseKey(p), "1000", "m")
	}
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, 2, sum.Scanned)
	assert.Equal(t, 3, sum.Deferred)
	assert.Zero(t, sum.Failed)
	assert.Empty(t, newS.calls)
	// The next cycle plans with the new Info and scans them.
	sum, err = r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, 5, sum.Scanned, "the unprocessed partitions are still due")
	assert.Len(t, newS.calls, 5)
	assert.Zero(t, tgt.outstanding.Load())
}

func TestLeaseUnavailableCountsAsFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	tgt := &swapTarget{scanners: []*testScanner{s}, fail: errors.New("plugin is not running")}
	r := New(Config{Name: "lease", Partitions: keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}, NoJitter: true, Client: e.client, Target: tgt})
	e.do(t, "ZADD", leaseKey(1), "1000", "m")
	sum, err := r.Cycle(context.Background(), CycleOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1, sum.Failed)
	assert.Equal(t, int64(1), sum.Errors[ErrorKey{scannerapi.ErrTransport, "plugin_unavailable"}])
	assert.Equal(t, int64(1), r.Status().Failed)
}

// Retune applies a new interval at once: a runner asleep for an hour
// wakes and runs its next cycle on the new schedule. The runner's clock is
// manual, so the test sees each sleep it plans instead of waiting on it.
func TestRetuneWakesTheSleep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := &testScanner{info: leaseInfo()}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	r := e.runner(t, s, Config{Interval: time.Hour, Clock: clk}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, r.Start(ctx))
	wait := func(within time.Duration) time.Duration {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		d, err := clk.WaitForTimerWithin(wctx, within)
		require.NoError(t, err, "the runner planned no sleep")
		return d
	}
	assert.Equal(t, time.Hour, wait(-1), "after cycle 1 it sleeps one interval")
	assert.Equal(t, uint64(1), r.Status().Cycle)
	clk.Advance(time.Minute)
	r.Retune(Tuning{Interval: 100 * time.Millisecond, Batch: 7})
	// Re-planned: cycle 1 started more than the new interval ago, so
	// cycle 2 runs at once, and the next sleep is the new interval.
	assert.Equal(t, 100*time.Millisecond, wait(100*time.Millisecond))
	assert.Equal(t, uint64(2), r.Status().Cycle)
	assert.Equal(t, 7, r.Tuning().Batch)
	assert.Equal(t, 8, r.Tuning().Concurrency, "zero keeps the default")
	cancel()
	<-r.Done()
}
