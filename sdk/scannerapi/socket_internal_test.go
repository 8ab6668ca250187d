package scannerapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/internal/wire"
)

// The plugin's end of the callback socket: the host's scan calls served
// by the plugin server, whose scanners' batches go back on the same
// socket. The host's end is the wire's host socket, answering batches as
// a host whose commands echo their last argument; the host's own
// callback service is pluginhost's test.

// socketScanner is a scanner for the socket tests: "echo" members are
// echoed through the host, "block" members wait for the call's context
// and report how it ended, "fail" members fail the scan.
type socketScanner struct {
	ended chan error
	hadDL chan bool
}

func (s *socketScanner) Info() Info {
	return Info{
		Name: "sock", Version: "1", APIVersion: APIVersion, Family: keys.FamilyFlow,
		DefaultInterval: time.Second, DefaultBatch: 10,
		Sources:  []CandidateSource{{Name: "due", Kind: SourceZSetDue, Key: "ff:idx:{p}:t", Backlog: BacklogPlugin}},
		Commands: []string{"ECHO"},
	}
}

func (s *socketScanner) Configure(context.Context, map[string]string) error { return nil }

func (s *socketScanner) ScanPartition(ctx context.Context, host Host, req *ScanRequest) (*ScanResult, error) {
	res := &ScanResult{}
	for _, c := range req.Candidates {
		switch c.Member {
		case "block":
			_, has := ctx.Deadline()
			s.hadDL <- has
			<-ctx.Done()
			s.ended <- ctx.Err()
			return nil, ctx.Err()
		case "fail":
			return nil, errors.New("scanner says no")
		default:
			replies, err := host.Exec(ctx, []Command{{"ECHO", c.Member}})
			if err != nil {
				return nil, err
			}
			res.Notes = append(res.Notes, replies[0].Str)
			res.Processed++
		}
	}
	return res, nil
}

// echoBatch answers a batch as a host whose commands echo their last
// argument, packing into the recycled buffer when it is given (as the
// host's callback service does).
func echoBatch(_ context.Context, req *pb.ExecRequest, buf *[]byte) *pb.ExecResponse {
	resp := &pb.ExecResponse{Seq: req.GetSeq()}
	cmds, err := codec.UnpackCommands[Command](req.GetPackedCommands(), codec.Limits{})
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = uint32(codes.InvalidArgument), err.Error()
		return resp
	}
	var dst []byte
	if buf != nil {
		dst = *buf
	}
	dst = binary.AppendUvarint(dst, uint64(len(cmds)))
	for _, c := range cmds {
		n := codec.Node{Kind: byte(KindString), Str: c[len(c)-1]}
		dst = codec.AppendTail(codec.AppendHead(dst, &n, 0), &n)
	}
	resp.PackedReplies = dst
	return resp
}

// socketFixture connects a plugin server and a host's end over a real
// socket pair, as Launch and Serve do, without a process in between.
func socketFixture(t *testing.T, sc Scanner) *wire.HostSocket {
	t.Helper()
	hostConn, pluginFile, err := wire.CallbackPair()
	require.NoError(t, err)
	pluginConn, err := net.FileConn(pluginFile)
	require.NoError(t, err)
	pluginFile.Close()
	ctx, cancel := context.WithCancel(context.Background())
	hs := wire.NewHostSocket(ctx, hostConn)
	hs.SetScans(true)
	served := make(chan struct{})
	go func() { _ = wire.ServeBatches(hs, echoBatch); close(served) }()
	srv, err := newPluginServer(hclog.NewNullLogger(), []Scanner{sc})
	require.NoError(t, err)
	srv.callback = pb.NewHostCallbacksClient(nil) // never used: batches go on the socket
	srv.stream = wire.FDExecStream(wire.NewPluginSocket(pluginConn, srv.ScanPartition))
	t.Cleanup(func() {
		cancel()
		hostConn.Close()
		pluginConn.Close()
		<-served
	})
	return hs
}

// scanCall is the host's request to scan members of partition 3.
func scanCall(members ...string) *pb.ScanPartitionRequest {
	req := &pb.ScanRequest{Partition: &pb.Partition{Family: uint32(keys.FamilyFlow), Index: 3}, Batch: 10}
	for _, m := range members {
		req.Candidates = append(req.Candidates, &pb.Candidate{Source: "due", Member: []byte(m)})
	}
	return &pb.ScanPartitionRequest{Scanner: "sock", CallId: 1, Request: req}
}

// ScanPartition on the socket pair: results, callbacks on the same
// socket, the scanner's errors as gRPC statuses, and the host's deadline
// and cancellation reaching the scanner's context.
func TestScanOnSocket(t *testing.T) {
	sc := &socketScanner{ended: make(chan error, 1), hadDL: make(chan bool, 1)}
	hs := socketFixture(t, sc)
	ctx := context.Background()

	resp, err := hs.Scan(ctx, scanCall("a", "b\x00"))
	require.NoError(t, err)
	assert.Equal(t, int64(2), resp.GetResult().GetProcessed())
	assert.Equal(t, []string{"a", "b\x00"}, resp.GetResult().GetNotes())

	_, err = hs.Scan(ctx, scanCall("fail"))
	assert.Equal(t, codes.Unknown, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "scanner says no")

	_, err = hs.Scan(ctx, &pb.ScanPartitionRequest{Scanner: "nope"})
	assert.Equal(t, codes.NotFound, status.Code(err))

	// Cancelled by the host: the scanner's context ends.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := hs.Scan(cctx, scanCall("block")); done <- err }()
	assert.False(t, <-sc.hadDL, "no deadline was set")
	cancel()
	assert.Equal(t, codes.Canceled, status.Code(<-done))
	assert.ErrorIs(t, <-sc.ended, context.Canceled)

	// The host's deadline becomes the scanner's.
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer dcancel()
	go func() { _, err := hs.Scan(dctx, scanCall("block")); done <- err }()
	assert.True(t, <-sc.hadDL, "the deadline crossed")
	// Its own timer or the host's cancel, whichever comes first.
	assert.Error(t, <-sc.ended)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(<-done))

	// The socket still works.
	resp, err = hs.Scan(ctx, scanCall("c"))
	require.NoError(t, err)
	assert.Equal(t, []string{"c"}, resp.GetResult().GetNotes())
}

// Concurrent scans on one socket, each echoing members of many sizes:
// every reply is its own command's, though both ends pack into recycled
// buffers and reuse their frame buffers (a buffer recycled while a frame
// still refers to it would show up here as another scan's bytes).
func TestSocketRecycledBuffersKeepBatchesApart(t *testing.T) {
	hs := socketFixture(t, &socketScanner{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 30 {
				var members []string
				for i := range 10 {
					// Sizes from a few bytes to a few kilobytes, so a
					// reused buffer is sometimes larger than the frame.
					n := 1 + (g*131+round*17+i*7)%4000
					members = append(members, fmt.Sprintf("%d/%d/%d:", g, round, i)+strings.Repeat(string(rune('a'+(g+i)%26)), n))
				}
				resp, err := hs.Scan(ctx, scanCall(members...))
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, members, resp.GetResult().GetNotes())
			}
		}()
	}
	wg.Wait()
}

// What the host answers a batch on the stream reaches the scanner as the
// batch's replies or as an error that says what the host said.
func TestStreamReplies(t *testing.T) {
	_, err := streamReplies(&pb.ExecResponse{ErrorCode: uint32(codes.FailedPrecondition), ErrorMessage: "no host call 1 in flight"}, 1)
	assert.EqualError(t, err, "host exec: FailedPrecondition: no host call 1 in flight")

	packed := echoBatch(context.Background(), &pb.ExecRequest{PackedCommands: codec.AppendCommands(nil, []Command{{"ECHO", "x"}, {"ECHO", "bin\x00\xff"}})}, nil)
	replies, err := streamReplies(packed, 2)
	require.NoError(t, err)
	assert.Equal(t, []Reply{{Kind: KindString, Str: "x"}, {Kind: KindString, Str: "bin\x00\xff"}}, replies)
	_, err = streamReplies(packed, 3)
	assert.EqualError(t, err, "host exec: 2 replies to 3 commands")
	_, err = streamReplies(&pb.ExecResponse{PackedReplies: []byte{5}}, 1)
	assert.ErrorContains(t, err, "host exec: packed batch")
}
