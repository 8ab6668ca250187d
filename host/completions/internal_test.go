package completions

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/service/servicetest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/testserver"
)

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// message builds a valid completion message of a fresh flow member.
func message(t *testing.T) string {
	t.Helper()
	fid := keys.NewFlowID()
	eid := keys.ExecutionIDForFlow(parts, fid, keys.NewUUID())
	b, err := json.Marshal(map[string]string{"execution_id": eid.String(), "flow_id": fid.String(), "outcome": "success"})
	require.NoError(t, err)
	return string(b)
}

func TestParseIsStrict(t *testing.T) {
	l := &Listener{parts: parts}
	fid := keys.NewFlowID()
	eid := keys.ExecutionIDForFlow(parts, fid, keys.NewUUID())
	other := keys.ExecutionIDForFlow(parts, fid, keys.NewUUID())
	wrongPart, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: (eid.Partition().Index + 1) % parts.Flow}, keys.NewUUID())
	require.NoError(t, err)
	ok := func(payload string) valkey.PubSubMessage {
		return valkey.PubSubMessage{Channel: keys.DagCompletionsChannel, Message: payload}
	}
	c, err := l.parse(ok(`{"execution_id":"` + eid.String() + `","flow_id":"` + fid.String() + `","outcome":"failed"}`))
	require.NoError(t, err)
	assert.Equal(t, depresolve.Completion{Execution: eid, Flow: fid, Outcome: "failed"}, c)
	_, err = l.parse(ok(`{"flow_id":"` + fid.String() + `","execution_id":"` + other.String() + `"}`))
	assert.NoError(t, err, "outcome is optional, key order free")

	for name, m := range map[string]valkey.PubSubMessage{
		"not json":          ok("garbage"),
		"empty":             ok(""),
		"array":             ok(`["x"]`),
		"trailing garbage":  ok(`{"execution_id":"` + eid.String() + `","flow_id":"` + fid.String() + `"} x`),
		"bare uuid eid":     ok(`{"execution_id":"` + eid.UUID().String() + `","flow_id":"` + fid.String() + `"}`),
		"non-canonical eid": ok(`{"execution_id":"{fp:0` + eid.String()[4:] + `","flow_id":"` + fid.String() + `"}`),
		"missing flow":      ok(`{"execution_id":"` + eid.String() + `"}`),
		"bad flow":          ok(`{"execution_id":"` + eid.String() + `","flow_id":"nope"}`),
		"wrong partition":   ok(`{"execution_id":"` + wrongPart.String() + `","flow_id":"` + fid.String() + `"}`),
		"other channel":     {Channel: "ff:other", Message: `{"execution_id":"` + eid.String() + `","flow_id":"` + fid.String() + `"}`},
	} {
		_, err := l.parse(m)
		assert.Error(t, err, name)
	}
}

// The operator's bounds are the configuration's to check (host/config);
// the listener fills what is unset and keeps its backoff range in order.
func TestConfig(t *testing.T) {
	d := Config{}.withDefaults()
	assert.Equal(t, DefaultConcurrency, d.Concurrency)
	assert.Equal(t, DefaultQueueSize, d.QueueSize)
	assert.Equal(t, DefaultDispatchTimeout, d.DispatchTimeout)
	assert.Equal(t, DefaultMinBackoff, d.MinBackoff)
	assert.Equal(t, DefaultMaxBackoff, d.MaxBackoff)
	assert.NotNil(t, d.Clock)
	d = Config{Concurrency: -1, QueueSize: -1, DispatchTimeout: -time.Second}.withDefaults()
	assert.Equal(t, DefaultConcurrency, d.Concurrency)
	assert.Equal(t, DefaultQueueSize, d.QueueSize)
	assert.Equal(t, DefaultDispatchTimeout, d.DispatchTimeout)
	d = Config{Enabled: true, Concurrency: 4, QueueSize: 10, MinBackoff: 10 * time.Second, MaxBackoff: time.Second}.withDefaults()
	assert.Equal(t, 4, d.Concurrency)
	assert.Equal(t, 10, d.QueueSize)
	assert.Equal(t, 10*time.Second, d.MaxBackoff, "never below the minimum")
}

// harness is a server, a listener whose cascade is replaced by fn, and a
// client to publish with.
type harness struct {
	vk  valkey.Client
	l   *Listener
	ctx context.Context
	ch  *service.Changes
}

func (h *harness) wait(t *testing.T, cond func() bool) {
	t.Helper()
	servicetest.WaitFor(t, h.ch, 0, cond)
}

func newHarness(t *testing.T, cfg Config, fn func(context.Context, depresolve.Completion) (depresolve.Result, error)) *harness {
	t.Helper()
	return newOwningHarness(t, cfg, nil, &service.Changes{}, fn)
}

// newOwningHarness is newHarness with an ownership check, told of the
// listener's changes on ch (which fn may notify too).
func newOwningHarness(t *testing.T, cfg Config, owns func(keys.Partition) bool, ch *service.Changes, fn func(context.Context, depresolve.Completion) (depresolve.Result, error)) *harness {
	t.Helper()
	srv := testserver.New(t)
	vk := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cfg.Enabled = true
	cfg.Library, cfg.Partitions, cfg.Owns, cfg.Changes = lua.New(vk, lua.Options{}), parts, owns, ch
	l := New(cfg)
	l.cascade = func(ctx context.Context, c depresolve.Completion) (depresolve.Result, error) {
		defer ch.Notify() // the test's own counters change in fn
		return fn(ctx, c)
	}
	require.NoError(t, l.Start(ctx))
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	servicetest.WaitFor(t, ch, 0, l.Subscribed)
	return &harness{vk: vk, l: l, ctx: ctx, ch: ch}
}

func (h *harness) publish(t *testing.T, payload string) {
	t.Helper()
	n, err := h.vk.Do(h.ctx, h.vk.B().Publish().Channel(keys.DagCompletionsChannel).Message(payload).Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "one subscriber")
}

// A panic in a dispatch is recovered and counted; the worker goes on.
func TestDispatchPanicIsRecovered(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	h := newHarness(t, Config{Concurrency: 1}, func(context.Context, depresolve.Completion) (depresolve.Result, error) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return depresolve.Result{Resolved: 1}, nil
	})
	h.publish(t, message(t))
	h.publish(t, message(t))
	// Both accepted (counted just after a worker may have taken one) and
	// the second dispatched.
	h.wait(t, func() bool { st := h.l.Stats(); return st.Dispatched == 1 && st.Accepted == 2 })
	st := h.l.Stats()
	assert.Equal(t, int64(1), st.Panics)
	assert.Equal(t, int64(1), st.Resolved)
	assert.True(t, st.Subscribed)
}

// No more than Concurrency cascades run at once; the rest wait in the
// queue and all get dispatched.
func TestConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	var inflight, peak atomic.Int64
	release := make(chan struct{})
	ch := &service.Changes{}
	h := newOwningHarness(t, Config{Concurrency: 3}, nil, ch, func(ctx context.Context, _ depresolve.Completion) (depresolve.Result, error) {
		n := inflight.Add(1)
		ch.Notify()
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inflight.Add(-1)
		return depresolve.Result{}, nil
	})
	for range 10 {
		h.publish(t, message(t))
	}
	h.wait(t, func() bool { return inflight.Load() == 3 && h.l.Stats().Accepted == 10 })
	// Every worker is busy: the other seven wait in the queue.
	assert.Len(t, h.l.queue, 7)
	assert.Equal(t, int64(3), peak.Load())
	close(release)
	h.wait(t, func() bool { return h.l.Stats().Dispatched == 10 })
	assert.Equal(t, int64(3), peak.Load())
}

// Stop drains what it can before its deadline, then cancels in-flight
// cascades, drops what is left and returns the deadline error; the
// subscription is gone.
func TestStopDrainsThenCancels(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var cancelled int
	var started atomic.Int64
	ch := &service.Changes{}
	h := newOwningHarness(t, Config{Concurrency: 1}, nil, ch, func(ctx context.Context, _ depresolve.Completion) (depresolve.Result, error) {
		started.Add(1)
		ch.Notify()
		<-ctx.Done()
		mu.Lock()
		cancelled++
		mu.Unlock()
		return depresolve.Result{}, ctx.Err()
	})
	for range 3 {
		h.publish(t, message(t))
	}
	h.wait(t, func() bool { return h.l.Stats().Accepted == 3 && started.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := h.l.Stop(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	// The alternative is waiting for a cascade that never ends.
	assert.Less(t, time.Since(t0), 10*time.Second)
	st := h.l.Stats()
	assert.Equal(t, int64(1), st.Dispatched, "the one in flight was cancelled")
	assert.Equal(t, int64(1), st.Failed)
	assert.Equal(t, int64(2), st.Dropped, "the queued ones left to the reconciler")
	assert.False(t, h.l.Subscribed())
	mu.Lock()
	assert.Equal(t, 1, cancelled)
	mu.Unlock()
	assert.Equal(t, err, h.l.Stop(context.Background()), "Stop is idempotent")
	n, perr := h.vk.Do(h.ctx, h.vk.B().Publish().Channel(keys.DagCompletionsChannel).Message("x").Build()).AsInt64()
	require.NoError(t, perr)
	assert.Zero(t, n, "unsubscribed")
}

// A disabled listener does nothing.
func TestDisabled(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	vk := srv.Client(t)
	l := New(Config{Enabled: false, Library: lua.New(vk, lua.Options{})})
	require.NoError(t, l.Start(context.Background()))
	assert.False(t, l.Enabled())
	assert.False(t, l.Subscribed())
	assert.NoError(t, l.Stop(context.Background()))
	n, err := vk.Do(context.Background(), vk.B().Publish().Channel(keys.DagCompletionsChannel).Message("x").Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// A second Start is refused.
func TestStartTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(context.Context, depresolve.Completion) (depresolve.Result, error) {
		return depresolve.Result{}, nil
	})
	assert.ErrorIs(t, h.l.Start(h.ctx), service.ErrStarted)
}

// With the server gone the receiver keeps retrying (with backoff, on its
// clock) without spinning or failing, and Stop still returns at once.
func TestServerGoneThenStop(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	vk := srv.Client(t)
	ch := &service.Changes{}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	l := New(Config{Enabled: true, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Clock: clk,
		Library: lua.New(vk, lua.Options{}), Changes: ch})
	require.NoError(t, l.Start(context.Background()))
	servicetest.WaitFor(t, ch, 0, l.Subscribed)
	srv.Kill()
	servicetest.WaitFor(t, ch, 0, func() bool { return !l.Subscribed() })
	// Several failed reconnects, each after its backoff on the clock.
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	for range 4 {
		d, err := clk.WaitForTimer(wctx)
		require.NoError(t, err, "the receiver planned no backoff")
		assert.LessOrEqual(t, d, 50*time.Millisecond, "within the backoff's bounds")
		clk.Advance(d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	require.NoError(t, l.Stop(ctx))
	// Stopped without waiting out its context (5 s) in a reconnect loop.
	assert.Less(t, time.Since(t0), 4*time.Second)
	assert.Zero(t, l.Stats().Reconnects)
	assert.Zero(t, l.Stats().Panics)
}

// With partitions shared among hosts, a completion of a partition another
// host owns is left to it; one of this host's is dispatched.
func TestOnlyOwnedPartitionsAreDispatched(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	mine := true
	var mu sync.Mutex
	owns := func(keys.Partition) bool { mu.Lock(); defer mu.Unlock(); return mine }
	h := newOwningHarness(t, Config{Concurrency: 1}, owns, &service.Changes{}, func(context.Context, depresolve.Completion) (depresolve.Result, error) {
		calls.Add(1)
		return depresolve.Result{}, nil
	})
	h.publish(t, message(t))
	h.wait(t, func() bool { return h.l.Stats().Dispatched == 1 })
	mu.Lock()
	mine = false
	mu.Unlock()
	h.publish(t, message(t))
	h.publish(t, message(t))
	h.wait(t, func() bool { return h.l.Stats().Messages == 3 })
	st := h.l.Stats()
	assert.Equal(t, int64(1), st.Accepted, "the other host's completions are not taken")
	assert.Equal(t, int64(1), calls.Load())
}
