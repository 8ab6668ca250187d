package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/internal/wire"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// The host's end of the callback stream, with the plugin's end played by
// the wire's stream client (what scannerapi's plugin server sends on):
// the binding of batches to calls, concurrency, cancellation, a broken
// stream, and the packed answers of PackedCallbacks on the socket pair.
// What a plugin makes of the answers is scannerapi's test.

// streamFixture is a host callback service on an in-memory connection
// and the plugin's end of the callback stream talking to it.
type streamFixture struct {
	p      *Plugin
	stream *wire.ExecStream
	server *grpc.Server
}

func newStreamFixture(t *testing.T) *streamFixture {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	f := &streamFixture{p: &Plugin{}, server: wire.NewGRPCServer(nil)}
	pb.RegisterHostCallbacksServer(f.server, &callbackServer{p: f.p})
	go func() { _ = f.server.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		append(wire.DialOptions(),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		f.server.Stop()
	})
	f.stream = wire.GRPCExecStream(pb.NewHostCallbacksClient(conn))
	return f
}

// exec sends one batch and returns the host's packed replies, or its
// refusal of the batch as a gRPC status.
func (f *streamFixture) exec(ctx context.Context, scanner string, call uint64, cmds []scannerapi.Command) ([]byte, error) {
	return execOn(ctx, f.stream, scanner, call, cmds)
}

func execOn(ctx context.Context, x *wire.ExecStream, scanner string, call uint64, cmds []scannerapi.Command) ([]byte, error) {
	req := &pb.ExecRequest{Scanner: scanner, CallId: call, PackedCommands: codec.AppendCommands(nil, cmds)}
	resp, err := x.Exec(ctx, req)
	if err != nil {
		return nil, err
	}
	return answer(resp)
}

// answer is a stream response's packed replies, or its error as a status.
func answer(resp *pb.ExecResponse) ([]byte, error) {
	if code := resp.GetErrorCode(); code != 0 {
		return nil, status.Error(codes.Code(code), resp.GetErrorMessage())
	}
	return resp.GetPackedReplies(), nil
}

// strings packs one string reply per s, as echoHost answers.
func packStrings(ss ...string) []byte {
	rs := make([]reply, len(ss))
	for i, s := range ss {
		rs[i] = reply{Kind: kindString, Str: s}
	}
	return packReplies(rs)
}

// echoHost answers each command with its last argument.
var echoHost = scannerapi.HostFunc(func(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	out := make([]scannerapi.Reply, len(cmds))
	for i, c := range cmds {
		out[i] = scannerapi.Reply{Kind: kindString, Str: c[len(c)-1]}
	}
	return out, ctx.Err()
})

// The stream applies the same binding rules as the unary Exec, with the
// same refusals (the scanner sees them as "host exec: <code>: <message>").
func TestCallbackStreamBindsBatchesToCalls(t *testing.T) {
	f := newStreamFixture(t)
	ctx := context.Background()

	_, err := f.exec(ctx, "a", 1, []scannerapi.Command{{"PING"}})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Equal(t, "no host call 1 in flight", status.Convert(err).Message())

	callCtx, cancel := context.WithCancel(context.Background())
	id := f.p.calls.add(callCtx, "a", echoHost)
	packed, err := f.exec(ctx, "a", id, []scannerapi.Command{{"ECHO", "x"}, {"ECHO", "bin\x00\xff"}})
	require.NoError(t, err)
	assert.Equal(t, packStrings("x", "bin\x00\xff"), packed)

	_, err = f.exec(ctx, "b", id, []scannerapi.Command{{"PING"}})
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "call")

	cancel()
	_, err = f.exec(ctx, "a", id, []scannerapi.Command{{"PING"}})
	assert.Equal(t, codes.Aborted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "host call")

	// A batch in the old form on the stream is refused, not misread.
	resp, err := f.stream.Exec(ctx, &pb.ExecRequest{Scanner: "a", CallId: f.p.calls.add(context.Background(), "a", echoHost),
		Commands: codec.CommandsToPB([]scannerapi.Command{{"PING"}})})
	require.NoError(t, err)
	_, err = answer(resp)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	// So is a malformed packed batch.
	resp, err = f.stream.Exec(ctx, &pb.ExecRequest{Scanner: "a", CallId: f.p.calls.add(context.Background(), "a", echoHost),
		PackedCommands: []byte{5}})
	require.NoError(t, err)
	_, err = answer(resp)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "packed batch")

	// The stream survived every refusal.
	packed, err = f.exec(ctx, "a", f.p.calls.add(context.Background(), "a", echoHost), []scannerapi.Command{{"ECHO", "still"}})
	require.NoError(t, err)
	assert.Equal(t, packStrings("still"), packed)
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
				packed, err := f.exec(ctx, "a", id, []scannerapi.Command{{"ECHO", want}, {"ECHO", want + "b"}})
				if err != nil {
					errs <- err
					return
				}
				if string(packed) != string(packStrings(want, want+"b")) {
					errs <- fmt.Errorf("batch %s got %q", want, packed)
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
	slow := scannerapi.HostFunc(func(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		close(started)
		<-release
		return echoHost(ctx, cmds)
	})
	id := f.p.calls.add(context.Background(), "a", slow)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.exec(ctx, "a", id, []scannerapi.Command{{"ECHO", "late"}})
		done <- err
	}()
	<-started
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	close(release)

	packed, err := f.exec(context.Background(), "a", f.p.calls.add(context.Background(), "a", echoHost), []scannerapi.Command{{"ECHO", "next"}})
	require.NoError(t, err)
	assert.Equal(t, packStrings("next"), packed)
}

// When the stream breaks, the batches waiting on it fail instead of
// hanging, and the next batch tries a new stream.
func TestCallbackStreamBreaks(t *testing.T) {
	f := newStreamFixture(t)
	started := make(chan struct{})
	stuck := scannerapi.HostFunc(func(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	id := f.p.calls.add(context.Background(), "a", stuck)
	done := make(chan error, 1)
	go func() {
		_, err := f.exec(context.Background(), "a", id, []scannerapi.Command{{"PING"}})
		done <- err
	}()
	<-started
	f.server.Stop() // closes the connection: the host is gone
	err := <-done
	require.Error(t, err)
	assert.Contains(t, err.Error(), "host exec:")

	_, err = f.exec(context.Background(), "a", f.p.calls.add(context.Background(), "a", echoHost), []scannerapi.Command{{"PING"}})
	assert.Error(t, err, "no host to open a new stream to")
}

// socketFixture serves a plugin's batches on a real socket pair as
// Launch does, and returns the plugin's end of the stream.
func socketFixture(t *testing.T) (*Plugin, *wire.ExecStream) {
	t.Helper()
	hostConn, pluginFile, err := wire.CallbackPair()
	require.NoError(t, err)
	pluginConn, err := net.FileConn(pluginFile)
	require.NoError(t, err)
	pluginFile.Close()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Plugin{exitCtx: ctx}
	hs := wire.NewHostSocket(ctx, hostConn)
	served := make(chan struct{})
	go func() { _ = wire.ServeBatches(hs, (&callbackServer{p: p}).streamBatch); close(served) }()
	noScans := func(context.Context, *pb.ScanPartitionRequest) (*pb.ScanPartitionResponse, error) {
		return nil, status.Error(codes.Unimplemented, "this test makes no scan calls")
	}
	x := wire.FDExecStream(wire.NewPluginSocket(pluginConn, noScans))
	t.Cleanup(func() {
		cancel()
		hostConn.Close()
		pluginConn.Close()
		<-served
	})
	return p, x
}

// packedEcho answers ECHO batches in packed form (as the host's callback
// service does), or answers them wrongly when told to.
type packedEcho struct {
	packed atomic.Int64
	short  bool // one reply too few
	fail   bool
}

func (e *packedEcho) Exec(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	return echoHost.Exec(ctx, cmds)
}

func (e *packedEcho) ExecPacked(_ context.Context, _ string, cmds []scannerapi.Command, w *ReplyWriter) error {
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
	p, x := socketFixture(t)
	ctx := context.Background()
	echo := func(e *packedEcho, member string) ([]byte, error) {
		id := p.calls.add(ctx, "sock", BindHost(e, "sock"))
		defer p.calls.remove(id)
		return execOn(ctx, x, "sock", id, []scannerapi.Command{{"ECHO", member}})
	}
	good := &packedEcho{}
	for _, m := range []string{"a", "b\x00", strings.Repeat("c", 3000)} {
		packed, err := echo(good, m)
		require.NoError(t, err)
		assert.Equal(t, packStrings(m), packed)
	}
	assert.Equal(t, int64(3), good.packed.Load(), "every batch went the packed way")

	_, err := echo(&packedEcho{short: true}, "a")
	assert.ErrorContains(t, err, "answered 0 replies to 1 commands")
	_, err = echo(&packedEcho{fail: true}, "a")
	assert.ErrorContains(t, err, "the store is gone")
}
