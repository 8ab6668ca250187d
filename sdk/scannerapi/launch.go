package scannerapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi/internal/pb"
)

// LaunchConfig says how to start a plugin process.
type LaunchConfig struct {
	// Path is the plugin executable.
	Path string
	// Args are extra command-line arguments (rarely needed).
	Args []string
	// Env is the plugin's environment on top of a minimal base (PATH,
	// TMPDIR, TZ, LANG, LC_ALL from the host). The host's own environment is
	// deliberately not inherited: it may hold Valkey credentials.
	Env []string
	// Logger receives go-plugin's and the plugin's log lines (the plugin's
	// under a sub-logger named after the binary, each line tagged with the
	// scanner). Nil means hclog.Default().
	Logger hclog.Logger
	// Callbacks runs the plugin's commands when a scanner method is called
	// with a nil Host. Nil is allowed if every call passes a Host.
	Callbacks Callbacks
	// StartTimeout bounds the handshake and the first Info call. Zero means
	// 10 s.
	StartTimeout time.Duration
	// Checksum, if set, is the expected SHA-256 of the executable; go-plugin
	// verifies it right before starting the process.
	Checksum []byte
	// NoMTLS turns off go-plugin's automatic mutual TLS on the gRPC
	// connection between host and plugin (Info, Configure, SampleBacklog,
	// health pings; everything, for a plugin that does not take the
	// callback socket). Its sockets live in a directory only the host's
	// user can open either way; mTLS additionally shuts out other
	// processes of that user. Off by default, i.e. mTLS is on.
	NoMTLS bool
	// CallbackPath says how the plugin's scan calls and callback batches
	// travel. The zero value, CallbackSocket, is the cheapest; the others
	// are what older plugins use, for tests and benchmarks of those paths
	// (the host serves all three).
	CallbackPath CallbackPath
	// Isolation confines the process (see Isolation); the zero value
	// does not. Confined, the plugin reads only its executable, the
	// system's shared libraries and what the Go runtime needs, writes
	// only its socket directory (also its TMPDIR), and cannot use TCP.
	Isolation Isolation
}

// CallbackPath is how a plugin's callback batches reach the host.
type CallbackPath int

const (
	// CallbackSocket: scan calls and the batch stream on a socket pair
	// made for the plugin alone and inherited as a file descriptor
	// (callbackfd.go).
	CallbackSocket CallbackPath = iota
	// CallbackStream: the batch stream as a gRPC stream through the
	// go-plugin broker (execstream.go).
	CallbackStream
	// CallbackUnary: one unary gRPC Exec per batch with a protobuf
	// message per command, as plugins built before the batch stream send.
	CallbackUnary
)

// Plugin is a running plugin process and the scanners it serves.
type Plugin struct {
	path       string
	logger     hclog.Logger
	client     *plugin.Client
	runner     *procRunner
	rpc        pb.ScannerClient
	callbacks  Callbacks
	apiVersion int
	pid        int
	scanners   []*remoteScanner

	calls      callRegistry
	exitCtx    context.Context // done once the process has exited
	exitCancel context.CancelFunc
	closed     sync.Once
	// socketDir is the directory go-plugin made for the process's unix
	// sockets; go-plugin removes it only when it still knows the process,
	// so shutdown removes it too.
	socketDir string
	// sock is the host's end of the callback socket pair (nil when the
	// plugin was launched without one).
	sock *hostSocket
}

// Launch starts a plugin process, completes the go-plugin handshake
// (gRPC only, automatic mTLS), connects the host callback channel and
// reads the plugin's scanners. The process runs in its own process group
// and, on Linux, gets SIGKILL when the host dies (Pdeathsig).
//
// ctx bounds the start only; the process lives until Kill or Close (or
// until it exits on its own: watch Exited).
func Launch(ctx context.Context, cfg LaunchConfig) (*Plugin, error) {
	if runtime.GOOS == "windows" {
		return nil, errors.New("scannerapi: launching plugins is only supported on unix")
	}
	if cfg.Path == "" {
		return nil, errors.New("scannerapi: LaunchConfig.Path is empty")
	}
	path, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("scannerapi: plugin path %q: %w", cfg.Path, err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.Default()
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	p := &Plugin{path: path, logger: logger, callbacks: cfg.Callbacks}
	p.exitCtx, p.exitCancel = context.WithCancel(context.Background())

	env := baseEnv()
	if lvl := logger.GetLevel(); lvl != hclog.NoLevel && lvl != hclog.Off {
		env = append(env, LogLevelEnv+"="+lvl.String())
	}
	env = append(env, cfg.Env...)

	// The callback socket pair: the plugin's end goes to the child as
	// descriptor 3 and is closed here once the child has it.
	var cbHost net.Conn
	var cbPlugin *os.File
	if cfg.CallbackPath == CallbackSocket {
		var err error
		if cbHost, cbPlugin, err = callbackPair(); err != nil {
			return nil, fmt.Errorf("scannerapi: launch %s: %w", path, err)
		}
		defer cbPlugin.Close()
	}

	var secure *plugin.SecureConfig
	if len(cfg.Checksum) > 0 {
		secure = &plugin.SecureConfig{Checksum: cfg.Checksum, Hash: sha256.New()}
	}

	p.client = plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: hostPluginSets(&grpcPlugin{}),
		RunnerFunc: func(l hclog.Logger, spec *exec.Cmd, socketDir string) (runner.Runner, error) {
			p.socketDir = socketDir
			// go-plugin hands us a placeholder command that carries the
			// environment it needs (cookie, versions, mTLS cert, socket
			// dir); the real command takes that environment over.
			cmd := exec.Command(path, cfg.Args...)
			cmd.Env = append(env, spec.Env...)
			if cfg.Isolation != IsolationOff {
				// The only directory it may write.
				cmd.Env = append(cmd.Env, "TMPDIR="+socketDir)
			}
			cmd.SysProcAttr = pluginProcAttr()
			if cbPlugin != nil {
				cmd.ExtraFiles = []*os.File{cbPlugin} // descriptor 3 = callbackFD
			}
			r, err := newProcRunner(l, cmd)
			if err != nil {
				return nil, err
			}
			r.isolation = cfg.Isolation
			r.readOnly = append([]string{path}, sandboxReadOnly...)
			r.readWrite = append([]string{socketDir}, sandboxReadWrite...)
			r.onExit = p.exitCancel
			p.runner = r
			return r, nil
		},
		SecureConfig:     secure,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         !cfg.NoMTLS,
		StartTimeout:     timeout,
		Logger:           logger,
		GRPCDialOptions:  dialOptions(),
	})

	fail := func(err error) (*Plugin, error) {
		p.Kill()
		if cbHost != nil {
			cbHost.Close()
		}
		return nil, fmt.Errorf("scannerapi: launch %s: %w", path, err)
	}
	rpcClient, err := p.client.Client()
	if err != nil {
		if verr := apiVersionError(path, err); verr != nil {
			p.Kill()
			if cbHost != nil {
				cbHost.Close()
			}
			return nil, verr
		}
		return fail(err)
	}
	p.pid = p.runner.Pid()
	raw, err := rpcClient.Dispense(pluginName)
	if err != nil {
		return fail(err)
	}
	conn, ok := raw.(*clientConn)
	if !ok {
		return fail(fmt.Errorf("unexpected plugin client type %T", raw))
	}
	p.rpc = conn.scanner
	p.apiVersion = p.client.NegotiatedVersion()

	// The callback channel: served by us on a broker stream for the
	// plugin's lifetime. The plugin dials it while answering Info (the
	// broker forgets undialled connection info after 5 s).
	cbID := conn.broker.NextId()
	go conn.broker.AcceptAndServe(cbID, func(opts []grpc.ServerOption) *grpc.Server {
		s := newGRPCServer(opts)
		pb.RegisterHostCallbacksServer(s, &callbackServer{p: p})
		return s
	})

	info := &pb.InfoRequest{CallbackBrokerId: cbID, ApiVersion: int32(p.apiVersion), ExecStream: cfg.CallbackPath != CallbackUnary}
	if cbHost != nil {
		// Served for the plugin's lifetime; its batches end with it.
		p.sock = newHostSocket(p.exitCtx, cbHost)
		srv := &callbackServer{p: p}
		go func() {
			err := srv.serveBatches(p.sock)
			cbHost.Close()
			// An exiting plugin closes its end a moment before the
			// process is reaped: give the exit a moment to be seen.
			t := time.NewTimer(500 * time.Millisecond)
			select {
			case <-p.exitCtx.Done():
			case <-t.C:
			}
			t.Stop()
			if p.exitCtx.Err() == nil {
				// The process lives but its channel is gone: it can
				// neither scan nor run a command. A restart is the way
				// back (the supervisor sees the exit).
				logger.Error("plugin's callback socket failed; stopping the plugin", "path", path, "error", err)
				p.Kill()
			}
		}()
		context.AfterFunc(p.exitCtx, func() { cbHost.Close() })
		info.CallbackFd = callbackFD
	}

	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := p.rpc.Info(ictx, info)
	if err != nil {
		return fail(fmt.Errorf("Info: %w", err))
	}
	if p.sock != nil && resp.GetScansOnSocket() {
		p.sock.scans.Store(true)
	}
	seen := map[string]bool{}
	for _, pi := range resp.GetScanners() {
		info := infoFromPB(pi)
		if err := ValidateInfo(info); err != nil {
			return fail(err)
		}
		if info.APIVersion != p.apiVersion {
			return fail(fmt.Errorf("scanner %s declares API version %d but the plugin negotiated %d", info.Name, info.APIVersion, p.apiVersion))
		}
		if seen[info.Name] {
			return fail(fmt.Errorf("two scanners are named %q", info.Name))
		}
		seen[info.Name] = true
		p.scanners = append(p.scanners, &remoteScanner{p: p, info: info})
	}
	if len(p.scanners) == 0 {
		return fail(errors.New("the plugin serves no scanner"))
	}
	return p, nil
}

// goPluginVersionRE matches go-plugin's incompatible-version message.
var goPluginVersionRE = regexp.MustCompile(`incompatible API version with plugin\. Plugin version: (-?\d+)`)

// apiVersionError recognises go-plugin's refusal of a plugin's protocol
// version and turns it into an *APIVersionError.
func apiVersionError(path string, err error) error {
	m := goPluginVersionRE.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	v, _ := strconv.Atoi(m[1])
	return &APIVersionError{Path: path, Plugin: v, Min: MinAPIVersion, Max: APIVersion, Detail: err.Error()}
}

// baseEnv is the part of the host's environment a plugin inherits.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "TMPDIR", "TZ", "LANG", "LC_ALL"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Scanners returns the plugin's scanners. They implement Scanner by RPC;
// Info is cached from launch. Passing a nil Host to ScanPartition or
// SampleBacklog makes the plugin's commands go to LaunchConfig.Callbacks
// under the scanner's name; passing a Host sends them to that Host for the
// duration of the call.
func (p *Plugin) Scanners() []HostScanner {
	out := make([]HostScanner, len(p.scanners))
	for i, s := range p.scanners {
		out[i] = s
	}
	return out
}

// Scanner returns the plugin's scanner with the given name.
func (p *Plugin) Scanner(name string) (HostScanner, bool) {
	for _, s := range p.scanners {
		if s.info.Name == name {
			return s, true
		}
	}
	return nil, false
}

// Path is the plugin executable.
func (p *Plugin) Path() string { return p.path }

// Pid is the plugin's process id (also its process group id).
func (p *Plugin) Pid() int { return p.pid }

// Isolation describes the confinement the process runs under: what was
// enforced, or "none (why)"; empty when LaunchConfig.Isolation was off.
func (p *Plugin) Isolation() string {
	if p.runner == nil {
		return ""
	}
	p.runner.mu.Lock()
	defer p.runner.mu.Unlock()
	return p.runner.isolated
}

// ProtectHostProcess makes the calling process non-dumpable on Linux:
// other processes of its user, plugins among them, can then read neither
// its memory nor /proc/<pid>/environ (where Valkey credentials given in
// the environment live). A host that launches plugins calls it at start.
func ProtectHostProcess() error { return makeNonDumpable() }

// APIVersion is the contract version negotiated in the handshake.
func (p *Plugin) APIVersion() int { return p.apiVersion }

// Exited is closed once the plugin process has exited, for any reason.
func (p *Plugin) Exited() <-chan struct{} { return p.exitCtx.Done() }

// ExitError is the process's exit status once Exited is closed (nil for a
// clean exit), and nil before.
func (p *Plugin) ExitError() error {
	select {
	case <-p.exitCtx.Done():
		if p.runner != nil {
			return p.runner.err
		}
	default:
	}
	return nil
}

// Ping checks that the plugin answers an RPC of its own service.
func (p *Plugin) Ping(parent context.Context) error {
	ctx, cancel := p.callContext(parent)
	defer cancel()
	if _, err := p.rpc.Ping(ctx, &pb.PingRequest{}); err != nil {
		return p.rpcError(parent, "", "Ping", err)
	}
	return nil
}

// Kill SIGKILLs the plugin's whole process group at once and waits until
// the process has been reaped. It is safe to call more than once and after
// Close.
func (p *Plugin) Kill() {
	if p.runner != nil {
		_ = p.runner.Kill(context.Background())
	}
	p.shutdown()
}

// Close stops the plugin gracefully: it asks it to stop serving (in-flight
// calls finish) and waits for it to exit; when ctx ends first, or after
// go-plugin's own grace period of 2 s, it kills the process group. Either
// way the group is swept with SIGKILL afterwards so nothing the plugin
// started survives.
func (p *Plugin) Close(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		p.shutdown()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		if p.runner != nil {
			_ = p.runner.Kill(context.Background())
		}
		<-done
	}
	if p.runner != nil {
		_ = killGroup(p.runner.Pid())
	}
	return err
}

// shutdown runs go-plugin's Kill once: graceful close, wait, force kill
// (through our runner, so the whole group), and release of its goroutines
// and sockets. Later calls wait for the first.
func (p *Plugin) shutdown() {
	p.closed.Do(func() {
		p.client.Kill()
		if p.runner != nil {
			<-p.runner.exited
		}
		if p.socketDir != "" {
			_ = os.RemoveAll(p.socketDir)
		}
	})
}

// callContext derives a call context that ends when the plugin exits, so a
// call to a dead plugin fails at once rather than at its deadline.
func (p *Plugin) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.exitCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// rpcError turns a gRPC error into ours: the scanner's own errors become a
// RemoteError, a dead process ErrPluginExited.
func (p *Plugin) rpcError(parent context.Context, scanner, method string, err error) error {
	st, ok := status.FromError(err)
	perr := parent.Err()
	if dl, has := parent.Deadline(); perr == nil && has && !time.Now().Before(dl) {
		// The deadline passed but the context's timer has not fired yet
		// (a busy process runs timers late). The plugin's deadline was
		// derived from ours and is never earlier, so its
		// DeadlineExceeded can arrive first: it is still our deadline.
		perr = context.DeadlineExceeded
	}
	if perr != nil && p.exitCtx.Err() == nil {
		// The caller gave up (deadline, shutdown): say so, at once.
		return fmt.Errorf("scanner %s: %s: %w", scanner, method, perr)
	}
	wait := time.Duration(0)
	if ok && (st.Code() == codes.Unavailable || st.Code() == codes.Canceled) {
		// A broken connection is usually seen a moment before the process
		// is reaped; give the exit a moment to be observed.
		wait = 500 * time.Millisecond
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-p.exitCtx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if p.exitCtx.Err() != nil {
		return fmt.Errorf("%s: %s: %w", p.path, method, ErrPluginExited)
	}
	if !ok {
		return fmt.Errorf("scanner %s: %s: %w", scanner, method, err)
	}
	switch st.Code() {
	case codes.Unknown, codes.InvalidArgument, codes.NotFound:
		return &RemoteError{Scanner: scanner, Method: method, Message: st.Message()}
	}
	return fmt.Errorf("scanner %s: %s: %w", scanner, method, err)
}

// remoteScanner is a Scanner served by a plugin process.
type remoteScanner struct {
	p    *Plugin
	info Info
}

func (s *remoteScanner) Info() Info { return s.info }

func (s *remoteScanner) Configure(parent context.Context, options map[string]string) error {
	ctx, cancel := s.p.callContext(parent)
	defer cancel()
	if _, err := s.p.rpc.Configure(ctx, &pb.ConfigureRequest{Scanner: s.info.Name, Options: options}); err != nil {
		return s.p.rpcError(parent, s.info.Name, "Configure", err)
	}
	return nil
}

func (s *remoteScanner) host(h Host) (Host, error) {
	if h != nil {
		return h, nil
	}
	if s.p.callbacks == nil {
		return nil, fmt.Errorf("scanner %s: no Host given and LaunchConfig.Callbacks is nil", s.info.Name)
	}
	return BindHost(s.p.callbacks, s.info.Name), nil
}

func (s *remoteScanner) ScanPartition(parent context.Context, host Host, req *ScanRequest) (*ScanResult, error) {
	h, err := s.host(host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.p.callContext(parent)
	defer cancel()
	id := s.p.calls.add(ctx, s.info.Name, h)
	defer s.p.calls.remove(id)
	preq := &pb.ScanPartitionRequest{Scanner: s.info.Name, CallId: id, Request: scanRequestToPB(req)}
	var resp *pb.ScanPartitionResponse
	if sock := s.p.sock; sock != nil && sock.scans.Load() {
		resp, err = sock.scan(ctx, preq)
	} else {
		resp, err = s.p.rpc.ScanPartition(ctx, preq)
	}
	if err != nil {
		return nil, s.p.rpcError(parent, s.info.Name, "ScanPartition", err)
	}
	return scanResultFromPB(resp.GetResult()), nil
}

func (s *remoteScanner) SampleBacklog(parent context.Context, host Host, partitions []keys.Partition) ([]int64, error) {
	h, err := s.host(host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.p.callContext(parent)
	defer cancel()
	id := s.p.calls.add(ctx, s.info.Name, h)
	defer s.p.calls.remove(id)
	req := &pb.SampleBacklogRequest{Scanner: s.info.Name, CallId: id}
	for _, part := range partitions {
		req.Partitions = append(req.Partitions, partitionToPB(part))
	}
	resp, err := s.p.rpc.SampleBacklog(ctx, req)
	if err != nil {
		return nil, s.p.rpcError(parent, s.info.Name, "SampleBacklog", err)
	}
	if !resp.GetPresent() {
		return nil, nil
	}
	if d := resp.GetDepths(); d != nil {
		return d, nil
	}
	return []int64{}, nil
}

// callRegistry maps the ids of host calls in flight to the Host their
// callbacks run on. A callback for an id not in flight is refused: a plugin
// cannot act outside the calls the host makes.
type callRegistry struct {
	next  atomic.Uint64
	mu    sync.Mutex
	calls map[uint64]callEntry
}

type callEntry struct {
	ctx     context.Context
	scanner string
	host    Host
}

func (r *callRegistry) add(ctx context.Context, scanner string, h Host) uint64 {
	id := r.next.Add(1)
	r.mu.Lock()
	if r.calls == nil {
		r.calls = make(map[uint64]callEntry)
	}
	r.calls[id] = callEntry{ctx: ctx, scanner: scanner, host: h}
	r.mu.Unlock()
	return id
}

func (r *callRegistry) remove(id uint64) {
	r.mu.Lock()
	delete(r.calls, id)
	r.mu.Unlock()
}

func (r *callRegistry) get(id uint64) (callEntry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.calls[id]
	return e, ok
}

// callbackServer is the HostCallbacks service the host serves to one
// plugin.
type callbackServer struct {
	pb.UnimplementedHostCallbacksServer
	p *Plugin
}

func (s *callbackServer) Exec(ctx context.Context, req *pb.ExecRequest) (*pb.ExecResponse, error) {
	call, err := s.bind(req)
	if err != nil {
		return nil, err
	}
	cmds := commandsFromPB(req.GetCommands())
	replies, err := s.run(ctx, call, cmds)
	if err != nil {
		return nil, err
	}
	return &pb.ExecResponse{Replies: repliesToPB(replies)}, nil
}

// bind finds the host call a batch belongs to, refusing batches of calls
// not in flight or of another scanner.
func (s *callbackServer) bind(req *pb.ExecRequest) (callEntry, error) {
	call, ok := s.p.calls.get(req.GetCallId())
	if !ok {
		return callEntry{}, status.Errorf(codes.FailedPrecondition, "no host call %d in flight", req.GetCallId())
	}
	if req.GetScanner() != call.scanner {
		return callEntry{}, status.Errorf(codes.PermissionDenied, "call %d belongs to scanner %q, not %q", req.GetCallId(), call.scanner, req.GetScanner())
	}
	if err := call.ctx.Err(); err != nil {
		return callEntry{}, status.Errorf(codes.Aborted, "host call %d has ended: %v", req.GetCallId(), err)
	}
	return call, nil
}

// run runs a bound batch on its call's Host. The batch ends with
// whichever ends first: ctx (the plugin's request or stream) or the host
// call it belongs to.
func (s *callbackServer) run(ctx context.Context, call callEntry, cmds []Command) ([]Reply, error) {
	ctx, cancel := callContext(ctx, call)
	defer cancel()
	replies, err := call.host.Exec(ctx, cmds)
	if err != nil {
		return nil, status.Error(codes.Aborted, err.Error())
	}
	if len(replies) != len(cmds) {
		return nil, status.Errorf(codes.Internal, "host answered %d replies to %d commands", len(replies), len(cmds))
	}
	return replies, nil
}

// runInto is run for the packed stream paths: the replies go to w, written
// by the Host itself when it can (PackedCallbacks), else from Exec's.
func (s *callbackServer) runInto(ctx context.Context, call callEntry, cmds []Command, w *ReplyWriter) error {
	ph, ok := call.host.(packedHost)
	if !ok || !ph.packs() {
		replies, err := s.run(ctx, call, cmds)
		if err != nil {
			return err
		}
		for i := range replies {
			w.Reply(&replies[i])
		}
		return nil
	}
	ctx, cancel := callContext(ctx, call)
	defer cancel()
	if err := ph.execPacked(ctx, cmds, w); err != nil {
		return status.Error(codes.Aborted, err.Error())
	}
	if err := w.finish(len(cmds)); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// callContext is the context of one batch: it ends with whichever ends
// first, ctx or the host call the batch belongs to.
func callContext(ctx context.Context, call callEntry) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(call.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}
