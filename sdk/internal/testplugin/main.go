// Command testplugin serves the SDK's test scanners (internal/testscanners);
// pluginhost's launch and transport tests build and launch it.
//
// Flags (LaunchConfig.Args) let one binary stand in for plugins built
// against other contract versions:
//
//	-api-version N   the scanners declare API version N (as if built
//	                 against an SDK whose APIVersion was N)
//	-raw-version N   answer the handshake with protocol version N without
//	                 going through Serve (a plugin from a newer SDK)
package main

import (
	"context"
	"flag"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ffscan/ffscan/sdk/internal/testscanners"
	"github.com/ffscan/ffscan/sdk/internal/wire"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	apiVersion := flag.Int("api-version", 0, "declare this API version")
	rawVersion := flag.Int("raw-version", 0, "handshake with this protocol version, bypassing Serve")
	flag.Parse()
	if *rawVersion != 0 {
		serveRaw(*rawVersion)
		return
	}
	scanners := testscanners.All()
	if *apiVersion != 0 {
		for i, s := range scanners {
			scanners[i] = testscanners.WithAPIVersion(s, *apiVersion)
		}
	}
	scannerapi.Serve(scanners...)
}

// rawPlugin serves nothing: the handshake is all a version test needs.
type rawPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (rawPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error { return nil }
func (rawPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}

func serveRaw(version int) {
	hs := wire.Handshake()
	hs.ProtocolVersion = uint(version)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: map[int]plugin.PluginSet{version: {wire.PluginName: rawPlugin{}}},
		GRPCServer:       plugin.DefaultGRPCServer,
	})
}
