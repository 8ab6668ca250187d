package pluginhost

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/scancall"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Linked wraps a scanner linked into the host process so that it behaves
// exactly like a scanner of a launched plugin (see Plugin.Scanners):
//
//   - ScanPartition and SampleBacklog called with a nil Host use
//     BindHost(cb, name);
//   - a panic becomes an error instead of taking the host down;
//   - results are normalized as if they had crossed the wire (a nil
//     result becomes an empty one, empty slices become nil, and free-text
//     fields are made valid UTF-8);
//   - the context carries a logger named after the scanner if it carries
//     none (see WithLogger).
//
// The host can then drive linked and launched scanners through the same
// code path, and a benchmark or test compares like with like.
func Linked(s scannerapi.Scanner, cb Callbacks) HostScanner {
	return &linked{s: s, cb: cb, name: s.Info().Name}
}

// HostScanner is a scanner as the host drives it, whether launched
// (Plugin.Scanners) or linked (Linked): it always answers SampleBacklog,
// with nil ("not measured") when the scanner is not a BacklogSampler.
type HostScanner interface {
	scannerapi.Scanner
	scannerapi.BacklogSampler
}

type linked struct {
	s    scannerapi.Scanner
	cb   Callbacks
	name string
}

func (l *linked) Info() scannerapi.Info { return l.s.Info() }

func (l *linked) ctx(ctx context.Context) context.Context {
	if _, ok := scancall.Logger(ctx); ok {
		return ctx
	}
	return scancall.WithLogger(ctx, hclog.Default().Named(l.name).With("scanner", l.name))
}

func (l *linked) host(h scannerapi.Host) (scannerapi.Host, error) {
	if h != nil {
		return h, nil
	}
	if l.cb == nil {
		return nil, fmt.Errorf("scanner %s: no Host given and no Callbacks to bind one", l.name)
	}
	return BindHost(l.cb, l.name), nil
}

func (l *linked) Configure(ctx context.Context, options map[string]string) (err error) {
	defer scancall.Recover(l.name, "Configure", &err)
	return l.s.Configure(l.ctx(ctx), options)
}

func (l *linked) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (res *scannerapi.ScanResult, err error) {
	defer scancall.Recover(l.name, "ScanPartition", &err)
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	if req.Scanner == "" {
		r := *req
		r.Scanner = l.name
		req = &r
	}
	res, err = l.s.ScanPartition(l.ctx(ctx), h, req)
	if err != nil {
		return nil, err
	}
	return normalize(res), nil
}

func (l *linked) SampleBacklog(ctx context.Context, host scannerapi.Host, partitions []keys.Partition) (out []int64, err error) {
	defer scancall.Recover(l.name, "SampleBacklog", &err)
	sampler, ok := l.s.(scannerapi.BacklogSampler)
	if !ok {
		return nil, nil // not measured, as a launched plugin answers
	}
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	return sampler.SampleBacklog(l.ctx(ctx), h, partitions)
}

// normalize returns r in the form it has after crossing the plugin wire
// (scannerapi's scanResultToPB, then scanResultFromPB): a nil result
// becomes an empty one, empty slices become nil, and the free-text fields
// the protocol carries as strings (error classes and codes, notes) are
// made valid UTF-8. TestLaunchedScannerMatchesLinked holds it to the
// wire's result.
func normalize(r *scannerapi.ScanResult) *scannerapi.ScanResult {
	if r == nil {
		return &scannerapi.ScanResult{}
	}
	out := &scannerapi.ScanResult{
		Processed: r.Processed, Skipped: r.Skipped, More: r.More,
		Backlog: r.Backlog, HasBacklog: r.HasBacklog,
		Settled: r.Settled, Lag: r.Lag, HasLag: r.HasLag,
	}
	for _, e := range r.Errors {
		out.Errors = append(out.Errors, scannerapi.ErrorCount{
			Class: scannerapi.ErrorClass(codec.ValidUTF8(string(e.Class))), Code: codec.ValidUTF8(e.Code), Count: e.Count,
		})
	}
	for _, n := range r.Notes {
		out.Notes = append(out.Notes, codec.ValidUTF8(n))
	}
	return out
}
