// Package lanes discovers the lanes in use from the keyspace itself.
//
// FlowFabric's library never records a lane anywhere when a producer
// starts using it: only its server's boot seeds ff:idx:lanes with the
// configured lanes. A lane-scoped scanner that knows only configured and
// recorded lanes never sees the executions of a lane that a producer
// simply started using (FlowFabric's P14). Every lane in use has lane
// index keys, ff:idx:{fp:N}:lane:<lane>:<set>, so a SCAN for them finds
// it. Discovery scans every primary (MATCH ff:idx:*:lane:*), paced: each
// Step reads a bounded number of SCAN pages per node and goes on where
// the previous one stopped, so a full pass over a large keyspace is spread
// over several steps instead of loading the server at once.
package lanes

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
)

// Pattern is the SCAN MATCH pattern of lane index keys.
const Pattern = "ff:idx:*:lane:*"

// PageSize is the SCAN COUNT of one page.
const PageSize = 1000

// laneSets are the per-lane index sets of a flow partition (the suffix of
// ff:idx:{fp:N}:lane:<lane>:<set>).
var laneSets = []string{"eligible", "delayed", "active", "terminal", "suspended",
	"blocked:dependencies", "blocked:budget", "blocked:quota", "blocked:route", "blocked:operator"}

// LaneOfKey returns the lane of a lane index key, or false when key is not
// one (or names a lane FlowFabric's lane rule refuses). A lane may itself
// contain ':', so the key is read from both ends: the tag, then the set.
func LaneOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "ff:idx:{")
	if !ok {
		return "", false
	}
	i := strings.Index(rest, "}:lane:")
	if i < 0 {
		return "", false
	}
	rest = rest[i+len("}:lane:"):]
	for _, set := range laneSets {
		if lane, ok := strings.CutSuffix(rest, ":"+set); ok && keys.ValidateLane(lane) == nil {
			return lane, true
		}
	}
	return "", false
}

// Discovery scans the primaries of a deployment for lanes. Safe for
// concurrent use; Steps are serialised.
type Discovery struct {
	client valkey.Client

	mu      sync.Mutex
	cursors map[string]uint64 // node -> where its next page starts (0: a new pass)
}

// New returns a discovery over client's nodes.
func New(client valkey.Client) *Discovery {
	return &Discovery{client: client, cursors: map[string]uint64{}}
}

// Step reads at most pages SCAN pages from every primary, continuing
// where the previous Step stopped (pages <= 0: one whole pass from the
// start), and
// returns the lanes found (sorted, unique) and whether every node finished
// a pass in this step. A node whose SCAN fails starts over next time.
func (d *Discovery) Step(ctx context.Context, pages int) ([]string, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	found := map[string]bool{}
	complete := true
	var firstErr error
	nodes := d.client.Nodes()
	for addr, node := range nodes {
		primary, err := IsPrimary(ctx, node)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("lanes: node %s: ROLE: %w", addr, err)
			}
			complete = false
			continue
		}
		if !primary {
			continue
		}
		done, err := d.scanNode(ctx, addr, node, pages, found)
		if err != nil {
			d.cursors[addr] = 0
			if firstErr == nil {
				firstErr = fmt.Errorf("lanes: node %s: SCAN: %w", addr, err)
			}
		}
		complete = complete && done && err == nil
	}
	// Forget nodes that left the topology.
	for addr := range d.cursors {
		if _, ok := nodes[addr]; !ok {
			delete(d.cursors, addr)
		}
	}
	out := make([]string, 0, len(found))
	for l := range found {
		out = append(out, l)
	}
	sort.Strings(out)
	return out, complete, firstErr
}

// scanNode reads pages of one node; true when its pass ended.
func (d *Discovery) scanNode(ctx context.Context, addr string, node valkey.Client, pages int, found map[string]bool) (bool, error) {
	cursor := d.cursors[addr]
	if pages <= 0 {
		cursor = 0 // a whole pass, from the start
	}
	for n := 0; pages <= 0 || n < pages; n++ {
		e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(Pattern).Count(PageSize).Build()).AsScanEntry()
		if err != nil {
			return false, err
		}
		for _, k := range e.Elements {
			if lane, ok := LaneOfKey(k); ok {
				found[lane] = true
			}
		}
		cursor = e.Cursor
		if cursor == 0 {
			d.cursors[addr] = 0
			return true, nil
		}
	}
	d.cursors[addr] = cursor
	return false, nil
}

// IsPrimary reports whether node is a primary (ROLE says master).
func IsPrimary(ctx context.Context, node valkey.Client) (bool, error) {
	role, err := node.Do(ctx, node.B().Role().Build()).ToArray()
	if err != nil {
		return false, err
	}
	if len(role) == 0 {
		return false, fmt.Errorf("empty ROLE reply")
	}
	r, err := role[0].ToString()
	return r == "master", err
}
