package scannerapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"

	"github.com/ffscan/ffscan/sdk/scannerapi/internal/pb"
)

// Handshake is the go-plugin handshake shared by the host and every plugin.
// The magic cookie only keeps people from running a plugin binary by hand
// by mistake (it is not a security measure). ProtocolVersion carries the
// contract version: Launch offers MinAPIVersion..APIVersion (go-plugin's
// VersionedPlugins) and Serve answers with the version its scanners declare.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  APIVersion,
	MagicCookieKey:   "FFSCAN_PLUGIN",
	MagicCookieValue: "scanner-7c1d0e9a4f3b",
}

// pluginName is the single plugin each binary serves under go-plugin; the
// scanners inside it are told apart by name in every RPC.
const pluginName = "scanners"

// maxMsgSize bounds one gRPC message in either direction (a large Exec
// batch or reply). gRPC's default of 4 MiB is too small for a batch of
// HGETALLs.
const maxMsgSize = 64 << 20

// LogLevelEnv is the environment variable through which the host passes
// its log level to a plugin, so the plugin does not produce lines the host
// would drop anyway.
const LogLevelEnv = "FFSCAN_PLUGIN_LOG_LEVEL"

// ErrPluginExited reports a call to a plugin process that has exited (or
// was killed) before or during the call.
var ErrPluginExited = errors.New("scanner plugin process has exited")

// RemoteError is an error a scanner returned inside its plugin process,
// carried back to the host as text.
type RemoteError struct {
	Scanner string // the scanner's name
	Method  string // the Scanner method: Configure, ScanPartition, SampleBacklog
	Message string // the error's text as the plugin reported it
}

// Error implements error.
func (e *RemoteError) Error() string {
	return fmt.Sprintf("scanner %s: %s: %s", e.Scanner, e.Method, e.Message)
}

// hostPluginSets is the host side's VersionedPlugins: every supported
// contract version. All versions share one wire protocol (the proto only
// ever gains optional fields); what differs between versions is meaning,
// which the host looks up with the negotiated version (see LiveConfigure).
func hostPluginSets(p plugin.Plugin) map[int]plugin.PluginSet {
	out := map[int]plugin.PluginSet{}
	for v := MinAPIVersion; v <= APIVersion; v++ {
		out[v] = plugin.PluginSet{pluginName: p}
	}
	return out
}

// servePluginSets is the plugin side's VersionedPlugins: the one version
// its scanners declare.
func servePluginSets(version int, p plugin.Plugin) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{version: {pluginName: p}}
}

// APIVersionError is returned by Launch when a plugin speaks a contract
// version this host does not run.
type APIVersionError struct {
	Path   string // the plugin executable
	Plugin int    // the version the plugin offered (0 if unknown)
	Min    int    // the oldest version the host runs
	Max    int    // the newest version the host runs
	Detail string // go-plugin's own message
}

// Error implements error.
func (e *APIVersionError) Error() string {
	offered := "an unknown scanner API version"
	if e.Plugin > 0 {
		offered = fmt.Sprintf("scanner API version %d", e.Plugin)
	}
	hint := "rebuild the plugin against a compatible sdk/scannerapi"
	if e.Plugin > e.Max {
		hint = "upgrade ffscan, or rebuild the plugin against an sdk/scannerapi no newer than this host's"
	}
	return fmt.Sprintf("plugin %s speaks %s; this host runs versions %d to %d: %s", e.Path, offered, e.Min, e.Max, hint)
}

// grpcPlugin is the go-plugin adapter. On the plugin side server is set; on
// the host side GRPCClient hands back the raw connection and broker, which
// Launch wraps.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	server *pluginServer
}

var _ plugin.GRPCPlugin = (*grpcPlugin)(nil)

func (p *grpcPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	if p.server == nil {
		return errors.New("scannerapi: no scanners to serve")
	}
	p.server.broker = broker
	pb.RegisterScannerServer(s, p.server)
	return nil
}

// clientConn is what GRPCClient returns on the host side.
type clientConn struct {
	scanner pb.ScannerClient
	broker  *plugin.GRPCBroker
}

func (p *grpcPlugin) GRPCClient(_ context.Context, broker *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &clientConn{scanner: pb.NewScannerClient(c), broker: broker}, nil
}

func newGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		experimental.BufferPool(messageBuffers))
	return grpc.NewServer(opts...)
}

func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
		experimental.WithBufferPool(messageBuffers),
	}
}

// messageBuffers is the pool gRPC takes message buffers from, on both
// ends. gRPC's default pool has no size between 32 KiB and 1 MiB and
// zeroes a buffer's whole capacity on every reuse, so each message of a
// few dozen KiB (a callback batch of a few hundred FCALLs) cost clearing
// a megabyte: a tenth of a plugin's CPU in the lease_expiry drain. With a
// size class at every power of two a buffer is at most twice the message.
var messageBuffers = func() mem.BufferPool {
	var exps []uint8
	for e := uint8(8); 1<<e <= 2*maxMsgSize; e++ {
		exps = append(exps, e)
	}
	p, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		panic(err) // only for exponents beyond the word size
	}
	return p
}()
