package wire

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
)

// The socket pair's framing: messages cross intact, and an oversized,
// truncated or unreadable frame ends the channel with an error instead of
// a huge allocation or a misread.
func TestCallbackFrames(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	fa, fb := NewFrameConn(a), NewFrameConn(b)
	want := &pb.ExecRequest{Scanner: "s", CallId: 7, Seq: 9, PackedCommands: codec.AppendCommands(nil, [][]string{{"PING", "x\x00"}})}
	go func() { _ = fa.Write(want) }()
	got := &pb.ExecRequest{}
	require.NoError(t, fb.Read(got))
	assert.Equal(t, want.GetPackedCommands(), got.GetPackedCommands())
	assert.Equal(t, uint64(9), got.GetSeq())

	frame := func(raw []byte) error {
		c, d := net.Pipe()
		defer d.Close()
		go func() { _, _ = c.Write(raw); c.Close() }()
		return NewFrameConn(d).Read(&pb.ExecRequest{})
	}
	assert.ErrorContains(t, frame([]byte{0xff, 0xff, 0xff, 0xff}), "exceeds")
	assert.ErrorIs(t, frame([]byte{10, 0, 0, 0, 1, 2}), io.ErrUnexpectedEOF)
	assert.Error(t, frame([]byte{2, 0, 0, 0, 0xff, 0xff}), "not a message")
}

// A plugin that writes garbage on its socket loses the channel; the host
// goes on.
func TestCallbackSocketGarbage(t *testing.T) {
	host, plugin := net.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeBatches(NewHostSocket(context.Background(), host), func(context.Context, *pb.ExecRequest, *[]byte) *pb.ExecResponse {
			t.Error("garbage was taken for a batch")
			return &pb.ExecResponse{}
		})
	}()
	_, err := plugin.Write([]byte{3, 0, 0, 0, 0xff, 0xff, 0xff})
	require.NoError(t, err)
	assert.Error(t, <-done)
	host.Close()
	plugin.Close()
}

// A peer that stops reading cannot block a writer for good: the write
// times out and the channel is closed.
func TestCallbackFrameWriteTimeout(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	f := NewFrameConn(a)
	f.writeTimeout = 50 * time.Millisecond
	err := f.Write(&pb.ExecRequest{Seq: 1})
	require.Error(t, err)
	assert.Error(t, f.Write(&pb.ExecRequest{Seq: 2}), "closed after a failed write")
}
