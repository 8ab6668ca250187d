package pluginhost

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/internal/wire"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// What a plugin's batch may make the host decode. A batch arrives in one
// message of at most MaxBatchBytes (wire.MaxMsgSize), but decoding costs
// more than its bytes: a string header per argument, which takes one or
// two bytes on the wire. The host refuses a batch past these bounds
// before it decodes it (codec.Limits, and wire.CheckFields on every
// message from a plugin), and its callbacks hold linked scanners to the
// same.
const (
	// MaxBatchCommands bounds one batch's commands: a scanner batches a
	// partition's work, far below it.
	MaxBatchCommands = wire.MaxBatchCommands
	// MaxBatchArgs bounds one batch's arguments, all commands together:
	// 16 MiB of string headers decoded at most.
	MaxBatchArgs = wire.MaxBatchArgs
	// MaxBatchBytes bounds one batch's message (and so its arguments'
	// bytes).
	MaxBatchBytes = wire.MaxMsgSize
)

// batchLimits are the bounds a batch is decoded under.
var batchLimits = codec.Limits{Commands: MaxBatchCommands, Args: MaxBatchArgs}

// Callbacks is what the host implements to run scanners' commands: one
// Exec per batch, told which scanner sent it so the host can enforce that
// scanner's allowlist (Info.Commands, Info.Functions, the "ff:" prefix).
// The same implementation serves linked scanners (through BindHost or
// Linked) and plugin processes (through LaunchConfig.Callbacks).
type Callbacks interface {
	Exec(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error)
}

// CallbacksFunc adapts a function to Callbacks.
type CallbacksFunc func(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error)

// Exec calls f.
func (f CallbacksFunc) Exec(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	return f(ctx, scanner, cmds)
}

// BindHost returns the Host a linked scanner named scanner uses: every Exec
// goes to cb with that name. It is the in-process counterpart of the
// callback channel a plugin process gets.
func BindHost(cb Callbacks, scanner string) scannerapi.Host {
	return boundHost{cb: cb, scanner: scanner}
}

type boundHost struct {
	cb      Callbacks
	scanner string
}

func (h boundHost) Exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	replies, err := h.cb.Exec(ctx, h.scanner, cmds)
	if err != nil {
		return nil, err
	}
	if len(replies) != len(cmds) {
		return nil, fmt.Errorf("pluginhost: host answered %d replies to %d commands", len(replies), len(cmds))
	}
	return replies, nil
}

// packedHost is a Host that can answer a batch in packed form.
type packedHost interface {
	scannerapi.Host
	// packs reports whether execPacked can be used.
	packs() bool
	execPacked(ctx context.Context, cmds []scannerapi.Command, w *ReplyWriter) error
}

func (h boundHost) packs() bool {
	_, ok := h.cb.(PackedCallbacks)
	return ok
}

func (h boundHost) execPacked(ctx context.Context, cmds []scannerapi.Command, w *ReplyWriter) error {
	return h.cb.(PackedCallbacks).ExecPacked(ctx, h.scanner, cmds, w)
}

// callRegistry maps the ids of host calls in flight to the Host their
// callbacks run on. A callback for an id not in flight is refused: a plugin
// cannot act outside the calls the host makes.
type callRegistry struct {
	next  atomic.Uint64
	mu    sync.Mutex
	calls map[uint64]callEntry
}

type callEntry struct {
	ctx     context.Context
	scanner string
	host    scannerapi.Host
}

func (r *callRegistry) add(ctx context.Context, scanner string, h scannerapi.Host) uint64 {
	id := r.next.Add(1)
	r.mu.Lock()
	if r.calls == nil {
		r.calls = make(map[uint64]callEntry)
	}
	r.calls[id] = callEntry{ctx: ctx, scanner: scanner, host: h}
	r.mu.Unlock()
	return id
}

func (r *callRegistry) remove(id uint64) {
	r.mu.Lock()
	delete(r.calls, id)
	r.mu.Unlock()
}

func (r *callRegistry) get(id uint64) (callEntry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.calls[id]
	return e, ok
}

// callbackServer is the HostCallbacks service the host serves to one
// plugin.
type callbackServer struct {
	pb.UnimplementedHostCallbacksServer
	p *Plugin
}

func (s *callbackServer) Exec(ctx context.Context, req *pb.ExecRequest) (*pb.ExecResponse, error) {
	call, err := s.bind(req)
	if err != nil {
		return nil, err
	}
	cmds := codec.CommandsFromPB[scannerapi.Command](req.GetCommands())
	replies, err := s.run(ctx, call, cmds)
	if err != nil {
		return nil, err
	}
	return &pb.ExecResponse{Replies: repliesToPB(replies)}, nil
}

// bind finds the host call a batch belongs to, refusing batches of calls
// not in flight or of another scanner.
func (s *callbackServer) bind(req *pb.ExecRequest) (callEntry, error) {
	call, ok := s.p.calls.get(req.GetCallId())
	if !ok {
		return callEntry{}, status.Errorf(codes.FailedPrecondition, "no host call %d in flight", req.GetCallId())
	}
	if req.GetScanner() != call.scanner {
		return callEntry{}, status.Errorf(codes.PermissionDenied, "call %d belongs to scanner %q, not %q", req.GetCallId(), call.scanner, req.GetScanner())
	}
	if err := call.ctx.Err(); err != nil {
		return callEntry{}, status.Errorf(codes.Aborted, "host call %d has ended: %v", req.GetCallId(), err)
	}
	return call, nil
}

// run runs a bound batch on its call's Host. The batch ends with
// whichever ends first: ctx (the plugin's request or stream) or the host
// call it belongs to.
func (s *callbackServer) run(ctx context.Context, call callEntry, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	ctx, cancel := callContext(ctx, call)
	defer cancel()
	replies, err := call.host.Exec(ctx, cmds)
	if err != nil {
		return nil, status.Error(codes.Aborted, err.Error())
	}
	if len(replies) != len(cmds) {
		return nil, status.Errorf(codes.Internal, "host answered %d replies to %d commands", len(replies), len(cmds))
	}
	return replies, nil
}

// runInto is run for the packed stream paths: the replies go to w, written
// by the Host itself when it can (PackedCallbacks), else from Exec's.
func (s *callbackServer) runInto(ctx context.Context, call callEntry, cmds []scannerapi.Command, w *ReplyWriter) error {
	ph, ok := call.host.(packedHost)
	if !ok || !ph.packs() {
		replies, err := s.run(ctx, call, cmds)
		if err != nil {
			return err
		}
		for i := range replies {
			w.Reply(&replies[i])
		}
		return nil
	}
	ctx, cancel := callContext(ctx, call)
	defer cancel()
	if err := ph.execPacked(ctx, cmds, w); err != nil {
		return status.Error(codes.Aborted, err.Error())
	}
	if err := w.finish(len(cmds)); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// callContext is the context of one batch: it ends with whichever ends
// first, ctx or the host call the batch belongs to.
func callContext(ctx context.Context, call callEntry) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(call.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// ExecStream serves the callback stream of one plugin.
func (s *callbackServer) ExecStream(stream pb.HostCallbacks_ExecStreamServer) error {
	return wire.ServeBatches(stream, s.streamBatch)
}

// streamBatch runs one batch of a stream (the gRPC stream or the socket)
// and answers it, packing the replies into buf when it is given (a
// recycled buffer) or a new one.
func (s *callbackServer) streamBatch(ctx context.Context, req *pb.ExecRequest, buf *[]byte) *pb.ExecResponse {
	resp := &pb.ExecResponse{Seq: req.GetSeq()}
	fail := func(err error) *pb.ExecResponse {
		st, _ := status.FromError(err)
		resp.ErrorCode, resp.ErrorMessage = uint32(st.Code()), codec.ValidUTF8(st.Message())
		return resp
	}
	call, err := s.bind(req)
	if err != nil {
		return fail(err)
	}
	if len(req.GetCommands()) > 0 {
		return fail(status.Error(codes.InvalidArgument, "a stream batch carries packed_commands, not commands"))
	}
	cmds, err := codec.UnpackCommands[scannerapi.Command](req.GetPackedCommands(), batchLimits)
	if err != nil {
		return fail(status.Error(codes.InvalidArgument, err.Error()))
	}
	var dst []byte
	if buf != nil {
		dst = *buf
	}
	w := newReplyWriter(dst, len(cmds))
	if err := s.runInto(ctx, call, cmds, w); err != nil {
		return fail(err)
	}
	resp.PackedReplies = w.buf
	return resp
}
