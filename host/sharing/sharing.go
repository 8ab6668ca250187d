// Package sharing divides the partitions among the hosts that share one
// keyspace, through the keyspace itself, so that each partition is scanned
// by one host at a time.
//
// Every host runs a Coordinator. It keeps its membership in a sorted set
// (score: the expiry of its membership, by the server's clock) and, each
// tick, computes from the live members which host each partition belongs
// to: rendezvous hashing, so that a host joining or leaving moves only the
// partitions it gains or loses. A host owns a partition only while it
// holds the partition's ownership entry (a field of one hash, with its
// expiry by the server's clock: taken when absent or expired, renewed
// while it is its own, given up when another host is due to own it), so
// two hosts never own one partition at the same time: a partition moving
// between hosts is released by one and then taken by the other.
//
// Fencing: a host acts on a partition only until ttl - margin after the
// renewal that confirmed it, by its own monotonic clock. A host that
// stalls (GC pause, SIGSTOP, a network partition) stops acting on its
// partitions when that deadline passes, before the keys expire and
// another host takes them. A call already sent when the deadline passes
// still completes; the library functions re-validate every change inside
// Valkey, so such a late call is at most redundant.
//
// Timing, with the defaults (ttl 10 s, tick 1 s): a partition moving to a
// joining host is unscanned for at most about one tick (released at the
// old owner's tick, taken at the new owner's); a dead host's partitions
// are taken within ttl + one tick. A single host owns every partition and
// needs no configuration.
package sharing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
)

// Keys of the coordination, one hash tag so that the scripts work on a
// cluster. They are ffscan's own, outside FlowFabric's layout.
const (
	MembersKey = "ffscan:{ffscan}:hosts"
	// OwnersKey is a HASH: field "<family>:<index>" of a partition, value
	// "<host id>|<expiry ms>" (the server's clock). One hash keeps an
	// idle host's renewals at a few commands per tick.
	OwnersKey = "ffscan:{ffscan}:owners"
)

// Defaults of Config.
const (
	DefaultTTL  = 10 * time.Second
	DefaultTick = time.Second
	// DefaultLeaveTimeout bounds the hand-over at Stop (Leave).
	DefaultLeaveTimeout = 2 * time.Second
)

// OwnerField is a partition's field in OwnersKey.
func OwnerField(p keys.Partition) string {
	return p.Family.String() + ":" + strconv.Itoa(int(p.Index))
}

// take holds each of ARGV[3..] for host ARGV[1] for ARGV[2] ms where the
// field is absent, expired or already the host's, in one call; it
// answers, per field, 1 when the host holds it afterwards.
var take = valkey.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, until_ms = ARGV[1], now + tonumber(ARGV[2])
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local cur = redis.call('HMGET', KEYS[1], unpack(fields))
local out, set = {}, {}
for i, f in ipairs(fields) do
  local ok = cur[i] == false
  if not ok then
    local host, exp = string.match(cur[i], '^(.*)|(%d+)$')
    ok = host == me or exp == nil or tonumber(exp) < now
  end
  if ok then
    set[#set + 1] = f
    set[#set + 1] = me .. '|' .. string.format('%d', until_ms)
    out[i] = 1
  else
    out[i] = 0
  end
end
if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)) end
return out`)

// give removes each of ARGV[2..] that host ARGV[1] holds.
var give = valkey.NewLuaScript(`
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
local cur = redis.call('HMGET', KEYS[1], unpack(fields))
local del = {}
for i, f in ipairs(fields) do
  if cur[i] ~= false and string.match(cur[i], '^(.*)|') == ARGV[1] then del[#del + 1] = f end
end
if #del > 0 then return redis.call('HDEL', KEYS[1], unpack(del)) end
return 0`)

// Config configures a Coordinator. Zero fields take the defaults above.
type Config struct {
	// ID names this host among the others (unique per process).
	ID string
	// Partitions are the deployment's partition counts.
	Partitions keys.PartitionConfig
	// TTL is how long membership and ownership last without renewal;
	// Tick how often they are renewed (at most TTL/3).
	TTL, Tick time.Duration
	// LeaveTimeout bounds giving everything up at Stop.
	LeaveTimeout time.Duration
	// Clock is the fencing clock (the system clock): what this host owns
	// is valid until TTL less a margin after the renewal, by this clock.
	Clock clock.Clock
	// Logger for ownership changes.
	Logger hclog.Logger
	// Changes, when set, is told of every tick that renewed the share.
	Changes *service.Changes
}

func (c Config) withDefaults() Config {
	service.Default(&c.TTL, DefaultTTL)
	service.Default(&c.Tick, DefaultTick)
	c.Tick = min(c.Tick, c.TTL/3)
	service.Default(&c.LeaveTimeout, DefaultLeaveTimeout)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Coordinator keeps this host's share of the partitions.
type Coordinator struct {
	loop   service.Loop
	client valkey.Client
	cfg    Config
	clk    clock.Clock
	log    hclog.Logger
	all    []keys.Partition

	mu      sync.Mutex
	owned   map[keys.Partition]bool
	until   time.Time // the owned set is valid until then (monotonic)
	members []string
	ticks   uint64
}

// New returns a coordinator; Start keeps it current.
func New(client valkey.Client, cfg Config) *Coordinator {
	cfg = cfg.withDefaults()
	var all []keys.Partition
	for _, f := range []keys.Family{keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota} {
		all = append(all, cfg.Partitions.Partitions(f)...)
	}
	return &Coordinator{client: client, cfg: cfg, clk: cfg.Clock, log: cfg.Logger, all: all, owned: map[keys.Partition]bool{}}
}

// Owns reports whether this host may act on p now.
func (c *Coordinator) Owns(p keys.Partition) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owned[p] && c.clk.Now().Before(c.until)
}

// Status is a snapshot of the coordinator's view.
type Status struct {
	ID      string
	Members []string
	Owned   map[keys.Family]int // partitions owned now, per family
	Ticks   uint64
}

// Status returns the current view.
func (c *Coordinator) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{ID: c.cfg.ID, Members: append([]string(nil), c.members...), Owned: map[keys.Family]int{}, Ticks: c.ticks}
	if c.clk.Now().Before(c.until) {
		for p, ok := range c.owned {
			if ok {
				st.Owned[p.Family]++
			}
		}
	}
	return st
}

// Start takes this host's share at once (so that it is known before any
// scanner runs; a failed first tick is logged, and the scanners wait for
// one that succeeds), then renews membership and ownership every tick
// until Stop or until ctx ends.
func (c *Coordinator) Start(ctx context.Context) error {
	if err := c.Tick(ctx); err != nil && ctx.Err() == nil {
		c.log.Warn("partition sharing: first tick failed; scanners wait for a tick that succeeds", "error", err)
	}
	return c.loop.Start(ctx, c.run)
}

// Stop stops renewing and gives up what this host holds, so that the
// others take it at once (the keys expire on their own otherwise).
func (c *Coordinator) Stop(ctx context.Context) error {
	err := c.loop.Stop(ctx)
	c.Leave(ctx)
	return err
}

func (c *Coordinator) run(ctx context.Context) {
	t := c.clk.NewTicker(c.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := c.Tick(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("partition sharing: tick failed; keeping what is still valid", "error", err)
		}
	}
}

// Leave gives up membership and every partition held.
func (c *Coordinator) Leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.LeaveTimeout)
	defer cancel()
	c.mu.Lock()
	var held []keys.Partition
	for p, ok := range c.owned {
		if ok {
			held = append(held, p)
		}
	}
	c.owned = map[keys.Partition]bool{}
	c.mu.Unlock()
	if len(held) > 0 {
		args := []string{c.cfg.ID}
		for _, p := range held {
			args = append(args, OwnerField(p))
		}
		give.Exec(ctx, c.client, []string{OwnersKey}, args)
	}
	c.client.Do(ctx, c.client.B().Zrem().Key(MembersKey).Member(c.cfg.ID).Build())
}

// Tick renews this host's membership, reads the live members, and takes,
// renews or gives up each partition by the assignment.
func (c *Coordinator) Tick(ctx context.Context) error {
	sent := c.clk.Now()
	b := c.client.B()
	ttl := c.cfg.TTL.Milliseconds()
	// The clock of the node that holds the sharing keys (a keyless TIME
	// could go to any node, a dead seed included).
	t, err := c.client.Do(ctx, b.Time().Build().SetSlot(MembersKey)).AsIntSlice()
	if err != nil || len(t) != 2 {
		return fmt.Errorf("TIME: %v", err)
	}
	now := t[0]*1000 + t[1]/1000
	res := c.client.DoMulti(ctx,
		b.Zadd().Key(MembersKey).ScoreMember().ScoreMember(float64(now+ttl), c.cfg.ID).Build(),
		b.Zremrangebyscore().Key(MembersKey).Min("-inf").Max(strconv.FormatInt(now, 10)).Build(),
		b.Zrange().Key(MembersKey).Min("0").Max("-1").Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			return fmt.Errorf("membership: %w", err)
		}
	}
	members, err := res[2].AsStrSlice()
	if err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	sort.Strings(members)
	var mine, others []keys.Partition
	for _, p := range c.all {
		if assign(members, p) == c.cfg.ID {
			mine = append(mine, p)
		} else {
			others = append(others, p)
		}
	}
	// Give up first what another host is due to own, then take ours.
	gives := []string{c.cfg.ID}
	c.mu.Lock()
	for _, p := range others {
		if c.owned[p] {
			delete(c.owned, p)
			gives = append(gives, OwnerField(p))
		}
	}
	c.mu.Unlock()
	if len(gives) > 1 {
		if err := give.Exec(ctx, c.client, []string{OwnersKey}, gives).Error(); err != nil {
			c.log.Warn("partition sharing: release failed; the keys expire on their own", "error", err)
		}
	}
	owned := map[keys.Partition]bool{}
	if len(mine) > 0 {
		args := []string{c.cfg.ID, strconv.FormatInt(ttl, 10)}
		for _, p := range mine {
			args = append(args, OwnerField(p))
		}
		got, err := take.Exec(ctx, c.client, []string{OwnersKey}, args).AsIntSlice()
		if err != nil {
			// Nothing confirmed: what was owned stays valid only until
			// its deadline.
			return fmt.Errorf("ownership: %w", err)
		}
		for i, n := range got {
			if n == 1 && i < len(mine) {
				owned[mine[i]] = true
			}
		}
	}
	c.mu.Lock()
	gained, lost := 0, 0
	for p := range owned {
		if !c.owned[p] {
			gained++
		}
	}
	for p := range c.owned {
		if !owned[p] {
			lost++
		}
	}
	c.owned = owned
	// Valid from when the renewals were sent, less a margin for the
	// clocks' drift and the round trip.
	c.until = sent.Add(c.cfg.TTL - c.cfg.TTL/5)
	changed := gained > 0 || lost > 0 || !slices.Equal(c.members, members)
	c.members = members
	c.ticks++
	c.mu.Unlock()
	c.cfg.Changes.Notify()
	if changed {
		c.log.Info("partition sharing", "hosts", len(members), "owned", len(owned), "of", len(c.all), "gained", gained, "lost", lost)
	}
	return nil
}

// assign is the host a partition belongs to among members: the highest
// hash of (host, partition), so a change of members moves only the
// partitions of the hosts that came or went.
func assign(members []string, p keys.Partition) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		h := sha256.Sum256([]byte(m + "\x00" + p.Tag()))
		if s := binary.BigEndian.Uint64(h[:8]); best == "" || s > bestScore {
			best, bestScore = m, s
		}
	}
	return best
}
