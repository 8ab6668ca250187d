package scannerapi

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/ffscan/ffscan/sdk/scannerapi/internal/pb"
)

// The callback channel on an inherited socket (InfoRequest.callback_fd).
//
// The host creates a connected pair of unix sockets for each plugin it
// launches and hands the plugin one end as file descriptor 3. The batches
// of the callback stream (execstream.go) travel on it as length-prefixed
// ExecRequest and ExecResponse messages, with the same binding checks,
// seq pairing and packed encoding as on the gRPC stream.
//
// Why: even on one long-lived gRPC stream a callback round trip cost
// about 250 us of CPU across the two processes on a 2-core VM (HTTP/2
// framing, the transport's reader and writer goroutines and the wake-ups
// between them), against about 15 us for a plain round trip between two
// processes. A drain makes one to three callbacks per partition, so that
// was most of what running a scanner as a plugin cost over linking it.
//
// Nothing is lost for security: the pair has no name anyone could connect
// to (unlike the broker's socket, it is not reachable even by another
// process of the same user), so it needs no TLS; the plugin gets only its
// own end, and the host checks every batch as it checks Exec.

// callbackFD is the descriptor number the plugin's end has in the plugin
// (the first of exec.Cmd.ExtraFiles).
const callbackFD = 3

// frameConn reads and writes length-prefixed protobuf messages.
type frameConn struct {
	conn net.Conn
	r    *bufio.Reader

	wmu  sync.Mutex
	wbuf []byte
}

func newFrameConn(c net.Conn) *frameConn {
	return &frameConn{conn: c, r: bufio.NewReaderSize(c, 64<<10)}
}

func (f *frameConn) write(m proto.Message) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	buf := append(f.wbuf[:0], 0, 0, 0, 0)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return err
	}
	if len(buf)-4 > maxMsgSize {
		return fmt.Errorf("callback message of %d bytes exceeds %d", len(buf)-4, maxMsgSize)
	}
	binary.LittleEndian.PutUint32(buf, uint32(len(buf)-4))
	_, err = f.conn.Write(buf)
	if cap(buf) <= 1<<20 {
		f.wbuf = buf // keep a moderate buffer for the next message
	}
	return err
}

// read reads one message; only one goroutine reads.
func (f *frameConn) read(m proto.Message) error {
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > maxMsgSize {
		return fmt.Errorf("callback message of %d bytes exceeds %d", n, maxMsgSize)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(f.r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return proto.Unmarshal(buf, m)
}

// fdHostStream is the host's end as the batch stream its handler serves.
type fdHostStream struct {
	ctx context.Context
	f   *frameConn
}

func (s fdHostStream) Context() context.Context { return s.ctx }

func (s fdHostStream) Recv() (*pb.ExecRequest, error) {
	m := &pb.ExecRequest{}
	if err := s.f.read(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (s fdHostStream) Send(m *pb.ExecResponse) error { return s.f.write(m) }

// fdPluginStream is the plugin's end as the stream its batches go on.
type fdPluginStream struct{ f *frameConn }

func (s fdPluginStream) Send(m *pb.ExecRequest) error { return s.f.write(m) }

func (s fdPluginStream) Recv() (*pb.ExecResponse, error) {
	m := &pb.ExecResponse{}
	if err := s.f.read(m); err != nil {
		return nil, err
	}
	return m, nil
}

// callbackPair makes the socket pair for one plugin: the host's end as a
// connection and the plugin's end as a file for exec.Cmd.ExtraFiles
// (which the parent closes once the plugin started).
func callbackPair() (host net.Conn, plugin *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("callback socket pair: %w", err)
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	hf := os.NewFile(uintptr(fds[0]), "ffscan-callbacks-host")
	plugin = os.NewFile(uintptr(fds[1]), "ffscan-callbacks-plugin")
	host, err = net.FileConn(hf) // a duplicate: the file can go
	hf.Close()
	if err != nil {
		plugin.Close()
		return nil, nil, fmt.Errorf("callback socket pair: %w", err)
	}
	return host, plugin, nil
}

// openCallbackFD opens the plugin's end of the pair (once per process).
func openCallbackFD(fd uint32) (net.Conn, error) {
	if fd != callbackFD {
		return nil, fmt.Errorf("the host offers callback descriptor %d; this SDK takes %d", fd, callbackFD)
	}
	f := os.NewFile(uintptr(fd), "ffscan-callbacks")
	if f == nil {
		return nil, fmt.Errorf("callback descriptor %d is not open", fd)
	}
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("callback descriptor %d: %w", fd, err)
	}
	return c, nil
}
