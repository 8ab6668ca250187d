package scannerapi

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
)

// Callbacks is what the host implements to run scanners' commands: one
// Exec per batch, told which scanner sent it so the host can enforce that
// scanner's allowlist (Info.Commands, Info.Functions, the "ff:" prefix).
// The same implementation serves linked scanners (through BindHost or
// Linked) and plugin processes (through LaunchConfig.Callbacks).
type Callbacks interface {
	Exec(ctx context.Context, scanner string, cmds []Command) ([]Reply, error)
}

// CallbacksFunc adapts a function to Callbacks.
type CallbacksFunc func(ctx context.Context, scanner string, cmds []Command) ([]Reply, error)

// Exec calls f.
func (f CallbacksFunc) Exec(ctx context.Context, scanner string, cmds []Command) ([]Reply, error) {
	return f(ctx, scanner, cmds)
}

// HostFunc adapts a function to Host.
type HostFunc func(ctx context.Context, cmds []Command) ([]Reply, error)

// Exec calls f.
func (f HostFunc) Exec(ctx context.Context, cmds []Command) ([]Reply, error) { return f(ctx, cmds) }

// BindHost returns the Host a linked scanner named scanner uses: every Exec
// goes to cb with that name. It is the in-process counterpart of the
// callback channel a plugin process gets.
func BindHost(cb Callbacks, scanner string) Host {
	return boundHost{cb: cb, scanner: scanner}
}

type boundHost struct {
	cb      Callbacks
	scanner string
}

func (h boundHost) Exec(ctx context.Context, cmds []Command) ([]Reply, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	replies, err := h.cb.Exec(ctx, h.scanner, cmds)
	if err != nil {
		return nil, err
	}
	if len(replies) != len(cmds) {
		return nil, fmt.Errorf("scannerapi: host answered %d replies to %d commands", len(replies), len(cmds))
	}
	return replies, nil
}

// Linked wraps a scanner linked into the host process so that it behaves
// exactly like a scanner of a launched plugin (see Plugin.Scanners):
//
//   - ScanPartition and SampleBacklog called with a nil Host use
//     BindHost(cb, name);
//   - a panic becomes an error instead of taking the host down;
//   - results are normalized as if they had crossed the wire (Normalize);
//   - the context carries a logger named after the scanner if it carries
//     none (see WithLogger).
//
// The host can then drive linked and launched scanners through the same
// code path, and a benchmark or test compares like with like.
func Linked(s Scanner, cb Callbacks) HostScanner {
	return &linked{s: s, cb: cb, name: s.Info().Name}
}

// HostScanner is a scanner as the host drives it, whether launched
// (Plugin.Scanners) or linked (Linked): it always answers SampleBacklog,
// with nil ("not measured") when the scanner is not a BacklogSampler.
type HostScanner interface {
	Scanner
	BacklogSampler
}

type linked struct {
	s    Scanner
	cb   Callbacks
	name string
}

func (l *linked) Info() Info { return l.s.Info() }

func (l *linked) ctx(ctx context.Context) context.Context {
	if _, ok := ctx.Value(loggerKey{}).(hclog.Logger); ok {
		return ctx
	}
	return WithLogger(ctx, hclog.Default().Named(l.name).With("scanner", l.name))
}

func (l *linked) host(h Host) (Host, error) {
	if h != nil {
		return h, nil
	}
	if l.cb == nil {
		return nil, fmt.Errorf("scanner %s: no Host given and no Callbacks to bind one", l.name)
	}
	return BindHost(l.cb, l.name), nil
}

func (l *linked) Configure(ctx context.Context, options map[string]string) (err error) {
	defer recoverInto(l.name, "Configure", &err)
	return l.s.Configure(l.ctx(ctx), options)
}

func (l *linked) ScanPartition(ctx context.Context, host Host, req *ScanRequest) (res *ScanResult, err error) {
	defer recoverInto(l.name, "ScanPartition", &err)
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
	return Normalize(res), nil
}

func (l *linked) SampleBacklog(ctx context.Context, host Host, partitions []keys.Partition) (out []int64, err error) {
	defer recoverInto(l.name, "SampleBacklog", &err)
	sampler, ok := l.s.(BacklogSampler)
	if !ok {
		return nil, nil // not measured, as a launched plugin answers
	}
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	return sampler.SampleBacklog(l.ctx(ctx), h, partitions)
}

// recoverInto turns a panic of a scanner method into an error.
func recoverInto(scanner, method string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("scanner %s: %s panicked: %v\n%s", scanner, method, r, debug.Stack())
	}
}

type loggerKey struct{}

// WithLogger returns a context that carries l for Logger.
func WithLogger(ctx context.Context, l hclog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// Logger returns the logger a scanner method should log through: in a
// plugin process it writes to stderr, where the host picks the lines up and
// logs them with the scanner's name; linked in, it is the host's logger. It
// never returns nil.
func Logger(ctx context.Context) hclog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(hclog.Logger); ok && l != nil {
		return l
	}
	return hclog.NewNullLogger()
}

// packedHost is a Host that can answer a batch in packed form.
type packedHost interface {
	Host
	// packs reports whether execPacked can be used.
	packs() bool
	execPacked(ctx context.Context, cmds []Command, w *ReplyWriter) error
}

func (h boundHost) packs() bool {
	_, ok := h.cb.(PackedCallbacks)
	return ok
}

func (h boundHost) execPacked(ctx context.Context, cmds []Command, w *ReplyWriter) error {
	return h.cb.(PackedCallbacks).ExecPacked(ctx, h.scanner, cmds, w)
}
