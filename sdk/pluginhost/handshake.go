package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/internal/wire"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Handshake is the go-plugin handshake every plugin answers (scannerapi.Serve
// does), with this SDK's newest contract version. Launch offers
// MinAPIVersion to scannerapi.APIVersion (go-plugin's
// VersionedPlugins); a plugin answers with the version its scanners
// declare. A test that fakes a plugin of another version answers it with
// its own ProtocolVersion. Each call returns a new value.
func Handshake() plugin.HandshakeConfig {
	hs := wire.Handshake()
	hs.ProtocolVersion = scannerapi.APIVersion
	return hs
}

// hostPluginSets is the host side's VersionedPlugins: every supported
// contract version. All versions share one wire protocol (the proto only
// ever gains optional fields); what differs between versions is meaning,
// which the host looks up with the negotiated version (see LiveConfigure).
func hostPluginSets(p plugin.Plugin) map[int]plugin.PluginSet {
	out := map[int]plugin.PluginSet{}
	for v := MinAPIVersion; v <= scannerapi.APIVersion; v++ {
		out[v] = plugin.PluginSet{wire.PluginName: p}
	}
	return out
}

// LiveConfigure reports whether a scanner of contract version v accepts
// Configure while it runs (version 2 and later; see scannerapi.APIVersion
// for what each version means).
func LiveConfigure(v int) bool { return v >= 2 }

// grpcPlugin is the host side's go-plugin adapter: GRPCClient hands back
// the raw connection and broker, which Launch wraps. (The plugin's own
// adapter, which serves the Scanner service, is in scannerapi.)
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

var _ plugin.GRPCPlugin = (*grpcPlugin)(nil)

// GRPCServer is the plugin's side, which a host never serves.
func (p *grpcPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("pluginhost: a host does not serve scanners (see scannerapi.Serve)")
}

// clientConn is what GRPCClient returns.
type clientConn struct {
	scanner pb.ScannerClient
	broker  *plugin.GRPCBroker
}

func (p *grpcPlugin) GRPCClient(_ context.Context, broker *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &clientConn{scanner: pb.NewScannerClient(c), broker: broker}, nil
}

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
	return &APIVersionError{Path: path, Plugin: v, Min: MinAPIVersion, Max: scannerapi.APIVersion, Detail: err.Error()}
}
