package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The packed encoding of a callback batch (ExecRequest.packed_commands and
// ExecResponse.packed_replies).
//
// Why it exists: as protobuf messages, every argument of every command and
// every element of every reply is a message or field of its own, built,
// sized, written, parsed and allocated on both sides. For a batch of a few
// hundred FCALLs that per-element work cost more CPU than everything else
// the plugin did. The packed form is one bytes field that both sides read
// and write with a few appends, so a batch costs one buffer on the way out
// and one allocation per string on the way in.
//
// Commands:  uvarint(count), then per command uvarint(argc) and per
//            argument uvarint(len) followed by the bytes.
// Replies:   uvarint(count), then per reply: one byte kind, one byte of
//            field flags, then the present fields in flag order:
//            str     uvarint(len) + bytes
//            int     zig-zag varint
//            float   8 bytes, IEEE 754 bits, little-endian
//            array   uvarint(n) + n replies
//            err     uvarint(len) + bytes
//            class   uvarint(len) + bytes (the ErrorClass)
//
// Every length is checked against what is left of the input before
// anything is allocated, so a malformed or hostile batch is an error, never
// a huge allocation or a panic.

// The field flags of a packed reply node.
const (
	FlagStr = 1 << iota
	FlagInt
	FlagFloat
	FlagArray
	FlagErr
	FlagClass
)

// MaxKind is the last reply kind the encoding knows (scannerapi.KindError:
// nil, string, int, float, array, error are 0 to 5); a node of a larger
// kind is malformed.
const MaxKind = 5

// MaxDepth bounds the nesting of a packed reply. Valkey replies nest a few
// levels (a stream read is four); the bound only stops a hostile peer from
// recursing without end.
const MaxDepth = 512

var errTruncated = errors.New("packed batch: truncated")

// AppendCommands appends the packed form of cmds to dst.
func AppendCommands[C ~[]string](dst []byte, cmds []C) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(cmds)))
	for _, c := range cmds {
		dst = binary.AppendUvarint(dst, uint64(len(c)))
		for _, a := range c {
			dst = binary.AppendUvarint(dst, uint64(len(a)))
			dst = append(dst, a...)
		}
	}
	return dst
}

// CommandsSize is the exact size of the packed form of cmds, so the
// buffer is allocated once.
func CommandsSize[C ~[]string](cmds []C) int {
	n := uvarintLen(uint64(len(cmds)))
	for _, c := range cmds {
		n += uvarintLen(uint64(len(c)))
		for _, a := range c {
			n += uvarintLen(uint64(len(a))) + len(a)
		}
	}
	return n
}

// Limits bound a batch before it is decoded: the bytes are bounded by
// the message they came in, but not what decoding them allocates, which
// is a 16-byte string header per argument, two bytes or fewer on the wire
// (and a slice per command): 64 MB of one-byte arguments would decode
// into a gigabyte of headers.
type Limits struct {
	Commands int // commands in the batch
	Args     int // arguments of all its commands
}

// UnpackCommands decodes a packed command batch. Each command's
// arguments are carved from one string, a copy of that command's own
// encoded bytes (its arguments and their length prefixes): a command is
// handled and dropped as a whole, so no argument keeps a larger buffer
// alive than its own command. The argument slices of the whole batch
// share one array. So a batch costs three allocations and one per command,
// whatever the number of arguments.
//
// A batch past lim (zero fields: no bound) is refused before anything
// is allocated for it.
func UnpackCommands[C ~[]string](b []byte, lim Limits) ([]C, error) {
	r := reader{b: b}
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("packed batch: no commands")
	}
	if lim.Commands > 0 && n > lim.Commands {
		return nil, fmt.Errorf("packed batch: %d commands exceeds the limit of %d", n, lim.Commands)
	}
	// First pass: check every length, count the arguments and note where
	// each command ends.
	first, total := r.off, 0
	ends := make([]int, n)
	for i := range ends {
		argc, err := r.count()
		if err != nil {
			return nil, err
		}
		if argc == 0 {
			return nil, fmt.Errorf("packed batch: command %d has no arguments", i)
		}
		for range argc {
			l, err := r.length()
			if err != nil {
				return nil, err
			}
			r.off += l
		}
		total += argc
		if lim.Args > 0 && total > lim.Args {
			return nil, fmt.Errorf("packed batch: more than %d arguments", lim.Args)
		}
		ends[i] = r.off
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("packed batch: %d bytes after the last command", len(r.b)-r.off)
	}
	// Second pass, over checked input: copy each command and slice it.
	out := make([]C, n)
	args := make([]string, total)
	r.off = first
	for i, end := range ends {
		argc, _ := r.count()
		base := r.off
		all := string(r.b[base:end])
		cmd := args[:argc:argc]
		args = args[argc:]
		for j := range cmd {
			l, _ := r.length()
			from := r.off - base
			cmd[j] = all[from : from+l]
			r.off += l
		}
		out[i] = C(cmd)
	}
	return out, nil
}

// Node is one node of a reply: its kind (a scannerapi.ReplyKind) and its
// fields besides the elements. A side converts its reply type to and from
// nodes: the host's writes them (a func(*R) (Node, []R) that also hands
// over the elements), the plugin's reads them (a func(*R, Node, []R) that
// fills an R from a node and its decoded elements; the node goes by value
// so that decoding a node allocates nothing of its own).
type Node struct {
	Kind  byte
	Str   string
	Int   int64
	Float float64
	Err   string
	Class string
}

// AppendReply appends the packed form of r, its elements included.
func AppendReply[R any](dst []byte, r *R, node func(*R) (Node, []R)) []byte {
	n, elems := node(r)
	dst = AppendHead(dst, &n, len(elems))
	for i := range elems {
		dst = AppendReply(dst, &elems[i], node)
	}
	return AppendTail(dst, &n)
}

// AppendHead appends n's kind, flags and the fields that come before the
// elements (str, int, float, and the element count when elems > 0). The
// elements follow, then AppendTail's fields.
func AppendHead(dst []byte, n *Node, elems int) []byte {
	var flags byte
	if n.Str != "" {
		flags |= FlagStr
	}
	if n.Int != 0 {
		flags |= FlagInt
	}
	if n.Float != 0 || math.Signbit(n.Float) {
		flags |= FlagFloat
	}
	if elems > 0 {
		flags |= FlagArray
	}
	if n.Err != "" {
		flags |= FlagErr
	}
	if n.Class != "" {
		flags |= FlagClass
	}
	dst = append(dst, n.Kind, flags)
	if flags&FlagStr != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(n.Str)))
		dst = append(dst, n.Str...)
	}
	if flags&FlagInt != 0 {
		dst = binary.AppendVarint(dst, n.Int)
	}
	if flags&FlagFloat != 0 {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(n.Float))
	}
	if flags&FlagArray != 0 {
		dst = binary.AppendUvarint(dst, uint64(elems))
	}
	return dst
}

// AppendTail appends n's err and class fields, the last of a node.
func AppendTail(dst []byte, n *Node) []byte {
	if n.Err != "" {
		dst = binary.AppendUvarint(dst, uint64(len(n.Err)))
		dst = append(dst, n.Err...)
	}
	if n.Class != "" {
		dst = binary.AppendUvarint(dst, uint64(len(n.Class)))
		dst = append(dst, n.Class...)
	}
	return dst
}

// UnpackReplies decodes a packed reply batch, filling each R, a zero
// value, with set.
// Strings are allocated one by one: a scanner may keep a member it read
// for a long time, and it must not keep the whole batch alive with it.
// Short strings that repeat (status words and codes: a batch of FCALLs
// answers "OK" hundreds of times) are allocated once per batch, and
// nested arrays are carved from shared blocks, so a batch costs a few
// allocations per hundred replies instead of three or four per reply.
func UnpackReplies[R any](b []byte, set func(r *R, n Node, elems []R)) ([]R, error) {
	d := replyReader[R]{reader: reader{b: b, short: new(shortStrings)}, set: set}
	n, err := d.count()
	if err != nil {
		return nil, err
	}
	out := make([]R, n)
	for i := range out {
		if err := d.reply(&out[i], 0); err != nil {
			return nil, err
		}
	}
	if d.off != len(d.b) {
		return nil, fmt.Errorf("packed batch: %d bytes after the last reply", len(d.b)-d.off)
	}
	return out, nil
}

type reader struct {
	b   []byte
	off int

	short *shortStrings // reply decoding only (nil for commands)
}

// replyReader decodes replies into R.
type replyReader[R any] struct {
	reader
	set   func(r *R, n Node, elems []R)
	block []R // what is left of the block nested arrays are cut from
}

// ReplyBlock is how many nested replies one shared block holds: large
// enough that a batch of FCALL replies costs a handful of allocations,
// small enough that a scanner keeping one reply keeps little else alive.
const ReplyBlock = 128

// array returns n zero replies for a nested array: cut from the current
// block when it has room, a block of its own when n is large.
func (d *replyReader[R]) array(n int) []R {
	if n > ReplyBlock/4 {
		return make([]R, n)
	}
	if len(d.block) < n {
		d.block = make([]R, ReplyBlock)
	}
	a := d.block[:n:n]
	d.block = d.block[n:]
	return a
}

// shortStrings remembers the short strings of one batch, so the ones that
// repeat are allocated once. It is a small direct-mapped table: a
// collision only costs an allocation.
type shortStrings [64]string

// maxShortString is the longest string shortStrings keeps: status words
// and error codes, not members or keys (which rarely repeat).
const maxShortString = 24

func (t *shortStrings) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	slot := &t[(len(b)*31+int(b[0])*7+int(b[len(b)-1]))&(len(t)-1)]
	if *slot == string(b) { // compared without allocating
		return *slot
	}
	*slot = string(b)
	return *slot
}

func (r *reader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		return 0, errTruncated
	}
	r.off += n
	return v, nil
}

// length reads a byte length that must fit in what is left.
func (r *reader) length() (int, error) {
	v, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if v > uint64(len(r.b)-r.off) {
		return 0, errTruncated
	}
	return int(v), nil
}

// count reads an element count. Every element takes at least one byte, so
// a count larger than what is left is malformed (and is refused before
// anything that large is allocated).
func (r *reader) count() (int, error) {
	return r.length()
}

func (r *reader) str() (string, error) {
	l, err := r.length()
	if err != nil {
		return "", err
	}
	var s string
	if r.short != nil && l <= maxShortString {
		s = r.short.get(r.b[r.off : r.off+l])
	} else {
		s = string(r.b[r.off : r.off+l])
	}
	r.off += l
	return s, nil
}

func (d *replyReader[R]) reply(out *R, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("packed batch: replies nested deeper than %d", MaxDepth)
	}
	var n Node
	flags, elems, err := d.head(&n)
	if err != nil {
		return err
	}
	var arr []R
	if flags&FlagArray != 0 {
		arr = d.array(elems)
		for i := range arr {
			if err := d.reply(&arr[i], depth+1); err != nil {
				return err
			}
		}
	}
	if err := d.tail(&n, flags); err != nil {
		return err
	}
	d.set(out, n, arr)
	return nil
}

// head reads a node's kind, flags and the fields before its elements, and
// returns the flags and the number of elements that follow.
func (d *replyReader[R]) head(n *Node) (flags byte, elems int, err error) {
	if len(d.b)-d.off < 2 {
		return 0, 0, errTruncated
	}
	n.Kind, flags = d.b[d.off], d.b[d.off+1]
	d.off += 2
	if n.Kind > MaxKind {
		return 0, 0, fmt.Errorf("packed batch: unknown reply kind %d", n.Kind)
	}
	if flags&^(FlagStr|FlagInt|FlagFloat|FlagArray|FlagErr|FlagClass) != 0 {
		return 0, 0, fmt.Errorf("packed batch: unknown reply fields %#x", flags)
	}
	if flags&FlagStr != 0 {
		if n.Str, err = d.str(); err != nil {
			return 0, 0, err
		}
	}
	if flags&FlagInt != 0 {
		v, k := binary.Varint(d.b[d.off:])
		if k <= 0 {
			return 0, 0, errTruncated
		}
		d.off += k
		n.Int = v
	}
	if flags&FlagFloat != 0 {
		if len(d.b)-d.off < 8 {
			return 0, 0, errTruncated
		}
		n.Float = math.Float64frombits(binary.LittleEndian.Uint64(d.b[d.off:]))
		d.off += 8
	}
	if flags&FlagArray != 0 {
		if elems, err = d.count(); err != nil {
			return 0, 0, err
		}
	}
	return flags, elems, nil
}

// tail reads a node's err and class fields, after its elements.
func (d *replyReader[R]) tail(n *Node, flags byte) error {
	var err error
	if flags&FlagErr != 0 {
		if n.Err, err = d.str(); err != nil {
			return err
		}
	}
	if flags&FlagClass != 0 {
		if n.Class, err = d.str(); err != nil {
			return err
		}
	}
	return nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
