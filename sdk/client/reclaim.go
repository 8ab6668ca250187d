package client

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/valkey-io/valkey-go"
)

// reclaimAny tries the expired-lease entries found by a scan. Their
// exec_cores are read in one round trip; only executions marked
// lease_expired_reclaimable (or revoked) in one of this worker's lanes are
// tried. Marking is the lease-expiry scanner's job: a lease that ran out
// but is not marked yet is left alone.
func (w *Worker) reclaimAny(ctx context.Context, ids []keys.ExecutionID) (*Task, error) {
	vk := w.c.vk
	cmds := make(valkey.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = vk.B().Hmget().Key(keys.Exec(id).Core()).Field("lifecycle_phase", "ownership_state", "lane_id").Build()
	}
	for i, r := range vk.DoMulti(ctx, cmds...) {
		vals, err := r.ToArray()
		if err != nil {
			return nil, fmt.Errorf("worker: read expired leases: %w", err)
		}
		f, err := messageStrings(vals)
		if err != nil {
			return nil, fmt.Errorf("worker: read expired leases: %w", err)
		}
		reclaimable := f[1] == OwnershipLeaseExpiredReclaimable || f[1] == OwnershipLeaseRevoked
		if f[0] != PhaseActive || !reclaimable || !w.lanes[f[2]] {
			continue
		}
		t, err := w.tryReclaim(ctx, ids[i], f[2])
		switch {
		case t != nil:
			return t, nil
		case err == nil:
		case claimRetryable(err):
			w.log.Debug("reclaim skipped", "execution_id", ids[i], "error", err)
		default:
			return nil, err
		}
	}
	return nil, nil
}

// tryReclaim takes over an execution whose lease expired or was revoked:
// reads, then ff_issue_reclaim_grant and ff_reclaim_execution pipelined.
// The old attempt ends interrupted_reclaimed and a new attempt of type
// reclaim starts. If the reclaim cap is reached the library fails the
// execution instead (MaxRetriesExhaustedError).
func (w *Worker) tryReclaim(ctx context.Context, id keys.ExecutionID, lane string) (*Task, error) {
	ec, err := w.c.readExecContext(ctx, id)
	if err != nil {
		return nil, err
	}
	grant := w.grantCall("ff_issue_reclaim_grant", id, lane, keys.FlowPart(id.Partition()).LeaseExpiry())
	call, cl := w.reclaimCall(id, lane, ec)
	res := w.c.lib.DoMulti(ctx, grant, call)
	if _, err := parseReply(grant.Function, res[0]); err != nil {
		return nil, err
	}
	r, err := parseReply(call.Function, res[1])
	if err != nil {
		return nil, err
	}
	w.log.Info("reclaimed execution after its lease expired", "execution_id", id, "lane", lane)
	return w.claimed(cl, r)
}

// ReclaimFromGrant takes over an execution for which a reclaim grant
// (ff_issue_reclaim_grant) was issued to this worker's WorkerID elsewhere.
// Capacity is checked first, leaving the grant untouched at capacity.
func (w *Worker) ReclaimFromGrant(ctx context.Context, id keys.ExecutionID) (*Task, error) {
	if err := w.tryAcquire(); err != nil {
		return nil, err
	}
	t, err := w.reclaimFromGrant(ctx, id)
	if t == nil {
		w.release()
	}
	return t, err
}

func (w *Worker) reclaimFromGrant(ctx context.Context, id keys.ExecutionID) (*Task, error) {
	ec, err := w.c.readExecContext(ctx, id)
	if err != nil {
		return nil, err
	}
	call, cl := w.reclaimCall(id, ec.core["lane_id"], ec)
	r, err := w.c.call(ctx, call)
	if err != nil {
		return nil, err
	}
	return w.claimed(cl, r)
}

// reclaimCall builds ff_reclaim_execution. KEYS (14): core, grant, old
// attempt, old stream_meta, new attempt, new usage, attempts,
// lease_current, lease_history, lease_expiry, worker_leases (new),
// active, attempt_timeout, execution_deadline. ARGV (8): eid, worker_id,
// wiid, lane, lease_id, lease_ttl_ms, attempt_id, policy_json (the stored
// policy, whose max_reclaim_count caps reclaims).
func (w *Worker) reclaimCall(id keys.ExecutionID, lane string, ec execContext) (lua.Call, claim) {
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	old := parseAttemptIndex(ec.core["current_attempt_index"])
	next := parseAttemptIndex(ec.core["total_attempt_count"])
	cl := claim{id: id, lane: lane, kind: ec.core["execution_kind"], payload: ec.payload, tags: ec.tags,
		retryJSON: ec.retryJSON, leaseID: keys.NewUUID().String(), attemptID: keys.NewUUID().String()}
	call := lua.Call{
		Function: "ff_reclaim_execution",
		Keys: []string{ek.Core(), ek.ClaimGrant(), ek.Attempt(old), ek.StreamMeta(old), ek.Attempt(next),
			ek.AttemptUsage(next), ek.Attempts(), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LeaseExpiry(),
			pk.WorkerLeases(w.opts.InstanceID), pk.LaneActive(lane), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{id.String(), w.opts.WorkerID, w.opts.InstanceID, lane, cl.leaseID,
			strconv.FormatInt(w.opts.LeaseTTL.Milliseconds(), 10), cl.attemptID, ec.policy},
	}
	cl.sentAt = time.Now()
	return call, cl
}
