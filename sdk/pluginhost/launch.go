package pluginhost

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"

	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/internal/wire"
	"github.com/ffscan/ffscan/sdk/scannerapi"
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
	// only its socket directory (also its TMPDIR), and opens no socket
	// but unix ones.
	Isolation Isolation
	// AllowConnect keeps connect() open to a confined plugin, which it is
	// not by default: a plugin built with an SDK that dials the host's
	// broker for its callbacks even when it was handed the socket pair
	// needs it (the operator's choice, for a plugin they know to be old).
	// The other callback paths imply it.
	AllowConnect bool
	// MemoryLimit, if positive, bounds the plugin's memory, in bytes;
	// its garbage collector aims below it (GOMEMLIMIT, 90 %). In a
	// control group (Cgroups) it is the group's memory bound, which
	// counts everything the plugin holds; the kernel kills a plugin that
	// reaches it. Without one it is RLIMIT_DATA, which counts the
	// private mappings the plugin made (the Go runtime's heap, and each
	// thread's whole stack reservation), and a plugin that passes it
	// dies of the Go runtime's "out of memory". Either way ExitError
	// says so. RLIMIT_DATA is set before the plugin runs by the
	// trampoline where it confines the plugin, and by the host right
	// after the start elsewhere on Linux; ignored on other systems.
	MemoryLimit int64
	// Cgroups, when set, puts the plugin in a control group of its own
	// (made before it runs, removed after it exited) bounded by
	// MemoryLimit, CPULimit and PidsLimit; the trampoline joins it
	// before it confines and execs the plugin. Nil: RLIMIT_DATA alone,
	// and Plugin.Bounds says so.
	Cgroups *Cgroups
	// CPULimit bounds the plugin's CPU time, in CPUs (0: none); only in
	// a control group.
	CPULimit float64
	// PidsLimit bounds the plugin's tasks, threads included (0: none);
	// only in a control group.
	PidsLimit int64
}

// CallbackPath is how a plugin's callback batches reach the host.
type CallbackPath int

const (
	// CallbackSocket: scan calls and the batch stream on a socket pair
	// made for the plugin alone and inherited as a file descriptor
	// (sdk/internal/wire/socket.go).
	CallbackSocket CallbackPath = iota
	// CallbackStream: the batch stream as a gRPC stream through the
	// go-plugin broker (sdk/internal/wire/stream.go).
	CallbackStream
	// CallbackUnary: one unary gRPC Exec per batch with a protobuf
	// message per command, as plugins built before the batch stream send.
	CallbackUnary
)

// Launch starts a plugin process, completes the go-plugin handshake
// (gRPC only, automatic mTLS), connects the host callback channel and
// reads the plugin's scanners. The process runs in its own process group
// and, on Linux, gets SIGKILL when the host dies (Pdeathsig).
//
// ctx bounds the start only; the process lives until Kill or Close (or
// until it exits on its own: watch Exited).
//
// The steps, each below: check the configuration and make the socket pair
// (prepare); have go-plugin verify the binary's checksum and start it
// through our runner, which builds the command (command) and starts it,
// confined if asked (procRunner.Start); the handshake, which negotiates
// the contract version (handshake); take the Scanner client (dispense);
// serve the plugin's callbacks on the broker and the socket pair
// (serveCallbacks); ask for Info and check every scanner it declares
// (readScanners). A failure after the process started kills it.
func Launch(ctx context.Context, cfg LaunchConfig) (*Plugin, error) {
	l, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	// The plugin's end of the socket pair is the child's once it started.
	defer l.closePluginEnd()
	l.p.client = plugin.NewClient(l.clientConfig())
	rpc, err := l.handshake()
	if err != nil {
		return nil, l.fail(err)
	}
	conn, err := l.dispense(rpc)
	if err != nil {
		return nil, l.fail(err)
	}
	info := l.serveCallbacks(conn)
	if err := l.readScanners(ctx, info); err != nil {
		return nil, l.fail(err)
	}
	return l.p, nil
}

// launch is one Launch under way: the Plugin it fills in and what it
// holds only until the plugin is up.
type launch struct {
	cfg     LaunchConfig
	path    string // the executable, absolute
	timeout time.Duration
	env     []string
	p       *Plugin
	// The callback socket pair (CallbackSocket): the host's end, served
	// for the plugin's lifetime, and the plugin's, which goes to the child
	// as descriptor 3.
	cbHost   net.Conn
	cbPlugin *os.File
}

// prepare checks cfg, fills in its defaults and makes the socket pair.
func prepare(cfg LaunchConfig) (*launch, error) {
	if runtime.GOOS == "windows" {
		return nil, errors.New("pluginhost: launching plugins is only supported on unix")
	}
	if cfg.Path == "" {
		return nil, errors.New("pluginhost: LaunchConfig.Path is empty")
	}
	// Before any plugin runs: a plugin may attack the program that
	// launches it from its first instruction on (ptrace, /proc/<pid>/mem),
	// while that program reads its Info.
	if err := ProtectHostProcess(); err != nil {
		return nil, fmt.Errorf("pluginhost: make this process non-dumpable before launching a plugin: %w", err)
	}
	path, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("pluginhost: plugin path %q: %w", cfg.Path, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.Default()
	}
	l := &launch{cfg: cfg, path: path, timeout: cfg.StartTimeout, env: pluginEnv(cfg.Logger, cfg.Env)}
	if l.timeout <= 0 {
		l.timeout = 10 * time.Second
	}
	l.p = &Plugin{path: path, logger: cfg.Logger, callbacks: cfg.Callbacks}
	l.p.exitCtx, l.p.exitCancel = context.WithCancel(context.Background())
	if cfg.CallbackPath == CallbackSocket {
		if l.cbHost, l.cbPlugin, err = wire.CallbackPair(); err != nil {
			return nil, fmt.Errorf("pluginhost: launch %s: %w", path, err)
		}
	}
	return l, nil
}

// pluginEnv is a plugin's whole environment: the minimal base (baseEnv),
// the host's log level, and the configured extra variables.
func pluginEnv(logger hclog.Logger, extra []string) []string {
	env := baseEnv()
	if lvl := logger.GetLevel(); lvl != hclog.NoLevel && lvl != hclog.Off {
		env = append(env, wire.LogLevelEnv+"="+lvl.String())
	}
	return append(env, extra...)
}

func (l *launch) closePluginEnd() {
	if l.cbPlugin != nil {
		l.cbPlugin.Close()
	}
}

// fail stops what the launch started and returns err, naming the plugin
// (an *APIVersionError names it already and is returned as it is).
func (l *launch) fail(err error) error {
	l.p.Kill()
	if l.cbHost != nil {
		l.cbHost.Close()
	}
	var verr *APIVersionError
	if errors.As(err, &verr) {
		return err
	}
	return fmt.Errorf("pluginhost: launch %s: %w", l.path, err)
}

// clientConfig is go-plugin's configuration for this plugin: our
// handshake and versions, gRPC only, the process started by our runner,
// none of the host's environment, and the binary's checksum verified
// right before it starts.
func (l *launch) clientConfig() *plugin.ClientConfig {
	var secure *plugin.SecureConfig
	if len(l.cfg.Checksum) > 0 {
		secure = &plugin.SecureConfig{Checksum: l.cfg.Checksum, Hash: sha256.New()}
	}
	return &plugin.ClientConfig{
		HandshakeConfig:  Handshake(),
		VersionedPlugins: hostPluginSets(&grpcPlugin{}),
		RunnerFunc:       l.runner,
		SecureConfig:     secure,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         !l.cfg.NoMTLS,
		StartTimeout:     l.timeout,
		Logger:           l.cfg.Logger,
		GRPCDialOptions:  wire.HostDialOptions(),
	}
}

// runner is go-plugin's RunnerFunc: our procRunner for the command, which
// starts it (confined when asked) and tells the Plugin when it exits.
func (l *launch) runner(log hclog.Logger, spec *exec.Cmd, socketDir string) (runner.Runner, error) {
	l.p.socketDir = socketDir
	r, err := newProcRunner(log, l.command(spec, socketDir))
	if err != nil {
		return nil, err
	}
	r.isolation = l.cfg.Isolation
	r.connect = l.cfg.CallbackPath != CallbackSocket || l.cfg.AllowConnect
	r.memoryLimit = l.cfg.MemoryLimit
	r.cgroups = l.cfg.Cgroups
	r.limits = Limits{Memory: l.cfg.MemoryLimit, CPU: l.cfg.CPULimit, Pids: l.cfg.PidsLimit}
	r.readOnly = append([]string{l.path}, sandboxReadOnly...)
	r.readWrite = append([]string{socketDir}, sandboxReadWrite...)
	r.onExit = l.p.exitCancel
	l.p.runner = r
	return r, nil
}

// command builds the plugin's command. go-plugin hands us a placeholder
// command that carries the environment it needs (cookie, versions, mTLS
// cert, socket dir); the real command takes that environment over.
func (l *launch) command(spec *exec.Cmd, socketDir string) *exec.Cmd {
	cmd := exec.Command(l.path, l.cfg.Args...)
	cmd.Env = append(l.env, spec.Env...)
	if l.cfg.Isolation != IsolationOff {
		// The only directory it may write.
		cmd.Env = append(cmd.Env, "TMPDIR="+socketDir)
	}
	if n := l.cfg.MemoryLimit; n > 0 {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+strconv.FormatInt(n/10*9, 10))
	}
	cmd.SysProcAttr = pluginProcAttr()
	if l.cbPlugin != nil {
		cmd.ExtraFiles = []*os.File{l.cbPlugin} // descriptor 3 = wire.CallbackFD
	}
	return cmd
}

// handshake starts the process and completes go-plugin's handshake, in
// which the plugin picks its contract version among those the host
// offers; a version the host does not run is an *APIVersionError.
func (l *launch) handshake() (plugin.ClientProtocol, error) {
	rpc, err := l.p.client.Client()
	if err != nil {
		if verr := apiVersionError(l.path, err); verr != nil {
			return nil, verr
		}
		return nil, err
	}
	l.p.pid = l.p.runner.Pid()
	l.p.apiVersion = l.p.client.NegotiatedVersion()
	return rpc, nil
}

// dispense takes the plugin's Scanner client and its broker.
func (l *launch) dispense(rpc plugin.ClientProtocol) (*clientConn, error) {
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		return nil, err
	}
	conn, ok := raw.(*clientConn)
	if !ok {
		return nil, fmt.Errorf("unexpected plugin client type %T", raw)
	}
	l.p.rpc = conn.scanner
	return conn, nil
}

// serveCallbacks serves the plugin's callbacks for its lifetime: the
// HostCallbacks service on a broker stream (which the plugin dials while
// answering Info: the broker forgets undialled connection info after
// 5 s), and the socket pair when there is one. It returns the Info
// request that offers them.
func (l *launch) serveCallbacks(conn *clientConn) *pb.InfoRequest {
	cbID := conn.broker.NextId()
	go conn.broker.AcceptAndServe(cbID, func(opts []grpc.ServerOption) *grpc.Server {
		s := wire.NewCallbackServer(opts)
		pb.RegisterHostCallbacksServer(s, &callbackServer{p: l.p})
		return s
	})
	info := &pb.InfoRequest{CallbackBrokerId: cbID, ApiVersion: int32(l.p.apiVersion), ExecStream: l.cfg.CallbackPath != CallbackUnary}
	if l.cbHost != nil {
		l.serveSocket()
		info.CallbackFd = wire.CallbackFD
	}
	return info
}

// serveSocket serves the plugin's batches on the host's end of the socket
// pair for the plugin's lifetime; its batches end with it. A channel that
// fails while the process lives stops the plugin.
func (l *launch) serveSocket() {
	p, cbHost := l.p, l.cbHost
	p.sock = wire.NewHostSocket(p.exitCtx, cbHost)
	srv := &callbackServer{p: p}
	go func() {
		err := wire.ServeBatches(p.sock, srv.streamBatch)
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
			p.logger.Error("plugin's callback socket failed; stopping the plugin", "path", p.path, "error", err)
			p.Kill()
		}
	}()
	context.AfterFunc(p.exitCtx, func() { cbHost.Close() })
}

// readScanners asks the plugin for its Info (which connects its callback
// channel) within the start timeout, and takes its scanners.
func (l *launch) readScanners(ctx context.Context, info *pb.InfoRequest) error {
	ictx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	resp, err := l.p.rpc.Info(ictx, info)
	if err != nil {
		return fmt.Errorf("Info: %w", err)
	}
	if l.p.sock != nil && resp.GetScansOnSocket() {
		l.p.sock.SetScans(true)
	}
	l.p.scanners, err = checkScanners(l.p, resp.GetScanners())
	return err
}

// checkScanners checks the scanners a plugin declares: each valid
// (scannerapi.ValidateInfo), of the contract version the plugin
// negotiated, named once; and at least one.
func checkScanners(p *Plugin, infos []*pb.ScannerInfo) ([]*remoteScanner, error) {
	var out []*remoteScanner
	seen := map[string]bool{}
	for _, pi := range infos {
		info := infoFromPB(pi)
		if err := scannerapi.ValidateInfo(info); err != nil {
			return nil, err
		}
		if info.APIVersion != p.apiVersion {
			return nil, fmt.Errorf("scanner %s declares API version %d but the plugin negotiated %d", info.Name, info.APIVersion, p.apiVersion)
		}
		if seen[info.Name] {
			return nil, fmt.Errorf("two scanners are named %q", info.Name)
		}
		seen[info.Name] = true
		out = append(out, &remoteScanner{p: p, info: info})
	}
	if len(out) == 0 {
		return nil, errors.New("the plugin serves no scanner")
	}
	return out, nil
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
