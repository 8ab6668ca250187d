package scannerapi

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

const (
	packedStr = 1 << iota
	packedInt
	packedFloat
	packedArray
	packedErr
	packedClass
)

// maxPackedDepth bounds the nesting of a packed reply. Valkey replies
// nest a few levels (a stream read is four); the bound only stops a
// hostile peer from recursing without end.
const maxPackedDepth = 512

var errPackedTruncated = errors.New("packed batch: truncated")

// appendPackedCommands appends the packed form of cmds to dst.
func appendPackedCommands(dst []byte, cmds []Command) []byte {
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

// packedCommandsSize is the exact size of the packed form of cmds, so the
// buffer is allocated once.
func packedCommandsSize(cmds []Command) int {
	n := uvarintLen(uint64(len(cmds)))
	for _, c := range cmds {
		n += uvarintLen(uint64(len(c)))
		for _, a := range c {
			n += uvarintLen(uint64(len(a))) + len(a)
		}
	}
	return n
}

// unpackCommands decodes a packed command batch. Each command's
// arguments are carved from one string, a copy of that command's own
// encoded bytes (its arguments and their length prefixes): a command is
// handled and dropped as a whole, so no argument keeps a larger buffer
// alive than its own command. The argument slices of the whole batch
// share one array. So a batch costs three allocations and one per command,
// whatever the number of arguments.
func unpackCommands(b []byte) ([]Command, error) {
	r := packedReader{b: b}
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("packed batch: no commands")
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
		ends[i] = r.off
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("packed batch: %d bytes after the last command", len(r.b)-r.off)
	}
	// Second pass, over checked input: copy each command and slice it.
	out := make([]Command, n)
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
		out[i] = cmd
	}
	return out, nil
}

// appendPackedReply appends the packed form of r (replies are written
// through a ReplyWriter, which also counts them).
func appendPackedReply(dst []byte, r *Reply) []byte {
	dst = appendPackedHead(dst, r, len(r.Array))
	for i := range r.Array {
		dst = appendPackedReply(dst, &r.Array[i])
	}
	return appendPackedErr(dst, r)
}

// appendPackedHead appends r's kind, flags and the fields that come
// before the elements (str, int, float, and the element count when elems
// > 0). The elements follow, then appendPackedErr's fields.
func appendPackedHead(dst []byte, r *Reply, elems int) []byte {
	var flags byte
	if r.Str != "" {
		flags |= packedStr
	}
	if r.Int != 0 {
		flags |= packedInt
	}
	if r.Float != 0 || math.Signbit(r.Float) {
		flags |= packedFloat
	}
	if elems > 0 {
		flags |= packedArray
	}
	if r.Err != "" {
		flags |= packedErr
	}
	if r.ErrClass != "" {
		flags |= packedClass
	}
	dst = append(dst, byte(r.Kind), flags)
	if flags&packedStr != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(r.Str)))
		dst = append(dst, r.Str...)
	}
	if flags&packedInt != 0 {
		dst = binary.AppendVarint(dst, r.Int)
	}
	if flags&packedFloat != 0 {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(r.Float))
	}
	if flags&packedArray != 0 {
		dst = binary.AppendUvarint(dst, uint64(elems))
	}
	return dst
}

// appendPackedErr appends r's err and class fields, the last of a node.
func appendPackedErr(dst []byte, r *Reply) []byte {
	if r.Err != "" {
		dst = binary.AppendUvarint(dst, uint64(len(r.Err)))
		dst = append(dst, r.Err...)
	}
	if r.ErrClass != "" {
		dst = binary.AppendUvarint(dst, uint64(len(r.ErrClass)))
		dst = append(dst, r.ErrClass...)
	}
	return dst
}

// unpackReplies decodes a packed reply batch. Strings are allocated one
// by one: a scanner may keep a member it read for a long time, and it
// must not keep the whole batch alive with it. Short strings that repeat
// (status words and codes: a batch of FCALLs answers "OK" hundreds of
// times) are allocated once per batch, and nested arrays are carved from
// shared blocks, so a batch costs a few allocations per hundred replies
// instead of three or four per reply.
func unpackReplies(b []byte) ([]Reply, error) {
	r := packedReader{b: b, short: new(shortStrings)}
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	out := make([]Reply, n)
	for i := range out {
		if err := r.reply(&out[i], 0); err != nil {
			return nil, err
		}
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("packed batch: %d bytes after the last reply", len(r.b)-r.off)
	}
	return out, nil
}

type packedReader struct {
	b   []byte
	off int

	// Reply decoding only (nil for commands).
	short *shortStrings
	block []Reply // what is left of the block nested arrays are cut from
}

// replyBlock is how many nested replies one shared block holds: large
// enough that a batch of FCALL replies costs a handful of allocations,
// small enough that a scanner keeping one reply keeps little else alive.
const replyBlock = 128

// array returns n zero replies for a nested array: cut from the current
// block when it has room, a block of its own when n is large.
func (r *packedReader) array(n int) []Reply {
	if n > replyBlock/4 {
		return make([]Reply, n)
	}
	if len(r.block) < n {
		r.block = make([]Reply, replyBlock)
	}
	a := r.block[:n:n]
	r.block = r.block[n:]
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

func (r *packedReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		return 0, errPackedTruncated
	}
	r.off += n
	return v, nil
}

// length reads a byte length that must fit in what is left.
func (r *packedReader) length() (int, error) {
	v, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if v > uint64(len(r.b)-r.off) {
		return 0, errPackedTruncated
	}
	return int(v), nil
}

// count reads an element count. Every element takes at least one byte, so
// a count larger than what is left is malformed (and is refused before
// anything that large is allocated).
func (r *packedReader) count() (int, error) {
	return r.length()
}

func (r *packedReader) str() (string, error) {
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

func (r *packedReader) reply(out *Reply, depth int) error {
	if depth > maxPackedDepth {
		return fmt.Errorf("packed batch: replies nested deeper than %d", maxPackedDepth)
	}
	if len(r.b)-r.off < 2 {
		return errPackedTruncated
	}
	kind, flags := ReplyKind(r.b[r.off]), r.b[r.off+1]
	r.off += 2
	if kind > KindError {
		return fmt.Errorf("packed batch: unknown reply kind %d", kind)
	}
	if flags&^(packedStr|packedInt|packedFloat|packedArray|packedErr|packedClass) != 0 {
		return fmt.Errorf("packed batch: unknown reply fields %#x", flags)
	}
	out.Kind = kind
	var err error
	if flags&packedStr != 0 {
		if out.Str, err = r.str(); err != nil {
			return err
		}
	}
	if flags&packedInt != 0 {
		v, n := binary.Varint(r.b[r.off:])
		if n <= 0 {
			return errPackedTruncated
		}
		r.off += n
		out.Int = v
	}
	if flags&packedFloat != 0 {
		if len(r.b)-r.off < 8 {
			return errPackedTruncated
		}
		out.Float = math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.off:]))
		r.off += 8
	}
	if flags&packedArray != 0 {
		n, err := r.count()
		if err != nil {
			return err
		}
		out.Array = r.array(n)
		for i := range out.Array {
			if err := r.reply(&out.Array[i], depth+1); err != nil {
				return err
			}
		}
	}
	if flags&packedErr != 0 {
		if out.Err, err = r.str(); err != nil {
			return err
		}
	}
	if flags&packedClass != 0 {
		c, err := r.str()
		if err != nil {
			return err
		}
		out.ErrClass = ErrorClass(c)
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
