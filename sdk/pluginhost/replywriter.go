package pluginhost

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// PackedCallbacks is implemented by Callbacks that can answer a plugin's
// batch straight in the packed form its socket carries, writing each reply
// as their client hands it over instead of building Reply values that are
// packed and dropped at once. The host's callback service does; it is an
// optimisation only: a Callbacks without it (a wrapper, a test double) is
// served through Exec, with the same replies.
type PackedCallbacks interface {
	Callbacks
	// ExecPacked runs cmds as Exec would and writes exactly one reply per
	// command to w, in order. On error nothing written is used.
	ExecPacked(ctx context.Context, scanner string, cmds []scannerapi.Command, w *ReplyWriter) error
}

// ReplyWriter writes the replies of one batch in the packed form. Nodes
// are written depth first: Array(n) is followed by its n elements.
type ReplyWriter struct {
	buf  []byte
	open []int // elements still to come in each open array, innermost last
	top  int   // top-level replies written
	size int64 // the replies' ReplySize, summed
}

// ReplyMark is a point between two top-level replies to rewind to.
type ReplyMark struct {
	off, top int
	size     int64
}

// Mark returns the point after the last top-level reply written. It must
// not be called inside an array.
func (w *ReplyWriter) Mark() ReplyMark {
	if len(w.open) > 0 {
		panic("pluginhost: ReplyWriter.Mark inside an array")
	}
	return ReplyMark{off: len(w.buf), top: w.top, size: w.size}
}

// Rewind drops everything written after m (a reply the host decided not to
// give after all, such as one past its reply budget).
func (w *ReplyWriter) Rewind(m ReplyMark) {
	if len(w.open) > 0 {
		panic("pluginhost: ReplyWriter.Rewind inside an array")
	}
	w.buf, w.top, w.size = w.buf[:m.off], m.top, m.size
}

// Replies returns how many top-level replies have been written.
func (w *ReplyWriter) Replies() int { return w.top }

// Size returns the ReplySize of the replies written so far.
func (w *ReplyWriter) Size() int64 { return w.size }

// Nil writes a nil reply.
func (w *ReplyWriter) Nil() { w.node(&codec.Node{Kind: byte(scannerapi.KindNil)}, 0) }

// Int writes an integer reply.
func (w *ReplyWriter) Int(v int64) { w.node(&codec.Node{Kind: byte(scannerapi.KindInt), Int: v}, 0) }

// Float writes a double reply.
func (w *ReplyWriter) Float(v float64) {
	w.node(&codec.Node{Kind: byte(scannerapi.KindFloat), Float: v}, 0)
}

// String writes a string reply.
func (w *ReplyWriter) String(s string) {
	w.node(&codec.Node{Kind: byte(scannerapi.KindString), Str: s}, 0)
}

// Error writes an error reply.
func (w *ReplyWriter) Error(msg string, class scannerapi.ErrorClass) {
	w.node(&codec.Node{Kind: byte(scannerapi.KindError), Err: msg, Class: string(class)}, 0)
}

// Array writes the head of an array of n elements; the next n nodes
// written are its elements.
func (w *ReplyWriter) Array(n int) { w.node(&codec.Node{Kind: byte(scannerapi.KindArray)}, n) }

// Reply writes r, its elements included.
func (w *ReplyWriter) Reply(r *scannerapi.Reply) {
	w.buf = codec.AppendReply(w.buf, r, replyNode)
	w.count(ReplySize(*r), 0)
}

// node writes one node: n's fields, or with elems > 0 the head of an
// array whose elements are written next (n then carries no error fields,
// which the format puts after the elements).
func (w *ReplyWriter) node(n *codec.Node, elems int) {
	if elems < 0 {
		panic("pluginhost: ReplyWriter.Array with a negative length")
	}
	w.buf = codec.AppendHead(w.buf, n, elems)
	w.buf = codec.AppendTail(w.buf, n)
	w.count(nodeSize(n.Str, n.Err), elems)
}

// count accounts for a node just written, of the given size and elements
// still to come.
func (w *ReplyWriter) count(size int64, elems int) {
	w.size += size
	if k := len(w.open); k > 0 {
		w.open[k-1]--
	} else {
		w.top++
	}
	if elems > 0 {
		w.open = append(w.open, elems)
	}
	for k := len(w.open); k > 0 && w.open[k-1] == 0; k-- {
		w.open = w.open[:k-1]
	}
}

// finish checks that w holds want complete replies.
func (w *ReplyWriter) finish(want int) error {
	if len(w.open) > 0 {
		return errors.New("the host left an array of its replies unfinished")
	}
	if w.top != want {
		return fmt.Errorf("the host answered %d replies to %d commands", w.top, want)
	}
	return nil
}

// NewReplyWriter starts a packed batch of n replies (for a host's own
// tests and transports; the plugin's socket makes its writers itself).
func NewReplyWriter(n int) *ReplyWriter { return newReplyWriter(nil, n) }

// newReplyWriter starts a packed reply batch of n replies in dst.
func newReplyWriter(dst []byte, n int) *ReplyWriter {
	return &ReplyWriter{buf: binary.AppendUvarint(dst, uint64(n))}
}

// Grow makes room for n more bytes of replies, so that writing replies
// whose size is known ahead (a host that measured them) reallocates the
// batch once, not at every doubling.
func (w *ReplyWriter) Grow(n int) {
	if n > 0 {
		w.buf = slices.Grow(w.buf, n)
	}
}

// Bytes returns the packed batch written so far.
func (w *ReplyWriter) Bytes() []byte { return w.buf }

// ReplySize is what a reply counts against a host's reply budget: the
// bytes of its strings plus 16 for each element, nested ones included. It
// is close to what the reply costs in memory, whatever form it travels
// in.
func ReplySize(r scannerapi.Reply) int64 {
	n := nodeSize(r.Str, r.Err)
	for i := range r.Array {
		n += ReplySize(r.Array[i])
	}
	return n
}

func nodeSize(str, err string) int64 { return int64(len(str) + len(err) + 16) }
