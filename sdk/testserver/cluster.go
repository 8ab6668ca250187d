package testserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Cluster is a real Valkey Cluster of masters only, on loopback.
type Cluster struct {
	Nodes []*Server
}

// Addrs lists the nodes' addresses (any of them seeds a cluster client).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}

// StartCluster starts `masters` cluster-enabled nodes without replicas,
// splits the 16384 slots between them in contiguous ranges, joins them with
// CLUSTER MEET and waits until every node reports cluster_state:ok.
func StartCluster(masters int) (*Cluster, error) {
	return StartClusterWith(ClusterOptions{Masters: masters})
}

// NewCluster starts a cluster for one test and stops it when the test ends.
func NewCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	c, err := StartCluster(masters)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Client opens a cluster-aware valkey-go client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) valkey.Client {
	t.Helper()
	cl, err := valkey.NewClient(valkey.ClientOption{InitAddress: c.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatalf("testserver: connect to cluster %v: %v", c.Addrs(), err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// nodeDo talks to one node directly; a cluster client would redirect.
func nodeDo(ctx context.Context, addr string, cmd ...string) error {
	cl, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.Do(ctx, cl.B().Arbitrary(cmd...).Build()).Error()
}

func waitClusterOK(ctx context.Context, addr string, masters int) error {
	cl, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	last := ""
	for {
		info, err := cl.Do(ctx, cl.B().ClusterInfo().Build()).ToString()
		if err == nil {
			last = info
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", masters)) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: node %s never reached cluster_state:ok with %d nodes; last CLUSTER INFO: %s", addr, masters, strings.ReplaceAll(strings.TrimSpace(last), "\r\n", " "))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
