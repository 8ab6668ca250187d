package audit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/keys"
)

// Defaults of Config.
const (
	DefaultMaxEntries = 100_000
	DefaultMaxAge     = 7 * 24 * time.Hour
	DefaultQueue      = 65_536
	// batchMax is the most entries one write sends (one pipeline, one
	// statement).
	batchMax = 512
	// trimEvery is how often the trail is trimmed by age.
	trimEvery = time.Minute
	// scanMax bounds the entries one query reads per Valkey stream.
	scanMax = 10_000
)

// Config configures a Recorder. Zero fields take the defaults.
type Config struct {
	// MaxEntries bounds the trail's size at every write: on Valkey each
	// stream (approximately: XADD MAXLEN ~), on Postgres the whole table
	// (see postgres.go).
	MaxEntries int64
	// MaxAge bounds the entries by age, trimmed every minute (on Valkey
	// XTRIM MINID ~, on Postgres a DELETE).
	MaxAge time.Duration
	// Queue bounds the entries waiting to be written; past it they are
	// dropped and counted.
	Queue int
	// Host names this host in its entries.
	Host string
	// Partitions are the deployment's partition counts (the Valkey
	// streams a query and the trim visit).
	Partitions keys.PartitionConfig
	Clock      clock.Clock
	Logger     hclog.Logger
}

func (c Config) withDefaults() Config {
	service.Default(&c.MaxEntries, DefaultMaxEntries)
	service.Default(&c.MaxAge, DefaultMaxAge)
	service.Default(&c.Queue, DefaultQueue)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Recorder writes the trail to its store and reads it back.
type Recorder struct {
	cfg   Config
	store Store
	loop  service.Loop
	queue chan Entry

	written, dropped, failed atomic.Uint64

	// Trimmed fires after each trim by age, with its error (tests).
	Trimmed testsignal.Signal[error]
}

// newRecorder returns a recorder writing to store (cfg with its
// defaults).
func newRecorder(store Store, cfg Config) *Recorder {
	return &Recorder{cfg: cfg, store: store, queue: make(chan Entry, cfg.Queue)}
}

// Record queues e (its host and time set here when missing); it never
// blocks: a full queue drops e and counts it.
func (r *Recorder) Record(e Entry) {
	if r == nil {
		return
	}
	if e.At.IsZero() {
		e.At = r.cfg.Clock.Now()
	}
	if e.Host == "" {
		e.Host = r.cfg.Host
	}
	select {
	case r.queue <- e:
	default:
		r.dropped.Add(1)
	}
}

// RecordWrite records a write a scanner's plugin sent and the host ran,
// as Record(ScannerEntry(...)) does, but leaves reading its key and
// execution to the writer: the caller is on the path of the scanner's
// reply.
func (r *Recorder) RecordWrite(scanner, digest string, d shadow.Decision, outcome string) {
	if r == nil {
		return
	}
	r.Record(Entry{Kind: KindScanner, Scanner: scanner, Digest: digest, Command: d.Command, Outcome: outcome, write: &d})
}

// Stats are the entries written, dropped (the queue was full) and lost
// to failed writes since the recorder started, and the store they go to.
type Stats struct {
	Store   string `json:"store"`
	Written uint64 `json:"written"`
	Dropped uint64 `json:"dropped"`
	Failed  uint64 `json:"failed"`
	Queued  int    `json:"queued"`
}

// Stats returns the counts.
func (r *Recorder) Stats() Stats {
	return Stats{Store: r.store.Name(), Written: r.written.Load(), Dropped: r.dropped.Load(), Failed: r.failed.Load(), Queued: len(r.queue)}
}

// Start runs the writer and the trim until Stop (service.ErrStarted on
// a second Start).
func (r *Recorder) Start(ctx context.Context) error {
	return r.loop.Start(ctx, r.run)
}

// Stop writes what is queued (until ctx ends) and stops.
func (r *Recorder) Stop(ctx context.Context) error {
	err := r.loop.Stop(ctx)
	r.drain(ctx)
	return err
}

func (r *Recorder) run(ctx context.Context) {
	trim := r.cfg.Clock.NewTicker(trimEvery)
	defer trim.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-r.queue:
			r.write(ctx, r.take(e))
		case <-trim.C():
			r.trim(ctx)
		}
	}
}

// take is e and what else is queued, up to batchMax.
func (r *Recorder) take(e Entry) []Entry {
	batch := []Entry{e}
	for len(batch) < batchMax {
		select {
		case e := <-r.queue:
			batch = append(batch, e)
		default:
			return batch
		}
	}
	return batch
}

// drain writes the queue's entries at a stop, until ctx ends (what is
// left then is counted as dropped).
func (r *Recorder) drain(ctx context.Context) {
	for {
		if ctx.Err() != nil {
			r.dropped.Add(uint64(len(r.queue)))
			return
		}
		select {
		case e := <-r.queue:
			r.write(ctx, r.take(e))
		default:
			return
		}
	}
}

// write appends a batch in one round trip.
func (r *Recorder) write(ctx context.Context, batch []Entry) {
	for i := range batch {
		if d := batch[i].write; d != nil {
			batch[i] = batch[i].about(*d)
		}
		batch[i] = batch[i].bounded()
	}
	// A batch taken is written even when a stop cancels the loop.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	failed, err := r.store.Write(wctx, batch)
	if failed > 0 && r.failed.Add(uint64(failed)) == uint64(failed) {
		r.cfg.Logger.Warn("audit trail: entries not written", "error", err)
	}
	r.written.Add(uint64(len(batch) - failed))
}

// trim drops the entries older than MaxAge.
func (r *Recorder) trim(ctx context.Context) {
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := r.store.Trim(tctx, r.cfg.Clock.Now().Add(-r.cfg.MaxAge))
	if err != nil {
		r.cfg.Logger.Debug("audit trail: trim failed", "error", err)
	}
	r.Trimmed.Signal(err)
}

// Filter selects entries of the trail.
type Filter struct {
	// Execution: only the entries about it (read from its partition's
	// stream alone).
	Execution string
	// Scanner, Kind: only these.
	Scanner, Kind string
	// Since: only entries at or after it (zero: any); Within: only the
	// last Within's (read with the recorder's clock; zero: any).
	Since  time.Time
	Within time.Duration
	// Limit bounds the entries returned (newest first; 0: 100).
	Limit int
}

// Query reads entries newest first (on Valkey, each stream is read back
// at most 10,000 entries deep).
func (r *Recorder) Query(ctx context.Context, f Filter) ([]Entry, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.Execution != "" {
		id, err := keys.ParseExecutionID(f.Execution)
		if err != nil {
			return nil, fmt.Errorf("execution %q: %w", f.Execution, err)
		}
		f.Execution = id.String()
	}
	if f.Within > 0 {
		if t := r.cfg.Clock.Now().Add(-f.Within); t.After(f.Since) {
			f.Since = t
		}
		f.Within = 0
	}
	return r.store.Query(ctx, f)
}
