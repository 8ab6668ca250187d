package client

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// ReplayResult says how a replayed execution waits to run again.
type ReplayResult struct {
	// Unsatisfied counts the dependencies a replayed flow member that had
	// been skipped waits for again; 0: it is eligible at once.
	Unsatisfied int
}

// Replay runs a terminal execution again as a new attempt of type replay
// (ff_replay_execution): eligible at once, or, for a flow member that was
// skipped because an upstream failed, waiting again on its dependencies
// (the impossible ones reset). The stored policy's max_replay_count (10
// by default) bounds the replays (ErrMaxReplaysExhausted). An execution
// that has not ended answers execution_not_terminal.
func (c *Client) Replay(ctx context.Context, id keys.ExecutionID) (ReplayResult, error) {
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	lane, err := c.vk.Do(ctx, c.vk.B().Hget().Key(ek.Core()).Field("lane_id").Build()).ToString()
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay %s: read lane: %w", id, err)
	}
	// A skipped member's edges: the library resets the impossible ones.
	edges, err := c.vk.Do(ctx, c.vk.B().Smembers().Key(ek.DepsAllEdges()).Build()).AsStrSlice()
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay %s: read edges: %w", id, err)
	}
	sort.Strings(edges)
	ks := []string{ek.Core(), pk.LaneTerminal(lane), pk.LaneEligible(lane), ek.LeaseHistory(),
		pk.LaneBlockedDependencies(lane), ek.DepsMeta(), ek.DepsUnresolved()}
	now, err := c.serverNowMillis(ctx) // recorded by FlowFabric's signature, unused by it
	if err != nil {
		return ReplayResult{}, err
	}
	args := []string{id.String(), now}
	for _, e := range edges {
		u, err := keys.ParseUUID(e)
		if err != nil {
			return ReplayResult{}, fmt.Errorf("replay %s: edge id %q: %w", id, e, err)
		}
		ks = append(ks, ek.Dep(u))
		args = append(args, e)
	}
	r, err := c.call(ctx, lua.Call{Function: "ff_replay_execution", Keys: ks, Args: args})
	if err != nil {
		return ReplayResult{}, err
	}
	n, _ := strconv.Atoi(r.field(0))
	return ReplayResult{Unsatisfied: n}, nil
}
