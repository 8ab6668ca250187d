// Package testserver starts real Valkey (or Redis 7.x) servers on loopback for
// tests: a single node, or a small cluster. Tests never talk to a mock; they
// get a throwaway server on a free port that is torn down with its files.
package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// ServerBinary finds the server to run: $FFSCAN_TEST_SERVER if set, else
// valkey-server, else redis-server on PATH.
func ServerBinary() (string, error) {
	if p := os.Getenv("FFSCAN_TEST_SERVER"); p != "" {
		return p, nil
	}
	for _, name := range []string{"valkey-server", "redis-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("testserver: neither valkey-server nor redis-server is on PATH; install one (e.g. apt-get install -y redis-server) or set FFSCAN_TEST_SERVER")
}

// Server is one running server process.
type Server struct {
	Addr string // host:port on 127.0.0.1
	Port int
	// BusPort is a cluster node's cluster bus port (0 for a server
	// started outside a cluster).
	BusPort int
	Dir     string // working directory, removed by Stop

	bin      string
	args     []string
	cmd      *exec.Cmd
	exited   chan struct{}
	stopOnce sync.Once
	logPath  string
}

// Option adjusts how a server starts.
type Option func(*config)

type config struct {
	args []string
	// clusterBus gives a cluster node a drawn port for its cluster bus.
	// Left to itself, a node listens on its port + 10000, a port no one
	// drew: another test's server could hold it, or get it after it was
	// drawn for that test.
	clusterBus bool
}

// clusterNode starts the server as a cluster node with its bus on a
// reserved port.
func clusterNode() Option {
	return func(c *config) {
		c.clusterBus = true
		c.args = append(c.args, "--cluster-enabled", "yes")
	}
}

// WithArgs adds server command-line arguments, e.g. "--cluster-enabled", "yes".
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Start launches a server on a free loopback port and waits until it
// answers PING. Call Stop when done (New does it for you in tests).
func Start(opts ...Option) (*Server, error) {
	bin, err := ServerBinary()
	if err != nil {
		return nil, err
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	// A drawn port can still be taken by a process outside the tests
	// before the server binds it; retry with a fresh one instead of
	// failing the test.
	var lastErr error
	for try := 0; try < 5; try++ {
		s, err := startOnce(bin, cfg)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startOnce(bin string, cfg config) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ffscan-testserver-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, Dir: dir, exited: make(chan struct{})}
	s.logPath = filepath.Join(dir, "server.log")
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--logfile", s.logPath, "--daemonize", "no", "--protected-mode", "no",
	}
	if cfg.clusterBus {
		bus, err := FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.BusPort = bus
		args = append(args, "--cluster-port", strconv.Itoa(bus))
	}
	s.bin, s.args = bin, append(args, cfg.args...)
	if err := s.exec(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.waitReady(10 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// exec starts the server process.
func (s *Server) exec() error {
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.SysProcAttr = serverProcAttr()
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("testserver: start %s: %w", s.bin, err)
	}
	exited := s.exited
	cmd := s.cmd
	go func() { _ = cmd.Wait(); close(exited) }()
	return nil
}

// Restart kills the server (SIGKILL) and starts it again on the same port
// and directory, with the same arguments, as a crash and a restart by its
// supervisor would. The dataset is what the server loads from its
// directory: a test that wants it kept runs SAVE first (the server is
// started without persistence). Settings made with CONFIG SET are gone.
func (s *Server) Restart() error {
	s.Kill()
	s.exited = make(chan struct{})
	if err := s.exec(); err != nil {
		return err
	}
	return s.waitReady(10 * time.Second)
}

// waitReady polls with a raw PING so readiness does not depend on a client
// library's own retry behaviour.
func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("testserver: server on %s exited during start: %s", s.Addr, s.logTail())
		default:
		}
		if pingRaw(s.Addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("testserver: server on %s not ready after %s: %s", s.Addr, limit, s.logTail())
}

func pingRaw(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	return nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(no server log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// Stop terminates the server (TERM, then KILL after 5 s) and removes its
// directory. It is safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(5 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.exited
			}
		}
		os.RemoveAll(s.Dir)
	})
}

// Kill stops the server abruptly (SIGKILL) without removing its directory,
// for fault tests; Stop still cleans up afterwards.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *Server) killed() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// New starts a server for one test and stops it when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Client opens a valkey-go client to this one server, closed when the test
// ends.
func (s *Server) Client(t testing.TB) valkey.Client {
	t.Helper()
	// ForceSingleClient: a node of a cluster must be addressed alone, not
	// through a cluster client that would spread commands over all nodes.
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("testserver: connect to %s: %v", s.Addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// Flush empties every database (loaded functions survive), for tests that
// share one server per package.
func (s *Server) Flush(t testing.TB) {
	t.Helper()
	c := s.Client(t)
	if err := c.Do(context.Background(), c.B().Flushall().Build()).Error(); err != nil {
		t.Fatalf("testserver: FLUSHALL on %s: %v", s.Addr, err)
	}
}
