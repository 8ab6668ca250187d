package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/service"
)

// The server's bounds on a client: a slow or idle client cannot hold a
// connection (and its goroutine and buffers) open for free.
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds reading a whole request (the bodies are
	// forms and empty POSTs).
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds writing a response, from the end of the
	// request's headers. The admin actions that wait for a plugin (a hot
	// swap's probation, an approval's relaunch) lift it for their own
	// response: only a holder of the admin token reaches them.
	DefaultWriteTimeout = 60 * time.Second
	// DefaultIdleTimeout bounds a kept-alive connection between requests.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds a request's headers.
	DefaultMaxHeaderBytes = 64 << 10
)

// ServerConfig configures a Server. Zero fields take the defaults above.
type ServerConfig struct {
	// Listen is host:port ("127.0.0.1:0" picks a free port).
	Listen            string
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	// Clock times the server's stop (the system clock). The client
	// timeouts above are the connections' deadlines, which net/http sets
	// on the operating system's clock.
	Clock  clock.Clock
	Logger hclog.Logger
	// Console, when set, serves the web console's pages (GET /, GET
	// /explain, POST /actions; host/console).
	Console http.Handler
}

func (c ServerConfig) withDefaults() ServerConfig {
	service.Default(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	service.Default(&c.ReadTimeout, DefaultReadTimeout)
	service.Default(&c.WriteTimeout, DefaultWriteTimeout)
	service.Default(&c.IdleTimeout, DefaultIdleTimeout)
	service.Default(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Server serves Handler's endpoints on one listener.
type Server struct {
	cfg  ServerConfig
	srv  *http.Server
	loop service.Loop // runs Serve

	mu sync.Mutex
	ln net.Listener // Start's; nil before
}

// NewServer returns a server of reg and src's endpoints; Start listens.
func NewServer(cfg ServerConfig, reg *prometheus.Registry, src Source) *Server {
	cfg = cfg.withDefaults()
	h := Handler(reg, src)
	if cfg.Console != nil {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		mux.Handle("GET /{$}", cfg.Console)
		mux.Handle("GET /explain", cfg.Console)
		mux.Handle("GET /activity", cfg.Console)
		mux.Handle("POST /actions", cfg.Console)
		h = mux
	}
	return &Server{cfg: cfg, srv: &http.Server{Handler: h, ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout, IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: cfg.MaxHeaderBytes}}
}

// Start listens (an address in use is its error) and serves in the
// background until Stop. The server outlives ctx: /readyz reports a
// shutdown until Stop. A second Start returns service.ErrStarted.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return service.ErrStarted
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", s.cfg.Listen, err)
	}
	// Serve ends at Stop (srv.Shutdown), not with ctx: the loop's context
	// is not Serve's.
	if err := s.loop.Start(context.WithoutCancel(ctx), func(context.Context) { s.serve(ln) }); err != nil {
		_ = ln.Close()
		return err
	}
	s.ln = ln
	return nil
}

func (s *Server) serve(ln net.Listener) {
	if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.cfg.Logger.Error("http server failed", "error", err)
	}
}

// Addr is the address Start listens on.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop stops accepting and waits for the requests in flight until ctx
// ends (then they are cut), and for Serve to return.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	started := s.ln != nil
	s.mu.Unlock()
	if !started {
		return nil
	}
	start := s.cfg.Clock.Now()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	err = errors.Join(err, s.loop.Stop(ctx))
	s.cfg.Logger.Debug("http server stopped", "took", clock.Since(s.cfg.Clock, start))
	return err
}
