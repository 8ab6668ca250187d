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

func TestConfig(t *testing.T) {
	assert.NoError(t, Config{}.Validate())
	assert.NoError(t, Config{Enabled: true, Concurrency: 4, QueueSize: 10}.Validate())
	assert.Error(t, Config{Concurrency: -1}.Validate())
	assert.Error(t, Config{QueueSize: -1}.Validate())
	assert.Error(t, Config{DispatchTimeout: -time.Second}.Validate())
	assert.Error(t, Config{MinBackoff: 10 * time.Second, MaxBackoff: time.Second}.Validate())
	d := Config{}.withDefaults()
	assert.Equal(t, DefaultConcurrency, d.Concurrency)
	assert.Equal(t, DefaultQueueSize, d.QueueSize)
}

// harness is a server, a listener whose cascade is replaced by fn, and a
// client to publish with.
type harness struct {
	vk  valkey.Client
	l   *Listener
	ctx context.Context
}

func newHarness(t *testing.T, cfg Config, fn func(context.Context, depresolve.Completion) (depresolve.Result, error)) *harness {
	t.Helper()
	return newOwningHarness(t, cfg, nil, fn)
}

func newOwningHarness(t *testing.T, cfg Config, owns func(keys.Partition) bool, fn func(context.Context, depresolve.Completion) (depresolve.Result, error)) *harness {
	t.Helper()
	srv := testserver.New(t)
	vk := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cfg.Enabled = true
	l := New(cfg, lua.New(vk, lua.Options{}), Options{Partitions: parts, Owns: owns})
	l.cascade = fn
	require.NoError(t, l.Start(ctx))
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	require.Eventually(t, l.Subscribed, 10*time.Second, 5*time.Millisecond)
	return &harness{vk: vk, l: l, ctx: ctx}
}

func (h *harness) publish(t *testing.T, payload string) {
	t.Helper()
	n, err := h.vk.Do(h.ctx, h.vk.B().Publish().Channel(keys.DagCompletionsChannel).Message(payload).Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "one subscriber")
}

// A panic in a dispatch is recovered and counted; the worker goes on.
func TestDispatchPanicIsRecovered(t *testing.T) {
	var calls atomic.Int64
	h := newHarness(t, Config{Concurrency: 1}, func(context.Context, depresolve.Completion) (depresolve.Result, error) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return depresolve.Result{Resolved: 1}, nil
	})
	h.publish(t, message(t))
	h.publish(t, message(t))
	require.Eventually(t, func() bool { return h.l.Stats().Dispatched == 1 }, 5*time.Second, 5*time.Millisecond)
	st := h.l.Stats()
	assert.Equal(t, int64(1), st.Panics)
	assert.Equal(t, int64(1), st.Resolved)
	assert.Equal(t, int64(2), st.Accepted)
	assert.True(t, st.Subscribed)
}

// No more than Concurrency cascades run at once; the rest wait in the
// queue and all get dispatched.
func TestConcurrencyIsBounded(t *testing.T) {
	var inflight, peak atomic.Int64
	release := make(chan struct{})
	h := newHarness(t, Config{Concurrency: 3}, func(ctx context.Context, _ depresolve.Completion) (depresolve.Result, error) {
		n := inflight.Add(1)
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
	require.Eventually(t, func() bool { return inflight.Load() == 3 && h.l.Stats().Accepted == 10 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, int64(3), peak.Load())
	close(release)
	require.Eventually(t, func() bool { return h.l.Stats().Dispatched == 10 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(3), peak.Load())
}

// Stop drains what it can before its deadline, then cancels in-flight
// cascades, drops what is left and returns the deadline error; the
// subscription is gone.
func TestStopDrainsThenCancels(t *testing.T) {
	var mu sync.Mutex
	var cancelled int
	var started atomic.Int64
	h := newHarness(t, Config{Concurrency: 1}, func(ctx context.Context, _ depresolve.Completion) (depresolve.Result, error) {
		started.Add(1)
		<-ctx.Done()
		mu.Lock()
		cancelled++
		mu.Unlock()
		return depresolve.Result{}, ctx.Err()
	})
	for range 3 {
		h.publish(t, message(t))
	}
	require.Eventually(t, func() bool { return h.l.Stats().Accepted == 3 && started.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
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
	srv := testserver.New(t)
	vk := srv.Client(t)
	l := New(Config{Enabled: false}, lua.New(vk, lua.Options{}), Options{})
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
	h := newHarness(t, Config{}, func(context.Context, depresolve.Completion) (depresolve.Result, error) {
		return depresolve.Result{}, nil
	})
	assert.Error(t, h.l.Start(h.ctx))
}

// With the server gone the receiver keeps retrying (with backoff) without
// spinning or failing, and Stop still returns at once.
func TestServerGoneThenStop(t *testing.T) {
	srv := testserver.New(t)
	vk := srv.Client(t)
	l := New(Config{Enabled: true, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		lua.New(vk, lua.Options{}), Options{})
	require.NoError(t, l.Start(context.Background()))
	require.Eventually(t, l.Subscribed, 10*time.Second, 5*time.Millisecond)
	srv.Kill()
	require.Eventually(t, func() bool { return !l.Subscribed() }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // several failed reconnects
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
	var calls atomic.Int64
	mine := true
	var mu sync.Mutex
	owns := func(keys.Partition) bool { mu.Lock(); defer mu.Unlock(); return mine }
	h := newOwningHarness(t, Config{Concurrency: 1}, owns, func(context.Context, depresolve.Completion) (depresolve.Result, error) {
		calls.Add(1)
		return depresolve.Result{}, nil
	})
	h.publish(t, message(t))
	require.Eventually(t, func() bool { return h.l.Stats().Dispatched == 1 }, 5*time.Second, 5*time.Millisecond)
	mu.Lock()
	mine = false
	mu.Unlock()
	h.publish(t, message(t))
	h.publish(t, message(t))
	require.Eventually(t, func() bool { return h.l.Stats().Messages == 3 }, 5*time.Second, 5*time.Millisecond)
	st := h.l.Stats()
	assert.Equal(t, int64(1), st.Accepted, "the other host's completions are not taken")
	assert.Equal(t, int64(1), calls.Load())
}
