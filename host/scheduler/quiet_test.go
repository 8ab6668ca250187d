package scheduler

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/keyevents"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// quietEnv is a server that publishes new-key events, the feed on it (on
// the real clock, its checks an hour apart, so that only what a test does
// makes a gap), and a runner on a manual clock.
type quietEnv struct {
	*env
	feed *keyevents.Feed
	r    *Runner
	s    *testScanner
	clk  *clock.Manual
	ch   *service.Changes
}

func newQuietEnv(t *testing.T, info scannerapi.Info, cfg Config) *quietEnv {
	t.Helper()
	srv := testserver.New(t, testserver.WithArgs("--notify-keyspace-events", "En"))
	client := srv.Client(t)
	e := &env{addr: srv.Addr, client: client, svc: callbacks.New(lua.New(client, lua.Options{}), nil)}
	ch := &service.Changes{}
	feed := keyevents.New(client, keyevents.Config{TopologyCheck: time.Hour, ConfigCheck: time.Hour, Changes: ch})
	require.NoError(t, feed.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, feed.Stop(context.Background())) })
	q := &quietEnv{env: e, feed: feed, clk: clock.NewManual(time.Unix(1_700_000_000, 0)), ch: ch}
	q.waitFeed(t, 0)
	q.s = &testScanner{info: info}
	cfg.Interval, cfg.Clock, cfg.Changes, cfg.Events = time.Minute, q.clk, ch, feed
	if cfg.Epoch == nil {
		cfg.Epoch = NewStoreEpoch()
	}
	q.r = e.runner(t, q.s, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, q.r.Start(ctx))
	t.Cleanup(func() {
		cancel()
		require.NoError(t, q.r.Stop(context.Background()))
	})
	q.waitCycle(t, 1)
	return q
}

// waitFeed waits until the feed is on in a generation after gen.
func (q *quietEnv) waitFeed(t *testing.T, after uint64) uint64 {
	t.Helper()
	var gen uint64
	require.NoError(t, q.ch.WaitFor(ctxT(t), func() bool {
		var on bool
		on, gen = q.feed.Covered()
		return on && gen > after
	}), "feed: %+v", q.feed.State())
	return gen
}

func (q *quietEnv) waitCycle(t *testing.T, n uint64) {
	t.Helper()
	require.NoError(t, q.ch.WaitFor(ctxT(t), func() bool { return q.r.Status().Cycle >= n }))
}

// nextCycle lets the interval pass and waits for the sweep to end; it
// returns the commands the server ran meanwhile.
func (q *quietEnv) nextCycle(t *testing.T) map[string]int64 {
	t.Helper()
	before := commandCalls(t, q.env)
	n := q.r.Status().Cycle
	d, err := q.clk.WaitForTimer(ctxT(t))
	require.NoError(t, err)
	q.clk.Advance(d)
	q.waitCycle(t, n+1)
	calls := diffCalls(before, commandCalls(t, q.env))
	delete(calls, "info")
	return calls
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func zadd(t *testing.T, c valkey.Client, key string, score int64, member string) {
	t.Helper()
	require.NoError(t, c.Do(context.Background(), c.B().Zadd().Key(key).ScoreMember().ScoreMember(float64(score), member).Build()).Error())
}

// With the feed on, a partition read empty is not read again until one of
// its source keys is created; then that partition alone is read, and its
// entry handled.
func TestQuietPartitionsReadAgainOnlyWhenAKeyIsCreated(t *testing.T) {
	t.Parallel()
	q := newQuietEnv(t, leaseInfo(), Config{})
	require.Equal(t, 16, q.r.Status().Quiet, "every partition was read empty")
	assert.Equal(t, map[string]int64{"time": 1}, q.nextCycle(t), "a quiet sweep reads nothing but the clock")
	assert.Equal(t, 16, q.r.Status().Quiet)

	// A key of another partition's family, and a key of no source, wake
	// nothing.
	zadd(t, q.client, "ff:idx:{b:1}:lease_expiry", 1, "x")
	zadd(t, q.client, "ff:idx:{fp:4}:other", 1, "x")
	now := scannertest.ServerNowMs(t, q.client)
	zadd(t, q.client, leaseKey(5), now-1, "due")
	require.NoError(t, q.ch.WaitFor(ctxT(t), func() bool { return q.r.Status().Quiet == 15 }))
	calls := q.nextCycle(t)
	assert.Equal(t, map[string]int64{"time": 1, "zrange": 1}, calls, "partition 5 alone is read")
	got := q.s.callsByPartition()
	require.Len(t, got, 1)
	require.Len(t, got[5], 1)
	assert.Equal(t, "due", got[5][0].Candidates[0].Member)
	// Its key still exists (the scanner removed nothing): not quiet.
	assert.Equal(t, 15, q.r.Status().Quiet)
}

// A gap in the feed (its subscriber's connection killed) makes every
// partition be read again once; then they are quiet again.
func TestQuietForgottenAfterAGap(t *testing.T) {
	t.Parallel()
	q := newQuietEnv(t, leaseInfo(), Config{})
	require.Equal(t, 16, q.r.Status().Quiet)
	_, gen := q.feed.Covered()
	killed, err := q.client.Do(context.Background(), q.client.B().ClientKill().TypePubsub().Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), killed)
	q.waitFeed(t, gen+1)
	calls := q.nextCycle(t)
	assert.Equal(t, int64(1), calls["exists"], "every partition read again (one EXISTS on one server)")
	assert.Equal(t, 16, q.r.Status().Quiet)
	assert.Equal(t, map[string]int64{"time": 1}, q.nextCycle(t))
}

// A partition read empty and then filled without any event (here the
// server stopped publishing, and the feed has not looked yet) is read
// again, and its entry handled, once the safety interval has passed.
func TestQuietPartitionReadAgainAfterTheSafetyInterval(t *testing.T) {
	t.Parallel()
	quietFor := 10 * time.Minute
	q := newQuietEnv(t, leaseInfo(), Config{QuietFor: quietFor})
	require.Equal(t, 16, q.r.Status().Quiet)
	require.NoError(t, q.client.Do(context.Background(), q.client.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "").Build()).Error())
	now := scannertest.ServerNowMs(t, q.client)
	zadd(t, q.client, leaseKey(9), now-1, "silent")
	on, _ := q.feed.Covered()
	require.True(t, on, "the feed has not noticed")
	var elapsed time.Duration
	for q.r.Status().Quiet == 16 {
		require.Empty(t, q.s.callsByPartition(), "nothing read before the safety interval")
		before := elapsed
		q.nextCycle(t)
		elapsed += time.Minute
		require.LessOrEqual(t, before, quietFor, "still quiet past the safety interval")
	}
	got := q.s.callsByPartition()
	require.Len(t, got[9], 1, "partition 9 read once its safety interval passed")
	assert.Equal(t, "silent", got[9][0].Candidates[0].Member)
	assert.LessOrEqual(t, elapsed, quietFor+time.Minute)
}

// A new store epoch (a failover, a transport error) forgets what was
// quiet, as does a change of the lanes (the read did not look at the new
// lane's keys).
func TestQuietForgottenOnANewEpochOrNewLanes(t *testing.T) {
	t.Parallel()
	epoch := NewStoreEpoch()
	lanes := []string{"default"}
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	info := leaseInfo()
	info.Sources[0].Key = "ff:idx:{p}:lane:{lane}:delayed"
	q := newQuietEnv(t, info, Config{Epoch: epoch, LanesFunc: func() []string {
		<-mu
		defer func() { mu <- struct{}{} }()
		return append([]string(nil), lanes...)
	}})
	require.Equal(t, 16, q.r.Status().Quiet)
	epoch.Bump()
	assert.Equal(t, int64(1), q.nextCycle(t)["exists"], "read again after the epoch changed")
	assert.Equal(t, map[string]int64{"time": 1}, q.nextCycle(t))
	<-mu
	lanes = []string{"default", "fresh"}
	mu <- struct{}{}
	assert.Equal(t, int64(2), q.nextCycle(t)["exists"], "read again with the new lane (one EXISTS per lane)")
	assert.Equal(t, map[string]int64{"time": 1}, q.nextCycle(t))
	// A key of a lane-scoped source wakes its partition.
	zadd(t, q.client, "ff:idx:{fp:3}:lane:fresh:delayed", 1, "x")
	require.NoError(t, q.ch.WaitFor(ctxT(t), func() bool { return q.r.Status().Quiet == 15 }))
}

func TestSourcePatternMatches(t *testing.T) {
	t.Parallel()
	info := scannerapi.Info{Sources: []scannerapi.CandidateSource{
		{Key: "ff:idx:{p}:lease_expiry"},
		{Key: "ff:idx:{p}:lane:{lane}:delayed"},
	}}
	ps := patternsOf(info)
	require.Len(t, ps, 2)
	tag := keys.Partition{Family: keys.FamilyFlow, Index: 3}.Tag()
	match := func(key string) bool {
		for _, p := range ps {
			if p.matches(key, tag) {
				return true
			}
		}
		return false
	}
	for key, want := range map[string]bool{
		"ff:idx:{fp:3}:lease_expiry":            true,
		"ff:idx:{fp:3}:lease_expiry2":           false,
		"ff:idx:{fp:31}:lease_expiry":           false,
		"ff:idx:{fp:3}:lane:default:delayed":    true,
		"ff:idx:{fp:3}:lane:a:b:delayed":        true,
		"ff:idx:{fp:3}:lane::delayed":           false,
		"ff:idx:{fp:3}:lane:default:eligible":   false,
		"ff:idx:{fp:4}:lane:default:delayed":    false,
		"ff:idx:{fp:3}:lane:default:delayedx":   false,
		strconv.Itoa(3) + "ff:idx:{fp:3}:lease": false,
	} {
		assert.Equal(t, want, match(key), key)
	}
}
