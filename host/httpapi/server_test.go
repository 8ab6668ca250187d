package httpapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/service"
)

func TestServerServesUntilStop(t *testing.T) {
	t.Parallel()
	s := NewServer(ServerConfig{Listen: "127.0.0.1:0"}, prometheus.NewRegistry(), fakeSource{})
	assert.Empty(t, s.Addr(), "nothing listens before Start")
	require.NoError(t, s.Stop(context.Background()), "stop before start")
	require.NoError(t, s.Start(context.Background()))
	addr := s.Addr()
	require.ErrorIs(t, s.Start(context.Background()), service.ErrStarted, "a second Start")
	assert.Equal(t, addr, s.Addr(), "a second Start leaves the first listener")
	resp, err := http.Get("http://" + s.Addr() + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	// The address is taken: a second server on it fails to start, naming it.
	other := NewServer(ServerConfig{Listen: s.Addr()}, prometheus.NewRegistry(), fakeSource{})
	assert.ErrorContains(t, other.Start(context.Background()), "http.listen "+s.Addr())

	require.NoError(t, s.Stop(context.Background()))
	_, err = net.Dial("tcp", s.Addr())
	assert.Error(t, err, "nothing listens after Stop")
	require.NoError(t, s.Stop(context.Background()), "a second Stop")
}

// closedByServer waits until the server closes conn (a read ends without
// the client's own deadline passing); the deadline only bounds a broken
// test.
func closedByServer(t *testing.T, conn net.Conn) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept the connection open")
	}
}

// A slow-loris client, trickling its headers a line at a time and never
// ending them, is cut off by the server's header timeout; so is a client
// that sends its headers and then trickles a body, by the read timeout,
// and one that idles between requests, by the idle timeout; headers
// past MaxHeaderBytes are refused. Before, only the headers were timed: a
// trickled body or an idle connection was held forever.
func TestServerCutsSlowClients(t *testing.T) {
	t.Parallel()
	s := NewServer(ServerConfig{Listen: "127.0.0.1:0", ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 600 * time.Millisecond,
		IdleTimeout: 300 * time.Millisecond,
		// The console's form POST is the endpoint that reads a body.
		Console: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })},
		prometheus.NewRegistry(), fakeSource{})
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	trickle := func(t *testing.T, head string, line func(int) string) {
		conn, err := net.Dial("tcp", s.Addr())
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, head)
		require.NoError(t, err)
		// The attacker's pace: a line every 50 ms, each well within any
		// per-read timeout, until the server hangs up.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := io.WriteString(conn, line(i)); err != nil {
					return
				}
			}
		}()
		closedByServer(t, conn)
	}
	t.Run("headers", func(t *testing.T) {
		trickle(t, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", func(i int) string { return fmt.Sprintf("X-Slow-%d: x\r\n", i) })
	})
	t.Run("body", func(t *testing.T) {
		trickle(t, "POST /actions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n", func(int) string { return "x" })
	})
	t.Run("idle", func(t *testing.T) {
		conn, err := net.Dial("tcp", s.Addr())
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		require.NoError(t, err)
		closedByServer(t, conn) // the answer, then nothing until the idle timeout
	})
	t.Run("headers too large", func(t *testing.T) {
		conn, err := net.Dial("tcp", s.Addr())
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "+strings.Repeat("b", 2*DefaultMaxHeaderBytes)+"\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	})
}
