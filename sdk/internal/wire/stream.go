package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
)

// The callback stream (HostCallbacks.ExecStream): a plugin's batches go
// to the host on one long-lived gRPC stream instead of one unary call
// each, in the packed encoding (sdk/internal/codec).
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

// MaxStreamBatches bounds the batches of one stream the host runs at
// once; beyond it the host stops reading the stream until one finishes.
// Each batch belongs to a host call in flight, and the host runs few
// calls per plugin at once (scheduler.concurrency), so this is far above
// what a well-behaved plugin sends.
const MaxStreamBatches = 64

// MaxStreamBytes bounds the batches of one stream the host holds at once,
// by the size of their messages: MaxStreamBatches of MaxMsgSize would be
// 4 GiB, held for as long as a plugin that does not read its replies
// keeps a send waiting (FrameWriteTimeout). Past it the host stops
// reading the stream until a batch finishes; a batch counts in whole
// units of streamUnit, one more than it fills.
const MaxStreamBytes = 2 * MaxMsgSize

const streamUnit = 1 << 20

// BatchServerStream is the host's end of a batch stream: the gRPC stream
// or the inherited socket (HostSocket).
type BatchServerStream interface {
	Context() context.Context
	Recv() (*pb.ExecRequest, error)
	Send(*pb.ExecResponse) error
}

// copyingSender is a stream whose Send has copied the message when it
// returns, so the message's buffers may be reused (buffers.go).
type copyingSender interface{ copiesOnSend() bool }

func copiesOnSend(s any) bool {
	c, ok := s.(copyingSender)
	return ok && c.copiesOnSend()
}

// BatchHandler answers one batch of a stream; it packs the replies into
// buf when buf is given (a recycled buffer, on a stream that copies what
// it sends), else into a new one. Its errors go in the response
// (ErrorCode, ErrorMessage).
type BatchHandler func(ctx context.Context, req *pb.ExecRequest, buf *[]byte) *pb.ExecResponse

// ServeBatches answers the batches of one stream with handle until the
// stream ends.
func ServeBatches(stream BatchServerStream, handle BatchHandler) error {
	ctx := stream.Context()
	var (
		sendMu  sync.Mutex
		running sync.WaitGroup
		slots   = make(chan struct{}, MaxStreamBatches)
		units   = make(chan struct{}, MaxStreamBytes/streamUnit)
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
		// Only this goroutine takes units, so a batch waits only for
		// the ones before it to finish.
		n := proto.Size(req)/streamUnit + 1
		for range n {
			select {
			case units <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		running.Add(1)
		go func() {
			defer func() {
				for range n {
					<-units
				}
				<-slots
				running.Done()
			}()
			var buf *[]byte
			if recycle {
				buf = GetBatchBuffer(0)
			}
			resp := handle(ctx, req, buf)
			sendMu.Lock()
			defer sendMu.Unlock()
			err := stream.Send(resp)
			if buf != nil {
				PutBatchBuffer(buf, resp.PackedReplies)
			}
			if err != nil && resp.GetErrorCode() == 0 {
				// Too large to send, most likely (a broken stream
				// fails this send too, and Recv reports it): the batch
				// must still get an answer.
				_ = stream.Send(&pb.ExecResponse{Seq: resp.GetSeq(), ErrorCode: uint32(codes.ResourceExhausted),
					ErrorMessage: codec.ValidUTF8("the batch's replies could not be sent: " + err.Error())})
			}
		}()
	}
}

// batchClientStream is the plugin's end of a batch stream.
type batchClientStream interface {
	Send(*pb.ExecRequest) error
	Recv() (*pb.ExecResponse, error)
}

// ExecStream is the plugin's end: it sends batches on the current stream
// and hands each response to the batch waiting for it. A stream that
// breaks fails the batches in flight; the next batch opens a new one.
type ExecStream struct {
	// open opens a stream: a gRPC ExecStream, or the inherited socket
	// (which can be opened once).
	open func() (batchClientStream, error)
	// copies: a batch has been copied when Send returns (the socket), so
	// its buffer may be recycled once Exec returns.
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

// Copies reports whether a batch has been copied when Exec returns, so
// that its packed buffer may be recycled then (the socket: yes; gRPC: no).
func (x *ExecStream) Copies() bool { return x.copies }

// conn returns the open stream, opening one if there is none.
func (x *ExecStream) conn() (*streamConn, error) {
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

// Exec sends one batch and waits for its response.
func (x *ExecStream) Exec(ctx context.Context, req *pb.ExecRequest) (*pb.ExecResponse, error) {
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

// GRPCExecStream opens gRPC callback streams on client.
func GRPCExecStream(client pb.HostCallbacksClient) *ExecStream {
	return &ExecStream{open: func() (batchClientStream, error) {
		// The stream lives as long as the process: it is not bound to
		// any one call, so it gets no call's context.
		return client.ExecStream(context.Background())
	}}
}

// FDExecStream sends batches on the inherited socket and serves the
// host's scan calls on it. Its reader starts at once (scan calls may come
// before the first batch); once the socket broke there is no other.
func FDExecStream(sock *PluginSocket) *ExecStream {
	var once sync.Once
	x := &ExecStream{copies: true, open: func() (s batchClientStream, err error) {
		err = errors.New("the callback socket is closed")
		once.Do(func() { s, err = sock, nil })
		return s, err
	}}
	_, _ = x.conn() // cannot fail the first time
	return x
}
