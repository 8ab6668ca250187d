package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
)

// FrameWriteTimeout bounds one frame's write. Both ends read their
// socket all the time (the readers hand frames on and never wait for
// work), so a write that cannot finish means the peer is stuck; the
// channel is then closed rather than blocking a caller for good (the host
// stops a plugin whose channel failed, and the supervisor restarts it).
const FrameWriteTimeout = 30 * time.Second

// FrameConn reads and writes length-prefixed protobuf messages: a
// little-endian uint32 length, then the message.
type FrameConn struct {
	conn         net.Conn
	r            *bufio.Reader
	writeTimeout time.Duration

	wmu  sync.Mutex
	wbuf []byte

	rbuf []byte // the reader's buffer (one reader): the message is copied out of it
}

// NewFrameConn frames messages on c.
func NewFrameConn(c net.Conn) *FrameConn {
	return &FrameConn{conn: c, r: bufio.NewReaderSize(c, 64<<10), writeTimeout: FrameWriteTimeout}
}

// Write writes one message; writers may be concurrent.
func (f *FrameConn) Write(m proto.Message) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	buf := append(f.wbuf[:0], 0, 0, 0, 0)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return err
	}
	if len(buf)-4 > MaxMsgSize {
		return fmt.Errorf("callback message of %d bytes exceeds %d", len(buf)-4, MaxMsgSize)
	}
	binary.LittleEndian.PutUint32(buf, uint32(len(buf)-4))
	if err := f.conn.SetWriteDeadline(time.Now().Add(f.writeTimeout)); err != nil {
		return err
	}
	if _, err = f.conn.Write(buf); err != nil {
		// Part of the frame may have gone out: the stream is no longer
		// in step, so nothing more may be written or read on it.
		f.conn.Close()
	}
	if cap(buf) <= 1<<20 {
		f.wbuf = buf // keep a moderate buffer for the next message
	}
	return err
}

// Read reads one message; only one goroutine reads. Unmarshalling copies
// every field out of the frame (protobuf copies bytes and strings), so the
// frame's buffer is reused for the next one.
func (f *FrameConn) Read(m proto.Message) error {
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > MaxMsgSize {
		return fmt.Errorf("callback message of %d bytes exceeds %d", n, MaxMsgSize)
	}
	if cap(f.rbuf) < int(n) {
		f.rbuf = make([]byte, n)
	}
	buf := f.rbuf[:n]
	if cap(f.rbuf) > MaxPooledBuffer {
		f.rbuf = nil // a rare huge frame is not kept
	}
	if _, err := io.ReadFull(f.r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	// The peer may be a hostile plugin: its message is bounded before
	// it is decoded (bound.go).
	if err := CheckFields(buf, m.ProtoReflect().Descriptor()); err != nil {
		return fmt.Errorf("callback message refused before decoding: %w", err)
	}
	return proto.Unmarshal(buf, m)
}
