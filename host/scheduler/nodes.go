package scheduler

// This file is how a sweep keeps the masters of a cluster apart: it knows
// which master serves a partition, and reads and scans each master's
// partitions in a lane of their own, so that a master that dies while
// reads or calls are in flight on it holds up those alone.

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua/topology"
)

// Pacing of the node map's reads.
const (
	// nodeMapMaxAge is how old the map may be before a dispatch asks for
	// a fresh one (in the background; the dispatch uses what it has). A
	// stale map groups a moved partition with its old master: its calls
	// are then isolated less well, never lost.
	nodeMapMaxAge = 10 * time.Second
	// nodeMapTimeout bounds one read of the map (CLUSTER SLOTS, through
	// any node that answers).
	nodeMapTimeout = 2 * time.Second
)

// NodeMap knows which master serves each slot of a Valkey Cluster, as
// CLUSTER SLOTS last said, read again in the background when it is older
// than nodeMapMaxAge or the store epoch changed (a failover, a reshard).
// One map serves every runner of a host. On a single server every
// partition is on the one node. Safe for concurrent use.
type NodeMap struct {
	client valkey.Client
	clk    clock.Clock
	epoch  *StoreEpoch

	mu         sync.Mutex
	slots      *topology.Slots
	at         time.Time
	readEpoch  uint64
	refreshing bool
}

// NewNodeMap returns a map of client's cluster (empty until its first
// read, which the first use starts); epoch may be nil.
func NewNodeMap(client valkey.Client, clk clock.Clock, epoch *StoreEpoch) *NodeMap {
	return &NodeMap{client: client, clk: clock.Or(clk), epoch: epoch}
}

// Of returns the address of the master serving p ("" when not known: on
// a single server, or before the first read).
func (m *NodeMap) Of(p keys.Partition) string {
	if m == nil || m.client == nil || m.client.Mode() != valkey.ClientModeCluster {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	if !m.refreshing && (m.slots == nil || now.Sub(m.at) > nodeMapMaxAge || m.epoch.Load() != m.readEpoch) {
		m.refreshing = true
		go m.refresh()
	}
	if m.slots == nil {
		return ""
	}
	return m.slots.Owner(keys.ClusterSlot(p.Tag()))
}

func (m *NodeMap) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), nodeMapTimeout)
	defer cancel()
	_ = m.Refresh(ctx) // the old map serves until a read succeeds
}

// Refresh reads the map now.
func (m *NodeMap) Refresh(ctx context.Context) error {
	epoch := m.epoch.Load()
	slots, err := topology.SlotOwners(ctx, m.client)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshing = false
	if err != nil {
		return err
	}
	m.slots, m.at, m.readEpoch = slots, m.clk.Now(), epoch
	return nil
}

// swept is what a sweep's reads and calls over some partitions gave: the
// partitions' states (of the nodes whose lane ended), those that said
// More, the backlogs the plugin reported, and whether every lane ended.
type swept struct {
	states   []*partState
	more     []keys.Partition
	backlog  map[uint16]int64
	complete bool
	// nowMs is the store's clock the partitions were scanned at, read
	// before the sweep (Valkey) or with its candidates (Postgres);
	// clockErr says why a Postgres sweep that read partitions has none.
	nowMs    int64
	clockErr error
}

// nodeLane is one node's share of a sweep: its partitions read and
// scanned by a sweep of its own (with a summary of its own), apart from
// the other nodes'.
type nodeLane struct {
	node  string
	parts []keys.Partition
	sw    *sweep
	stop  chan struct{}

	mu       sync.Mutex
	ended    bool // its reads and calls are over
	detached bool // the sweep stopped waiting for it

	states  []*partState
	more    []keys.Partition
	backlog map[uint16]int64
}

// laneEvent tells the sweep that lane i made progress (a read round or a
// call ended) or, with ended, finished.
type laneEvent struct {
	i     int
	ended bool
	took  time.Duration
}

// readAndScan reads the partitions and scans those with candidates, node
// by node on a cluster: each master's partitions go through a lane of
// their own (their reads, then their calls, Concurrency at a time), so a
// master that dies under the sweep, whose reads and calls then wait in
// the client until its failover, holds up no other master's partitions.
// The sweep waits for every lane, except a lane that stopped making
// progress: once no read or call of it has ended for a straggler wait
// (stragglerWait) while every other lane is done, it goes on detached. Its
// calls in flight finish, none is started any more, its partitions stay
// busy (no sweep reads them) until it ended, and what it did is counted
// then (lateLane). On a single server, or for a Postgres scanner, there is
// one lane, which the sweep waits for.
func (sw *sweep) readAndScan(ctx context.Context, parts []keys.Partition, followUp bool) swept {
	r := sw.r
	lanes := sw.lanesByNode(parts)
	for _, l := range lanes {
		for _, p := range l.parts {
			r.busy.mark(p.Index, true)
		}
	}
	// Room for every event a lane can send (its read, each call, its
	// end), so that a lane never waits on a sweep that stopped listening.
	events := make(chan laneEvent, 2*len(parts)+2*len(lanes))
	for i, l := range lanes {
		r.calling.Add(1)
		go func() {
			defer r.calling.Done()
			l.run(ctx, i, followUp, events)
		}()
	}
	sw.await(lanes, events)
	out := swept{backlog: map[uint16]int64{}, complete: true, nowMs: sw.nowMs}
	for _, l := range lanes {
		l.mu.Lock()
		detached := l.detached
		l.mu.Unlock()
		if detached {
			out.complete = false
			continue
		}
		sw.sum.merge(l.sw.sum)
		if l.sw.clocked {
			out.nowMs = l.sw.nowMs
		} else if out.clockErr == nil {
			out.clockErr = l.sw.clockErr
		}
		out.states = append(out.states, l.states...)
		out.more = append(out.more, l.more...)
		for p, v := range l.backlog {
			out.backlog[p] = v
		}
	}
	sort.Slice(out.more, func(i, j int) bool { return out.more[i].Index < out.more[j].Index })
	return out
}

// lanesByNode splits the partitions by the master serving them.
func (sw *sweep) lanesByNode(parts []keys.Partition) []*nodeLane {
	idx := map[string]int{}
	var lanes []*nodeLane
	for _, p := range parts {
		n := ""
		if !sw.postgres() {
			n = sw.r.nodes.Of(p)
		}
		i, ok := idx[n]
		if !ok {
			i = len(lanes)
			idx[n] = i
			lanes = append(lanes, &nodeLane{node: n, sw: sw.child(), stop: make(chan struct{})})
		}
		lanes[i].parts = append(lanes[i].parts, p)
	}
	return lanes
}

// child is a sweep over part of the partitions with a summary of its own.
func (sw *sweep) child() *sweep {
	c := *sw
	c.sum = &Summary{Cycle: sw.sum.Cycle, Errors: map[ErrorKey]int64{}}
	c.laneSet = nil
	return &c
}

// run reads the lane's partitions and scans those with candidates, then
// says it ended; a lane the sweep stopped waiting for records what it did
// itself.
func (l *nodeLane) run(ctx context.Context, i int, followUp bool, events chan<- laneEvent) {
	r := l.sw.r
	t0 := r.clk.Now()
	progress := func() { events <- laneEvent{i: i, took: r.since(t0)} }
	states := l.sw.read(ctx, l.parts)
	progress()
	// The clock of the read: a Postgres read brings its own (fetchPostgres).
	more, backlog := l.sw.dispatch(ctx, states, l.sw.nowMs, followUp, l.stop, progress)
	for _, p := range l.parts {
		r.busy.mark(p.Index, false)
	}
	l.mu.Lock()
	l.states, l.more, l.backlog, l.ended = states, more, backlog, true
	detached := l.detached
	l.mu.Unlock()
	if detached {
		r.lateLane(l)
		return
	}
	events <- laneEvent{i: i, ended: true}
}

// detach stops waiting for the lane unless it ended already; it reports
// whether it did.
func (l *nodeLane) detach() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return false
	}
	l.detached = true
	close(l.stop)
	return true
}

// LaneStragglerWait is the least time a lane may go without progress
// before the sweep stops waiting for it (see readAndScan). A healthy
// master answers a lane's reads in milliseconds and a call ends in tens of
// them; a master that died makes the client wait until its failover
// (seconds). Cutting a lane loose cancels nothing (it ends on its own and
// its results are counted then), so a short wait costs a merely slow
// master nothing but the sweep's not waiting for it.
const LaneStragglerWait = 200 * time.Millisecond

// stragglerWait is how long a lane may go without progress: at least
// LaneStragglerWait, or four times the longest step (a read round or a
// call) seen in this sweep, so that a store slow everywhere is waited for.
func stragglerWait(longest time.Duration) time.Duration {
	return max(LaneStragglerWait, 4*longest)
}

// await waits for the lanes (see readAndScan).
func (sw *sweep) await(lanes []*nodeLane, events <-chan laneEvent) {
	r := sw.r
	ended := make([]bool, len(lanes))
	last := make([]time.Time, len(lanes))
	start := r.clk.Now()
	for i := range last {
		last[i] = start
	}
	remaining := len(lanes)
	var longest time.Duration
	// On a cluster each lane is one master's, and one that stops making
	// progress is cut loose, whether or not other lanes are in this
	// sweep (a wake-up may read one master's partitions alone). Without
	// the map of masters (a single server, a Postgres scanner, or the map
	// not read yet) a lane is cut loose only when it lags behind every
	// other lane.
	cluster := len(lanes) > 0 && lanes[0].node != ""
	for remaining > 0 {
		var timer clock.Timer
		var fire <-chan time.Time
		if cluster || (len(lanes) > 1 && remaining < len(lanes)) {
			earliest := time.Time{}
			for i := range lanes {
				if !ended[i] && (earliest.IsZero() || last[i].Before(earliest)) {
					earliest = last[i]
				}
			}
			timer = r.clk.NewTimer(earliest.Add(stragglerWait(longest)).Sub(r.clk.Now()))
			fire = timer.C()
			r.TestSignals.Straggling.Signal(remaining)
		}
		select {
		case e := <-events:
			if e.ended {
				ended[e.i] = true
				remaining--
			} else if !ended[e.i] {
				last[e.i] = r.clk.Now()
				longest = max(longest, e.took)
			}
		case <-fire:
			now := r.clk.Now()
			wait := stragglerWait(longest)
			for i, l := range lanes {
				if ended[i] || now.Sub(last[i]) < wait {
					continue
				}
				if !l.detach() {
					continue // it ended meanwhile: its end event is on its way
				}
				ended[i] = true
				remaining--
				sw.sum.Detached++
				r.log.Warn("a node's reads or scan calls stopped ending while the other nodes' are done: the sweep goes on without them; its partitions wait until they end",
					"node", l.node, "partitions", len(l.parts), "waited", wait)
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// lateLane records what a detached lane did once it ended: its counts go
// to the metrics and status as a sweep's would (what was done is
// counted), and its partitions that said More are woken at once.
func (r *Runner) lateLane(l *nodeLane) {
	sum := l.sw.sum
	r.recordCounts(sum)
	r.status.update(func(st *Status) {
		st.count(sum)
		st.Late++
	})
	if len(l.more) > 0 {
		now := r.clk.Now()
		epoch := r.cfg.Epoch.Load()
		for _, p := range l.more {
			r.wakeups.Learn(epoch, p, now)
		}
		r.replan()
	}
	r.cfg.Changes.Notify()
}

// merge adds a lane's summary to the sweep's.
func (s *Summary) merge(o *Summary) {
	s.Scanned += o.Scanned
	s.Empty += o.Empty
	s.Failed += o.Failed
	s.Deferred += o.Deferred
	s.Processed += o.Processed
	s.Skipped += o.Skipped
	for k, v := range o.Errors {
		s.Errors[k] += v
	}
	s.Notes = append(s.Notes, o.Notes...)
}
