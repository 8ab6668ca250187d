package lanes

// ff:idx:lanes: the lanes producers and hosts recorded.

import (
	"context"
	"fmt"
	"sort"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
)

// MergeLanes adds the configured lanes to ff:idx:lanes and returns the union
// with the lanes already recorded there (sorted), so lane-scoped sources
// also cover lanes that producers created. Recorded lanes that fail
// FlowFabric's lane rule are skipped: a key built from them would be
// malformed.
func MergeLanes(ctx context.Context, client valkey.Client, configured []string, log hclog.Logger) ([]string, error) {
	b := client.B()
	res := client.DoMulti(ctx,
		b.Sadd().Key(keys.LanesIndex).Member(configured...).Build(),
		b.Smembers().Key(keys.LanesIndex).Build())
	if err := res[0].Error(); err != nil {
		return nil, fmt.Errorf("%s: SADD: %w", keys.LanesIndex, err)
	}
	stored, err := res[1].AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("%s: SMEMBERS: %w", keys.LanesIndex, err)
	}
	return unionLanes(configured, stored, log), nil
}

// ReadLanes is MergeLanes without the write: the union of the configured
// lanes and those recorded in ff:idx:lanes, for runs that must not change
// the keyspace (scan-once --dry-run).
func ReadLanes(ctx context.Context, client valkey.Client, configured []string, log hclog.Logger) ([]string, error) {
	stored, err := client.Do(ctx, client.B().Smembers().Key(keys.LanesIndex).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("%s: SMEMBERS: %w", keys.LanesIndex, err)
	}
	return unionLanes(configured, stored, log), nil
}

// UnionLanes is the sorted union of two lane lists, without malformed
// lanes (logged when log is set).
func UnionLanes(a, b []string, log hclog.Logger) []string { return unionLanes(a, b, log) }

func unionLanes(configured, stored []string, log hclog.Logger) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range append(append([]string{}, configured...), stored...) {
		if seen[l] {
			continue
		}
		seen[l] = true
		if err := keys.ValidateLane(l); err != nil {
			if log != nil {
				log.Warn("ignoring malformed lane in "+keys.LanesIndex, "error", err)
			}
			continue
		}
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}
