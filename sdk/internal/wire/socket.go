package wire

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
)

// The callback channel on an inherited socket (InfoRequest.callback_fd).
//
// The host creates a connected pair of unix sockets for each plugin it
// launches and hands the plugin one end as file descriptor 3. Length-
// prefixed SocketFrame messages travel on it both ways: the batches of the
// callback stream (stream.go), with the same binding checks, seq pairing
// and packed encoding as on the gRPC stream, and the host's ScanPartition
// calls to a plugin that said scans_on_socket, with the host's deadline
// and cancellation. Everything else (Info, Configure, SampleBacklog,
// health pings) stays on go-plugin's gRPC connection.
//
// Why: even on one long-lived gRPC stream a callback round trip cost
// a few hundred microseconds of CPU across the two processes on a 2-core
// VM (HTTP/2 framing, the transport's reader and writer goroutines and
// the wake-ups between them), and a gRPC ScanPartition call about 230 us,
// against about 15 us for a plain round trip between two processes. A
// drain makes a scan call and two callbacks per partition.
//
// Nothing is lost for security: the pair has no name anyone could connect
// to (unlike the broker's socket, it is not reachable even by another
// process of the same user), so it needs no TLS; the plugin gets only its
// own end, and the host checks every batch as it checks Exec.

// CallbackFD is the descriptor number the plugin's end has in the plugin
// (the first of exec.Cmd.ExtraFiles).
const CallbackFD = 3

// HostSocket is the host's end of a plugin's socket pair: the batch
// stream its callback handler serves (ServeBatches), and the ScanPartition
// calls it makes to a plugin that said scans_on_socket.
type HostSocket struct {
	ctx context.Context // the plugin's lifetime
	f   *FrameConn

	scans atomic.Bool // the plugin answers ScanPartition here
	seq   atomic.Uint64
	calls *waiters[*pb.ScanReply] // ends when the socket can no longer be read
}

// NewHostSocket serves the host's end c for a plugin whose lifetime is
// ctx.
func NewHostSocket(ctx context.Context, c net.Conn) *HostSocket {
	return &HostSocket{ctx: ctx, f: NewFrameConn(c), calls: newWaiters[*pb.ScanReply]()}
}

// SetScans records whether the plugin answers ScanPartition on the socket
// (InfoResponse.scans_on_socket).
func (h *HostSocket) SetScans(on bool) { h.scans.Store(on) }

// Scans reports whether scan calls go on the socket.
func (h *HostSocket) Scans() bool { return h.scans.Load() }

// Context is the plugin's lifetime.
func (h *HostSocket) Context() context.Context { return h.ctx }

// Recv returns the next callback batch, handing scan answers to their
// calls on the way.
func (h *HostSocket) Recv() (*pb.ExecRequest, error) {
	for {
		fr := &pb.SocketFrame{}
		err := h.f.Read(fr)
		if err == nil {
			switch b := fr.GetBody().(type) {
			case *pb.SocketFrame_Exec:
				return b.Exec, nil
			case *pb.SocketFrame_ScanReply:
				h.calls.deliver(b.ScanReply.GetSeq(), b.ScanReply)
				continue
			default:
				err = fmt.Errorf("unexpected %T from the plugin", b)
			}
		}
		h.calls.end(err)
		return nil, err
	}
}

// copiesOnSend: Send has copied the message when it returns.
func (h *HostSocket) copiesOnSend() bool { return true }

// Send answers a batch.
func (h *HostSocket) Send(m *pb.ExecResponse) error {
	return h.f.Write(&pb.SocketFrame{Body: &pb.SocketFrame_ExecReply{ExecReply: m}})
}

// Scan makes one ScanPartition call on the socket. Its errors are gRPC
// statuses, as the gRPC call's are, so callers map them the same way.
func (h *HostSocket) Scan(ctx context.Context, req *pb.ScanPartitionRequest) (*pb.ScanPartitionResponse, error) {
	seq := h.seq.Add(1)
	ch, err := h.calls.add(seq)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "callback socket: %v", err)
	}
	forget := func() { h.calls.forget(seq) }
	call := &pb.ScanCall{Seq: seq, Request: req}
	if dl, ok := ctx.Deadline(); ok {
		call.DeadlineUnixNano = dl.UnixNano()
	}
	if err := h.f.Write(&pb.SocketFrame{Body: &pb.SocketFrame_Scan{Scan: call}}); err != nil {
		forget()
		return nil, status.Errorf(codes.Unavailable, "callback socket: %v", err)
	}
	select {
	case r := <-ch:
		if code := codes.Code(r.GetErrorCode()); code != codes.OK && ctx.Err() != nil {
			// The call failed because the host gave up on it, as a gRPC
			// client would report it.
			return nil, status.FromContextError(ctx.Err()).Err()
		} else if code != codes.OK {
			return nil, status.Error(code, r.GetErrorMessage())
		}
		return r.GetResponse(), nil
	case <-h.calls.ended():
		return nil, status.Errorf(codes.Unavailable, "callback socket: %v", h.calls.reason())
	case <-ctx.Done():
		forget()
		// The plugin's call ends too; its answer, if any, is dropped.
		_ = h.f.Write(&pb.SocketFrame{Body: &pb.SocketFrame_Cancel{Cancel: seq}})
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// ScanFunc runs one of the host's scan calls in the plugin, as its gRPC
// server's ScanPartition does (errors are gRPC statuses or become
// codes.Unknown).
type ScanFunc func(ctx context.Context, req *pb.ScanPartitionRequest) (*pb.ScanPartitionResponse, error)

// PluginSocket is the plugin's end of the pair: the stream its batches go
// on (FDExecStream), and the ScanPartition calls the host makes on it,
// which it runs with scan.
type PluginSocket struct {
	f    *FrameConn
	scan ScanFunc

	mu      sync.Mutex
	running map[uint64]context.CancelFunc
}

// NewPluginSocket serves the plugin's end c, running the host's scan calls
// with scan.
func NewPluginSocket(c net.Conn, scan ScanFunc) *PluginSocket {
	return &PluginSocket{f: NewFrameConn(c), scan: scan}
}

// Send sends a batch.
func (p *PluginSocket) Send(m *pb.ExecRequest) error {
	return p.f.Write(&pb.SocketFrame{Body: &pb.SocketFrame_Exec{Exec: m}})
}

// Recv returns the next batch answer, starting and cancelling the host's
// scan calls on the way.
func (p *PluginSocket) Recv() (*pb.ExecResponse, error) {
	for {
		fr := &pb.SocketFrame{}
		if err := p.f.Read(fr); err != nil {
			p.cancelAll()
			return nil, err
		}
		switch b := fr.GetBody().(type) {
		case *pb.SocketFrame_ExecReply:
			return b.ExecReply, nil
		case *pb.SocketFrame_Scan:
			p.start(b.Scan)
		case *pb.SocketFrame_Cancel:
			p.mu.Lock()
			if cancel := p.running[b.Cancel]; cancel != nil {
				cancel()
			}
			p.mu.Unlock()
		default:
			p.cancelAll()
			return nil, fmt.Errorf("unexpected %T from the host", b)
		}
	}
}

// start runs one scan call in a goroutine of its own and answers it.
func (p *PluginSocket) start(call *pb.ScanCall) {
	var (
		ctx    context.Context
		cancel context.CancelFunc
	)
	if dl := call.GetDeadlineUnixNano(); dl != 0 {
		ctx, cancel = context.WithDeadline(context.Background(), time.Unix(0, dl))
	} else {
		ctx, cancel = context.WithCancel(context.Background())
	}
	seq := call.GetSeq()
	p.mu.Lock()
	if p.running == nil {
		p.running = map[uint64]context.CancelFunc{}
	}
	p.running[seq] = cancel
	p.mu.Unlock()
	go func() {
		defer func() {
			p.mu.Lock()
			delete(p.running, seq)
			p.mu.Unlock()
			cancel()
		}()
		reply := &pb.ScanReply{Seq: seq}
		resp, err := p.scan(ctx, call.GetRequest())
		if err != nil && ctx.Err() != nil {
			// The call ended (the host's deadline or cancel): say so, as
			// a gRPC server does, whatever the scanner returned.
			err = status.FromContextError(ctx.Err()).Err()
		}
		if err != nil {
			st := status.Convert(err)
			reply.ErrorCode, reply.ErrorMessage = uint32(st.Code()), codec.ValidUTF8(st.Message())
		} else {
			reply.Response = resp
		}
		// A failed write means the host is gone; the reader sees it.
		_ = p.f.Write(&pb.SocketFrame{Body: &pb.SocketFrame_ScanReply{ScanReply: reply}})
	}()
}

func (p *PluginSocket) cancelAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cancel := range p.running {
		cancel()
	}
}

// CallbackPair makes the socket pair for one plugin: the host's end as a
// connection and the plugin's end as a file for exec.Cmd.ExtraFiles
// (which the parent closes once the plugin started).
func CallbackPair() (host net.Conn, plugin *os.File, err error) {
	// Under ForkLock, so that no process another goroutine starts
	// meanwhile inherits the pair before it is marked close-on-exec.
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, fmt.Errorf("callback socket pair: %w", err)
	}
	hf := os.NewFile(uintptr(fds[0]), "ffscan-callbacks-host")
	plugin = os.NewFile(uintptr(fds[1]), "ffscan-callbacks-plugin")
	host, err = net.FileConn(hf) // a duplicate: the file can go
	hf.Close()
	if err != nil {
		plugin.Close()
		return nil, nil, fmt.Errorf("callback socket pair: %w", err)
	}
	return host, plugin, nil
}

// OpenCallbackFD opens the plugin's end of the pair (once per process).
func OpenCallbackFD(fd uint32) (net.Conn, error) {
	if fd != CallbackFD {
		return nil, fmt.Errorf("the host offers callback descriptor %d; this SDK takes %d", fd, CallbackFD)
	}
	f := os.NewFile(uintptr(fd), "ffscan-callbacks")
	if f == nil {
		return nil, fmt.Errorf("callback descriptor %d is not open", fd)
	}
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("callback descriptor %d: %w", fd, err)
	}
	return c, nil
}
