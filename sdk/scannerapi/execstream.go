package scannerapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ffscan/ffscan/sdk/scannerapi/internal/pb"
)

// The callback stream (HostCallbacks.ExecStream): a plugin's batches go
// to the host on one long-lived gRPC stream instead of one unary call
// each, in the packed encoding (packed.go).
//
// Why: measured on the lease_expiry drain, a unary callback cost a few
// hundred microseconds of CPU across the two processes before any command
// ran (a new HTTP/2 stream with its headers and trailers, a server
// goroutine, protobuf messages per command and argument), which made a
// plugin use two to three times the CPU per item of the same scanner
// linked into the host. On the stream a batch is one message each way.
//
// The host answers the batches of a stream concurrently (batches of
// different partitions of one cycle are in flight at once), each under the
// same binding checks as Exec, and in any order; the seq pairs them up.

// maxStreamBatches bounds the batches of one stream the host runs at
// once; beyond it the host stops reading the stream until one finishes.
// Each batch belongs to a host call in flight, and the host runs few
// calls per plugin at once (scheduler.concurrency), so this is far above
// what a well-behaved plugin sends.
const maxStreamBatches = 64

// batchServerStream is the host's end of a batch stream: the gRPC stream
// or the inherited socket (callbackfd.go).
type batchServerStream interface {
	Context() context.Context
	Recv() (*pb.ExecRequest, error)
	Send(*pb.ExecResponse) error
}

// copyingSender is a stream whose Send has copied the message when it
// returns, so the message's buffers may be reused (bufpool.go).
type copyingSender interface{ copiesOnSend() bool }

func copiesOnSend(s any) bool {
	c, ok := s.(copyingSender)
	return ok && c.copiesOnSend()
}

// batchClientStream is the plugin's end of a batch stream.
type batchClientStream interface {
	Send(*pb.ExecRequest) error
	Recv() (*pb.ExecResponse, error)
}

// ExecStream serves the callback stream of one plugin.
func (s *callbackServer) ExecStream(stream pb.HostCallbacks_ExecStreamServer) error {
	return s.serveBatches(stream)
}

// serveBatches answers the batches of one stream until it ends.
func (s *callbackServer) serveBatches(stream batchServerStream) error {
	ctx := stream.Context()
	var (
		sendMu  sync.Mutex
		running sync.WaitGroup
		slots   = make(chan struct{}, maxStreamBatches)
	)
	// Responses may only be sent while this handler runs.
	defer running.Wait()
	recycle := copiesOnSend(stream)
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		running.Add(1)
		go func() {
			defer func() { <-slots; running.Done() }()
			var buf *[]byte
			if recycle {
				buf = getBatchBuffer(0)
			}
			resp := s.streamBatch(ctx, req, buf)
			sendMu.Lock()
			defer sendMu.Unlock()
			err := stream.Send(resp)
			if buf != nil {
				putBatchBuffer(buf, resp.PackedReplies)
			}
			if err != nil && resp.GetErrorCode() == 0 {
				// Too large to send, most likely (a broken stream
				// fails this send too, and Recv reports it): the batch
				// must still get an answer.
				_ = stream.Send(&pb.ExecResponse{Seq: resp.GetSeq(), ErrorCode: uint32(codes.ResourceExhausted),
					ErrorMessage: validUTF8("the batch's replies could not be sent: " + err.Error())})
			}
		}()
	}
}

// streamBatch runs one batch of the stream and answers it, packing the
// replies into buf when it is given (a recycled buffer) or a new one.
func (s *callbackServer) streamBatch(ctx context.Context, req *pb.ExecRequest, buf *[]byte) *pb.ExecResponse {
	resp := &pb.ExecResponse{Seq: req.GetSeq()}
	fail := func(err error) *pb.ExecResponse {
		st, _ := status.FromError(err)
		resp.ErrorCode, resp.ErrorMessage = uint32(st.Code()), validUTF8(st.Message())
		return resp
	}
	call, err := s.bind(req)
	if err != nil {
		return fail(err)
	}
	if len(req.GetCommands()) > 0 {
		return fail(status.Error(codes.InvalidArgument, "a stream batch carries packed_commands, not commands"))
	}
	cmds, err := unpackCommands(req.GetPackedCommands())
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

// execStream is the plugin's end: it sends batches on the current stream
// and hands each response to the batch waiting for it. A stream that
// breaks fails the batches in flight; the next batch opens a new one.
type execStream struct {
	// open opens a stream: a gRPC ExecStream, or the inherited socket
	// (which can be opened once).
	open func() (batchClientStream, error)
	// copies: a batch has been copied when Send returns (the socket), so
	// its buffer may be recycled once exec returns.
	copies bool
	seq    atomic.Uint64

	mu  sync.Mutex
	cur *streamConn
}

type streamConn struct {
	stream batchClientStream
	sendMu sync.Mutex
	calls  *waiters[*pb.ExecResponse]
}

// conn returns the open stream, opening one if there is none.
func (x *execStream) conn() (*streamConn, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if c := x.cur; c != nil {
		select {
		case <-c.calls.ended():
		default:
			return c, nil
		}
	}
	stream, err := x.open()
	if err != nil {
		return nil, fmt.Errorf("host exec: open the callback stream: %w", err)
	}
	c := &streamConn{stream: stream, calls: newWaiters[*pb.ExecResponse]()}
	go c.receive()
	x.cur = c
	return c, nil
}

// receive hands responses to their batches until the stream ends.
func (c *streamConn) receive() {
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the host closed the callback stream")
			}
			c.calls.end(fmt.Errorf("host exec: %w", err))
			return
		}
		c.calls.deliver(resp.GetSeq(), resp)
	}
}

// exec sends one batch and waits for its response.
func (x *execStream) exec(ctx context.Context, req *pb.ExecRequest) (*pb.ExecResponse, error) {
	c, err := x.conn()
	if err != nil {
		return nil, err
	}
	seq := x.seq.Add(1)
	req.Seq = seq
	ch, err := c.calls.add(seq)
	if err != nil {
		return nil, err
	}

	c.sendMu.Lock()
	err = c.stream.Send(req)
	c.sendMu.Unlock()
	if err != nil && !errors.Is(err, io.EOF) {
		// io.EOF means the stream ended, and receive says why.
		c.calls.forget(seq)
		return nil, fmt.Errorf("host exec: %w", err)
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-c.calls.ended():
		select {
		case resp := <-ch: // answered just before the stream ended
			return resp, nil
		default:
			return nil, c.calls.reason()
		}
	case <-ctx.Done():
		// The host still runs the batch until its call ends; the answer
		// is dropped when it comes.
		c.calls.forget(seq)
		return nil, ctx.Err()
	}
}

// streamReplies unpacks a stream response to a batch of n commands.
func streamReplies(resp *pb.ExecResponse, n int) ([]Reply, error) {
	if code := resp.GetErrorCode(); code != 0 {
		return nil, fmt.Errorf("host exec: %s: %s", codes.Code(code), resp.GetErrorMessage())
	}
	replies, err := unpackReplies(resp.GetPackedReplies())
	if err != nil {
		return nil, fmt.Errorf("host exec: %w", err)
	}
	if len(replies) != n {
		return nil, fmt.Errorf("host exec: %d replies to %d commands", len(replies), n)
	}
	return replies, nil
}

// grpcExecStream opens gRPC callback streams on client.
func grpcExecStream(client pb.HostCallbacksClient) *execStream {
	return &execStream{open: func() (batchClientStream, error) {
		// The stream lives as long as the process: it is not bound to
		// any one call, so it gets no call's context.
		return client.ExecStream(context.Background())
	}}
}

// fdExecStream sends batches on the inherited socket and serves the
// host's scan calls on it. Its reader starts at once (scan calls may come
// before the first batch); once the socket broke there is no other.
func fdExecStream(sock *pluginSocket) *execStream {
	var once sync.Once
	x := &execStream{copies: true, open: func() (s batchClientStream, err error) {
		err = errors.New("the callback socket is closed")
		once.Do(func() { s, err = sock, nil })
		return s, err
	}}
	_, _ = x.conn() // cannot fail the first time
	return x
}
