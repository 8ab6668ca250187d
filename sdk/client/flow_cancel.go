package client

// This file is flow cancellation: CancelFlow and DrainFlowCancels, the
// client-side drain that cancels and acknowledges members.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/valkey-io/valkey-go"
)

// CancelPolicy is a flow's cancellation_policy.
type CancelPolicy string

// Cancellation policies, as the library stores them.
const (
	// CancelAll cancels every member: ff_cancel_flow queues every member in
	// the flow's pending_cancels and the flow in its partition's
	// cancel_backlog (due after the grace window), for the cancel
	// reconciler or DrainFlowCancels.
	CancelAll CancelPolicy = "cancel_all"
	// CancelPending records the policy; the library queues nothing. With
	// CancelFlowOptions.Wait the client cancels the members that are not
	// running (lifecycle runnable) and leaves running ones to finish.
	CancelPending CancelPolicy = "cancel_pending"
	// CancelFlowOnly marks the flow cancelled (no new members or edges)
	// and leaves every member alone.
	CancelFlowOnly CancelPolicy = "flow_only"
)

// DefaultCancelGrace is the library's grace window when none is given:
// the cancel reconciler leaves a cancelled flow to its primary dispatch for
// this long.
const DefaultCancelGrace = 30 * time.Second

// Member cancels issued for a cancelled flow: source flow_cascade (the
// library then publishes no completion, so the push path does not race the
// cancel by skipping children that are being cancelled anyway) and the
// reason FlowFabric's dispatcher stores.
const (
	flowCancelSource   = "flow_cascade"
	flowCancelReason   = "flow_cancelled"
	overrideSource     = "operator_override"
	drainBatch         = 500
	maxDrainErrorsKept = 8
)

// CancelFlowOptions tune CancelFlow.
type CancelFlowOptions struct {
	Reason string       // stored as the flow's cancel_reason
	Policy CancelPolicy // default CancelAll

	// Grace is how long the cancel reconciler waits before it takes over
	// the member cancels of a CancelAll flow. nil: the library default
	// (DefaultCancelGrace). Whole milliseconds, 0 or more.
	Grace *time.Duration

	// Wait makes CancelFlow cancel the members itself before it returns
	// (CancelAll: every pending member, each acknowledged; CancelPending:
	// the members that are not running). Without Wait the call returns as
	// soon as the flow is marked cancelled and the member cancels are left
	// to the cancel reconciler once the grace window has passed (or to
	// DrainFlowCancels).
	Wait bool
}

// CancelFlowResult is the outcome of CancelFlow.
type CancelFlowResult struct {
	Policy  CancelPolicy
	Members []keys.ExecutionID // every member at cancel time (set order)
	// Drain is what Wait did (nil without Wait).
	Drain *DrainResult
}

// CancelFlow marks a flow cancelled with one ff_cancel_flow and, with
// opts.Wait, cancels its members before returning. A missing flow is
// ErrFlowNotFound, an already cancelled one ErrFlowAlreadyTerminal.
//
// With Wait, an error is returned when a member could not be cancelled
// (Drain says how many); the flow stays cancelled and the members left
// stay queued for the cancel reconciler.
func (c *Client) CancelFlow(ctx context.Context, fid keys.FlowID, opts CancelFlowOptions) (CancelFlowResult, error) {
	if opts.Policy == "" {
		opts.Policy = CancelAll
	}
	switch opts.Policy {
	case CancelAll, CancelPending, CancelFlowOnly:
	default:
		return CancelFlowResult{}, invalid("Policy", "%q is not one of cancel_all, cancel_pending, flow_only", opts.Policy)
	}
	if err := validateText("Reason", opts.Reason, false, c.limits.MaxReasonBytes); err != nil {
		return CancelFlowResult{}, err
	}
	grace := ""
	if opts.Grace != nil {
		g := *opts.Grace
		if g < 0 || g%time.Millisecond != 0 {
			return CancelFlowResult{}, invalid("Grace", "%v must be whole milliseconds, 0 or more", g)
		}
		grace = strconv.FormatInt(g.Milliseconds(), 10)
	}
	fk, pk := keys.Flow(c.parts, fid), keys.FlowPart(c.parts.FlowPartition(fid))
	r, err := c.call(ctx, lua.Call{
		Function: "ff_cancel_flow",
		Keys:     []string{fk.Core(), fk.Members(), pk.FlowIndex(), fk.PendingCancels(), pk.CancelBacklog()},
		Args:     []string{fid.String(), opts.Reason, string(opts.Policy), nowMillis(), grace},
	})
	if err != nil {
		return CancelFlowResult{}, err
	}
	out := CancelFlowResult{Policy: CancelPolicy(r.field(0))}
	for _, m := range r.Fields[min(1, len(r.Fields)):] {
		if id, perr := keys.ParseExecutionID(m); perr == nil {
			out.Members = append(out.Members, id)
		}
	}
	if !opts.Wait {
		return out, nil
	}
	switch opts.Policy {
	case CancelAll:
		d, err := c.DrainFlowCancels(ctx, fid)
		out.Drain = &d
		return out, err
	case CancelPending:
		var d DrainResult
		c.cancelMembers(ctx, fid, out.Members, memberCancel{onlyRunnable: true}, &d)
		out.Drain = &d
		return out, d.err()
	}
	return out, nil
}

// DrainResult counts what a member-cancel pass did.
type DrainResult struct {
	Cancelled       int // cancelled now
	AlreadyTerminal int // had ended on its own (execution_not_active): done
	NotFound        int // no such execution (execution_not_found, or an unparsable id): done
	Skipped         int // running members CancelPending leaves alone
	Failed          int // could not be cancelled or acknowledged; still pending
	Remaining       int64
	Errors          []error // the first few failures
}

func (d *DrainResult) fail(err error) {
	d.Failed++
	if len(d.Errors) < maxDrainErrorsKept {
		d.Errors = append(d.Errors, err)
	}
}

func (d *DrainResult) err() error {
	if d.Failed == 0 {
		return nil
	}
	return fmt.Errorf("client: %d member cancel(s) failed: %w", d.Failed, errors.Join(d.Errors...))
}

// DrainFlowCancels does the member cancels owed by a CancelAll flow now,
// the same work the cancel reconciler does after the grace window: for
// each member in the flow's pending_cancels it reads the member's core (its
// lane, attempt, waitpoint and worker decide the keys), cancels it with
// ff_cancel_execution and acknowledges it with ff_ack_cancel_member, which
// also removes the flow from the cancel backlog with the last member.
//
// A member that already ended (execution_not_active) or no longer exists
// (execution_not_found) is done and acknowledged too; only transport
// errors and other refusals leave a member pending (Failed, and an error
// is returned). Work is pipelined in batches: one round trip for the core
// reads, one for the cancels and one for the acknowledgements.
func (c *Client) DrainFlowCancels(ctx context.Context, fid keys.FlowID) (DrainResult, error) {
	var d DrainResult
	fk := keys.Flow(c.parts, fid)
	members, err := c.sscanAll(ctx, fk.PendingCancels())
	if err != nil {
		return d, fmt.Errorf("client: read pending cancels of flow %s: %w", fid, err)
	}
	var ids []keys.ExecutionID
	var invalidIDs []string
	for _, m := range members {
		if id, perr := keys.ParseExecutionID(m); perr == nil {
			ids = append(ids, id)
		} else {
			invalidIDs = append(invalidIDs, m)
		}
	}
	// An id that does not parse can never be cancelled; acknowledge it so
	// it does not keep the flow in the backlog forever.
	d.NotFound += c.ackMembers(ctx, fid, invalidIDs, &d)
	c.cancelMembers(ctx, fid, ids, memberCancel{ack: true}, &d)
	d.Remaining, err = c.vk.Do(ctx, c.vk.B().Scard().Key(fk.PendingCancels()).Build()).AsInt64()
	if err != nil {
		d.fail(fmt.Errorf("client: count pending cancels of flow %s: %w", fid, err))
	}
	return d, d.err()
}

type memberCancel struct {
	ack          bool // acknowledge done members in pending_cancels
	onlyRunnable bool // leave members that are not runnable alone
}

// memberCoreFields are read to build ff_cancel_execution's KEYS from the
// member's real state.
var memberCoreFields = []string{"execution_id", "lane_id", "current_lane", "current_attempt_index",
	"current_waitpoint_id", "current_worker_instance_id", "lifecycle_phase"}

// cancelMembers cancels members in batches and, with opts.ack,
// acknowledges each one that is done.
func (c *Client) cancelMembers(ctx context.Context, fid keys.FlowID, ids []keys.ExecutionID, opts memberCancel, d *DrainResult) {
	for start := 0; start < len(ids); start += drainBatch {
		batch := ids[start:min(start+drainBatch, len(ids))]
		reads := make(valkey.Commands, len(batch))
		for i, id := range batch {
			reads[i] = c.vk.B().Hmget().Key(keys.Exec(id).Core()).Field(memberCoreFields...).Build()
		}
		var done []string
		var calls []lua.Call
		var callIDs []keys.ExecutionID
		for i, res := range c.vk.DoMulti(ctx, reads...) {
			id := batch[i]
			f, err := arrayStrings(res)
			switch {
			case err != nil:
				d.fail(fmt.Errorf("read member %s: %w", id, err))
			case f[0] == "":
				d.NotFound++
				done = append(done, id.String())
			case opts.onlyRunnable && f[6] != "runnable":
				d.Skipped++
			default:
				core := map[string]string{"lane_id": coreLane(f[1], f[2]), "current_attempt_index": f[3],
					"current_waitpoint_id": f[4], "current_worker_instance_id": f[5]}
				calls = append(calls, cancelCall(id, core, flowCancelReason, flowCancelSource, "", ""))
				callIDs = append(callIDs, id)
			}
		}
		var retry []lua.Call
		var retryIDs []keys.ExecutionID
		for i, res := range c.lib.DoMulti(ctx, calls...) {
			id := callIDs[i]
			if errors.Is(replyErr(calls[i].Function, res), ErrLeaseRevoked) {
				// flow_cascade is refused on a revoked lease; an operator
				// override cancels it (and publishes its completion).
				call := calls[i]
				call.Args = append([]string(nil), call.Args...)
				call.Args[2] = overrideSource
				retry, retryIDs = append(retry, call), append(retryIDs, id)
				continue
			}
			if c.classifyMemberCancel(id, calls[i].Function, res, d) {
				done = append(done, id.String())
			}
		}
		for i, res := range c.lib.DoMulti(ctx, retry...) {
			if c.classifyMemberCancel(retryIDs[i], retry[i].Function, res, d) {
				done = append(done, retryIDs[i].String())
			}
		}
		if opts.ack {
			c.ackMembers(ctx, fid, done, d)
		}
	}
}

// classifyMemberCancel counts one member cancel and reports whether the
// member is done. FlowFabric's Valkey path treated already-terminal and
// missing members as transient (pitfall P6); here the Lua code decides.
func (c *Client) classifyMemberCancel(id keys.ExecutionID, function string, res valkey.ValkeyResult, d *DrainResult) bool {
	err := replyErr(function, res)
	switch {
	case err == nil:
		d.Cancelled++
	case errors.Is(err, ErrExecutionNotActive):
		d.AlreadyTerminal++
	case errors.Is(err, ErrExecutionNotFound):
		d.NotFound++
	default:
		d.fail(fmt.Errorf("cancel member %s: %w", id, err))
		return false
	}
	return true
}

func replyErr(function string, res valkey.ValkeyResult) error {
	_, err := parseReply(function, res)
	return err
}

// ackMembers acknowledges members with ff_ack_cancel_member, pipelined,
// and returns how many were acknowledged. A failed acknowledgement leaves
// the member pending (it is retried by the next drain or by the cancel
// reconciler, and cancelling it again is harmless).
func (c *Client) ackMembers(ctx context.Context, fid keys.FlowID, members []string, d *DrainResult) int {
	if len(members) == 0 {
		return 0
	}
	acked := 0
	fk, pk := keys.Flow(c.parts, fid), keys.FlowPart(c.parts.FlowPartition(fid))
	calls := make([]lua.Call, len(members))
	for i, m := range members {
		calls[i] = lua.Call{
			Function: "ff_ack_cancel_member",
			Keys:     []string{fk.PendingCancels(), pk.CancelBacklog()},
			Args:     []string{m, fid.String()},
		}
	}
	for i, res := range c.lib.DoMulti(ctx, calls...) {
		if err := replyErr(calls[i].Function, res); err != nil {
			d.fail(fmt.Errorf("acknowledge member %s: %w", members[i], err))
			continue
		}
		acked++
	}
	return acked
}

// sscanAll reads a whole set with SSCAN (no single huge reply), without
// duplicates.
func (c *Client) sscanAll(ctx context.Context, key string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	var cursor uint64
	for {
		e, err := c.vk.Do(ctx, c.vk.B().Sscan().Key(key).Cursor(cursor).Count(drainBatch).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		for _, m := range e.Elements {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
		if e.Cursor == 0 {
			return out, nil
		}
		cursor = e.Cursor
	}
}

// coreLane is the lane the library uses for an execution's index keys:
// lane_id, then current_lane, then "default" (H.core_lane). It is only
// applied to fields that were read successfully from an existing core.
func coreLane(laneID, currentLane string) string {
	switch {
	case laneID != "":
		return laneID
	case currentLane != "":
		return currentLane
	}
	return "default"
}
