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
	"strings"

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
	ranges, err := clusterSlots(ctx, client)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed range %v", r)
		}
		addr, err := masterAddr(f[2])
		if err != nil {
			return nil, err
		}
		seen[addr] = true
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out, nil
}

// clusterSlots asks the anchor's master for CLUSTER SLOTS, and any node
// the client knows when that fails (the anchor's master may be the node
// failing over).
func clusterSlots(ctx context.Context, client valkey.Client) ([]valkey.ValkeyMessage, error) {
	ranges, err := client.Do(ctx, client.B().ClusterSlots().Build().SetSlot(Anchor)).ToArray()
	if err != nil {
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
	return ranges, nil
}

// masterAddr reads the master entry of a CLUSTER SLOTS range.
func masterAddr(m valkey.ValkeyMessage) (string, error) {
	f, err := m.ToArray()
	if err != nil || len(f) < 2 {
		return "", fmt.Errorf("CLUSTER SLOTS: malformed master entry")
	}
	host, _ := f[0].ToString()
	port, err := f[1].AsInt64()
	if err != nil {
		return "", fmt.Errorf("CLUSTER SLOTS: master port: %w", err)
	}
	return net.JoinHostPort(host, strconv.FormatInt(port, 10)), nil
}

// Slots is who serves which slots of a cluster, as CLUSTER SLOTS said.
type Slots struct {
	owner [16384]string // master address per slot ("" unserved)
}

// SlotOwners reads which master serves each slot (CLUSTER SLOTS), asking
// the anchor's master first and any node the client knows when that
// fails, like Masters.
func SlotOwners(ctx context.Context, client valkey.Client) (*Slots, error) {
	ranges, err := clusterSlots(ctx, client)
	if err != nil {
		return nil, err
	}
	s := &Slots{}
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed range %v", r)
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		if err1 != nil || err2 != nil || lo < 0 || hi >= int64(len(s.owner)) || lo > hi {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed slot range %v", r)
		}
		addr, err := masterAddr(f[2])
		if err != nil {
			return nil, err
		}
		for slot := lo; slot <= hi; slot++ {
			s.owner[slot] = addr
		}
	}
	return s, nil
}

// Owner returns the address of the master serving slot ("" when none
// does, or slot is out of range).
func (s *Slots) Owner(slot uint16) string {
	if int(slot) >= len(s.owner) {
		return ""
	}
	return s.owner[slot]
}

// Masters returns the sorted addresses of the masters serving slots.
func (s *Slots) Masters() []string {
	seen := map[string]bool{}
	for _, a := range s.owner {
		if a != "" {
			seen[a] = true
		}
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Fingerprint is a string that changes when any slot changes master.
func (s *Slots) Fingerprint() string {
	var b strings.Builder
	prev := "\x00"
	for slot, a := range s.owner {
		if a != prev {
			fmt.Fprintf(&b, "%d=%s;", slot, a)
			prev = a
		}
	}
	return b.String()
}
