package pluginhost

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

type reply = scannerapi.Reply

const (
	kindNil    = scannerapi.KindNil
	kindString = scannerapi.KindString
	kindInt    = scannerapi.KindInt
	kindFloat  = scannerapi.KindFloat
	kindArray  = scannerapi.KindArray
	kindError  = scannerapi.KindError
)

// sampleReplies are replies of every kind and shape a batch carries.
func sampleReplies() []reply {
	return []reply{
		{Kind: kindArray, Array: []reply{{Kind: kindInt, Int: 1}, {Kind: kindString, Str: "marked"}}},
		{Kind: kindNil},
		{Kind: kindString, Str: "bin\x00\xff"},
		{Kind: kindInt, Int: math.MinInt64},
		{Kind: kindInt, Int: -1},
		{Kind: kindFloat, Float: 1.5},
		{Kind: kindFloat, Float: math.Copysign(0, -1)},
		{Kind: kindFloat, Float: math.Inf(-1)},
		{Kind: kindError, Err: "ERR no such function", ErrClass: scannerapi.ErrServer},
		{Kind: kindError, Err: "connection reset", ErrClass: scannerapi.ErrTransport},
		{Kind: kindArray, Array: []reply{{Kind: kindArray, Array: []reply{{Kind: kindArray, Array: []reply{{Kind: kindString, Str: "deep"}}}}}}},
		// Fields a kind does not usually carry still travel.
		{Kind: kindString, Str: "s", Int: 7, Err: "e"},
	}
}

// packReplies is the packed batch of rs, encoded reply by reply without a
// ReplyWriter.
func packReplies(rs []reply) []byte {
	b := binary.AppendUvarint(nil, uint64(len(rs)))
	for i := range rs {
		b = codec.AppendReply(b, &rs[i], replyNode)
	}
	return b
}

// The packed layout of a reply with every field, elements included, is
// pinned byte by byte: plugins built with older SDKs read it.
func TestPackedReplyLayout(t *testing.T) {
	r := reply{Kind: kindArray, Str: "s", Int: -1, Float: 2, Array: []reply{{Kind: kindInt, Int: 1}}, Err: "e", ErrClass: scannerapi.ErrLua}
	want := []byte{byte(kindArray), codec.FlagStr | codec.FlagInt | codec.FlagFloat | codec.FlagArray | codec.FlagErr | codec.FlagClass,
		1, 's', // str
		1,                         // int -1, zig-zag
		0, 0, 0, 0, 0, 0, 0, 0x40, // float 2
		1,                               // one element
		byte(kindInt), codec.FlagInt, 2, // the element: int 1
		1, 'e', // err, after the elements
		3, 'l', 'u', 'a', // class
	}
	assert.Equal(t, want, codec.AppendReply(nil, &r, replyNode))
}

// writeNodes writes r node by node, as a host converting its client's
// replies does.
func writeNodes(w *ReplyWriter, r *reply) {
	switch {
	case len(r.Array) > 0 && r.Str == "" && r.Int == 0 && r.Float == 0 && r.Err == "" && r.ErrClass == "":
		w.Array(len(r.Array))
		for i := range r.Array {
			writeNodes(w, &r.Array[i])
		}
	case r.Kind == kindNil && plain(r, reply{Kind: kindNil}):
		w.Nil()
	case r.Kind == kindInt && plain(r, reply{Kind: kindInt, Int: r.Int}):
		w.Int(r.Int)
	case r.Kind == kindString && plain(r, reply{Kind: kindString, Str: r.Str}):
		w.String(r.Str)
	case r.Kind == kindFloat && r.Str == "" && r.Int == 0 && r.Err == "" && r.ErrClass == "":
		w.Float(r.Float)
	case r.Kind == kindError && r.Str == "" && r.Int == 0 && r.Float == 0 && len(r.Array) == 0:
		w.Error(r.Err, r.ErrClass)
	default:
		w.Reply(r)
	}
}

// plain reports whether r, which has no elements, is want.
func plain(r *reply, want reply) bool {
	return len(r.Array) == 0 && r.Kind == want.Kind && r.Str == want.Str && r.Int == want.Int &&
		r.Float == want.Float && r.Err == want.Err && r.ErrClass == want.ErrClass
}

// Written node by node or as whole replies, a batch is byte for byte what
// packing Reply values gives, and its Size is theirs.
func TestReplyWriterMatchesPackedReplies(t *testing.T) {
	rs := append(sampleReplies(),
		reply{Kind: kindArray, Array: []reply{{Kind: kindString, Str: "m"}, {Kind: kindFloat, Float: 1.25}}},
		reply{Kind: kindArray, Array: []reply{{Kind: kindInt, Int: 1}}, Err: "e", ErrClass: scannerapi.ErrLua},
		reply{Kind: kindArray},
	)
	var size int64
	for _, r := range rs {
		size += ReplySize(r)
	}
	for _, whole := range []bool{false, true} {
		w := newReplyWriter(nil, len(rs))
		for i := range rs {
			if whole {
				w.Reply(&rs[i])
			} else {
				writeNodes(w, &rs[i])
			}
		}
		require.NoError(t, w.finish(len(rs)))
		assert.Equal(t, packReplies(rs), w.buf, "whole replies: %v", whole)
		assert.Equal(t, size, w.Size(), "whole replies: %v", whole)
		assert.Equal(t, len(rs), w.Replies())
	}
}

func TestReplyWriterRewindAndFinish(t *testing.T) {
	w := newReplyWriter(nil, 2)
	w.String("kept")
	m := w.Mark()
	w.Array(2)
	w.Int(1)
	w.String("dropped")
	assert.Equal(t, 2, w.Replies())
	w.Rewind(m)
	assert.Equal(t, 1, w.Replies())
	assert.Equal(t, ReplySize(reply{Kind: kindString, Str: "kept"}), w.Size())
	w.Error("refused: over budget", scannerapi.ErrRefused)
	require.NoError(t, w.finish(2))
	assert.Equal(t, packReplies([]reply{{Kind: kindString, Str: "kept"}, {Kind: kindError, Err: "refused: over budget", ErrClass: scannerapi.ErrRefused}}), w.buf)

	// A short answer, an extra one and an unfinished array are errors.
	short := newReplyWriter(nil, 2)
	short.Nil()
	assert.ErrorContains(t, short.finish(2), "1 replies to 2 commands")
	open := newReplyWriter(nil, 1)
	open.Array(2)
	open.Int(1)
	assert.ErrorContains(t, open.finish(1), "unfinished")
	assert.Panics(t, func() { open.Mark() }, "a mark inside an array")
	extra := newReplyWriter(nil, 1)
	extra.Float(math.Inf(1))
	extra.Nil()
	assert.ErrorContains(t, extra.finish(1), "2 replies to 1 commands")
}
