package wire

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/ffscan/ffscan/sdk/internal/pb"
)

// A message whose fields would decode into far more than its bytes is
// refused before it is decoded, on the socket and by the gRPC codec:
// empty commands (two bytes each on the wire), one-byte backlog depths
// (a packed list), replies nested without end. A batch at the bounds
// passes.
func TestMessagesAreBoundedBeforeDecoding(t *testing.T) {
	many := &pb.ExecRequest{Commands: make([]*pb.Command, MaxMsgFields+1)}
	for i := range many.Commands {
		many.Commands[i] = &pb.Command{}
	}
	raw, err := proto.Marshal(many)
	require.NoError(t, err)
	assert.Less(t, len(raw), 3*MaxMsgFields, "two bytes a command")
	assert.ErrorContains(t, CheckFields(raw, many.ProtoReflect().Descriptor()), "ffscan.scanner.v1.ExecRequest: more than 1062672 fields")

	depths := &pb.SampleBacklogResponse{Depths: make([]int64, MaxMsgFields+1)}
	raw, err = proto.Marshal(depths)
	require.NoError(t, err)
	assert.ErrorContains(t, CheckFields(raw, depths.ProtoReflect().Descriptor()), "more than")

	deep := &pb.Reply{}
	for range maxMsgDepth + 1 {
		deep = &pb.Reply{Array: []*pb.Reply{deep}}
	}
	raw, err = proto.Marshal(deep)
	require.NoError(t, err)
	assert.ErrorContains(t, CheckFields(raw, deep.ProtoReflect().Descriptor()), "nested deeper than 64")

	full := &pb.ExecRequest{Commands: make([]*pb.Command, MaxBatchCommands)}
	for i := range full.Commands {
		full.Commands[i] = &pb.Command{Args: make([][]byte, MaxBatchArgs/MaxBatchCommands)}
	}
	raw, err = proto.Marshal(full)
	require.NoError(t, err)
	assert.NoError(t, CheckFields(raw, full.ProtoReflect().Descriptor()), "a batch at the bounds")

	// On the socket.
	a, b := net.Pipe()
	defer b.Close()
	go func() { _ = NewFrameConn(a).Write(many); a.Close() }()
	assert.ErrorContains(t, NewFrameConn(b).Read(&pb.ExecRequest{}), "callback message refused before decoding")
}

// batchStream is a BatchServerStream fed by the test.
type batchStream struct {
	ctx  context.Context
	reqs chan *pb.ExecRequest
}

func (s *batchStream) Context() context.Context { return s.ctx }

func (s *batchStream) Recv() (*pb.ExecRequest, error) {
	r, ok := <-s.reqs
	if !ok {
		return nil, io.EOF
	}
	return r, nil
}

func (s *batchStream) Send(*pb.ExecResponse) error { return nil }

// The batches of one stream the host holds at once are bounded by their
// bytes, not only their number: of eight batches of 30 MiB, at most four
// (120 MiB, within MaxStreamBytes) are handled at once, where the count
// alone (MaxStreamBatches) would let all eight in.
func TestStreamBatchesAreBoundedByBytes(t *testing.T) {
	const batch, n = 30 << 20, 8
	s := &batchStream{ctx: context.Background(), reqs: make(chan *pb.ExecRequest, n)}
	payload := make([]byte, batch)
	for range n {
		s.reqs <- &pb.ExecRequest{PackedCommands: payload}
	}
	close(s.reqs)
	var (
		running, most atomic.Int32
		started       = make(chan struct{}, n)
		release       = make(chan struct{})
		once          sync.Once
	)
	done := make(chan error, 1)
	go func() {
		done <- ServeBatches(s, func(context.Context, *pb.ExecRequest, *[]byte) *pb.ExecResponse {
			r := running.Add(1)
			for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
			}
			started <- struct{}{}
			<-release
			running.Add(-1)
			return &pb.ExecResponse{}
		})
	}()
	for range MaxStreamBytes / (batch + streamUnit) {
		<-started
	}
	once.Do(func() { close(release) })
	require.NoError(t, <-done)
	assert.Equal(t, int32(MaxStreamBytes/(batch+streamUnit)), most.Load(), "batches handled at once")
}
