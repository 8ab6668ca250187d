// Package wire is the connection between an ffscan host and a scanner
// plugin process, as both ends see it: the go-plugin handshake, the gRPC
// options both sides set, and the callback channel a plugin's batches
// travel on: a socket pair inherited by the plugin (socket.go, on length-
// prefixed frames, frames.go) or a long-lived gRPC stream through the
// go-plugin broker (stream.go). It moves protobuf messages and the packed
// batches of sdk/internal/codec; what a batch or a scan call means is
// each side's business: sdk/scannerapi serves scanners in the plugin,
// sdk/pluginhost launches plugins and answers their batches.
package wire

import (
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// Handshake is the go-plugin handshake shared by the host and every
// plugin, without its protocol version, which each side sets: the host
// offers every contract version it runs (go-plugin's VersionedPlugins),
// a plugin answers with the version its scanners declare. The magic
// cookie only keeps people from running a plugin binary by hand by
// mistake (it is not a security measure). Each call returns a new value,
// the caller's to set the version in.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		MagicCookieKey:   "FFSCAN_PLUGIN",
		MagicCookieValue: "scanner-7c1d0e9a4f3b",
	}
}

// PluginName is the single plugin each binary serves under go-plugin; the
// scanners inside it are told apart by name in every RPC.
const PluginName = "scanners"

// MaxMsgSize bounds one gRPC message, or one frame of the callback
// socket, in either direction (a large Exec batch or reply). gRPC's
// default of 4 MiB is too small for a batch of HGETALLs.
const MaxMsgSize = 64 << 20

// LogLevelEnv is the environment variable through which the host passes
// its log level to a plugin, so the plugin does not produce lines the host
// would drop anyway.
const LogLevelEnv = "FFSCAN_PLUGIN_LOG_LEVEL"

// NewGRPCServer is the gRPC server both sides serve on (go-plugin's
// GRPCServer on the plugin, the callback service on the host's broker
// stream).
func NewGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(MaxMsgSize), grpc.MaxSendMsgSize(MaxMsgSize),
		experimental.BufferPool(messageBuffers))
	return grpc.NewServer(opts...)
}

// DialOptions are the options of every gRPC connection either side
// dials.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMsgSize), grpc.MaxCallSendMsgSize(MaxMsgSize)),
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
	for e := uint8(8); 1<<e <= 2*MaxMsgSize; e++ {
		exps = append(exps, e)
	}
	p, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		panic(err) // only for exponents beyond the word size
	}
	return p
}()
