package scannerapi

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/internal/wire"
)

// servePluginSets is the plugin side's VersionedPlugins: the one version
// its scanners declare. (The host offers every version it runs; all
// versions share one wire protocol, which only ever gains optional
// fields, and differ in meaning.)
func servePluginSets(version int, p plugin.Plugin) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{version: {wire.PluginName: p}}
}

// grpcPlugin is the plugin side's go-plugin adapter: it registers the
// Scanner service. The host's own adapter is in sdk/pluginhost.
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

// GRPCClient is the host's side, which a plugin never takes.
func (p *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("scannerapi: a plugin does not launch plugins (see sdk/pluginhost)")
}
