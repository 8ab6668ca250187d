package lanes

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
)

// Defaults of KeeperConfig.
const (
	// DefaultRefresh is how often a running host re-reads ff:idx:lanes
	// (and takes a discovery step), so lane-scoped sources pick up lanes
	// producers add after boot.
	DefaultRefresh = 30 * time.Second
	// DefaultDiscoveryPages bounds the discovery SCAN of one refresh:
	// pages of PageSize keys per primary. A lane a producer starts using
	// after boot is found within ceil(keys per primary / (pages x
	// PageSize)) refreshes: within one (30 s) up to 50,000 keys per
	// primary, within 10 (5 min) at 500,000.
	DefaultDiscoveryPages = 50
)

// KeeperConfig configures a Keeper. Zero fields take the defaults above.
type KeeperConfig struct {
	// Configured are the configuration's lanes (lanes:): recorded in
	// ff:idx:lanes at every refresh, and known even when nobody else
	// recorded them.
	Configured []string
	// ReadOnly keeps the keyspace as it is: the lanes are read and
	// discovered, never recorded (a dry-run host).
	ReadOnly       bool
	Refresh        time.Duration
	DiscoveryPages int
	Clock          clock.Clock
	Logger         hclog.Logger
}

func (c KeeperConfig) withDefaults() KeeperConfig {
	service.Default(&c.Refresh, DefaultRefresh)
	service.Default(&c.DiscoveryPages, DefaultDiscoveryPages)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Keeper knows the lanes in use: the configured ones, those recorded in
// ff:idx:lanes and those discovery finds in the keyspace. Load reads them
// at boot; Start keeps them current (a refresh every Refresh, and at once
// when the configured lanes change). Without a Valkey client the lanes are
// the configured ones and nothing runs.
type Keeper struct {
	loop   service.Loop
	client valkey.Client
	disc   *Discovery
	cfg    KeeperConfig
	log    hclog.Logger
	known  atomic.Pointer[[]string]
	now    chan struct{} // asks the refresh for an immediate merge

	mu         sync.Mutex
	configured []string
	// seen are lanes whose keys new-key events named (Saw): known at
	// once, and recorded with the configured ones at every refresh.
	seen []string

	// TestSignals fire at a keeper's events for tests that Init them.
	TestSignals KeeperTestSignals
}

// KeeperTestSignals are a Keeper's events.
type KeeperTestSignals struct {
	// Refreshed: a refresh ended, with the lanes known after it.
	Refreshed testsignal.Signal[[]string]
}

// NewKeeper returns a keeper over client's keyspace (nil: none), knowing
// the configured lanes until Load.
func NewKeeper(client valkey.Client, cfg KeeperConfig) *Keeper {
	cfg = cfg.withDefaults()
	k := &Keeper{client: client, cfg: cfg, log: cfg.Logger, now: make(chan struct{}, 1), configured: slices.Clone(cfg.Configured)}
	if client != nil {
		k.disc = New(client)
	}
	known := slices.Clone(cfg.Configured)
	k.known.Store(&known)
	return k
}

// Lanes returns the lanes known now (sorted). Do not modify the slice.
func (k *Keeper) Lanes() []string { return *k.known.Load() }

// Load merges the configured lanes with ff:idx:lanes (only reads it when
// read only) and then runs one full discovery pass, so that lanes in use
// that nobody configured or recorded are known before anything runs.
func (k *Keeper) Load(ctx context.Context) error {
	if k.client == nil {
		return nil
	}
	var known []string
	var err error
	if k.cfg.ReadOnly {
		known, err = ReadLanes(ctx, k.client, k.configuredLanes(), k.log)
	} else {
		known, err = MergeLanes(ctx, k.client, k.configuredLanes(), k.log)
	}
	if err != nil {
		return err
	}
	k.known.Store(&known)
	k.Discover(ctx)
	return nil
}

// Discover runs one full discovery pass and adds the lanes found to the
// known ones (and to ff:idx:lanes, unless read only). A failure is logged:
// the known lanes stay.
func (k *Keeper) Discover(ctx context.Context) {
	if k.disc == nil {
		return // no Valkey
	}
	found, _, err := k.disc.Step(ctx, 0)
	if err != nil {
		k.log.Warn("lane discovery failed; lanes in use that are not recorded stay unseen until it succeeds", "error", err)
	}
	if len(found) == 0 {
		return
	}
	known := k.Lanes()
	merged := UnionLanes(known, found, k.log)
	if !k.cfg.ReadOnly {
		if m, err := MergeLanes(ctx, k.client, append(k.configuredLanes(), merged...), k.log); err != nil {
			k.log.Warn("could not record discovered lanes in "+keys.LanesIndex, "error", err)
		} else {
			merged = m
		}
	}
	if !slices.Equal(known, merged) {
		k.log.Info("lanes discovered", "lanes", merged)
	}
	k.known.Store(&merged)
}

// SetConfigured changes the configured lanes (a reload); a running keeper
// records them at once.
func (k *Keeper) SetConfigured(lanes []string) {
	k.mu.Lock()
	k.configured = slices.Clone(lanes)
	k.mu.Unlock()
	select {
	case k.now <- struct{}{}:
	default:
	}
}

func (k *Keeper) configuredLanes() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append(slices.Clone(k.configured), k.seen...)
}

// Saw makes a lane known at once: a key of it was just created (a new-key
// event), so lane-scoped sources read it from their next sweep instead of
// after the next refresh. The refresh it asks for records it in
// ff:idx:lanes (unless read only).
func (k *Keeper) Saw(lane string) {
	known := k.Lanes()
	if _, found := slices.BinarySearch(known, lane); found {
		return
	}
	if keys.ValidateLane(lane) != nil {
		return
	}
	k.mu.Lock()
	if !slices.Contains(k.seen, lane) {
		k.seen = append(k.seen, lane)
	}
	// Stored under mu so that two Saws do not lose each other's lane (a
	// refresh stores what it read, which includes seen).
	merged := UnionLanes(k.Lanes(), []string{lane}, k.log)
	k.known.Store(&merged)
	k.mu.Unlock()
	k.log.Info("new lane in use", "lane", lane)
	select {
	case k.now <- struct{}{}:
	default:
	}
}

// Start refreshes the lanes every Refresh until Stop or until ctx ends;
// without Valkey it does nothing.
func (k *Keeper) Start(ctx context.Context) error {
	if k.client == nil || k.cfg.ReadOnly {
		return nil
	}
	return k.loop.Start(ctx, k.refreshLoop)
}

// Stop stops refreshing.
func (k *Keeper) Stop(ctx context.Context) error { return k.loop.Stop(ctx) }

func (k *Keeper) refreshLoop(ctx context.Context) {
	t := k.cfg.Clock.NewTicker(k.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-k.now:
		}
		k.refresh(ctx)
	}
}

// refresh takes one discovery step and records the configured and found
// lanes in ff:idx:lanes; the known lanes become what is recorded there.
func (k *Keeper) refresh(ctx context.Context) {
	record := k.configuredLanes()
	found, _, derr := k.disc.Step(ctx, k.cfg.DiscoveryPages)
	if derr != nil && ctx.Err() == nil {
		k.log.Warn("lane discovery step failed; it starts over on the next refresh", "error", derr)
	}
	record = append(record, found...)
	lanes, err := MergeLanes(ctx, k.client, record, k.log)
	if err != nil {
		if ctx.Err() == nil {
			k.log.Warn("lane refresh failed; keeping the known lanes", "error", err)
		}
		k.TestSignals.Refreshed.Signal(k.Lanes())
		return
	}
	if old := k.Lanes(); !slices.Equal(old, lanes) {
		k.log.Info("lanes changed", "lanes", lanes)
	}
	k.known.Store(&lanes)
	k.TestSignals.Refreshed.Signal(lanes)
}
