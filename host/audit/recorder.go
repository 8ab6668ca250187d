package audit

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/keys"
)

// Defaults of Config.
const (
	DefaultMaxEntries = 100_000
	DefaultMaxAge     = 7 * 24 * time.Hour
	DefaultQueue      = 65_536
	// batchMax is the most entries one pipeline writes.
	batchMax = 512
	// trimEvery is how often streams are trimmed by age.
	trimEvery = time.Minute
	// scanMax bounds the entries one query reads per stream.
	scanMax = 10_000
)

// Config configures a Recorder. Zero fields take the defaults.
type Config struct {
	// MaxEntries bounds each stream (approximately: XADD MAXLEN ~).
	MaxEntries int64
	// MaxAge bounds each stream's entries by age (XTRIM MINID ~, every
	// minute).
	MaxAge time.Duration
	// Queue bounds the entries waiting to be written; past it they are
	// dropped and counted.
	Queue int
	// Host names this host in its entries.
	Host string
	// Partitions are the deployment's partition counts (the streams a
	// query and the trim visit).
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

// Recorder writes the trail to Valkey and reads it back.
type Recorder struct {
	cfg    Config
	client valkey.Client
	loop   service.Loop
	queue  chan Entry

	written, dropped, failed atomic.Uint64
}

// New returns a recorder writing to client.
func New(client valkey.Client, cfg Config) *Recorder {
	cfg = cfg.withDefaults()
	return &Recorder{cfg: cfg, client: client, queue: make(chan Entry, cfg.Queue)}
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

// Stats are the entries written, dropped (the queue was full) and lost
// to failed writes since the recorder started.
type Stats struct {
	Written uint64 `json:"written"`
	Dropped uint64 `json:"dropped"`
	Failed  uint64 `json:"failed"`
	Queued  int    `json:"queued"`
}

// Stats returns the counts.
func (r *Recorder) Stats() Stats {
	return Stats{Written: r.written.Load(), Dropped: r.dropped.Load(), Failed: r.failed.Load(), Queued: len(r.queue)}
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

// write appends a batch in one pipeline.
func (r *Recorder) write(ctx context.Context, batch []Entry) {
	gs := groups(batch)
	cmds := make(valkey.Commands, 0, len(gs))
	maxLen := strconv.FormatInt(r.cfg.MaxEntries, 10)
	for _, g := range gs {
		cmds = append(cmds, r.client.B().Arbitrary("XADD").Keys(g.stream).Args(append([]string{"MAXLEN", "~", maxLen, "*"}, g.fields()...)...).Build())
	}
	// A batch taken is written even when a stop cancels the loop.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for i, res := range r.client.DoMulti(wctx, cmds...) {
		n := uint64(len(gs[i].items))
		if err := res.Error(); err != nil {
			if r.failed.Add(n) == n {
				r.cfg.Logger.Warn("audit trail: entries not written", "error", err)
			}
			continue
		}
		r.written.Add(n)
	}
}

// streams are every stream of the trail.
func (r *Recorder) streams() []string {
	out := []string{OperatorStream}
	for _, f := range []keys.Family{keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota} {
		for _, p := range r.cfg.Partitions.Partitions(f) {
			out = append(out, "ffscan:audit:"+p.Tag())
		}
	}
	return out
}

// trim drops every stream's entries older than MaxAge.
func (r *Recorder) trim(ctx context.Context) {
	minID := strconv.FormatInt(r.cfg.Clock.Now().Add(-r.cfg.MaxAge).UnixMilli(), 10)
	var cmds valkey.Commands
	for _, s := range r.streams() {
		cmds = append(cmds, r.client.B().Xtrim().Key(s).Minid().Almost().Threshold(minID).Build())
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, res := range r.client.DoMulti(tctx, cmds...) {
		if err := res.Error(); err != nil {
			r.cfg.Logger.Debug("audit trail: trim failed", "error", err)
			return
		}
	}
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

// Query reads entries newest first. Each stream is read back at most
// 10,000 entries deep.
func (r *Recorder) Query(ctx context.Context, f Filter) ([]Entry, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	streams := r.streams()
	if f.Execution != "" {
		id, err := keys.ParseExecutionID(f.Execution)
		if err != nil {
			return nil, fmt.Errorf("execution %q: %w", f.Execution, err)
		}
		f.Execution = id.String()
		streams = []string{"ffscan:audit:" + id.Partition().Tag()}
	}
	if f.Within > 0 {
		if t := r.cfg.Clock.Now().Add(-f.Within); t.After(f.Since) {
			f.Since = t
		}
	}
	start := "-"
	if !f.Since.IsZero() {
		start = strconv.FormatInt(f.Since.UnixMilli(), 10)
	}
	count := int64(scanMax)
	if f.Execution == "" && f.Scanner == "" && f.Kind == "" {
		count = int64(f.Limit)
	}
	cmds := make(valkey.Commands, 0, len(streams))
	for _, s := range streams {
		cmds = append(cmds, r.client.B().Xrevrange().Key(s).End("+").Start(start).Count(count).Build())
	}
	var out []Entry
	for i, res := range r.client.DoMulti(ctx, cmds...) {
		entries, err := res.AsXRange()
		if err != nil && !valkey.IsValkeyNil(err) {
			return nil, fmt.Errorf("read %s: %w", streams[i], err)
		}
		for _, x := range entries {
			for _, e := range entriesOf(x.ID, x.FieldValues) {
				if (f.Execution != "" && e.Execution != f.Execution) || (f.Scanner != "" && e.Scanner != f.Scanner) || (f.Kind != "" && e.Kind != f.Kind) {
					continue
				}
				out = append(out, e)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return idLess(out[j].ID, out[i].ID) })
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// idLess orders stream IDs (ms-seq).
func idLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ai, _ := strconv.ParseInt(am, 10, 64)
	bi, _ := strconv.ParseInt(bm, 10, 64)
	if ai != bi {
		return ai < bi
	}
	aq, _ := strconv.ParseInt(as, 10, 64)
	bq, _ := strconv.ParseInt(bs, 10, 64)
	return aq < bq
}
