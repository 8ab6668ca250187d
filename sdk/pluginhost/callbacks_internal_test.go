package pluginhost

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// The host's callback service only runs batches of calls in flight, for
// the scanner the call was made to, and ends them with the call.
func TestCallbackServerBindsBatchesToCalls(t *testing.T) {
	p := &Plugin{}
	srv := &callbackServer{p: p}
	var got []scannerapi.Command
	host := scannerapi.HostFunc(func(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		got = cmds
		out := make([]scannerapi.Reply, len(cmds))
		for i := range out {
			out[i] = scannerapi.Reply{Kind: scannerapi.KindString, Str: "ok"}
		}
		return out, ctx.Err()
	})
	req := func(scanner string, id uint64) *pb.ExecRequest {
		return &pb.ExecRequest{Scanner: scanner, CallId: id, Commands: codec.CommandsToPB([]scannerapi.Command{{"PING"}})}
	}

	_, err := srv.Exec(context.Background(), req("a", 1))
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "no call in flight")

	callCtx, cancel := context.WithCancel(context.Background())
	id := p.calls.add(callCtx, "a", host)
	resp, err := srv.Exec(context.Background(), req("a", id))
	require.NoError(t, err)
	assert.Len(t, resp.GetReplies(), 1)
	assert.Equal(t, []scannerapi.Command{{"PING"}}, got)

	_, err = srv.Exec(context.Background(), req("b", id))
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "another scanner's call")

	cancel()
	_, err = srv.Exec(context.Background(), req("a", id))
	assert.Equal(t, codes.Aborted, status.Code(err), "the call's end ends its batches")

	p.calls.remove(id)
	_, err = srv.Exec(context.Background(), req("a", id))
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "finished call")
}
