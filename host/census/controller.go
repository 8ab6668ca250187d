package census

// The controller: when the census is worth keeping, and the pacing of its
// passes. Decide and the pacing are pure (time is an input); the
// controller's loop only gathers their inputs (the scanners' load, the
// keyspace's size) and carries out what they say.

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/lanes"
	"github.com/ffscan/ffscan/host/service"
)

// Mode is scheduler.lane_census: auto keeps the census while it is
// cheaper than reading every lane's key, on always, off never.
type Mode string

// Modes.
const (
	ModeAuto Mode = "auto"
	ModeOn   Mode = "on"
	ModeOff  Mode = "off"
)

// Defaults of ControllerConfig.
const (
	DefaultMode = ModeAuto
	// DefaultGrace is how long the census outlives the lane-scoped
	// scanners' load dropping to nothing: a scanner briefly unavailable
	// (a plugin restarting, a swap) reports no load, and the census is
	// kept through such gaps rather than forgotten and warmed again, with
	// every lane key read in between.
	DefaultGrace = 30 * time.Second
	// DefaultMinLanes is the fewest lanes auto mode uses the census for:
	// with few lanes, reading every lane's key costs a few commands per
	// interval (one EXISTS covers a lane's keys of 256 partitions on a
	// single node), and the census would only add latency for new lane
	// keys.
	DefaultMinLanes = 64
	// DefaultKeysMaxAge is how old the keyspace's size may be before it
	// is read again (DBSIZE of every primary).
	DefaultKeysMaxAge = 2 * time.Second
	// DefaultIdle is the wait between two looks while the census is not
	// wanted.
	DefaultIdle = time.Second
)

const (
	// worth is how much cheaper the census must be than reading every
	// lane's key before auto mode uses it.
	worth = 2
	// commandCost weighs a command against a key lookup in the comparison
	// (parsing, dispatch and the reply cost about as much as a few dozen
	// lookups).
	commandCost = 20
	// minPeriod bounds how often a pass may run.
	minPeriod = 100 * time.Millisecond
	// minWait is the shortest wait after a pass ended early.
	minWait = 10 * time.Millisecond
	// stepsPerPass spreads a pass over a period.
	stepsPerPass = 8
)

// Load is what the lane-scoped scanners cost when every lane's key is
// read: keys read per second over all of them, and the shortest interval
// among them.
type Load struct {
	KeysPerSecond float64
	Interval      time.Duration
}

// Keyspace is the size of the primaries' keyspace.
type Keyspace struct {
	Keys      int64 // all primaries together
	Largest   int64 // the largest primary's
	Primaries int
	At        time.Time // when it was read; zero: never
}

// Input is what one decision is made on.
type Input struct {
	Mode     Mode
	Load     Load
	Keyspace Keyspace
	// Cluster: one EXISTS covers one key (on a single node, a lane's
	// keys of 256 partitions).
	Cluster bool
}

// Decision says whether the census is wanted and how a pass is paced.
type Decision struct {
	Want bool
	// Period is how long a pass should take (half the shortest
	// lane-scoped interval); Pages how many SCAN pages one step reads, so
	// that a pass takes stepsPerPass steps.
	Period time.Duration
	Pages  int
}

// Eligible says whether the census is considered at all: a lane-scoped
// load, and in auto mode enough lanes.
func Eligible(mode Mode, load Load, lanes, minLanes int) bool {
	return mode != ModeOff && load.KeysPerSecond > 0 && (mode == ModeOn || lanes >= minLanes)
}

// Decide compares, in key lookups per second, a census pass over the
// primaries' keyspace every half of the shortest lane-scoped interval
// against reading every lane's key directly (partitions x lanes x
// lane-scoped sources per interval, summed over the scanners). The census
// wins for many lanes over a keyspace of moderate size (thousands of
// lanes, an idle or modest deployment), not for one lane over millions of
// keys. Mode on wants it whatever the cost. Call it only when Eligible.
func Decide(in Input) Decision {
	period := max(in.Load.Interval/2, minPeriod)
	ks := in.Keyspace
	// Key lookups plus commands, per second: SCAN pages over every key
	// against the lane keys read directly (on a single node EXISTS checks
	// 256 partitions' keys in one command).
	cost := (float64(ks.Keys) + commandCost*(float64(ks.Keys)/lanes.PageSize+float64(ks.Primaries))) / period.Seconds()
	perCommand := 256.0
	if in.Cluster {
		perCommand = 1
	}
	direct := in.Load.KeysPerSecond
	directCost := direct + commandCost*direct/perCommand
	want := in.Mode == ModeOn || (!ks.At.IsZero() && cost*worth < directCost)
	return Decision{Want: want, Period: period, Pages: int(ks.Largest/lanes.PageSize/stepsPerPass) + 1}
}

// memory is what the controller carries from one step to the next.
type memory struct {
	lastLoad   Load
	lastLoadAt time.Time
	passStart  time.Time // zero: no pass in progress
	on         bool
}

// load is the load to judge by at now: the one reported, or through a gap
// in it (no load) shorter than grace, the last one reported.
func (m *memory) load(now time.Time, l Load, grace time.Duration) Load {
	if l.KeysPerSecond > 0 {
		m.lastLoad, m.lastLoadAt = l, now
		return l
	}
	if !m.lastLoadAt.IsZero() && now.Sub(m.lastLoadAt) < grace {
		return m.lastLoad
	}
	return l
}

// stepWait is the wait after a step of a pass that goes on: a pass per
// period, in stepsPerPass steps.
func (m *memory) stepWait(now time.Time, period time.Duration) time.Duration {
	if m.passStart.IsZero() {
		m.passStart = now
	}
	return period / stepsPerPass
}

// passEnded is the wait after a pass ended (or failed): the rest of its
// period, a pass that ends early waiting for the period's end.
func (m *memory) passEnded(now time.Time, period time.Duration) time.Duration {
	wait := max(m.passStart.Add(period).Sub(now), minWait)
	m.passStart = time.Time{}
	return wait
}

// ControllerConfig configures a Controller. Zero fields take the defaults
// above.
type ControllerConfig struct {
	Mode Mode
	// Load reports the lane-scoped scanners' load now.
	Load func() Load
	// Lanes reports how many lanes are known now.
	Lanes      func() int
	Grace      time.Duration
	MinLanes   int
	KeysMaxAge time.Duration
	Idle       time.Duration
	Clock      clock.Clock
	Logger     hclog.Logger
}

func (c ControllerConfig) withDefaults() ControllerConfig {
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	if c.Load == nil {
		c.Load = func() Load { return Load{} }
	}
	if c.Lanes == nil {
		c.Lanes = func() int { return 0 }
	}
	service.Default(&c.Grace, DefaultGrace)
	service.Default(&c.KeysMaxAge, DefaultKeysMaxAge)
	service.Default(&c.Idle, DefaultIdle)
	service.Default(&c.MinLanes, DefaultMinLanes)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Controller keeps a Census for as long as Decide wants it, stepping its
// passes at their pace.
type Controller struct {
	loop   service.Loop
	census *Census
	client valkey.Client
	cfg    ControllerConfig
	clk    clock.Clock
	log    hclog.Logger

	mu   sync.Mutex
	mode Mode

	// Owned by the loop.
	mem  memory
	keys Keyspace

	// TestSignals fire at the controller's events for tests that Init
	// them.
	TestSignals ControllerTestSignals
}

// ControllerTestSignals are a Controller's events.
type ControllerTestSignals struct {
	// Stepped: a step ended, with what was decided (the zero Decision
	// when the census was not eligible) and the wait planned after it.
	Stepped testsignal.Signal[Step]
}

// Step is one step of the controller, for tests.
type Step struct {
	Decision Decision
	Wait     time.Duration
}

// NewController returns a controller of census over client's primaries.
func NewController(census *Census, client valkey.Client, cfg ControllerConfig) *Controller {
	cfg = cfg.withDefaults()
	return &Controller{census: census, client: client, cfg: cfg, clk: cfg.Clock, log: cfg.Logger, mode: cfg.Mode}
}

// SetMode changes the mode (a reload); it applies from the next step.
func (c *Controller) SetMode(m Mode) {
	c.mu.Lock()
	c.mode = m
	c.mu.Unlock()
}

func (c *Controller) currentMode() Mode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mode
}

// Start runs the controller until Stop or until ctx ends.
func (c *Controller) Start(ctx context.Context) error {
	return c.loop.Start(ctx, c.run)
}

// Stop stops it; the census keeps what it knows.
func (c *Controller) Stop(ctx context.Context) error { return c.loop.Stop(ctx) }

func (c *Controller) run(ctx context.Context) {
	for {
		wait := c.step(ctx)
		if !clock.Sleep(ctx, c.clk, wait) {
			return
		}
	}
}

// step makes one decision, carries it out and returns the wait before the
// next.
func (c *Controller) step(ctx context.Context) time.Duration {
	now := c.clk.Now()
	mode := c.currentMode()
	load := c.mem.load(now, c.cfg.Load(), c.cfg.Grace)
	var d Decision
	wait := c.cfg.Idle
	if Eligible(mode, load, c.cfg.Lanes(), c.cfg.MinLanes) {
		if now.Sub(c.keys.At) > c.cfg.KeysMaxAge {
			if ks, err := primaryKeys(ctx, c.client); err == nil {
				ks.At = now
				c.keys = ks
			} else if ctx.Err() == nil {
				c.log.Debug("lane census: DBSIZE failed", "error", err)
			}
		}
		d = Decide(Input{Mode: mode, Load: load, Keyspace: c.keys, Cluster: c.client.Mode() == valkey.ClientModeCluster})
		if d.Want {
			wait = c.stepPass(ctx, now, d)
		}
	}
	c.switchTo(d.Want, load)
	c.TestSignals.Stepped.Signal(Step{Decision: d, Wait: wait})
	return wait
}

// stepPass reads the census's next pages and returns the wait before the
// next step.
func (c *Controller) stepPass(ctx context.Context, now time.Time, d Decision) time.Duration {
	wait := c.mem.stepWait(now, d.Period)
	c.census.SetEnabled(true)
	ended, err := c.census.Step(ctx, d.Pages)
	if err != nil && ctx.Err() == nil {
		c.log.Debug("lane census step failed; the pass starts over", "error", err)
	}
	if ended || err != nil || !c.census.InPass() {
		wait = c.mem.passEnded(c.clk.Now(), d.Period)
	}
	return wait
}

// switchTo turns the census on or off, saying so when it changes.
func (c *Controller) switchTo(want bool, load Load) {
	if want == c.mem.on {
		return
	}
	c.mem.on = want
	if want {
		c.log.Info("lane census on: lane-scoped sources read only the lane keys that exist",
			"lane_key_reads_per_second_without", int64(load.KeysPerSecond), "keys", c.keys.Keys)
		return
	}
	c.census.SetEnabled(false)
	c.log.Info("lane census off: every lane's key is read")
}

// primaryKeys reads the size of every primary's keyspace.
func primaryKeys(ctx context.Context, client valkey.Client) (Keyspace, error) {
	var ks Keyspace
	for _, node := range client.Nodes() {
		primary, err := lanes.IsPrimary(ctx, node)
		if err != nil {
			return Keyspace{}, err
		}
		if !primary {
			continue
		}
		n, err := node.Do(ctx, node.B().Dbsize().Build()).AsInt64()
		if err != nil {
			return Keyspace{}, err
		}
		ks.Keys += n
		ks.Largest = max(ks.Largest, n)
		ks.Primaries++
	}
	return ks, nil
}
