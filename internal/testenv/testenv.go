// Package testenv gives the root module's tests real servers. The
// implementation is the SDK's public starter (sdk/testserver), so plugin
// authors and ffscan's own tests start servers the same way; this package
// only keeps the short import the root tests have always used.
package testenv

import (
	"testing"

	"github.com/ffscan/ffscan/sdk/testserver"
)

// Server is one running server process.
type Server = testserver.Server

// Cluster is a real cluster of masters only, on loopback.
type Cluster = testserver.Cluster

// Option adjusts how a server starts.
type Option = testserver.Option

// ServerBinary finds the server to run ($FFSCAN_TEST_SERVER, valkey-server,
// redis-server).
func ServerBinary() (string, error) { return testserver.ServerBinary() }

// WithArgs adds server command-line arguments.
func WithArgs(args ...string) Option { return testserver.WithArgs(args...) }

// Start launches a server on a free loopback port; the caller stops it.
func Start(opts ...Option) (*Server, error) { return testserver.Start(opts...) }

// New starts a server for one test and stops it when the test ends.
func New(t testing.TB, opts ...Option) *Server { t.Helper(); return testserver.New(t, opts...) }

// StartCluster starts a cluster of masters; the caller stops it.
func StartCluster(masters int) (*Cluster, error) { return testserver.StartCluster(masters) }

// NewCluster starts a cluster for one test and stops it when the test ends.
func NewCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return testserver.NewCluster(t, masters)
}

// ClusterOptions shape a cluster with replicas for failover tests.
type ClusterOptions = testserver.ClusterOptions

// NewClusterWith starts a cluster (with replicas) for one test and stops
// it when the test ends.
func NewClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	return testserver.NewClusterWith(t, o)
}
