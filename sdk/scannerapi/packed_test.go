package scannerapi_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/testscanners"
	"github.com/ffscan/ffscan/sdk/internal/wire"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// sampleReplies are replies of every kind and shape a batch carries.
func sampleReplies() []scannerapi.Reply {
	return []scannerapi.Reply{
		{Kind: scannerapi.KindArray, Array: []scannerapi.Reply{{Kind: scannerapi.KindInt, Int: 1}, {Kind: scannerapi.KindString, Str: "marked"}}},
		{Kind: scannerapi.KindNil},
		{Kind: scannerapi.KindString, Str: "bin\x00\xff"},
		{Kind: scannerapi.KindInt, Int: math.MinInt64},
		{Kind: scannerapi.KindInt, Int: -1},
		{Kind: scannerapi.KindFloat, Float: 1.5},
		{Kind: scannerapi.KindFloat, Float: math.Copysign(0, -1)},
		{Kind: scannerapi.KindFloat, Float: math.Inf(-1)},
		{Kind: scannerapi.KindError, Err: "ERR no such function", ErrClass: scannerapi.ErrServer},
		{Kind: scannerapi.KindError, Err: "conn\xffreset", ErrClass: scannerapi.ErrTransport},
		{Kind: scannerapi.KindArray, Array: []scannerapi.Reply{{Kind: scannerapi.KindArray, Array: []scannerapi.Reply{{Kind: scannerapi.KindString, Str: "deep"}}}}},
		// Fields a kind does not usually carry still travel.
		{Kind: scannerapi.KindString, Str: "s", Int: 7, Err: "e", ErrClass: scannerapi.ErrLua},
	}
}

// What a host writes (pluginhost.ReplyWriter), a plugin reads back
// exactly: every kind and field, binary strings and error text, the sign
// of zero, NaN.
func TestHostRepliesReadBack(t *testing.T) {
	rs := sampleReplies()
	w := pluginhost.NewReplyWriter(len(rs))
	for i := range rs {
		w.Reply(&rs[i])
	}
	got, err := scannerapi.UnpackReplies(w.Bytes())
	require.NoError(t, err)
	require.Len(t, got, len(rs))
	for i := range rs {
		assert.Equal(t, rs[i], got[i], "reply %d", i)
		assert.Equal(t, math.Signbit(rs[i].Float), math.Signbit(got[i].Float), "reply %d keeps the sign of zero", i)
	}
	w = pluginhost.NewReplyWriter(1)
	w.Float(math.NaN())
	nan, err := scannerapi.UnpackReplies(w.Bytes())
	require.NoError(t, err)
	assert.True(t, math.IsNaN(nan[0].Float))
}

// BenchmarkPackedCodec measures what the packed encoding costs the plugin
// per command, for the drain's batch of 390 FCALLs: it packs the commands
// in a recycled buffer, as on the socket, and unpacks the replies. (The
// host's side is pluginhost's BenchmarkPackedCodec.) Linked in, a scanner
// pays none of it.
func BenchmarkPackedCodec(b *testing.B) {
	const n = 390
	cmds, replies := testscanners.DrainBatch(n)
	w := pluginhost.NewReplyWriter(n)
	for i := range replies {
		w.Reply(&replies[i])
	}
	packedReplies := w.Bytes()
	b.Run("plugin", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf := wire.GetBatchBuffer(codec.CommandsSize(cmds))
			wire.PutBatchBuffer(buf, codec.AppendCommands(*buf, cmds))
			if _, err := scannerapi.UnpackReplies(packedReplies); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/command")
	})
}
