package client

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

// execContext is what a claim needs to know about an execution beforehand:
// its state (to pick the claim function and build KEYS) and the input the
// task hands to its handler. Payload and kind never change once an
// execution can be claimed; tags may, and are a snapshot.
type execContext struct {
	core      map[string]string
	policy    string
	payload   []byte
	tags      map[string]string
	retryJSON string
	timeoutMs int64
}

var execContextFields = []string{"execution_id", "lifecycle_phase", "ownership_state", "lane_id",
	"attempt_state", "total_attempt_count", "current_attempt_index", "execution_kind"}

// readExecContext reads exec_core fields, policy, payload and tags in one
// round trip. A missing execution is ErrExecutionNotFound.
func (c *Client) readExecContext(ctx context.Context, id keys.ExecutionID) (execContext, error) {
	vk, ek := c.vk, keys.Exec(id)
	res := vk.DoMulti(ctx,
		vk.B().Hmget().Key(ek.Core()).Field(execContextFields...).Build(),
		vk.B().Get().Key(ek.Policy()).Build(),
		vk.B().Get().Key(ek.Payload()).Build(),
		vk.B().Hgetall().Key(ek.Tags()).Build())
	var out execContext
	vals, err := res[0].ToArray()
	if err != nil {
		return out, fmt.Errorf("worker: read %s: %w", id, err)
	}
	strs, err := messageStrings(vals)
	if err != nil {
		return out, fmt.Errorf("worker: read %s: %w", id, err)
	}
	if strs[0] == "" {
		return out, fmt.Errorf("worker: execution %s: %w", id, ErrExecutionNotFound)
	}
	out.core = make(map[string]string, len(execContextFields))
	for i, f := range execContextFields {
		out.core[f] = strs[i]
	}
	if out.policy, err = optString(res[1]); err != nil {
		return out, fmt.Errorf("worker: read policy of %s: %w", id, err)
	}
	out.retryJSON, out.timeoutMs = parseStoredPolicy(out.policy)
	if p, err := res[2].AsBytes(); err == nil {
		out.payload = p
	} else if !valkey.IsValkeyNil(err) {
		return out, fmt.Errorf("worker: read payload of %s: %w", id, err)
	}
	if out.tags, err = res[3].AsStrMap(); err != nil {
		return out, fmt.Errorf("worker: read tags of %s: %w", id, err)
	}
	return out, nil
}

func optString(r valkey.ValkeyResult) (string, error) {
	s, err := r.ToString()
	if valkey.IsValkeyNil(err) {
		return "", nil
	}
	return s, err
}

// tryClaim takes one eligible execution: one round trip of reads, then the
// grant and the claim pipelined in a second one. A capability mismatch
// moves the execution to the lane's blocked:route set so no worker keeps
// picking an execution nobody can run (the unblock scanner brings it back
// when a capable worker registers).
func (w *Worker) tryClaim(ctx context.Context, id keys.ExecutionID, lane string) (*Task, error) {
	ec, err := w.c.readExecContext(ctx, id)
	if err != nil {
		return nil, err
	}
	grant := w.grantCall("ff_issue_claim_grant", id, lane, keys.FlowPart(id.Partition()).LaneEligible(lane))
	claimFn, cl := w.claimCall(id, lane, ec)
	res := w.c.lib.DoMulti(ctx, grant, claimFn)
	if _, err := parseReply(grant.Function, res[0]); err != nil {
		var cm *CapabilityMismatchError
		if errors.As(err, &cm) {
			w.blockRoute(ctx, id, lane, cm)
		}
		return nil, err
	}
	r, err := parseReply(claimFn.Function, res[1])
	if errors.Is(err, ErrUseClaimResumedExecution) {
		// The attempt was interrupted after we read its state; our grant is
		// still there for the resume-claim.
		ec.core["attempt_state"] = "attempt_interrupted"
		claimFn, cl = w.claimCall(id, lane, ec)
		r, err = w.c.call(ctx, claimFn)
	}
	if err != nil {
		return nil, err
	}
	return w.claimed(cl, r)
}

// ClaimFromGrant claims an execution for which a claim grant was issued to
// this worker's WorkerID elsewhere (e.g. by a scheduler that checked
// budgets and quotas). It checks capacity first: at capacity it returns
// ErrWorkerAtCapacity and the grant stays valid for its TTL. An
// interrupted attempt is resumed (ff_claim_resumed_execution).
func (w *Worker) ClaimFromGrant(ctx context.Context, id keys.ExecutionID, lane string) (*Task, error) {
	if err := validateLane("lane", lane); err != nil {
		return nil, err
	}
	if err := w.tryAcquire(); err != nil {
		return nil, err
	}
	t, err := w.claimFromGrant(ctx, id, lane)
	if t == nil {
		w.release()
	}
	return t, err
}

func (w *Worker) claimFromGrant(ctx context.Context, id keys.ExecutionID, lane string) (*Task, error) {
	ec, err := w.c.readExecContext(ctx, id)
	if err != nil {
		return nil, err
	}
	claimFn, cl := w.claimCall(id, lane, ec)
	r, err := w.c.call(ctx, claimFn)
	if errors.Is(err, ErrUseClaimResumedExecution) {
		ec.core["attempt_state"] = "attempt_interrupted"
		claimFn, cl = w.claimCall(id, lane, ec)
		r, err = w.c.call(ctx, claimFn)
	}
	if err != nil {
		return nil, err
	}
	return w.claimed(cl, r)
}

// grantCall builds ff_issue_claim_grant / ff_issue_reclaim_grant: KEYS (3)
// core, claim_grant, eligible (reclaim: lease_expiry); ARGV (9) eid,
// worker_id, wiid, lane, cap_hash, grant_ttl_ms, route_snapshot_json,
// admission_summary, worker_caps_csv.
func (w *Worker) grantCall(fn string, id keys.ExecutionID, lane, third string) lua.Call {
	ek := keys.Exec(id)
	return lua.Call{
		Function: fn,
		Keys:     []string{ek.Core(), ek.ClaimGrant(), third},
		Args: []string{id.String(), w.opts.WorkerID, w.opts.InstanceID, lane, "",
			strconv.FormatInt(w.opts.GrantTTL.Milliseconds(), 10), "", "", w.capsCSV},
	}
}

// claimCall builds the claim matching the execution's attempt state: a
// fresh ff_claim_execution, or ff_claim_resumed_execution for an
// interrupted attempt. It also returns the claim record the reply will
// complete.
func (w *Worker) claimCall(id keys.ExecutionID, lane string, ec execContext) (lua.Call, claim) {
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	cl := claim{id: id, lane: lane, kind: ec.core["execution_kind"], payload: ec.payload, tags: ec.tags,
		retryJSON: ec.retryJSON, leaseID: keys.NewUUID().String(), sentAt: time.Now()}
	ttl := strconv.FormatInt(w.opts.LeaseTTL.Milliseconds(), 10)
	if ec.core["attempt_state"] == "attempt_interrupted" {
		cur := parseAttemptIndex(ec.core["current_attempt_index"])
		// KEYS (11): core, grant, eligible, lease_expiry, worker_leases,
		// attempt(current), lease_current, lease_history, active,
		// attempt_timeout, execution_deadline. ARGV (8): eid, worker_id,
		// wiid, lane, cap_hash, lease_id, ttl, remaining_attempt_timeout_ms.
		return lua.Call{
			Function: "ff_claim_resumed_execution",
			Keys: []string{ek.Core(), ek.ClaimGrant(), pk.LaneEligible(lane), pk.LeaseExpiry(),
				pk.WorkerLeases(w.opts.InstanceID), ek.Attempt(cur), ek.LeaseCurrent(), ek.LeaseHistory(),
				pk.LaneActive(lane), pk.AttemptTimeout(), pk.ExecutionDeadline()},
			Args: []string{id.String(), w.opts.WorkerID, w.opts.InstanceID, lane, "", cl.leaseID, ttl, ""},
		}, cl
	}
	next := parseAttemptIndex(ec.core["total_attempt_count"])
	cl.attemptID = keys.NewUUID().String()
	timeout := ""
	if ec.timeoutMs > 0 {
		timeout = strconv.FormatInt(ec.timeoutMs, 10)
	}
	// KEYS (14): core, grant, eligible, lease_expiry, worker_leases,
	// attempt(i), usage(i), policy(i), attempts, lease_current,
	// lease_history, active, attempt_timeout, execution_deadline. ARGV
	// (12): eid, worker_id, wiid, lane, cap_hash, lease_id, lease_ttl_ms,
	// renew_before_ms, attempt_id, attempt_policy_json, attempt_timeout_ms,
	// deadline_at.
	return lua.Call{
		Function: "ff_claim_execution",
		Keys: []string{ek.Core(), ek.ClaimGrant(), pk.LaneEligible(lane), pk.LeaseExpiry(),
			pk.WorkerLeases(w.opts.InstanceID), ek.Attempt(next), ek.AttemptUsage(next), ek.AttemptPolicy(next),
			ek.Attempts(), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LaneActive(lane), pk.AttemptTimeout(),
			pk.ExecutionDeadline()},
		Args: []string{id.String(), w.opts.WorkerID, w.opts.InstanceID, lane, "", cl.leaseID, ttl,
			strconv.FormatInt((w.opts.LeaseTTL * 2 / 3).Milliseconds(), 10), cl.attemptID, "{}", timeout, ""},
	}, cl
}

// claimed completes the claim record from the reply {lease_id, epoch,
// expires_at, attempt_id, attempt_index, attempt_type} and starts the task.
func (w *Worker) claimed(cl claim, r reply) (*Task, error) {
	idx, err := strconv.ParseUint(r.field(4), 10, 32)
	if err != nil || r.field(1) == "" || r.field(3) == "" {
		return nil, fmt.Errorf("%s: %w: %v", r.Function, ErrUnexpectedReply, r.Fields)
	}
	cl.leaseID, cl.epoch, cl.attemptID = r.field(0), r.field(1), r.field(3)
	cl.attemptIndex, cl.attemptType = uint32(idx), r.field(5)
	t := w.newTask(cl)
	w.log.Debug("claimed", "execution_id", cl.id, "lane", cl.lane, "attempt", cl.attemptIndex, "type", cl.attemptType)
	return t, nil
}

// blockRoute moves an execution no capability of this worker satisfies to
// the lane's blocked:route set (ff_block_execution_for_admission with
// waiting_for_capable_worker). Best effort: if it fails, the next poll
// meets the execution again and retries.
func (w *Worker) blockRoute(ctx context.Context, id keys.ExecutionID, lane string, cm *CapabilityMismatchError) {
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	_, err := w.c.call(ctx, lua.Call{
		Function: "ff_block_execution_for_admission",
		Keys:     []string{ek.Core(), pk.LaneEligible(lane), pk.LaneBlockedRoute(lane)},
		Args:     []string{id.String(), "waiting_for_capable_worker", "no connected worker satisfies required_capabilities", nowMillis()},
	})
	if err != nil {
		w.log.Warn("could not block execution after a capability mismatch", "execution_id", id, "error", err)
		return
	}
	w.log.Info("capability mismatch: execution moved to blocked:route", "execution_id", id, "missing", cm.Missing)
}
