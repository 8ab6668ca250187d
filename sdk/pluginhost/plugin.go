package pluginhost

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/internal/wire"
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
	sock *wire.HostSocket
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

// Bounds describes the kernel's bounds on the process's resources: its
// control group's (memory, CPU, tasks) or, without one, its rlimits.
func (p *Plugin) Bounds() string {
	if p.runner == nil {
		return ""
	}
	p.runner.mu.Lock()
	defer p.runner.mu.Unlock()
	return p.runner.bounds
}

// Usage reads the process's control group: its memory, CPU time,
// throttling and tasks now. ok is false without a control group, or
// once the process exited.
func (p *Plugin) Usage() (u Usage, ok bool) {
	if p.runner == nil {
		return Usage{}, false
	}
	select {
	case <-p.runner.exited:
		return Usage{}, false
	default:
	}
	p.runner.mu.Lock()
	g := p.runner.group
	p.runner.mu.Unlock()
	if g == nil {
		return Usage{}, false
	}
	return g.usage(), true
}

// ProtectHostProcess makes the calling process non-dumpable on Linux:
// other processes of its user, plugins among them, can then read neither
// its memory nor /proc/<pid>/environ (where Valkey credentials given in
// the environment live), nor ptrace it. Launch calls it before it starts
// any plugin, so every program that launches one (the host, and the CLI
// commands that only read a plugin's Info) is protected from the first
// plugin on; a host may call it earlier.
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
