package scheduler

// What a runner is given: its collaborators (the scanner, the metrics),
// its configuration and its defaults.

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Target yields the scanner to call. The supervisor implements it: the
// scanner behind it changes when a plugin restarts, and is unavailable
// while it restarts.
type Target interface {
	Current() (scannerapi.Scanner, scannerapi.Info, error)
}

// Lease is one call's hold on a scanner instance (see Acquirer).
type Lease struct {
	Scanner scannerapi.Scanner
	Info    scannerapi.Info
	// Host is the instance's own Host; nil means the runner's.
	Host scannerapi.Host
	// Release ends the lease once the call returned; nil is allowed.
	Release func()
	// Outcome, when set, hears after each ScanPartition call whether it
	// ended at its own call deadline (the scanner did not answer in
	// call_timeout), so the instance's owner can restart a plugin that
	// hangs in its calls while still answering health checks.
	Outcome func(timedOut bool)
}

// Acquirer is a Target that hands out the scanner per call instead of per
// cycle. The host's supervisors implement it, so that a hot swap switches
// between two partition calls of a cycle and the old plugin only has to
// finish the calls it already has.
type Acquirer interface {
	Target
	Acquire() (Lease, error)
}

// Recorder receives metrics (host/metrics implements it).
type Recorder interface {
	Cycle(scanner string, d time.Duration)
	Items(scanner string, processed, skipped int64)
	Errors(scanner string, class scannerapi.ErrorClass, code string, n int64)
	Partitions(scanner, outcome string, n int)
	Backlog(scanner string, v int64)
	Lag(scanner string, d time.Duration)
	RPC(scanner, method string, d time.Duration)
}

// Defaults of Config and Tuning.
const (
	DefaultConcurrency  = 8
	DefaultCallTimeout  = 5 * time.Second
	DefaultMaxFollowUps = 8
	// MaxNotes bounds the notes kept from one scan call.
	MaxNotes = 64
	// DefaultBatch is the batch of a scanner whose Info names none.
	DefaultBatch = 50
)

// Bounds of the configuration's scheduler and scanner settings.
const (
	// MinInterval is the shortest scanner interval; FlowFabric clamps to
	// the same floor, so a typo cannot turn a scanner into a busy loop.
	MinInterval = 100 * time.Millisecond
	// MaxConcurrency bounds Concurrency (scheduler.concurrency).
	MaxConcurrency = 1024
	// MaxBatch bounds a scanner's batch (scanners.<name>.batch).
	MaxBatch = 10000
)

// Config tunes one scanner's runner and names its collaborators. Zero
// fields take the defaults above.
type Config struct {
	// ActionBudget bounds the items the scanner acts on per window; past
	// it the runner pauses itself (budget.go). Zero: none.
	ActionBudget ActionBudget
	// Name is the scanner name (metric label, request field).
	Name string
	// Client is the host's Valkey (nil: it serves Postgres alone).
	Client valkey.Client
	// Target is the scanner the runner dispatches to.
	Target Target
	// Host is passed to ScanPartition (a linked scanner uses it; a plugin
	// client ignores it and calls back through the broker). Nil: none.
	Host scannerapi.Host
	// Recorder receives the runner's metrics (nil: none).
	Recorder Recorder
	// Logger receives the runner's logs (nil: none).
	Logger hclog.Logger
	// Interval overrides Info.DefaultInterval when non-zero.
	Interval time.Duration
	// Batch overrides Info.DefaultBatch when non-zero.
	Batch int
	// Partitions are the deployment's partition counts.
	Partitions keys.PartitionConfig
	// Lanes expand "{lane}" sources.
	Lanes []string
	// Owns, when set, says which partitions this host may scan now (the
	// partitions shared among hosts); a cycle over all partitions skips
	// the others. Nil: every partition.
	Owns func(keys.Partition) bool
	// LanesFunc, when set, is asked for the lanes at every cycle instead
	// (the host refreshes them from ff:idx:lanes as producers add lanes).
	LanesFunc func() []string
	// Concurrency bounds concurrent ScanPartition calls.
	Concurrency int
	// CallTimeout is the deadline of one plugin call.
	CallTimeout time.Duration
	// CallParent is the parent of every plugin call's context (its values
	// reach the calls). Calls do not derive from Start's context, so that
	// stopping dispatch does not abort scans in flight: Stop cancels them
	// at its own deadline. Nil means context.Background().
	CallParent context.Context
	// MaxFollowUps bounds the prompt rescans of partitions that report
	// More within one cycle, so a scanner that always says More cannot
	// starve the sleep.
	MaxFollowUps int
	// NoJitter starts the first cycle at once instead of after a random
	// delay within the interval (tests, scan-once).
	NoJitter bool
	// Clock is the time source (the system clock).
	Clock clock.Clock
	// Census, when set, says which lane keys exist, so that lane-scoped
	// sources read only those (nil: every lane's key is read).
	Census Census
	// Epoch is the host's store epoch, shared by its runners (nil: not
	// tracked). The runner bumps it on transport failures and topology
	// changes and sends it with every scan request.
	Epoch *StoreEpoch
	// Postgres is the host's FlowFabric Postgres database, which a scanner
	// with Postgres sources reads (nil: none; such a scanner's cycles
	// fail, saying so).
	Postgres *pgxpool.Pool
	// PostgresReads are the connections the candidate reads run on (nil:
	// Postgres; the host passes its own, postgres.OpenReaders).
	PostgresReads *postgres.Readers
	// PostgresFilter is the host's namespace / instance-tag filter, which
	// the candidate reads apply (postgres.namespace, postgres.instance_tag).
	PostgresFilter scannerapi.Filter
	// Changes, when set, is told of every change of the status (a cycle
	// ended, a cycle could not run).
	Changes *service.Changes
	// Events is the host's new-key event feed: with it on, partitions read
	// empty are skipped until one of their source keys is created, for at
	// most QuietFor (quiet.go). Nil: every partition is read at every
	// interval.
	Events Events
	// QuietFor is the safety interval of quiet partitions (default
	// DefaultQuietFor).
	QuietFor time.Duration
	// Nodes tells which master serves a partition, so that each node's
	// calls are dispatched apart (dispatch.go); one map serves a host's
	// runners. Nil: the runner makes its own.
	Nodes *NodeMap
	// PollOnly turns due-time wake-ups off: partitions are visited at
	// every interval's sweep and only then, and due-ordered sources are
	// read by score, as before wake-ups existed (the benchmarks run both
	// side by side). See wake.go.
	PollOnly bool
}

func (c Config) withDefaults() Config {
	service.Default(&c.MaxFollowUps, DefaultMaxFollowUps)
	service.Default(&c.QuietFor, DefaultQuietFor)
	if c.CallParent == nil {
		c.CallParent = context.Background()
	}
	c.Clock = clock.Or(c.Clock)
	if c.PostgresReads == nil && c.Postgres != nil {
		c.PostgresReads = postgres.SharedReaders(c.Postgres)
	}
	if c.Recorder == nil {
		c.Recorder = nopRecorder{}
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	t := c.tuning().withDefaults()
	c.Concurrency, c.CallTimeout = t.Concurrency, t.CallTimeout
	return c
}

func (c Config) tuning() Tuning {
	return Tuning{Interval: c.Interval, Batch: c.Batch, Concurrency: c.Concurrency, CallTimeout: c.CallTimeout, PollOnly: c.PollOnly}
}

type nopRecorder struct{}

func (nopRecorder) Cycle(string, time.Duration)                         {}
func (nopRecorder) Items(string, int64, int64)                          {}
func (nopRecorder) Errors(string, scannerapi.ErrorClass, string, int64) {}
func (nopRecorder) Partitions(string, string, int)                      {}
func (nopRecorder) Backlog(string, int64)                               {}
func (nopRecorder) Lag(string, time.Duration)                           {}
func (nopRecorder) RPC(string, string, time.Duration)                   {}
