// Package keyevents follows the keys the deployment's Valkey creates: the
// server's new-key events (keyspace notifications with the "n" class,
// published on __keyevent@0__:new with the key's name), received on every
// master, handed to whoever watches (the scanners' runners, the lanes).
//
// With it, a partition whose sources were read empty need not be read
// again until one of its keys is created: an idle host's reads, which on a
// Valkey Cluster are one command per partition and source at every
// interval, fall to nearly nothing. But a notification is a hint, never
// the truth: Valkey publishes it once, to the subscribers connected at
// that moment, on the node that created the key. So the feed is trusted
// only while it covers every master, and says so with a generation:
//
//   - the feed is on once every master publishes new-key events (its
//     notify-keyspace-events holds "E" and "n") and a subscription on each
//     is confirmed; then the generation moves on;
//   - any gap moves it on again and turns the feed off until it is whole
//     once more: a subscription that ends (a node restarted or failed, the
//     connection killed, the output buffer limit hit), a change of the
//     masters or of which master serves which slots (a failover, a
//     resharding, a node added; checked every TopologyCheck), a node whose
//     setting no longer publishes (checked every ConfigCheck).
//
// A consumer that learns something from the absence of events (a
// partition read empty stays empty) learns it within one generation and
// forgets it when the generation changes. What the feed cannot see at all
// (an event lost on a healthy connection, which Valkey does not do, or a
// setting changed and back between two checks) is bounded by the
// consumers' own safety interval.
//
// The server's setting is changed only when the configuration allows it
// (key_events.configure): then the feed adds "E" and "n" to what a node
// has (masters and replicas, so that a replica promoted later publishes
// too), with CONFIG SET, which a restarted node forgets and the feed sets
// again when it resubscribes. Otherwise a node without them leaves the
// feed off, and the host behaves and costs as it does without events;
// status says which node and why.
package keyevents

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua/topology"
)

// Channel is where a server publishes the names of the keys it creates in
// database 0 (the one ffscan uses).
const Channel = "__keyevent@0__:new"

// ConnectionName names the subscriber connections in CLIENT LIST.
const ConnectionName = "ffscan-keyevents"

// Mode says whether the host uses the events.
type Mode string

// Modes.
const (
	// ModeAuto uses new-key events where every master publishes them.
	ModeAuto Mode = "auto"
	// ModeOff never subscribes: partitions are read at every interval.
	ModeOff Mode = "off"
)

// Defaults of Config.
const (
	DefaultMode = ModeAuto
	// DefaultTopologyCheck is how often a cluster's masters and slots are
	// compared with those the subscriptions were made for: a master
	// added, or slots moved to one, is subscribed to (and every partition
	// read again) within this.
	DefaultTopologyCheck = time.Second
	// DefaultConfigCheck is how often each master's
	// notify-keyspace-events is read again: a setting changed at run
	// time turns the feed off within this.
	DefaultConfigCheck = 30 * time.Second
	// DefaultSubscribeTimeout bounds the wait for every master to confirm
	// its subscription.
	DefaultSubscribeTimeout = 5 * time.Second
	DefaultMinBackoff       = 100 * time.Millisecond
	DefaultMaxBackoff       = 5 * time.Second
)

// Config configures a Feed. Zero fields take the defaults above.
type Config struct {
	Mode Mode
	// Configure lets the feed add "E" and "n" to a node's
	// notify-keyspace-events where they are missing (CONFIG SET).
	Configure        bool
	TopologyCheck    time.Duration
	ConfigCheck      time.Duration
	SubscribeTimeout time.Duration
	MinBackoff       time.Duration
	MaxBackoff       time.Duration
	Clock            clock.Clock
	Logger           hclog.Logger
	// Changes is told of every change of the feed's state.
	Changes *service.Changes
}

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	service.Default(&c.TopologyCheck, DefaultTopologyCheck)
	service.Default(&c.ConfigCheck, DefaultConfigCheck)
	service.Default(&c.SubscribeTimeout, DefaultSubscribeTimeout)
	service.Default(&c.MinBackoff, DefaultMinBackoff)
	service.Default(&c.MaxBackoff, DefaultMaxBackoff)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Watcher receives the keys created while the feed runs: key is the
// key's name; p its partition when the key carries a partition's hash tag
// (hasPart). It runs on a subscriber's goroutine: it must be quick.
type Watcher func(key string, p keys.Partition, hasPart bool)

// NodeState is what the feed knows of one node.
type NodeState struct {
	Addr string `json:"addr"`
	// Master: the node serves slots (or is the single server); only
	// masters are subscribed to.
	Master bool `json:"master"`
	// Setting is the node's notify-keyspace-events as last read.
	Setting string `json:"setting"`
	// Publishes: Setting holds "E" and "n".
	Publishes  bool `json:"publishes"`
	Subscribed bool `json:"subscribed"`
	// Error is why the node could not be read or subscribed to.
	Error string `json:"error,omitempty"`
}

// State is the feed's view for status.
type State struct {
	Mode Mode `json:"mode"`
	// On: every master publishes new-key events and is subscribed to.
	On bool `json:"on"`
	// Gen moves on at every change of On: what a consumer learned from
	// the absence of events in one generation holds only in it.
	Gen uint64 `json:"generation"`
	// Reason says why the feed is off.
	Reason string      `json:"reason,omitempty"`
	Nodes  []NodeState `json:"nodes,omitempty"`
	// Events counts the new-key events received; Gaps the times the feed
	// went off after it was on.
	Events uint64 `json:"events"`
	Gaps   uint64 `json:"gaps"`
}

// Feed is the new-key event feed of one deployment.
type Feed struct {
	loop   service.Loop
	client valkey.Client
	cfg    Config
	log    hclog.Logger
	clk    clock.Clock

	watchers atomic.Pointer[[]watcherEntry]
	wmu      sync.Mutex
	nextID   int

	events atomic.Uint64
	on     atomic.Bool
	gen    atomic.Uint64

	mu    sync.Mutex
	state State

	// kick ends the current session at once (tests: a topology check
	// without waiting for its ticker).
	kick chan struct{}

	// TestSignals fire at the feed's events for tests that Init them.
	TestSignals TestSignals
}

// TestSignals are a Feed's events.
type TestSignals struct {
	// Changed: the feed turned on (true) or off (false).
	Changed testsignal.Signal[bool]
	// Checked: a topology or configuration check found nothing changed.
	Checked testsignal.Signal[struct{}]
}

type watcherEntry struct {
	id int
	fn Watcher
}

// New returns a feed over client's nodes (nil: no Valkey, always off).
func New(client valkey.Client, cfg Config) *Feed {
	cfg = cfg.withDefaults()
	f := &Feed{client: client, cfg: cfg, log: cfg.Logger, clk: cfg.Clock, kick: make(chan struct{}, 1)}
	f.state = State{Mode: cfg.Mode, Reason: "not started"}
	if cfg.Mode == ModeOff {
		f.state.Reason = "key_events.mode is off"
	}
	if client == nil {
		f.state.Reason = "no Valkey"
	}
	empty := []watcherEntry{}
	f.watchers.Store(&empty)
	return f
}

// Watch registers w for every key created from now on; the returned
// function unregisters it.
func (f *Feed) Watch(w func(key string, p keys.Partition, hasPart bool)) (cancel func()) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.nextID++
	id := f.nextID
	list := append(append([]watcherEntry{}, *f.watchers.Load()...), watcherEntry{id: id, fn: w})
	f.watchers.Store(&list)
	return func() {
		f.wmu.Lock()
		defer f.wmu.Unlock()
		old := *f.watchers.Load()
		list := make([]watcherEntry, 0, len(old))
		for _, e := range old {
			if e.id != id {
				list = append(list, e)
			}
		}
		f.watchers.Store(&list)
	}
}

// Covered returns whether the feed covers every master now, and its
// generation.
func (f *Feed) Covered() (on bool, gen uint64) {
	// gen is read first: a change of on bumps gen after storing on, so
	// (on, gen) read in this order never pairs a stale on with a new gen.
	gen = f.gen.Load()
	on = f.on.Load()
	if f.gen.Load() != gen {
		return false, gen
	}
	return on, gen
}

// State returns the feed's view for status.
func (f *Feed) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.state
	st.Nodes = append([]NodeState(nil), f.state.Nodes...)
	st.On, st.Gen, st.Events = f.on.Load(), f.gen.Load(), f.events.Load()
	return st
}

// Start follows the events until Stop or until ctx ends; with mode off or
// without Valkey it does nothing.
func (f *Feed) Start(ctx context.Context) error {
	if f.client == nil || f.cfg.Mode == ModeOff {
		return nil
	}
	return f.loop.Start(ctx, f.run)
}

// Stop stops following (the feed is off from then on).
func (f *Feed) Stop(ctx context.Context) error {
	err := f.loop.Stop(ctx)
	f.setOff("stopped", f.nodesSnapshot())
	return err
}

// Recheck makes the running feed check the topology and the settings now
// rather than at its next tick.
func (f *Feed) Recheck() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *Feed) run(ctx context.Context) {
	backoff := f.cfg.MinBackoff
	for ctx.Err() == nil {
		wasOn := f.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if wasOn {
			backoff = f.cfg.MinBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if !clock.Sleep(ctx, f.clk, wait) {
			return
		}
		backoff = min(2*backoff, f.cfg.MaxBackoff)
	}
}

// session makes the feed whole once (settings checked, every master
// subscribed), keeps it on until a gap, and turns it off. It reports
// whether the feed was on.
func (f *Feed) session(ctx context.Context) bool {
	plan, err := f.plan(ctx)
	if err != nil {
		f.setOff(fmt.Sprintf("cannot read the masters: %v", err), f.nodesSnapshot())
		return false
	}
	nodes, reason := f.checkSettings(ctx, plan, true)
	if reason != "" {
		f.setOff(reason, nodes)
		// Nothing will change by itself soon: look again at the next
		// settings check (or when the topology changes).
		f.waitForChange(ctx, plan, nodes)
		return false
	}
	sctx, cancel := context.WithCancel(ctx)
	ended := make(chan string, len(plan.masters))
	var confirmed sync.WaitGroup
	var subs sync.WaitGroup
	defer func() {
		cancel()
		subs.Wait()
	}()
	for _, addr := range plan.masters {
		confirmed.Add(1)
		subs.Add(1)
		go func() {
			defer subs.Done()
			ended <- f.subscribe(sctx, addr, confirmed.Done)
		}()
	}
	allConfirmed := make(chan struct{})
	go func() { confirmed.Wait(); close(allConfirmed) }()
	t := f.clk.NewTimer(f.cfg.SubscribeTimeout)
	select {
	case <-allConfirmed:
		t.Stop()
	case why := <-ended:
		t.Stop()
		f.setOff(why, markSubscribed(nodes, nil))
		return false
	case <-t.C():
		f.setOff(fmt.Sprintf("not every master confirmed its subscription within %s", f.cfg.SubscribeTimeout), nodes)
		return false
	case <-ctx.Done():
		t.Stop()
		return false
	}
	nodes = markSubscribed(nodes, plan.masters)
	f.setOn(nodes)
	why := f.watchSession(ctx, plan, ended)
	cancel()
	f.setOff(why, markSubscribed(f.nodesSnapshot(), nil))
	return true
}

// watchSession waits for the first gap of a session that is on and
// returns what it was.
func (f *Feed) watchSession(ctx context.Context, plan topo, ended <-chan string) string {
	topoTick := f.clk.NewTicker(f.cfg.TopologyCheck)
	defer topoTick.Stop()
	cfgTick := f.clk.NewTicker(f.cfg.ConfigCheck)
	defer cfgTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return "stopped"
		case why := <-ended:
			return why
		case <-f.kick:
			if why := f.changed(ctx, plan, true); why != "" {
				return why
			}
		case <-topoTick.C():
			if plan.cluster {
				if why := f.changed(ctx, plan, false); why != "" {
					return why
				}
			}
		case <-cfgTick.C():
			if why := f.changed(ctx, plan, true); why != "" {
				return why
			}
		}
	}
}

// changed compares the topology (and, with settings, every master's
// notify-keyspace-events) with the session's; it returns what changed, or
// "" when nothing did.
func (f *Feed) changed(ctx context.Context, plan topo, settings bool) string {
	now, err := f.plan(ctx)
	if err != nil {
		return fmt.Sprintf("cannot read the masters: %v", err)
	}
	if now.fingerprint != plan.fingerprint {
		return "the cluster's masters or slots changed"
	}
	if settings {
		nodes, reason := f.checkSettings(ctx, now, false)
		if reason != "" {
			return reason
		}
		f.setNodes(markSubscribed(nodes, plan.masters))
	}
	f.TestSignals.Checked.Signal(struct{}{})
	return ""
}

// waitForChange waits, while the feed is off for a setting, until the next
// settings check, a topology change or a Recheck.
func (f *Feed) waitForChange(ctx context.Context, plan topo, nodes []NodeState) {
	topoTick := f.clk.NewTicker(f.cfg.TopologyCheck)
	defer topoTick.Stop()
	cfgTick := f.clk.NewTimer(f.cfg.ConfigCheck)
	defer cfgTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
			return
		case <-cfgTick.C():
			return
		case <-topoTick.C():
			if !plan.cluster {
				continue
			}
			if now, err := f.plan(ctx); err != nil || now.fingerprint != plan.fingerprint {
				return
			}
		}
	}
}

// subscribe holds a subscription to Channel on the master at addr until
// ctx ends or the connection breaks, and returns why it ended; confirmed
// is called once the server confirmed it.
func (f *Feed) subscribe(ctx context.Context, addr string, confirmed func()) (why string) {
	var once sync.Once
	confirm := func() { once.Do(confirmed) }
	defer confirm() // a subscription that ended unconfirmed releases the wait too
	node, ok := f.client.Nodes()[addr]
	if !ok {
		return fmt.Sprintf("master %s is not among the client's connections yet", addr)
	}
	dc, release := node.Dedicate()
	defer func() {
		dc.Close()
		release()
	}()
	_ = dc.Do(ctx, dc.B().ClientSetname().ConnectionName(ConnectionName).Build()).Error()
	hooked := valkey.WithOnSubscriptionHook(ctx, func(s valkey.PubSubSubscription) {
		if s.Kind == "subscribe" && s.Channel == Channel {
			confirm()
		}
	})
	err := dc.Receive(hooked, dc.B().Subscribe().Channel(Channel).Build(), f.handle)
	if ctx.Err() != nil {
		return "stopped"
	}
	if err == nil {
		err = errors.New("the subscription ended")
	}
	return fmt.Sprintf("the subscription on %s ended: %v", addr, err)
}

// handle passes one event to the watchers.
func (f *Feed) handle(m valkey.PubSubMessage) {
	key := m.Message
	if !strings.HasPrefix(key, keys.Prefix) {
		return
	}
	f.events.Add(1)
	p, ok := PartitionOf(key)
	for _, w := range *f.watchers.Load() {
		w.fn(key, p, ok)
	}
}

// PartitionOf returns the partition whose hash tag key carries (the
// first {...}, as the cluster hashes it), if it is one.
func PartitionOf(key string) (keys.Partition, bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return keys.Partition{}, false
	}
	j := strings.IndexByte(key[i:], '}')
	if j < 0 {
		return keys.Partition{}, false
	}
	p, err := keys.ParseTag(key[i : i+j+1])
	return p, err == nil
}

// topo is the masters a session subscribes to, and a fingerprint of who
// serves which slots.
type topo struct {
	cluster     bool
	masters     []string
	fingerprint string
}

func (f *Feed) plan(ctx context.Context) (topo, error) {
	if f.client.Mode() != valkey.ClientModeCluster {
		var addrs []string
		for a := range f.client.Nodes() {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		return topo{masters: addrs, fingerprint: strings.Join(addrs, ",")}, nil
	}
	slots, err := topology.SlotOwners(ctx, f.client)
	if err != nil {
		return topo{}, err
	}
	return topo{cluster: true, masters: slots.Masters(), fingerprint: slots.Fingerprint()}, nil
}

// checkSettings reads notify-keyspace-events on every node the client
// knows (setting it where allowed and missing) and returns their states
// and, when a master does not publish new-key events, why the feed cannot
// be on. log says a node's state is logged when it is found wanting (at
// the start of a session; the periodic checks only report).
func (f *Feed) checkSettings(ctx context.Context, plan topo, log bool) ([]NodeState, string) {
	masters := map[string]bool{}
	for _, m := range plan.masters {
		masters[m] = true
	}
	clients := f.client.Nodes()
	var addrs []string
	for a := range clients {
		addrs = append(addrs, a)
	}
	for _, m := range plan.masters {
		if _, ok := clients[m]; !ok {
			addrs = append(addrs, m)
		}
	}
	sort.Strings(addrs)
	var nodes []NodeState
	var problems []string
	for _, a := range addrs {
		ns := NodeState{Addr: a, Master: masters[a]}
		node, ok := clients[a]
		if !ok {
			ns.Error = "not among the client's connections yet"
			if ns.Master {
				problems = append(problems, fmt.Sprintf("master %s: %s", a, ns.Error))
			}
			nodes = append(nodes, ns)
			continue
		}
		setting, err := readSetting(ctx, node)
		if err == nil && !publishes(setting) && f.cfg.Configure {
			want := withNewKeyEvents(setting)
			if err = node.Do(ctx, node.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", want).Build()).Error(); err == nil {
				f.log.Info("new-key events turned on (key_events.configure)", "node", a, "was", setting, "now", want)
				setting, err = readSetting(ctx, node)
			} else {
				err = fmt.Errorf("CONFIG SET notify-keyspace-events %q: %w", want, err)
			}
		}
		ns.Setting = setting
		if err != nil {
			// A replica that cannot be read does not stop the feed, but
			// a master does.
			ns.Error = err.Error()
			if ns.Master {
				problems = append(problems, fmt.Sprintf("master %s: %v", a, err))
			}
			nodes = append(nodes, ns)
			continue
		}
		ns.Publishes = publishes(setting)
		if ns.Master && !ns.Publishes {
			problems = append(problems, fmt.Sprintf("master %s: notify-keyspace-events is %q, without %s (set it to include \"En\" on the server, or key_events.configure: true to let ffscan do it)",
				a, setting, missing(setting)))
		}
		nodes = append(nodes, ns)
	}
	if len(problems) > 0 {
		reason := "new-key events off: " + strings.Join(problems, "; ")
		if log {
			f.log.Info("new-key events are not used; every partition is read at every interval", "reason", reason)
		}
		return nodes, reason
	}
	return nodes, ""
}

func readSetting(ctx context.Context, node valkey.Client) (string, error) {
	m, err := node.Do(ctx, node.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	if err != nil {
		return "", fmt.Errorf("CONFIG GET notify-keyspace-events: %w", err)
	}
	v, ok := m["notify-keyspace-events"]
	if !ok {
		return "", errors.New("CONFIG GET notify-keyspace-events: no such setting (a server before Redis 7 has no new-key events)")
	}
	return v, nil
}

// publishes reports whether a notify-keyspace-events value publishes
// new-key events on Channel: the keyevent channels (E) and the new-key
// class (n), which "A" does not include.
func publishes(setting string) bool {
	return strings.ContainsRune(setting, 'E') && strings.ContainsRune(setting, 'n')
}

func missing(setting string) string {
	var m []string
	if !strings.ContainsRune(setting, 'E') {
		m = append(m, `"E"`)
	}
	if !strings.ContainsRune(setting, 'n') {
		m = append(m, `"n"`)
	}
	return strings.Join(m, " and ")
}

// withNewKeyEvents adds what setting lacks of "E" and "n".
func withNewKeyEvents(setting string) string {
	out := setting
	for _, c := range "En" {
		if !strings.ContainsRune(out, c) {
			out += string(c)
		}
	}
	return out
}

func markSubscribed(nodes []NodeState, masters []string) []NodeState {
	sub := map[string]bool{}
	for _, m := range masters {
		sub[m] = true
	}
	out := append([]NodeState(nil), nodes...)
	for i := range out {
		out[i].Subscribed = sub[out[i].Addr]
	}
	return out
}

func (f *Feed) nodesSnapshot() []NodeState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]NodeState(nil), f.state.Nodes...)
}

func (f *Feed) setNodes(nodes []NodeState) {
	f.mu.Lock()
	f.state.Nodes = nodes
	f.mu.Unlock()
}

func (f *Feed) setOn(nodes []NodeState) {
	f.mu.Lock()
	f.state.Nodes, f.state.Reason = nodes, ""
	f.on.Store(true)
	f.gen.Add(1)
	f.mu.Unlock()
	f.log.Info("new-key events on: partitions read empty are read again when one of their keys is created", "masters", len(nodes))
	f.cfg.Changes.Notify()
	f.TestSignals.Changed.Signal(true)
}

func (f *Feed) setOff(reason string, nodes []NodeState) {
	f.mu.Lock()
	changed := f.state.Reason != reason
	f.state.Nodes, f.state.Reason = nodes, reason
	was := f.on.Swap(false)
	if was {
		f.state.Gaps++
		f.gen.Add(1)
	}
	f.mu.Unlock()
	if was {
		f.log.Info("new-key events off: every partition is read again", "reason", reason)
		f.TestSignals.Changed.Signal(false)
	}
	if was || changed {
		f.cfg.Changes.Notify()
	}
}
