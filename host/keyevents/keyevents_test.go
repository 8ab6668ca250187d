package keyevents_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/keyevents"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// seen collects the events a watcher received and tells of each.
type seen struct {
	mu    sync.Mutex
	keys  []string
	parts []keys.Partition
	ch    service.Changes
}

func (s *seen) watch(key string, p keys.Partition, hasPart bool) {
	s.mu.Lock()
	s.keys = append(s.keys, key)
	if hasPart {
		s.parts = append(s.parts, p)
	}
	s.mu.Unlock()
	s.ch.Notify()
}

func (s *seen) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		if k == key {
			return true
		}
	}
	return false
}

func startFeed(t *testing.T, client valkey.Client, cfg keyevents.Config) (*keyevents.Feed, *service.Changes) {
	t.Helper()
	ch := &service.Changes{}
	cfg.Changes = ch
	f := keyevents.New(client, cfg)
	require.NoError(t, f.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, f.Stop(context.Background())) })
	return f, ch
}

func waitOn(t *testing.T, f *keyevents.Feed, ch *service.Changes, on bool) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var gen uint64
	err := ch.WaitFor(ctx, func() bool {
		var got bool
		got, gen = f.Covered()
		return got == on
	})
	require.NoError(t, err, "feed on=%v: %+v", on, f.State())
	return gen
}

// A server that publishes new-key events: the feed turns on, and every key
// created under ff: reaches the watchers with its partition.
func TestFeedOnDeliversNewKeys(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t, testserver.WithArgs("--notify-keyspace-events", "En"))
	c := srv.Client(t)
	f, ch := startFeed(t, c, keyevents.Config{})
	w := &seen{}
	stop := f.Watch(w.watch)
	defer stop()
	waitOn(t, f, ch, true)
	st := f.State()
	require.True(t, st.On)
	require.Len(t, st.Nodes, 1)
	assert.True(t, st.Nodes[0].Publishes && st.Nodes[0].Subscribed && st.Nodes[0].Master)

	ctx := context.Background()
	key := "ff:idx:{fp:7}:lease_expiry"
	require.NoError(t, c.Do(ctx, c.B().Zadd().Key("other:key").ScoreMember().ScoreMember(1, "a").Build()).Error())
	require.NoError(t, c.Do(ctx, c.B().Zadd().Key(key).ScoreMember().ScoreMember(1, "a").Build()).Error())
	// A second member creates nothing.
	require.NoError(t, c.Do(ctx, c.B().Zadd().Key(key).ScoreMember().ScoreMember(2, "b").Build()).Error())
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, w.ch.WaitFor(wctx, func() bool { return w.has(key) }))
	w.mu.Lock()
	assert.Equal(t, []string{key}, w.keys, "keys outside ff: are not passed on; an existing key is not new")
	assert.Equal(t, []keys.Partition{{Family: keys.FamilyFlow, Index: 7}}, w.parts)
	w.mu.Unlock()
}

// Without "E" and "n" the feed stays off and says which node and why, and
// the server's setting is left alone unless configure allows changing it.
func TestFeedOffWithoutTheSettingUnlessAllowedToSetIt(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t, testserver.WithArgs("--notify-keyspace-events", "Kx"))
	c := srv.Client(t)
	ctx := context.Background()
	f, ch := startFeed(t, c, keyevents.Config{})
	require.NoError(t, ch.WaitFor(ctxT(t), func() bool { return f.State().Reason != "not started" }))
	st := f.State()
	assert.False(t, st.On)
	assert.Contains(t, st.Reason, srv.Addr)
	assert.Contains(t, st.Reason, `"E" and "n"`)
	setting, err := c.Do(ctx, c.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	require.NoError(t, err)
	assert.NotContains(t, setting["notify-keyspace-events"], "n", "the server's setting is untouched")
	assert.NotContains(t, setting["notify-keyspace-events"], "E", "the server's setting is untouched")

	srv2 := testserver.New(t, testserver.WithArgs("--notify-keyspace-events", "Kx"))
	c2 := srv2.Client(t)
	f2, ch2 := startFeed(t, c2, keyevents.Config{Configure: true})
	waitOn(t, f2, ch2, true)
	setting, err = c2.Do(ctx, c2.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	require.NoError(t, err)
	s := setting["notify-keyspace-events"]
	for _, want := range "KEnx" {
		assert.Contains(t, s, string(want), "what the server had is kept and E, n added: %q", s)
	}
}

// Mode off never subscribes.
func TestFeedModeOff(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t, testserver.WithArgs("--notify-keyspace-events", "En"))
	f := keyevents.New(srv.Client(t), keyevents.Config{Mode: keyevents.ModeOff})
	require.NoError(t, f.Start(context.Background()))
	defer func() { require.NoError(t, f.Stop(context.Background())) }()
	on, _ := f.Covered()
	assert.False(t, on)
	assert.Contains(t, f.State().Reason, "off")
}

// A subscription that ends is a gap: the feed turns off (a new
// generation) and on again (another) once it has resubscribed; events
// flow again.
func TestFeedGapOnAKilledSubscriber(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t, testserver.WithArgs("--notify-keyspace-events", "En"))
	c := srv.Client(t)
	f, ch := startFeed(t, c, keyevents.Config{})
	w := &seen{}
	defer f.Watch(w.watch)()
	g1 := waitOn(t, f, ch, true)
	ctx := context.Background()
	killed, err := c.Do(ctx, c.B().ClientKill().TypePubsub().Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), killed)
	// Off and on again: two generations.
	require.NoError(t, ch.WaitFor(ctxT(t), func() bool { on, g := f.Covered(); return on && g >= g1+2 }))
	assert.Equal(t, uint64(1), f.State().Gaps)
	key := "ff:idx:{fp:1}:lease_expiry"
	require.NoError(t, c.Do(ctx, c.B().Zadd().Key(key).ScoreMember().ScoreMember(1, "a").Build()).Error())
	require.NoError(t, w.ch.WaitFor(ctxT(t), func() bool { return w.has(key) }))
}

// A restarted server loses a setting made with CONFIG SET: the feed, when
// it resubscribes, finds it missing and sets it again where allowed.
func TestFeedSetsTheSettingAgainAfterARestart(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	f, ch := startFeed(t, c, keyevents.Config{Configure: true})
	g1 := waitOn(t, f, ch, true)
	ctx := context.Background()
	// What a restart does to the setting, without the restart: the
	// setting goes, the connection breaks.
	require.NoError(t, c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "").Build()).Error())
	_, err := c.Do(ctx, c.B().ClientKill().TypePubsub().Build()).AsInt64()
	require.NoError(t, err)
	require.NoError(t, ch.WaitFor(ctxT(t), func() bool { on, g := f.Covered(); return on && g > g1 }))
	setting, err := c.Do(ctx, c.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	require.NoError(t, err)
	assert.Contains(t, setting["notify-keyspace-events"], "E")
	assert.Contains(t, setting["notify-keyspace-events"], "n")
}

// A setting changed on a running server is found at the next settings
// check (Recheck here): the feed turns off, saying why.
func TestFeedOffWhenTheSettingGoes(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t, testserver.WithArgs("--notify-keyspace-events", "En"))
	c := srv.Client(t)
	f, ch := startFeed(t, c, keyevents.Config{})
	waitOn(t, f, ch, true)
	require.NoError(t, c.Do(context.Background(), c.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "").Build()).Error())
	f.Recheck()
	waitOn(t, f, ch, false)
	assert.Contains(t, f.State().Reason, `notify-keyspace-events is ""`)
}

func TestPartitionOf(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]keys.Partition{
		"ff:idx:{fp:12}:lease_expiry":            {Family: keys.FamilyFlow, Index: 12},
		"ff:idx:{b:3}:budget_resets":             {Family: keys.FamilyBudget, Index: 3},
		"ff:exec:{fp:0}:0000-ab:core":            {Family: keys.FamilyFlow, Index: 0},
		"ff:idx:{fp:4}:lane:{odd}:delayed":       {Family: keys.FamilyFlow, Index: 4},
		"ff:quota:{q:31}:x":                      {Family: keys.FamilyQuota, Index: 31},
		"ff:idx:{fp:4}:lane:default:blocked:dep": {Family: keys.FamilyFlow, Index: 4},
	} {
		p, ok := keyevents.PartitionOf(key)
		assert.True(t, ok, key)
		assert.Equal(t, want, p, key)
	}
	for _, key := range []string{"ff:idx:lanes", "ff:idx:{x:1}:y", "ff:{fp:01}:z", "ff:{fp:1", "ff:config:partitions"} {
		_, ok := keyevents.PartitionOf(key)
		assert.False(t, ok, key)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// On a cluster the feed subscribes on every master (notifications are
// node-local): keys created on any of them reach the watchers. A slot
// moved to another master is a gap: the feed goes off and on again.
func TestFeedOnEveryMasterOfACluster(t *testing.T) {
	cl := testserver.NewCluster(t, 3)
	c := cl.Client(t)
	f, ch := startFeed(t, c, keyevents.Config{Configure: true})
	w := &seen{}
	defer f.Watch(w.watch)()
	g1 := waitOn(t, f, ch, true)
	st := f.State()
	masters := 0
	for _, n := range st.Nodes {
		if n.Master {
			masters++
			assert.True(t, n.Subscribed && n.Publishes, "%+v", n)
		}
	}
	require.Equal(t, 3, masters)

	ctx := context.Background()
	byMaster := map[*testserver.Server]string{}
	for p := 0; len(byMaster) < 3 && p < 256; p++ {
		tag := keys.Partition{Family: keys.FamilyFlow, Index: uint16(p)}.Tag()
		m, err := cl.MasterOf(ctx, tag)
		require.NoError(t, err)
		if _, ok := byMaster[m]; !ok {
			byMaster[m] = "ff:idx:" + tag + ":lease_expiry"
		}
	}
	require.Len(t, byMaster, 3)
	for _, key := range byMaster {
		require.NoError(t, c.Do(ctx, c.B().Zadd().Key(key).ScoreMember().ScoreMember(1, "a").Build()).Error())
	}
	for _, key := range byMaster {
		require.NoError(t, w.ch.WaitFor(ctxT(t), func() bool { return w.has(key) }), key)
	}

	// Move the slot of partition 0 to another master.
	tag := keys.Partition{Family: keys.FamilyFlow, Index: 0}.Tag()
	from, err := cl.MasterOf(ctx, tag)
	require.NoError(t, err)
	to := cl.Nodes[0]
	if to == from {
		to = cl.Nodes[1]
	}
	require.NoError(t, cl.MigrateSlot(ctx, int(keys.ClusterSlot(tag)), from, to, 10))
	f.Recheck()
	require.NoError(t, ch.WaitFor(ctxT(t), func() bool { on, g := f.Covered(); return on && g >= g1+2 }))
	assert.Equal(t, uint64(1), f.State().Gaps)
}
