package scannerapi

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The packed layout of a reply with every field, elements included, is
// pinned byte by byte: plugins built with older SDKs read it.
func TestPackedReplyLayout(t *testing.T) {
	r := Reply{Kind: KindArray, Str: "s", Int: -1, Float: 2, Array: []Reply{{Kind: KindInt, Int: 1}}, Err: "e", ErrClass: ErrLua}
	want := []byte{byte(KindArray), packedStr | packedInt | packedFloat | packedArray | packedErr | packedClass,
		1, 's', // str
		1,                         // int -1, zig-zag
		0, 0, 0, 0, 0, 0, 0, 0x40, // float 2
		1,                           // one element
		byte(KindInt), packedInt, 2, // the element: int 1
		1, 'e', // err, after the elements
		3, 'l', 'u', 'a', // class
	}
	assert.Equal(t, want, appendPackedReply(nil, &r))
}

// writeNodes writes r node by node, as a host converting its client's
// replies does.
func writeNodes(w *ReplyWriter, r *Reply) {
	switch {
	case len(r.Array) > 0 && r.Str == "" && r.Int == 0 && r.Float == 0 && r.Err == "" && r.ErrClass == "":
		w.Array(len(r.Array))
		for i := range r.Array {
			writeNodes(w, &r.Array[i])
		}
	case r.Kind == KindNil && plain(r, Reply{Kind: KindNil}):
		w.Nil()
	case r.Kind == KindInt && plain(r, Reply{Kind: KindInt, Int: r.Int}):
		w.Int(r.Int)
	case r.Kind == KindString && plain(r, Reply{Kind: KindString, Str: r.Str}):
		w.String(r.Str)
	case r.Kind == KindFloat && r.Str == "" && r.Int == 0 && r.Err == "" && r.ErrClass == "":
		w.Float(r.Float)
	case r.Kind == KindError && r.Str == "" && r.Int == 0 && r.Float == 0 && len(r.Array) == 0:
		w.Error(r.Err, r.ErrClass)
	default:
		w.Reply(r)
	}
}

// plain reports whether r, which has no elements, is want.
func plain(r *Reply, want Reply) bool {
	return len(r.Array) == 0 && r.Kind == want.Kind && r.Str == want.Str && r.Int == want.Int &&
		r.Float == want.Float && r.Err == want.Err && r.ErrClass == want.ErrClass
}

// Written node by node or as whole replies, a batch is byte for byte what
// packing Reply values gives, and its Size is theirs.
func TestReplyWriterMatchesPackedReplies(t *testing.T) {
	rs := append(packedSampleReplies(),
		Reply{Kind: KindArray, Array: []Reply{{Kind: KindString, Str: "m"}, {Kind: KindFloat, Float: 1.25}}},
		Reply{Kind: KindArray, Array: []Reply{{Kind: KindInt, Int: 1}}, Err: "e", ErrClass: ErrLua},
		Reply{Kind: KindArray},
	)
	var size int64
	for _, r := range rs {
		size += r.Size()
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
		assert.Equal(t, appendPackedReplies(nil, rs), w.buf, "whole replies: %v", whole)
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
	assert.Equal(t, Reply{Kind: KindString, Str: "kept"}.Size(), w.Size())
	w.Error("refused: over budget", ErrRefused)
	require.NoError(t, w.finish(2))
	got, err := unpackReplies(w.buf)
	require.NoError(t, err)
	assert.Equal(t, []Reply{{Kind: KindString, Str: "kept"}, {Kind: KindError, Err: "refused: over budget", ErrClass: ErrRefused}}, got)

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
