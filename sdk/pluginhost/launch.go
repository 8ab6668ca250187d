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
	// only its socket directory (also its TMPDIR), and cannot use TCP.
	Isolation Isolation
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
func Launch(ctx context.Context, cfg LaunchConfig) (*Plugin, error) {
	if runtime.GOOS == "windows" {
		return nil, errors.New("pluginhost: launching plugins is only supported on unix")
	}
	if cfg.Path == "" {
		return nil, errors.New("pluginhost: LaunchConfig.Path is empty")
	}
	path, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("pluginhost: plugin path %q: %w", cfg.Path, err)
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
		env = append(env, wire.LogLevelEnv+"="+lvl.String())
	}
	env = append(env, cfg.Env...)

	// The callback socket pair: the plugin's end goes to the child as
	// descriptor 3 and is closed here once the child has it.
	var cbHost net.Conn
	var cbPlugin *os.File
	if cfg.CallbackPath == CallbackSocket {
		var err error
		if cbHost, cbPlugin, err = wire.CallbackPair(); err != nil {
			return nil, fmt.Errorf("pluginhost: launch %s: %w", path, err)
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
				cmd.ExtraFiles = []*os.File{cbPlugin} // descriptor 3 = wire.CallbackFD
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
		GRPCDialOptions:  wire.DialOptions(),
	})

	fail := func(err error) (*Plugin, error) {
		p.Kill()
		if cbHost != nil {
			cbHost.Close()
		}
		return nil, fmt.Errorf("pluginhost: launch %s: %w", path, err)
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
	raw, err := rpcClient.Dispense(wire.PluginName)
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
		s := wire.NewGRPCServer(opts)
		pb.RegisterHostCallbacksServer(s, &callbackServer{p: p})
		return s
	})

	info := &pb.InfoRequest{CallbackBrokerId: cbID, ApiVersion: int32(p.apiVersion), ExecStream: cfg.CallbackPath != CallbackUnary}
	if cbHost != nil {
		// Served for the plugin's lifetime; its batches end with it.
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
				logger.Error("plugin's callback socket failed; stopping the plugin", "path", path, "error", err)
				p.Kill()
			}
		}()
		context.AfterFunc(p.exitCtx, func() { cbHost.Close() })
		info.CallbackFd = wire.CallbackFD
	}

	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := p.rpc.Info(ictx, info)
	if err != nil {
		return fail(fmt.Errorf("Info: %w", err))
	}
	if p.sock != nil && resp.GetScansOnSocket() {
		p.sock.SetScans(true)
	}
	seen := map[string]bool{}
	for _, pi := range resp.GetScanners() {
		info := infoFromPB(pi)
		if err := scannerapi.ValidateInfo(info); err != nil {
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
