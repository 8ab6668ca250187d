// Package sharing divides the partitions among the hosts that share one
// store (a Valkey keyspace, or a Postgres database), through the store
// itself, so that each partition is scanned by one host at a time.
//
// Every host runs a Coordinator. It keeps its membership in the store
// (with its expiry, by the store's clock) and, each tick, computes from
// the live members which host each partition belongs to: rendezvous
// hashing, so that a host joining or leaving moves only the partitions it
// gains or loses. A host owns a partition only while it holds the
// partition's ownership entry (with its expiry by the store's clock:
// taken when absent or lapsed, renewed while it is its own, given up when
// another host is due to own it), so two hosts never own one partition at
// the same time: a partition moving between hosts is released by one and
// then taken by the other.
//
// Fencing: a host acts on a partition only until ttl - margin after the
// renewal that confirmed it, by its own monotonic clock. A host that
// stalls (GC pause, SIGSTOP, a network partition) stops acting on its
// partitions when that deadline passes, before its entries lapse and
// another host takes them. A call already sent when the deadline passes
// still completes; the store's functions re-validate every change, so
// such a late call is at most redundant.
//
// The logic above is this file's, the same for every store; a Store
// (store.go) only keeps the entries: ValkeyStore (valkey.go) and the
// Postgres store (host/sharing/pgstore).
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
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
)

// Defaults of Config.
const (
	DefaultTTL  = 10 * time.Second
	DefaultTick = time.Second
	// DefaultLeaveTimeout bounds the hand-over at Stop (Leave).
	DefaultLeaveTimeout = 2 * time.Second
)

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
	// Changes, when set, is told of every tick (renewed or failed) and of
	// every change of the owned set.
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
	loop  service.Loop
	store Store
	cfg   Config
	clk   clock.Clock
	log   hclog.Logger
	all   []keys.Partition

	mu      sync.Mutex
	owned   map[keys.Partition]bool
	until   time.Time // the owned set is valid until then (monotonic)
	members []string
	ticks   uint64
	// changes counts changes of the owned set (status readers compare
	// it before and after reading the store).
	changes   uint64
	failures  uint64
	lastError string
	// gains counts the ticks that gave this host partitions it could not
	// act on before them; gained is told of each (see Gains).
	gains  uint64
	gained service.Changes
}

// New returns a coordinator keeping its share in store; Start keeps it
// current.
func New(store Store, cfg Config) *Coordinator {
	cfg = cfg.withDefaults()
	var all []keys.Partition
	for _, f := range []keys.Family{keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota} {
		all = append(all, cfg.Partitions.Partitions(f)...)
	}
	return &Coordinator{store: store, cfg: cfg, clk: cfg.Clock, log: cfg.Logger, all: all, owned: map[keys.Partition]bool{}}
}

// Owns reports whether this host may act on p now.
func (c *Coordinator) Owns(p keys.Partition) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owned[p] && c.clk.Now().Before(c.until)
}

// Gains counts the ticks after which this host owns partitions it could
// not act on just before: partitions it took, and partitions it kept
// whose view had run out before the tick confirmed them (a stall, or
// renewals slower than the view lasts). next is closed at the next such
// tick. Whoever left work to a partition's owner while Owns was false
// (the completion listener) takes it up again at each gain: Owns being
// false says nothing about who, if anyone, acts meanwhile.
func (c *Coordinator) Gains() (n uint64, next <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gains, c.gained.C()
}

// Share returns how many partitions this host may act on now (of every
// family) and how many the deployment has: what it owns while its view
// is valid, nothing once the view ran out.
func (c *Coordinator) Share() (owned, all int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clk.Now().Before(c.until) {
		owned = len(c.owned)
	}
	return owned, len(c.all)
}

// Status is a snapshot of the coordinator's view.
type Status struct {
	ID string
	// Store names the store and the share ("valkey", "postgres (filter
	// none)").
	Store   string
	Members []string
	Owned   map[keys.Family]int // partitions owned now, per family
	// Partitions are the partitions owned now, in family and index order:
	// the fencing view, valid for ValidFor more without a renewal.
	Partitions []keys.Partition
	ValidFor   time.Duration
	// At is when the view was taken (the coordinator's clock).
	At time.Time
	// Ticks counts the ticks that renewed the share, Failures those that
	// failed (LastError says why the last one did).
	Ticks, Failures uint64
	LastError       string
	// Changes counts the changes of the owned set.
	Changes uint64
}

// Status returns the current view.
func (c *Coordinator) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	st := Status{ID: c.cfg.ID, Store: c.store.Describe(), Members: append([]string(nil), c.members...), Owned: map[keys.Family]int{},
		At: now, Ticks: c.ticks, Failures: c.failures, LastError: c.lastError, Changes: c.changes}
	if now.Before(c.until) {
		st.ValidFor = c.until.Sub(now)
		for _, p := range c.all {
			if c.owned[p] {
				st.Owned[p.Family]++
				st.Partitions = append(st.Partitions, p)
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
		c.log.Warn("partition sharing: first tick failed; scanners wait for a tick that succeeds", "store", c.store.Describe(), "error", err)
	}
	return c.loop.Start(ctx, c.run)
}

// Stop stops renewing and gives up what this host holds, so that the
// others take it at once (the entries lapse on their own otherwise).
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
			c.log.Warn("partition sharing: tick failed; keeping what is still valid", "store", c.store.Describe(), "error", err)
		}
	}
}

// Leave gives up every partition held and the membership.
func (c *Coordinator) Leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.LeaveTimeout)
	defer cancel()
	c.mu.Lock()
	var held []keys.Partition
	for _, p := range c.all {
		if c.owned[p] {
			held = append(held, p)
		}
	}
	c.owned = map[keys.Partition]bool{}
	c.changes++
	c.mu.Unlock()
	c.cfg.Changes.Notify()
	if err := c.store.Release(ctx, c.cfg.ID, held); err != nil {
		c.log.Warn("partition sharing: release at leave failed; the entries lapse on their own", "error", err)
	}
	if err := c.store.Leave(ctx, c.cfg.ID); err != nil {
		c.log.Warn("partition sharing: leave failed; the membership lapses on its own", "error", err)
	}
}

// Tick renews this host's membership, reads the live members, and takes,
// renews or gives up each partition by the assignment.
func (c *Coordinator) Tick(ctx context.Context) error {
	err := c.tick(ctx)
	if err != nil {
		c.mu.Lock()
		c.failures++
		c.lastError = err.Error()
		c.mu.Unlock()
		c.cfg.Changes.Notify()
	}
	return err
}

func (c *Coordinator) tick(ctx context.Context) error {
	sent := c.clk.Now()
	// With a store that renews and holds in one call, the partitions the
	// last members gave this host are held in the renewal's call: those
	// are this host's again unless the members changed.
	c.mu.Lock()
	guess, _ := c.split(c.members)
	c.mu.Unlock()
	rh, together := c.store.(RenewHolder)
	together = together && len(guess) > 0
	var members []string
	var guessed []bool
	var err error
	if together {
		members, guessed, err = rh.RenewHold(ctx, c.cfg.ID, c.cfg.TTL, guess)
	} else {
		members, err = c.store.Renew(ctx, c.cfg.ID, c.cfg.TTL)
	}
	if err != nil {
		return err
	}
	sort.Strings(members)
	mine, others := c.split(members)
	isMine := make(map[keys.Partition]bool, len(mine))
	for _, p := range mine {
		isMine[p] = true
	}
	owned := map[keys.Partition]bool{}
	var untaken []keys.Partition // this host's, and not held yet this tick
	if together {
		inGuess := make(map[keys.Partition]bool, len(guess))
		for i, p := range guess {
			inGuess[p] = true
			if guessed[i] && isMine[p] {
				owned[p] = true
			}
		}
		for _, p := range mine {
			if !inGuess[p] {
				untaken = append(untaken, p)
			}
		}
	} else {
		untaken = mine
	}
	// Give up first what another host is due to own (no longer acting on
	// it from here), then take ours. Held in the renewal's call and no
	// longer this host's (the members changed): given up as well.
	var gives []keys.Partition
	c.mu.Lock()
	for _, p := range others {
		if c.owned[p] {
			delete(c.owned, p)
			gives = append(gives, p)
		}
	}
	if len(gives) > 0 {
		c.changes++
	}
	c.mu.Unlock()
	if together {
		for i, p := range guess {
			if guessed[i] && !isMine[p] && !slices.Contains(gives, p) {
				gives = append(gives, p)
			}
		}
	}
	if err := c.store.Release(ctx, c.cfg.ID, gives); err != nil {
		c.log.Warn("partition sharing: release failed; the entries lapse on their own", "error", err)
	}
	if len(untaken) > 0 {
		held, err := c.store.Hold(ctx, c.cfg.ID, c.cfg.TTL, untaken)
		if err != nil {
			// Nothing confirmed: what was owned stays valid only until
			// its deadline.
			return err
		}
		for i, ok := range held {
			if ok {
				owned[untaken[i]] = true
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
	// Kept partitions whose view ran out before this confirmation were
	// not this host's to act on meanwhile: they come back as a gain.
	now := c.clk.Now()
	regained := len(owned) > gained && !now.Before(c.until)
	lapsed := now.Sub(c.until)
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
	if gained > 0 || lost > 0 {
		c.changes++
	}
	c.members = members
	c.ticks++
	c.lastError = ""
	gain := gained > 0 || regained
	if gain {
		c.gains++
	}
	c.mu.Unlock()
	if gain {
		c.gained.Notify()
	}
	c.cfg.Changes.Notify()
	if regained {
		c.log.Warn("partition sharing: this host's view ran out before a renewal confirmed it; it did not act on its partitions meanwhile",
			"for", lapsed, "tick_took", clock.Since(c.clk, sent))
	}
	if changed {
		c.log.Info("partition sharing", "store", c.store.Describe(), "hosts", len(members), "owned", len(owned), "of", len(c.all), "gained", gained, "lost", lost)
	}
	return nil
}

// split divides the partitions between this host (mine) and the others by
// members (none of them this host's without members).
func (c *Coordinator) split(members []string) (mine, others []keys.Partition) {
	for _, p := range c.all {
		if len(members) > 0 && assign(members, p) == c.cfg.ID {
			mine = append(mine, p)
		} else {
			others = append(others, p)
		}
	}
	return mine, others
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
