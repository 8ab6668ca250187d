// Package topology reads which nodes of a Valkey Cluster serve slots now.
//
// A cluster client's own list of connections is not that: valkey-go keeps
// the configured seed addresses among them even after the seed node died
// and its slots failed over. Code that must visit every master (loading
// the library) or show where the data lives (status) asks the cluster
// itself, through a node that serves a slot.
package topology

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"

	"github.com/valkey-io/valkey-go"
)

// Anchor is the key whose slot's master answers the query: the tag of flow
// partition 0, which every deployment has.
const Anchor = "{fp:0}"

// Masters returns the sorted addresses (host:port) of the masters that
// serve at least one slot, as CLUSTER SLOTS reports them. On a single
// server it returns the client's one node.
func Masters(ctx context.Context, client valkey.Client) ([]string, error) {
	if client.Mode() != valkey.ClientModeCluster {
		var out []string
		for addr := range client.Nodes() {
			out = append(out, addr)
		}
		sort.Strings(out)
		return out, nil
	}
	ranges, err := client.Do(ctx, client.B().ClusterSlots().Build().SetSlot(Anchor)).ToArray()
	if err != nil {
		// The anchor's master may be the node failing over: any node
		// the client knows can answer.
		for _, n := range client.Nodes() {
			if r, nerr := n.Do(ctx, n.B().ClusterSlots().Build()).ToArray(); nerr == nil {
				ranges, err = r, nil
				break
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	seen := map[string]bool{}
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed range %v", r)
		}
		m, err := f[2].ToArray()
		if err != nil || len(m) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed master entry")
		}
		host, _ := m[0].ToString()
		port, err := m[1].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS: master port: %w", err)
		}
		seen[net.JoinHostPort(host, strconv.FormatInt(port, 10))] = true
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out, nil
}
