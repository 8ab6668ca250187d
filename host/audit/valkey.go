package audit

// The trail on Valkey: a stream per partition beside the partition's own
// keys, and ffscan:{ffscan}:audit for the rest (see the package comment).

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
)

// New returns a recorder writing to Valkey through client.
func New(client valkey.Client, cfg Config) *Recorder {
	cfg = cfg.withDefaults()
	return newRecorder(&valkeyStore{client: client, maxEntries: cfg.MaxEntries, parts: cfg.Partitions}, cfg)
}

// valkeyStore keeps the trail in streams, each bounded by length at every
// append (XADD MAXLEN ~) and by age by the trim (XTRIM MINID ~). One
// call's actions on a partition share a stream entry (group.go).
type valkeyStore struct {
	client     valkey.Client
	maxEntries int64
	// parts are the deployment's partition counts: the streams a query
	// and the trim visit.
	parts keys.PartitionConfig
}

// Name implements Store.
func (s *valkeyStore) Name() string { return "valkey" }

// Write appends a batch in one pipeline.
func (s *valkeyStore) Write(ctx context.Context, batch []Entry) (failed int, err error) {
	gs := groups(batch)
	cmds := make(valkey.Commands, 0, len(gs))
	maxLen := strconv.FormatInt(s.maxEntries, 10)
	for _, g := range gs {
		cmds = append(cmds, s.client.B().Arbitrary("XADD").Keys(g.stream).Args(append([]string{"MAXLEN", "~", maxLen, "*"}, g.fields()...)...).Build())
	}
	for i, res := range s.client.DoMulti(ctx, cmds...) {
		if rerr := res.Error(); rerr != nil {
			failed += len(gs[i].items)
			if err == nil {
				err = rerr
			}
		}
	}
	return failed, err
}

// streams are every stream of the trail.
func (s *valkeyStore) streams() []string {
	out := []string{OperatorStream}
	for _, f := range []keys.Family{keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota} {
		for _, p := range s.parts.Partitions(f) {
			out = append(out, "ffscan:audit:"+p.Tag())
		}
	}
	return out
}

// Trim drops every stream's entries older than before.
func (s *valkeyStore) Trim(ctx context.Context, before time.Time) error {
	minID := strconv.FormatInt(before.UnixMilli(), 10)
	var cmds valkey.Commands
	for _, st := range s.streams() {
		cmds = append(cmds, s.client.B().Xtrim().Key(st).Minid().Almost().Threshold(minID).Build())
	}
	for _, res := range s.client.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			return err
		}
	}
	return nil
}

// Query reads the streams newest first: one execution's from its
// partition's stream alone, else every stream. Each stream is read back
// at most scanMax entries deep.
func (s *valkeyStore) Query(ctx context.Context, f Filter) ([]Entry, error) {
	streams := s.streams()
	if f.Execution != "" {
		id, err := keys.ParseExecutionID(f.Execution)
		if err != nil {
			return nil, fmt.Errorf("execution %q: %w", f.Execution, err)
		}
		streams = []string{"ffscan:audit:" + id.Partition().Tag()}
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
	for _, st := range streams {
		cmds = append(cmds, s.client.B().Xrevrange().Key(st).End("+").Start(start).Count(count).Build())
	}
	var out []Entry
	for i, res := range s.client.DoMulti(ctx, cmds...) {
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
