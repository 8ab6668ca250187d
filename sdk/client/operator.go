package client

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// EdgeGroupPolicy is how a downstream execution's inbound edges combine.
type EdgeGroupPolicy struct {
	// Variant: "all_of" (every upstream must succeed; the default when no
	// policy is set), "any_of" (one success suffices) or "quorum" (K
	// successes).
	Variant string
	// OnSatisfied, for any_of and quorum: "cancel_remaining" (cancel the
	// siblings still running once the group is decided) or "let_run".
	OnSatisfied string
	// K is the quorum size (quorum only, at least 1).
	K int
}

// SetEdgeGroupPolicy sets the inbound edge-group policy of a downstream
// execution of a flow (ff_set_edge_group_policy). It must come before the
// first dependency edge into it is applied; setting the stored variant
// again is a no-op (changed reports false).
func (c *Client) SetEdgeGroupPolicy(ctx context.Context, fid keys.FlowID, downstream keys.ExecutionID, p EdgeGroupPolicy) (changed bool, err error) {
	switch p.Variant {
	case "all_of":
	case "any_of", "quorum":
		if p.OnSatisfied != "cancel_remaining" && p.OnSatisfied != "let_run" {
			return false, invalid("OnSatisfied", "%q must be cancel_remaining or let_run for %s", p.OnSatisfied, p.Variant)
		}
		if p.Variant == "quorum" && p.K < 1 {
			return false, invalid("K", "%d: a quorum needs at least 1", p.K)
		}
	default:
		return false, invalid("Variant", "%q is not all_of, any_of or quorum", p.Variant)
	}
	fk := keys.Flow(c.parts, fid)
	now, err := c.serverNowMillis(ctx)
	if err != nil {
		return false, err
	}
	r, err := c.call(ctx, lua.Call{
		Function: "ff_set_edge_group_policy",
		Keys:     []string{fk.Core(), fk.EdgeGroup(downstream)},
		Args:     []string{p.Variant, p.OnSatisfied, strconv.Itoa(p.K), now},
	})
	if err != nil {
		return false, err
	}
	return r.field(0) == "set", nil
}

// WaitpointKey is one kid of a partition's waitpoint HMAC keystore that
// still validates tokens after a rotation, until Expires.
type WaitpointKey struct {
	Kid     string
	Expires time.Time
}

// RotateWaitpointSecret installs a new waitpoint HMAC signing key on every
// flow partition (ff_rotate_waitpoint_hmac_secret, one call per
// partition, as FlowFabric's operators do): kid names it (no ':'), secret
// is its bytes, grace is how long tokens signed with the previous key stay
// valid. Installing the same kid and secret again is a no-op; the same kid
// with another secret is refused (rotation_conflict).
func (c *Client) RotateWaitpointSecret(ctx context.Context, kid string, secret []byte, grace time.Duration) error {
	if kid == "" || strings.Contains(kid, ":") {
		return invalid("kid", "%q must be non-empty and contain no ':'", kid)
	}
	if len(secret) == 0 {
		return invalid("secret", "must not be empty")
	}
	if grace < 0 || grace%time.Millisecond != 0 {
		return invalid("grace", "%v must be whole milliseconds, 0 or more", grace)
	}
	args := []string{kid, hex.EncodeToString(secret), strconv.FormatInt(grace.Milliseconds(), 10)}
	for _, p := range c.parts.Partitions(keys.FamilyFlow) {
		if _, err := c.call(ctx, lua.Call{Function: "ff_rotate_waitpoint_hmac_secret",
			Keys: []string{keys.FlowPart(p).WaitpointHMAC()}, Args: args}); err != nil {
			return fmt.Errorf("partition %s: %w", p.Tag(), err)
		}
	}
	return nil
}

// WaitpointKeys lists one flow partition's waitpoint HMAC keystore
// (ff_list_waitpoint_hmac_kids): the current kid ("" before the first
// rotation) and the previous kids still in their grace.
func (c *Client) WaitpointKeys(ctx context.Context, p keys.Partition) (current string, verifying []WaitpointKey, err error) {
	r, err := c.call(ctx, lua.Call{Function: "ff_list_waitpoint_hmac_kids", Keys: []string{keys.FlowPart(p).WaitpointHMAC()}})
	if err != nil {
		return "", nil, err
	}
	n, _ := strconv.Atoi(r.field(1))
	for i := 0; i < n; i++ {
		verifying = append(verifying, WaitpointKey{Kid: r.field(2 + 2*i), Expires: msTime(r.field(3 + 2*i))})
	}
	return r.field(0), verifying, nil
}
