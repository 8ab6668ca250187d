package codec

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rep is a reply type shaped as scannerapi.Reply (which this package
// cannot import), with its kinds.
type rep struct {
	Kind  byte
	Str   string
	Int   int64
	Float float64
	Array []rep
	Err   string
	Class string
}

const (
	kindNil byte = iota
	kindString
	kindInt
	kindFloat
	kindArray
	kindError
)

type cmd []string

func repNode(r *rep) (Node, []rep) {
	return Node{Kind: r.Kind, Str: r.Str, Int: r.Int, Float: r.Float, Err: r.Err, Class: r.Class}, r.Array
}

func setRep(r *rep, n Node, elems []rep) {
	*r = rep{Kind: n.Kind, Str: n.Str, Int: n.Int, Float: n.Float, Array: elems, Err: n.Err, Class: n.Class}
}

func packReplies(rs []rep) []byte {
	b := binary.AppendUvarint(nil, uint64(len(rs)))
	for i := range rs {
		b = AppendReply(b, &rs[i], repNode)
	}
	return b
}

func unpackReplies(b []byte) ([]rep, error) { return UnpackReplies(b, setRep) }

func sampleCommands() []cmd {
	return []cmd{
		{"FCALL", "ff_mark_lease_expired_if_due", "4", "ff:exec:{fp:7}:x:core", "ff:exec:{fp:7}:x:lease:current", "ff:idx:{fp:7}:lease_expiry", "ff:exec:{fp:7}:x:lease:history", "x"},
		{"PING"},
		{"SET", "k", ""},                         // an empty argument
		{"SET", "bin\x00\xff\r\n", "\x00"},       // binary-safe
		{"HSET", "h", string(make([]byte, 300))}, // a length needing two varint bytes
	}
}

func sampleReplies() []rep {
	return []rep{
		{Kind: kindArray, Array: []rep{{Kind: kindInt, Int: 1}, {Kind: kindString, Str: "marked"}}},
		{Kind: kindNil},
		{Kind: kindString, Str: "bin\x00\xff"},
		{Kind: kindInt, Int: math.MinInt64},
		{Kind: kindInt, Int: -1},
		{Kind: kindFloat, Float: 1.5},
		{Kind: kindFloat, Float: math.Copysign(0, -1)},
		{Kind: kindFloat, Float: math.Inf(-1)},
		{Kind: kindError, Err: "ERR no such function", Class: "server"},
		{Kind: kindError, Err: "connection reset", Class: "transport"},
		{Kind: kindArray, Array: []rep{{Kind: kindArray, Array: []rep{{Kind: kindArray, Array: []rep{{Kind: kindString, Str: "deep"}}}}}}},
		// Fields a kind does not usually carry still travel.
		{Kind: kindString, Str: "s", Int: 7, Err: "e"},
	}
}

func TestPackedCommandsRoundTrip(t *testing.T) {
	cmds := sampleCommands()
	b := AppendCommands(nil, cmds)
	assert.Len(t, b, CommandsSize(cmds), "the size is computed exactly")
	got, err := UnpackCommands[cmd](b, Limits{})
	require.NoError(t, err)
	assert.Equal(t, cmds, got)
	// The protobuf path gives the same commands.
	assert.Equal(t, CommandsFromPB[cmd](CommandsToPB(cmds)), got)
}

func TestPackedRepliesRoundTrip(t *testing.T) {
	rs := sampleReplies()
	b := packReplies(rs)
	got, err := unpackReplies(b)
	require.NoError(t, err)
	require.Len(t, got, len(rs))
	for i := range rs {
		assert.Equal(t, rs[i], got[i], "reply %d", i)
		assert.Equal(t, math.Signbit(rs[i].Float), math.Signbit(got[i].Float), "reply %d keeps the sign of zero", i)
	}
	// NaN compares unequal to itself: check it separately.
	nan, err := unpackReplies(packReplies([]rep{{Kind: kindFloat, Float: math.NaN()}}))
	require.NoError(t, err)
	assert.True(t, math.IsNaN(nan[0].Float))
	// The protobuf path gives the same replies.
	assert.Equal(t, RepliesFromPB(RepliesToPB(rs, repNode), setRep), got)
}

// The packed layout of a reply with every field, elements included, is
// pinned byte by byte: plugins built with older SDKs read it.
func TestPackedReplyLayout(t *testing.T) {
	r := rep{Kind: kindArray, Str: "s", Int: -1, Float: 2, Array: []rep{{Kind: kindInt, Int: 1}}, Err: "e", Class: "lua"}
	want := []byte{kindArray, FlagStr | FlagInt | FlagFloat | FlagArray | FlagErr | FlagClass,
		1, 's', // str
		1,                         // int -1, zig-zag
		0, 0, 0, 0, 0, 0, 0, 0x40, // float 2
		1,                   // one element
		kindInt, FlagInt, 2, // the element: int 1
		1, 'e', // err, after the elements
		3, 'l', 'u', 'a', // class
	}
	assert.Equal(t, want, AppendReply(nil, &r, repNode))
	// The kind of the last node the encoding knows.
	assert.Equal(t, kindError, byte(MaxKind))
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
	var randReply func(depth int) rep
	randReply = func(depth int) rep {
		r := rep{Kind: byte(rng.IntN(int(kindError) + 1))}
		switch r.Kind {
		case kindString:
			r.Str = randStr()
		case kindInt:
			r.Int = rng.Int64() - rng.Int64()
		case kindFloat:
			r.Float = rng.NormFloat64() * 1e6
		case kindArray:
			if depth < 4 {
				for range rng.IntN(5) {
					r.Array = append(r.Array, randReply(depth+1))
				}
			}
		case kindError:
			r.Err, r.Class = randStr(), "lua"
		}
		return r
	}
	for range 300 {
		var cmds []cmd
		for range 1 + rng.IntN(20) {
			c := cmd{"CMD"}
			for range rng.IntN(8) {
				c = append(c, randStr())
			}
			cmds = append(cmds, c)
		}
		gotC, err := UnpackCommands[cmd](AppendCommands(nil, cmds), Limits{})
		require.NoError(t, err)
		require.Equal(t, cmds, gotC)

		var rs []rep
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
			rs = []rep{}
		}
		require.Equal(t, rs, gotR)
	}
}

// TestPackedMalformed: every truncation of a valid batch, trailing bytes,
// impossible counts, unknown kinds and fields, and endless nesting are
// errors, never a panic or a large allocation.
func TestPackedMalformed(t *testing.T) {
	cmds := AppendCommands(nil, sampleCommands())
	for n := 0; n < len(cmds); n++ {
		_, err := UnpackCommands[cmd](cmds[:n], Limits{})
		assert.Error(t, err, "commands cut to %d of %d bytes", n, len(cmds))
	}
	_, err := UnpackCommands[cmd](append(append([]byte(nil), cmds...), 0), Limits{})
	assert.ErrorContains(t, err, "after the last command")

	reps := packReplies(sampleReplies())
	for n := 0; n < len(reps); n++ {
		_, err := unpackReplies(reps[:n])
		assert.Error(t, err, "replies cut to %d of %d bytes", n, len(reps))
	}
	_, err = unpackReplies(append(append([]byte(nil), reps...), 0))
	assert.ErrorContains(t, err, "after the last reply")

	huge := binary.AppendUvarint(nil, math.MaxUint64)
	_, err = UnpackCommands[cmd](huge, Limits{})
	assert.Error(t, err, "a count beyond the input")
	_, err = unpackReplies(huge)
	assert.Error(t, err, "a count beyond the input")
	_, err = UnpackCommands[cmd](binary.AppendUvarint(binary.AppendUvarint(nil, 1), 0), Limits{})
	assert.ErrorContains(t, err, "no arguments")
	_, err = UnpackCommands[cmd](binary.AppendUvarint(nil, 0), Limits{})
	assert.ErrorContains(t, err, "no commands")

	// Past its limits, a batch is refused before it is decoded: a
	// megabyte of one-byte arguments would decode into 16 MB of string
	// headers.
	ones := make([]cmd, 1000)
	for i := range ones {
		ones[i] = make(cmd, 1000)
	}
	packed := AppendCommands(nil, ones)
	_, err = UnpackCommands[cmd](packed, Limits{Commands: 999})
	assert.ErrorContains(t, err, "packed batch: 1000 commands exceeds the limit of 999")
	_, err = UnpackCommands[cmd](packed, Limits{Args: 100_000})
	assert.ErrorContains(t, err, "packed batch: more than 100000 arguments")
	got, err := UnpackCommands[cmd](packed, Limits{Commands: 1000, Args: 1_000_000})
	require.NoError(t, err)
	assert.Len(t, got, 1000, "at the limits")

	_, err = unpackReplies([]byte{1, kindError + 1, 0})
	assert.ErrorContains(t, err, "unknown reply kind")
	_, err = unpackReplies([]byte{1, kindNil, 0x80})
	assert.ErrorContains(t, err, "unknown reply fields")

	// Arrays of one array of one array ... deeper than the bound.
	var deep []byte
	deep = binary.AppendUvarint(deep, 1)
	for range MaxDepth + 2 {
		deep = append(deep, kindArray, FlagArray, 1)
	}
	deep = append(deep, kindNil, 0)
	_, err = unpackReplies(deep)
	assert.ErrorContains(t, err, "nested deeper")
}

// TestPackedArgumentsShareOneStringPerCommand: a command's arguments are
// carved from one allocation of about that command's bytes, so keeping an
// argument never keeps the rest of the batch alive, and a batch's
// allocations do not grow with its arguments.
func TestPackedArgumentsShareOneStringPerCommand(t *testing.T) {
	cmds := []cmd{{"SET", "a", "bb"}, {"GET", "ccc"}, {"HSET", "key", "f1", "v1", "f2", "v2", "f3", "v3"}}
	packed := AppendCommands(nil, cmds)
	got, err := UnpackCommands[cmd](packed, Limits{})
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
		_, _ = UnpackCommands[cmd](packed, Limits{})
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
	rs := make([]rep, 0, n+2)
	for range n {
		rs = append(rs, rep{Kind: kindArray, Array: []rep{{Kind: kindInt, Int: 1}, {Kind: kindString, Str: "OK"}, {Kind: kindString, Str: "marked"}}})
	}
	big := rep{Kind: kindArray}
	for i := range ReplyBlock {
		big.Array = append(big.Array, rep{Kind: kindInt, Int: int64(i)})
	}
	rs = append(rs, big, rep{Kind: kindArray, Array: []rep{{Kind: kindString, Str: member}, {Kind: kindString, Str: member}}})
	packed := packReplies(rs)
	got, err := unpackReplies(packed)
	require.NoError(t, err)
	require.Equal(t, rs, got)

	assert.Same(t, unsafe.StringData(got[0].Array[1].Str), unsafe.StringData(got[n-1].Array[1].Str), "a repeated status word is allocated once")
	long := got[n+1].Array
	assert.NotSame(t, unsafe.StringData(long[0].Str), unsafe.StringData(long[1].Str), "a long string is its own allocation")

	got[0].Array = append(got[0].Array, rep{Kind: kindString, Str: "appended"})
	got[0].Array[0].Int = 99
	for i := 1; i < n; i++ {
		require.Equal(t, rs[i], got[i], "reply %d is untouched by changes to reply 0", i)
	}

	allocs := testing.AllocsPerRun(50, func() {
		_, _ = unpackReplies(packed)
	})
	// The batch, the short-string table, two strings, the large array, the
	// long strings and one block per ReplyBlock nested replies.
	assert.LessOrEqual(t, allocs, float64(1+1+2+1+2+(3*n+2)/ReplyBlock+1))
}

// The protobuf form keeps binary strings, nested arrays and error
// classes.
func TestConvertRoundTrip(t *testing.T) {
	r := rep{Kind: kindArray, Array: []rep{
		{Kind: kindInt, Int: -3}, {Kind: kindString, Str: "a\x00\xff"}, {Kind: kindNil},
		{Kind: kindFloat, Float: 2.5}, {Kind: kindError, Err: "WRONGTYPE x", Class: "server"},
		{Kind: kindArray, Array: []rep{{Kind: kindString, Str: "nested"}}},
	}}
	assert.Equal(t, []rep{r}, RepliesFromPB(RepliesToPB([]rep{r}, repNode), setRep))
	cmds := []cmd{{"FCALL", "f", "1", "k\xff", "a"}, {}}
	assert.Equal(t, cmds, CommandsFromPB[cmd](CommandsToPB(cmds)))
}
