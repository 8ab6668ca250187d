package scannerapi

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func packedSampleCommands() []Command {
	return []Command{
		{"FCALL", "ff_mark_lease_expired_if_due", "4", "ff:exec:{fp:7}:x:core", "ff:exec:{fp:7}:x:lease:current", "ff:idx:{fp:7}:lease_expiry", "ff:exec:{fp:7}:x:lease:history", "x"},
		{"PING"},
		{"SET", "k", ""},                         // an empty argument
		{"SET", "bin\x00\xff\r\n", "\x00"},       // binary-safe
		{"HSET", "h", string(make([]byte, 300))}, // a length needing two varint bytes
	}
}

func packedSampleReplies() []Reply {
	return []Reply{
		{Kind: KindArray, Array: []Reply{{Kind: KindInt, Int: 1}, {Kind: KindString, Str: "marked"}}},
		{Kind: KindNil},
		{Kind: KindString, Str: "bin\x00\xff"},
		{Kind: KindInt, Int: math.MinInt64},
		{Kind: KindInt, Int: -1},
		{Kind: KindFloat, Float: 1.5},
		{Kind: KindFloat, Float: math.Copysign(0, -1)},
		{Kind: KindFloat, Float: math.Inf(-1)},
		{Kind: KindError, Err: "ERR no such function", ErrClass: ErrServer},
		{Kind: KindError, Err: "connection reset", ErrClass: ErrTransport},
		{Kind: KindArray, Array: []Reply{{Kind: KindArray, Array: []Reply{{Kind: KindArray, Array: []Reply{{Kind: KindString, Str: "deep"}}}}}}},
		// Fields a kind does not usually carry still travel.
		{Kind: KindString, Str: "s", Int: 7, Err: "e"},
	}
}

// appendPackedReplies appends the packed batch of rs to dst, as a host
// writing whole replies does.
func appendPackedReplies(dst []byte, rs []Reply) []byte {
	w := newReplyWriter(dst, len(rs))
	for i := range rs {
		w.Reply(&rs[i])
	}
	return w.buf
}

func packReplies(rs []Reply) []byte { return appendPackedReplies(nil, rs) }

func TestPackedCommandsRoundTrip(t *testing.T) {
	cmds := packedSampleCommands()
	b := appendPackedCommands(nil, cmds)
	assert.Len(t, b, packedCommandsSize(cmds), "the size is computed exactly")
	got, err := unpackCommands(b)
	require.NoError(t, err)
	assert.Equal(t, cmds, got)
	// The protobuf path gives the same commands.
	assert.Equal(t, commandsFromPB(commandsToPB(cmds)), got)
}

func TestPackedRepliesRoundTrip(t *testing.T) {
	rs := packedSampleReplies()
	b := packReplies(rs)
	got, err := unpackReplies(b)
	require.NoError(t, err)
	require.Len(t, got, len(rs))
	for i := range rs {
		assert.Equal(t, rs[i], got[i], "reply %d", i)
		assert.Equal(t, math.Signbit(rs[i].Float), math.Signbit(got[i].Float), "reply %d keeps the sign of zero", i)
	}
	// NaN compares unequal to itself: check it separately.
	nan, err := unpackReplies(appendPackedReplies(nil, []Reply{{Kind: KindFloat, Float: math.NaN()}}))
	require.NoError(t, err)
	assert.True(t, math.IsNaN(nan[0].Float))
	// The protobuf path gives the same replies.
	assert.Equal(t, repliesFromPB(repliesToPB(rs)), got)
}

// TestPackedRandomRoundTrip checks random batches both ways, seeded so a
// failure repeats.
func TestPackedRandomRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 2))
	randStr := func() string {
		b := make([]byte, rng.IntN(4)*rng.IntN(70))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return string(b)
	}
	var randReply func(depth int) Reply
	randReply = func(depth int) Reply {
		r := Reply{Kind: ReplyKind(rng.IntN(int(KindError) + 1))}
		switch r.Kind {
		case KindString:
			r.Str = randStr()
		case KindInt:
			r.Int = rng.Int64() - rng.Int64()
		case KindFloat:
			r.Float = rng.NormFloat64() * 1e6
		case KindArray:
			if depth < 4 {
				for range rng.IntN(5) {
					r.Array = append(r.Array, randReply(depth+1))
				}
			}
		case KindError:
			r.Err, r.ErrClass = randStr(), ErrLua
		}
		return r
	}
	for range 300 {
		var cmds []Command
		for range 1 + rng.IntN(20) {
			c := Command{"CMD"}
			for range rng.IntN(8) {
				c = append(c, randStr())
			}
			cmds = append(cmds, c)
		}
		gotC, err := unpackCommands(appendPackedCommands(nil, cmds))
		require.NoError(t, err)
		require.Equal(t, cmds, gotC)

		var rs []Reply
		for range rng.IntN(20) {
			rs = append(rs, randReply(0))
		}
		packed := packReplies(rs)
		gotR, err := unpackReplies(packed)
		require.NoError(t, err)
		// Exactly what was sent: unlike a protobuf string field, the
		// packed form carries error text that is not UTF-8 unchanged,
		// as a linked scanner sees it.
		if rs == nil {
			rs = []Reply{}
		}
		require.Equal(t, rs, gotR)
	}
}

// TestPackedMalformed: every truncation of a valid batch, trailing bytes,
// impossible counts, unknown kinds and fields, and endless nesting are
// errors, never a panic or a large allocation.
func TestPackedMalformed(t *testing.T) {
	cmds := appendPackedCommands(nil, packedSampleCommands())
	for n := 0; n < len(cmds); n++ {
		_, err := unpackCommands(cmds[:n])
		assert.Error(t, err, "commands cut to %d of %d bytes", n, len(cmds))
	}
	_, err := unpackCommands(append(append([]byte(nil), cmds...), 0))
	assert.ErrorContains(t, err, "after the last command")

	reps := appendPackedReplies(nil, packedSampleReplies())
	for n := 0; n < len(reps); n++ {
		_, err := unpackReplies(reps[:n])
		assert.Error(t, err, "replies cut to %d of %d bytes", n, len(reps))
	}
	_, err = unpackReplies(append(append([]byte(nil), reps...), 0))
	assert.ErrorContains(t, err, "after the last reply")

	huge := binary.AppendUvarint(nil, math.MaxUint64)
	_, err = unpackCommands(huge)
	assert.Error(t, err, "a count beyond the input")
	_, err = unpackReplies(huge)
	assert.Error(t, err, "a count beyond the input")
	_, err = unpackCommands(binary.AppendUvarint(binary.AppendUvarint(nil, 1), 0))
	assert.ErrorContains(t, err, "no arguments")
	_, err = unpackCommands(binary.AppendUvarint(nil, 0))
	assert.ErrorContains(t, err, "no commands")

	_, err = unpackReplies([]byte{1, byte(KindError) + 1, 0})
	assert.ErrorContains(t, err, "unknown reply kind")
	_, err = unpackReplies([]byte{1, byte(KindNil), 0x80})
	assert.ErrorContains(t, err, "unknown reply fields")

	// Arrays of one array of one array ... deeper than the bound.
	var deep []byte
	deep = binary.AppendUvarint(deep, 1)
	for range maxPackedDepth + 2 {
		deep = append(deep, byte(KindArray), packedArray, 1)
	}
	deep = append(deep, byte(KindNil), 0)
	_, err = unpackReplies(deep)
	assert.ErrorContains(t, err, "nested deeper")
}

// TestPackedArgumentsShareOneStringPerCommand: a command's arguments are
// carved from one allocation of about that command's bytes, so keeping an
// argument never keeps the rest of the batch alive, and a batch's
// allocations do not grow with its arguments.
func TestPackedArgumentsShareOneStringPerCommand(t *testing.T) {
	cmds := []Command{{"SET", "a", "bb"}, {"GET", "ccc"}, {"HSET", "key", "f1", "v1", "f2", "v2", "f3", "v3"}}
	packed := appendPackedCommands(nil, cmds)
	got, err := unpackCommands(packed)
	require.NoError(t, err)
	assert.Equal(t, cmds, got)
	var regions [][2]uintptr
	for i, c := range got {
		lo, hi := uintptr(math.MaxUint64), uintptr(0)
		size := 0
		for _, a := range c {
			size += len(a) + 1 // its bytes and a length byte
			if len(a) == 0 {
				continue
			}
			p := uintptr(unsafe.Pointer(unsafe.StringData(a)))
			lo, hi = min(lo, p), max(hi, p+uintptr(len(a)))
		}
		assert.LessOrEqual(t, int(hi-lo), size, "command %d's arguments lie in one copy of its bytes", i)
		for _, r := range regions {
			assert.True(t, hi <= r[0] || lo >= r[1], "command %d shares memory with another command", i)
		}
		regions = append(regions, [2]uintptr{lo, hi})
	}
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = unpackCommands(packed)
	})
	// The command slice, the argument array, the commands' ends (which
	// the compiler may keep on the stack) and one string per command.
	assert.LessOrEqual(t, allocs, float64(3+len(cmds)))
}

// TestPackedRepliesShareShortStringsAndBlocks: a batch of FCALL replies
// allocates its repeated status words once and cuts its nested arrays
// from shared blocks, and neither is visible to the scanner: every array
// is its own (appending to one leaves the next alone) and long strings,
// which a scanner may keep, are still allocated one by one.
func TestPackedRepliesShareShortStringsAndBlocks(t *testing.T) {
	const n = 300
	member := "{fp:3}:0b7c4e3a-9d1f-4c2a-8e5b-000000000001"
	rs := make([]Reply, 0, n+2)
	for range n {
		rs = append(rs, Reply{Kind: KindArray, Array: []Reply{{Kind: KindInt, Int: 1}, {Kind: KindString, Str: "OK"}, {Kind: KindString, Str: "marked"}}})
	}
	big := Reply{Kind: KindArray}
	for i := range replyBlock {
		big.Array = append(big.Array, Reply{Kind: KindInt, Int: int64(i)})
	}
	rs = append(rs, big, Reply{Kind: KindArray, Array: []Reply{{Kind: KindString, Str: member}, {Kind: KindString, Str: member}}})
	packed := packReplies(rs)
	got, err := unpackReplies(packed)
	require.NoError(t, err)
	require.Equal(t, rs, got)

	assert.Same(t, unsafe.StringData(got[0].Array[1].Str), unsafe.StringData(got[n-1].Array[1].Str), "a repeated status word is allocated once")
	long := got[n+1].Array
	assert.NotSame(t, unsafe.StringData(long[0].Str), unsafe.StringData(long[1].Str), "a long string is its own allocation")

	got[0].Array = append(got[0].Array, Reply{Kind: KindString, Str: "appended"})
	got[0].Array[0].Int = 99
	for i := 1; i < n; i++ {
		require.Equal(t, rs[i], got[i], "reply %d is untouched by changes to reply 0", i)
	}

	allocs := testing.AllocsPerRun(50, func() {
		_, _ = unpackReplies(packed)
	})
	// The batch, the short-string table, two strings, the large array, the
	// long strings and one block per replyBlock nested replies.
	assert.LessOrEqual(t, allocs, float64(1+1+2+1+2+(3*n+2)/replyBlock+1))
}
