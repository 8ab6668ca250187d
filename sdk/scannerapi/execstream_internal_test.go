package scannerapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi/internal/pb"
)

// streamFixture is a host callback service on an in-memory connection
// and the plugin's end of the callback stream talking to it.
type streamFixture struct {
	p      *Plugin
	stream *execStream
	server *grpc.Server
}

func newStreamFixture(t *testing.T) *streamFixture {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	f := &streamFixture{p: &Plugin{}, server: newGRPCServer(nil)}
	pb.RegisterHostCallbacksServer(f.server, &callbackServer{p: f.p})
	go func() { _ = f.server.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		append(dialOptions(),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		f.server.Stop()
	})
	f.stream = grpcExecStream(pb.NewHostCallbacksClient(conn))
	return f
}

func (f *streamFixture) exec(ctx context.Context, scanner string, call uint64, cmds []Command) ([]Reply, error) {
	req := &pb.ExecRequest{Scanner: scanner, CallId: call, PackedCommands: appendPackedCommands(nil, cmds)}
	resp, err := f.stream.exec(ctx, req)
	if err != nil {
		return nil, err
	}
	return streamReplies(resp, len(cmds))
}

// echoHost answers each command with its last argument.
var echoHost = HostFunc(func(ctx context.Context, cmds []Command) ([]Reply, error) {
	out := make([]Reply, len(cmds))
	for i, c := range cmds {
		out[i] = Reply{Kind: KindString, Str: c[len(c)-1]}
	}
	return out, ctx.Err()
})

// The stream applies the same binding rules as the unary Exec, with the
// same error text a scanner sees.
func TestCallbackStreamBindsBatchesToCalls(t *testing.T) {
	f := newStreamFixture(t)
	ctx := context.Background()

	_, err := f.exec(ctx, "a", 1, []Command{{"PING"}})
	assert.EqualError(t, err, "host exec: FailedPrecondition: no host call 1 in flight")

	callCtx, cancel := context.WithCancel(context.Background())
	id := f.p.calls.add(callCtx, "a", echoHost)
	replies, err := f.exec(ctx, "a", id, []Command{{"ECHO", "x"}, {"ECHO", "bin\x00\xff"}})
	require.NoError(t, err)
	assert.Equal(t, []Reply{{Kind: KindString, Str: "x"}, {Kind: KindString, Str: "bin\x00\xff"}}, replies)

	_, err = f.exec(ctx, "b", id, []Command{{"PING"}})
	assert.ErrorContains(t, err, "PermissionDenied: call")

	cancel()
	_, err = f.exec(ctx, "a", id, []Command{{"PING"}})
	assert.ErrorContains(t, err, "Aborted: host call")

	// A batch in the old form on the stream is refused, not misread.
	resp, err := f.stream.exec(ctx, &pb.ExecRequest{Scanner: "a", CallId: f.p.calls.add(context.Background(), "a", echoHost),
		Commands: commandsToPB([]Command{{"PING"}})})
	require.NoError(t, err)
	_, err = streamReplies(resp, 1)
	assert.ErrorContains(t, err, "InvalidArgument")
	// So is a malformed packed batch.
	resp, err = f.stream.exec(ctx, &pb.ExecRequest{Scanner: "a", CallId: f.p.calls.add(context.Background(), "a", echoHost),
		PackedCommands: []byte{5}})
	require.NoError(t, err)
	_, err = streamReplies(resp, 1)
	assert.ErrorContains(t, err, "InvalidArgument: packed batch")

	// The stream survived every refusal.
	replies, err = f.exec(ctx, "a", f.p.calls.add(context.Background(), "a", echoHost), []Command{{"ECHO", "still"}})
	require.NoError(t, err)
	assert.Equal(t, "still", replies[0].Str)
}

// Batches of many calls in flight at once on one stream each get their
// own replies.
func TestCallbackStreamConcurrentBatches(t *testing.T) {
	f := newStreamFixture(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Go(func() {
			id := f.p.calls.add(context.Background(), "a", echoHost)
			for i := range 50 {
				want := fmt.Sprintf("g%d-i%d", g, i)
				replies, err := f.exec(ctx, "a", id, []Command{{"ECHO", want}, {"ECHO", want + "b"}})
				if err != nil {
					errs <- err
					return
				}
				if replies[0].Str != want || replies[1].Str != want+"b" {
					errs <- fmt.Errorf("batch %s got %q, %q", want, replies[0].Str, replies[1].Str)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A scanner that gives up on a batch gets its context's error at once;
// the host's late answer is dropped and later batches are unaffected.
func TestCallbackStreamCancelledBatch(t *testing.T) {
	f := newStreamFixture(t)
	release := make(chan struct{})
	started := make(chan struct{})
	slow := HostFunc(func(ctx context.Context, cmds []Command) ([]Reply, error) {
		close(started)
		<-release
		return echoHost(ctx, cmds)
	})
	id := f.p.calls.add(context.Background(), "a", slow)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.exec(ctx, "a", id, []Command{{"ECHO", "late"}})
		done <- err
	}()
	<-started
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	close(release)

	replies, err := f.exec(context.Background(), "a", f.p.calls.add(context.Background(), "a", echoHost), []Command{{"ECHO", "next"}})
	require.NoError(t, err)
	assert.Equal(t, "next", replies[0].Str)
}

// When the stream breaks, the batches waiting on it fail instead of
// hanging, and the next batch tries a new stream.
func TestCallbackStreamBreaks(t *testing.T) {
	f := newStreamFixture(t)
	started := make(chan struct{})
	stuck := HostFunc(func(ctx context.Context, cmds []Command) ([]Reply, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	id := f.p.calls.add(context.Background(), "a", stuck)
	done := make(chan error, 1)
	go func() {
		_, err := f.exec(context.Background(), "a", id, []Command{{"PING"}})
		done <- err
	}()
	<-started
	f.server.Stop() // closes the connection: the host is gone
	err := <-done
	require.Error(t, err)
	assert.Contains(t, err.Error(), "host exec:")

	_, err = f.exec(context.Background(), "a", f.p.calls.add(context.Background(), "a", echoHost), []Command{{"PING"}})
	assert.Error(t, err, "no host to open a new stream to")
}

// The socket pair's framing: messages cross intact, and an oversized,
// truncated or unreadable frame ends the channel with an error instead of
// a huge allocation or a misread.
func TestCallbackFrames(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	fa, fb := newFrameConn(a), newFrameConn(b)
	want := &pb.ExecRequest{Scanner: "s", CallId: 7, Seq: 9, PackedCommands: appendPackedCommands(nil, []Command{{"PING", "x\x00"}})}
	go func() { _ = fa.write(want) }()
	got := &pb.ExecRequest{}
	require.NoError(t, fb.read(got))
	assert.Equal(t, want.GetPackedCommands(), got.GetPackedCommands())
	assert.Equal(t, uint64(9), got.GetSeq())

	frame := func(raw []byte) error {
		c, d := net.Pipe()
		defer d.Close()
		go func() { _, _ = c.Write(raw); c.Close() }()
		return newFrameConn(d).read(&pb.ExecRequest{})
	}
	assert.ErrorContains(t, frame([]byte{0xff, 0xff, 0xff, 0xff}), "exceeds")
	assert.ErrorIs(t, frame([]byte{10, 0, 0, 0, 1, 2}), io.ErrUnexpectedEOF)
	assert.Error(t, frame([]byte{2, 0, 0, 0, 0xff, 0xff}), "not a message")
}

// A plugin that writes garbage on its socket loses the channel; the host
// goes on.
func TestCallbackSocketGarbage(t *testing.T) {
	host, plugin := net.Pipe()
	srv := &callbackServer{p: &Plugin{}}
	done := make(chan error, 1)
	go func() { done <- srv.serveBatches(newHostSocket(context.Background(), host)) }()
	_, err := plugin.Write([]byte{3, 0, 0, 0, 0xff, 0xff, 0xff})
	require.NoError(t, err)
	assert.Error(t, <-done)
	host.Close()
	plugin.Close()
}

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

// socketFixture connects a plugin server and a host over a real socket
// pair, as Launch and Serve do, without a process in between.
func socketFixture(t *testing.T, sc Scanner) (*Plugin, *hostSocket) {
	t.Helper()
	hostConn, pluginFile, err := callbackPair()
	require.NoError(t, err)
	pluginConn, err := net.FileConn(pluginFile)
	require.NoError(t, err)
	pluginFile.Close()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Plugin{exitCtx: ctx}
	hs := newHostSocket(ctx, hostConn)
	hs.scans.Store(true)
	served := make(chan struct{})
	go func() { _ = (&callbackServer{p: p}).serveBatches(hs); close(served) }()
	srv, err := newPluginServer(hclog.NewNullLogger(), []Scanner{sc})
	require.NoError(t, err)
	srv.callback = pb.NewHostCallbacksClient(nil) // never used: batches go on the socket
	srv.stream = fdExecStream(&pluginSocket{f: newFrameConn(pluginConn), srv: srv})
	t.Cleanup(func() {
		cancel()
		hostConn.Close()
		pluginConn.Close()
		<-served
	})
	return p, hs
}

func scanCall(p *Plugin, ctx context.Context, members ...string) *pb.ScanPartitionRequest {
	id := p.calls.add(ctx, "sock", echoHost)
	req := &ScanRequest{Partition: keys.Partition{Family: keys.FamilyFlow, Index: 3}, Batch: 10}
	for _, m := range members {
		req.Candidates = append(req.Candidates, Candidate{Source: "due", Member: m})
	}
	return &pb.ScanPartitionRequest{Scanner: "sock", CallId: id, Request: scanRequestToPB(req)}
}

// ScanPartition on the socket pair: results, callbacks on the same
// socket, the scanner's errors as gRPC statuses, and the host's deadline
// and cancellation reaching the scanner's context.
func TestScanOnSocket(t *testing.T) {
	sc := &socketScanner{ended: make(chan error, 1), hadDL: make(chan bool, 1)}
	p, hs := socketFixture(t, sc)
	ctx := context.Background()

	resp, err := hs.scan(ctx, scanCall(p, ctx, "a", "b\x00"))
	require.NoError(t, err)
	assert.Equal(t, int64(2), resp.GetResult().GetProcessed())
	assert.Equal(t, []string{"a", "b\x00"}, resp.GetResult().GetNotes())

	_, err = hs.scan(ctx, scanCall(p, ctx, "fail"))
	assert.Equal(t, codes.Unknown, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "scanner says no")

	_, err = hs.scan(ctx, &pb.ScanPartitionRequest{Scanner: "nope"})
	assert.Equal(t, codes.NotFound, status.Code(err))

	// Cancelled by the host: the scanner's context ends.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := hs.scan(cctx, scanCall(p, cctx, "block")); done <- err }()
	assert.False(t, <-sc.hadDL, "no deadline was set")
	cancel()
	assert.Equal(t, codes.Canceled, status.Code(<-done))
	assert.ErrorIs(t, <-sc.ended, context.Canceled)

	// The host's deadline becomes the scanner's.
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer dcancel()
	go func() { _, err := hs.scan(dctx, scanCall(p, dctx, "block")); done <- err }()
	assert.True(t, <-sc.hadDL, "the deadline crossed")
	// Its own timer or the host's cancel, whichever comes first.
	assert.Error(t, <-sc.ended)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(<-done))

	// The socket still works.
	resp, err = hs.scan(ctx, scanCall(p, ctx, "c"))
	require.NoError(t, err)
	assert.Equal(t, []string{"c"}, resp.GetResult().GetNotes())
}

// Concurrent scans on one socket, each echoing members of many sizes:
// every reply is its own command's, though both ends pack into recycled
// buffers and reuse their frame buffers (a buffer recycled while a frame
// still refers to it would show up here as another scan's bytes).
func TestSocketRecycledBuffersKeepBatchesApart(t *testing.T) {
	p, hs := socketFixture(t, &socketScanner{})
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
				resp, err := hs.scan(ctx, scanCall(p, ctx, members...))
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, members, resp.GetResult().GetNotes())
			}
		}()
	}
	wg.Wait()
}

// A peer that stops reading cannot block a writer for good: the write
// times out and the channel is closed.
func TestCallbackFrameWriteTimeout(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	f := newFrameConn(a)
	f.writeTimeout = 50 * time.Millisecond
	err := f.write(&pb.ExecRequest{Seq: 1})
	require.Error(t, err)
	assert.Error(t, f.write(&pb.ExecRequest{Seq: 2}), "closed after a failed write")
}

// packedEcho answers ECHO batches in packed form (as the host's callback
// service does), or answers them wrongly when told to.
type packedEcho struct {
	packed atomic.Int64
	short  bool // one reply too few
	fail   bool
}

func (e *packedEcho) Exec(ctx context.Context, scanner string, cmds []Command) ([]Reply, error) {
	return echoHost.Exec(ctx, cmds)
}

func (e *packedEcho) ExecPacked(_ context.Context, _ string, cmds []Command, w *ReplyWriter) error {
	e.packed.Add(1)
	if e.fail {
		return errors.New("the store is gone")
	}
	for i, c := range cmds {
		if e.short && i == len(cmds)-1 {
			break
		}
		w.String(c[1])
	}
	return nil
}

// A Host whose Callbacks answer in packed form answers socket batches that
// way, with the same replies; a packed answer with a reply missing, or an
// error, fails the batch instead of handing the scanner wrong replies.
func TestSocketPackedCallbacks(t *testing.T) {
	p, hs := socketFixture(t, &socketScanner{})
	ctx := context.Background()
	call := func(e *packedEcho, members ...string) (*pb.ScanPartitionResponse, error) {
		id := p.calls.add(ctx, "sock", BindHost(e, "sock"))
		defer p.calls.remove(id)
		req := &ScanRequest{Partition: keys.Partition{Family: keys.FamilyFlow, Index: 3}, Batch: 10}
		for _, m := range members {
			req.Candidates = append(req.Candidates, Candidate{Source: "due", Member: m})
		}
		return hs.scan(ctx, &pb.ScanPartitionRequest{Scanner: "sock", CallId: id, Request: scanRequestToPB(req)})
	}
	good := &packedEcho{}
	resp, err := call(good, "a", "b\x00", strings.Repeat("c", 3000))
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b\x00", strings.Repeat("c", 3000)}, resp.GetResult().GetNotes())
	assert.Equal(t, int64(3), good.packed.Load(), "every batch went the packed way")

	_, err = call(&packedEcho{short: true}, "a")
	assert.ErrorContains(t, err, "answered 0 replies to 1 commands")
	_, err = call(&packedEcho{fail: true}, "a")
	assert.ErrorContains(t, err, "the store is gone")
}
