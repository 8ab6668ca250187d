package scheduler

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// On a cluster each master's partitions are read and called in a lane of
// their own: while one master's calls hang (as they do when it dies under
// them), every other master's partitions are called, and once those are
// done the sweep waits a straggler wait for the hanging lane and no
// longer. The lane goes on detached (no call started on it any more), its
// partitions are left alone by the next sweep while it runs, and what its
// calls did is counted when they end.
func TestDispatchDoesNotWaitForAStalledNode(t *testing.T) {
	t.Parallel()
	cl := testserver.NewCluster(t, 3)
	client := cl.Client(t)
	ctx := context.Background()
	e := &env{client: client, svc: callbacks.New(lua.New(client, lua.Options{}), nil)}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	nodes := NewNodeMap(client, clk, nil)
	require.NoError(t, nodes.Refresh(ctx))
	victim, err := cl.MasterOf(ctx, keys.Partition{Family: keys.FamilyFlow, Index: 0}.Tag())
	require.NoError(t, err)
	onVictim := map[uint16]bool{}
	for p := range uint16(16) {
		m, err := cl.MasterOf(ctx, keys.Partition{Family: keys.FamilyFlow, Index: p}.Tag())
		require.NoError(t, err)
		onVictim[p] = m == victim
		e.do(t, "ZADD", leaseKey(p), "1", "m"+strconv.Itoa(int(p)))
	}
	hung := 0
	for _, v := range onVictim {
		if v {
			hung++
		}
	}
	require.Greater(t, hung, 2, "the victim serves more partitions than it gets calls at once")

	release := make(chan struct{})
	ch := &service.Changes{}
	var mu sync.Mutex
	started := map[uint16]bool{}
	returned := 0
	s := &testScanner{info: leaseInfo(), fn: func(ctx context.Context, _ scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
		mu.Lock()
		started[req.Partition.Index] = true
		mu.Unlock()
		if onVictim[req.Partition.Index] {
			ch.Notify()
			<-release
		} else {
			mu.Lock()
			returned++
			mu.Unlock()
			ch.Notify()
		}
		return &scannerapi.ScanResult{Processed: int64(len(req.Candidates))}, nil
	}}
	// The healthy calls returned n in all, and the victim's calls in
	// flight started (v in all).
	progress := func(n, v int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			hanging := 0
			for p := range started {
				if onVictim[p] {
					hanging++
				}
			}
			return returned >= n && hanging >= v
		}
	}
	r := e.runner(t, s, Config{Clock: clk, Nodes: nodes, Concurrency: 2, Changes: ch}, nil)
	r.TestSignals.Straggling.Init()
	// waitStraggler waits until the dispatch waits for one node alone.
	waitStraggler := func(ctx context.Context) {
		for {
			n, err := r.TestSignals.Straggling.Wait(ctx)
			require.NoError(t, err)
			if n == 1 {
				return
			}
		}
	}
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		require.NoError(t, r.Stop(ctx))
	})

	type result struct {
		sum Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := r.Cycle(ctx, CycleOptions{})
		done <- result{sum, err}
	}()
	// The other masters' calls end; the dispatch then waits for the
	// victim's on a straggler timer, which the test lets pass.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, ch.WaitFor(wctx, progress(16-hung, 2)))
	waitStraggler(wctx)
	d, err := clk.WaitForTimer(wctx)
	require.NoError(t, err)
	assert.Equal(t, LaneStragglerWait, d)
	clk.Advance(d)
	var res result
	select {
	case res = <-done:
	case <-wctx.Done():
		t.Fatal("the cycle waited for the hanging node")
	}
	require.NoError(t, res.err)
	assert.Equal(t, 16-hung, res.sum.Scanned, "every other master's partition was called")
	assert.Equal(t, int64(16-hung), res.sum.Processed)
	assert.Equal(t, 1, res.sum.Detached, "the victim's lane goes on detached")
	mu.Lock()
	calledOnVictim := 0
	for p := range started {
		if onVictim[p] {
			calledOnVictim++
		}
	}
	mu.Unlock()
	assert.Equal(t, 2, calledOnVictim, "the victim's other partitions were not called")

	// The next sweep leaves the victim's partitions alone while its lane
	// runs, and waits for no one.
	res.sum, res.err = r.Cycle(ctx, CycleOptions{})
	require.NoError(t, res.err)
	assert.Equal(t, hung, res.sum.Busy)
	assert.Equal(t, 16-hung, res.sum.Scanned)
	assert.Zero(t, res.sum.Detached)

	// The hanging calls end: what they did is counted.
	close(release)
	require.NoError(t, ch.WaitFor(wctx, func() bool { return r.Status().Late == 1 }))
	st := r.Status()
	assert.Equal(t, int64(2*(16-hung)+2), st.Processed, "both sweeps' calls and the two late ones")
	mu.Lock()
	calledOnVictim = 0
	for p := range started {
		if onVictim[p] {
			calledOnVictim++
		}
	}
	mu.Unlock()
	assert.Equal(t, 2, calledOnVictim, "no call was started on the detached lane")
}
