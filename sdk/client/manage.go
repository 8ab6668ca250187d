package client

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// ChangePriority sets the priority of an execution that is waiting in its
// lane's eligible set and re-sorts it there. Anything else (delayed,
// blocked, running, finished) is refused with ErrExecutionNotEligible.
func (c *Client) ChangePriority(ctx context.Context, id keys.ExecutionID, priority int) error {
	if err := validatePriority("priority", priority); err != nil {
		return err
	}
	core, err := c.coreFields(ctx, id, "lane_id")
	if err != nil {
		return err
	}
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	_, err = c.call(ctx, lua.Call{
		Function: "ff_change_priority",
		Keys:     []string{ek.Core(), pk.LaneEligible(core["lane_id"])},
		Args:     []string{id.String(), strconv.Itoa(priority)},
	})
	return err
}

// tagKeyPattern is the library's rule for ff_set_execution_tags:
// "<caller>.<field>", so tags written by different callers cannot collide.
var tagKeyPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*\.[^.]`)

// SetTags adds or overwrites tags of an execution. Keys must be namespaced
// as "<caller>.<field>" (e.g. "billing.customer"). Keys are sent sorted so
// the call is deterministic.
func (c *Client) SetTags(ctx context.Context, id keys.ExecutionID, tags map[string]string) error {
	args, err := c.tagPairs(tags)
	if err != nil {
		return err
	}
	ek := keys.Exec(id)
	_, err = c.call(ctx, lua.Call{Function: "ff_set_execution_tags", Keys: []string{ek.Core(), ek.Tags()}, Args: args})
	return err
}

// SetFlowTags adds or overwrites tags of a flow (ff_set_flow_tags), with
// the same rules as SetTags. A flow that does not exist answers
// ErrFlowNotFound.
func (c *Client) SetFlowTags(ctx context.Context, fid keys.FlowID, tags map[string]string) error {
	args, err := c.tagPairs(tags)
	if err != nil {
		return err
	}
	fk := keys.Flow(c.parts, fid)
	_, err = c.call(ctx, lua.Call{Function: "ff_set_flow_tags", Keys: []string{fk.Core(), fk.Tags()}, Args: args})
	return err
}

// tagPairs checks tags at the edge (non-empty, namespaced keys, the size
// limits) and returns them as key/value arguments, sorted by key so the
// call is deterministic.
func (c *Client) tagPairs(tags map[string]string) ([]string, error) {
	if len(tags) == 0 {
		return nil, invalid("tags", "no tags given")
	}
	if _, err := c.tagsJSON(tags); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(tags))
	for k := range tags {
		if !tagKeyPattern.MatchString(k) {
			return nil, invalid(fmt.Sprintf("tags[%q]", k), "key must look like <caller>.<field>, e.g. billing.customer")
		}
		names = append(names, k)
	}
	sort.Strings(names)
	args := make([]string, 0, 2*len(names))
	for _, k := range names {
		args = append(args, k, tags[k])
	}
	return args, nil
}

// CancelOptions describe a producer-side cancel.
type CancelOptions struct {
	Reason string // stored as cancellation_reason
	// Source is stored as cancelled_by. Default "operator_override"
	// (FlowFabric's default), which cancels even a running execution
	// without its lease; a running worker finds out at its next renewal.
	Source string
}

// CancelResult is the outcome of Cancel.
type CancelResult struct {
	PreviousPhase    string // lifecycle phase before the cancel
	AlreadyCancelled bool   // it was cancelled before; nothing changed
}

// Cancel makes an execution terminal with outcome cancelled, whatever
// phase it is in. Cancelling an already cancelled execution succeeds with
// AlreadyCancelled; one that ended otherwise gives *ExecutionNotActiveError.
func (c *Client) Cancel(ctx context.Context, id keys.ExecutionID, opts CancelOptions) (CancelResult, error) {
	if opts.Source == "" {
		opts.Source = "operator_override"
	}
	if err := validateText("Reason", opts.Reason, false, c.limits.MaxReasonBytes); err != nil {
		return CancelResult{}, err
	}
	if err := validateText("Source", opts.Source, false, 256); err != nil {
		return CancelResult{}, err
	}
	core, err := c.coreFields(ctx, id, "lane_id", "current_waitpoint_id", "current_worker_instance_id", "current_attempt_index")
	if err != nil {
		return CancelResult{}, err
	}
	r, err := c.call(ctx, cancelCall(id, core, opts.Reason, opts.Source, "", ""))
	var na *ExecutionNotActiveError
	if errors.As(err, &na) && na.TerminalOutcome == "cancelled" {
		return CancelResult{PreviousPhase: na.LifecyclePhase, AlreadyCancelled: true}, nil
	}
	if err != nil {
		return CancelResult{}, err
	}
	return CancelResult{PreviousPhase: r.field(1)}, nil
}

// cancelCall builds ff_cancel_execution from exec_core fields (lane_id,
// current_waitpoint_id, current_worker_instance_id, current_attempt_index).
// KEYS (21): core, attempt, stream_meta, lease_current, lease_history,
// lease_expiry, worker_leases, suspension_current, waitpoint, wp_condition,
// suspension_timeout, terminal, attempt_timeout, execution_deadline,
// eligible, delayed, blocked deps/budget/quota/route/operator.
// ARGV (5): eid, reason, source, lease_id, epoch.
func cancelCall(id keys.ExecutionID, core map[string]string, reason, source, leaseID, epoch string) lua.Call {
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	lane := core["lane_id"]
	idx := parseAttemptIndex(core["current_attempt_index"])
	wp, _ := keys.ParseUUID(core["current_waitpoint_id"]) // nil uuid when none
	return lua.Call{
		Function: "ff_cancel_execution",
		Keys: []string{ek.Core(), ek.Attempt(idx), ek.StreamMeta(idx), ek.LeaseCurrent(), ek.LeaseHistory(),
			pk.LeaseExpiry(), pk.WorkerLeases(core["current_worker_instance_id"]), ek.SuspensionCurrent(),
			pk.Waitpoint(wp), pk.WaitpointCondition(wp), pk.SuspensionTimeout(), pk.LaneTerminal(lane),
			pk.AttemptTimeout(), pk.ExecutionDeadline(), pk.LaneEligible(lane), pk.LaneDelayed(lane),
			pk.LaneBlockedDependencies(lane), pk.LaneBlockedBudget(lane), pk.LaneBlockedQuota(lane),
			pk.LaneBlockedRoute(lane), pk.LaneBlockedOperator(lane)},
		Args: []string{id.String(), reason, source, leaseID, epoch},
	}
}

// parseAttemptIndex reads current_attempt_index; "" (never claimed) is 0,
// which is only used to name a placeholder key the library does not touch.
func parseAttemptIndex(s string) uint32 {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

// coreFields reads exec_core fields the caller needs to build KEYS (the
// lane decides which index keys a call touches). A missing execution is
// ErrExecutionNotFound.
func (c *Client) coreFields(ctx context.Context, id keys.ExecutionID, fields ...string) (map[string]string, error) {
	if id.IsZero() {
		return nil, invalid("id", "zero execution id")
	}
	vals, err := c.vk.Do(ctx, c.vk.B().Hmget().Key(keys.Exec(id).Core()).Field(append([]string{"execution_id"}, fields...)...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("client: read exec_core of %s: %w", id, err)
	}
	strs, err := messageStrings(vals)
	if err != nil {
		return nil, fmt.Errorf("client: read exec_core of %s: %w", id, err)
	}
	if strs[0] == "" {
		return nil, fmt.Errorf("client: execution %s: %w", id, ErrExecutionNotFound)
	}
	out := make(map[string]string, len(fields))
	for i, f := range fields {
		out[f] = strs[i+1]
	}
	return out, nil
}

// nowMillis is the client clock in ms, for the ARGV now_ms some functions
// take (FlowFabric's callers also send their own clock there).
func nowMillis() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }
