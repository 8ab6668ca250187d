package client

import (
	"context"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// Delay pauses the task's execution until the given time without ending
// its attempt (ff_delay_execution): the lease is released and the
// execution waits in its lane's delayed set; once promoted, a worker
// continues the same attempt (it is claimed as resumed). The task is
// finished afterwards. The time must lie in the future.
func (t *Task) Delay(ctx context.Context, until time.Time) error {
	if t.isFinished() {
		return ErrTaskFinished
	}
	if !until.After(time.Now()) {
		return invalid("until", "%s is not in the future", until.Format(time.RFC3339Nano))
	}
	return t.pause(ctx, "ff_delay_execution", func(pk keys.FlowPartKeys) string { return pk.LaneDelayed(t.lane) },
		strconv.FormatInt(until.UnixMilli(), 10))
}

// WaitForChildren pauses the task's execution until its dependencies
// (child executions it depends on in its flow) are resolved, without
// ending its attempt (ff_move_to_waiting_children): the lease is released
// and the execution waits in its lane's blocked-by-dependencies set; once
// eligible, a worker continues the same attempt. The task is finished
// afterwards.
func (t *Task) WaitForChildren(ctx context.Context) error {
	if t.isFinished() {
		return ErrTaskFinished
	}
	return t.pause(ctx, "ff_move_to_waiting_children", func(pk keys.FlowPartKeys) string { return pk.LaneBlockedDependencies(t.lane) })
}

// pause runs one of the two pausing functions. KEYS (9): core, attempt,
// lease_current, lease_history, lease_expiry, worker_leases, active, the
// parking set, attempt_timeout. ARGV: eid, lease_id, epoch, attempt_id,
// then extra (delay_until), then the source (empty: this worker's fence).
func (t *Task) pause(ctx context.Context, function string, parking func(keys.FlowPartKeys) string, extra ...string) error {
	ek, pk := keys.Exec(t.id), keys.FlowPart(t.id.Partition())
	args := append([]string{t.id.String(), t.leaseID, t.epoch, t.attemptID}, extra...)
	args = append(args, "")
	_, err := t.w.c.call(ctx, lua.Call{
		Function: function,
		Keys: []string{ek.Core(), ek.Attempt(t.attemptIndex), ek.LeaseCurrent(), ek.LeaseHistory(),
			pk.LeaseExpiry(), pk.WorkerLeases(t.w.opts.InstanceID), pk.LaneActive(t.lane), parking(pk), pk.AttemptTimeout()},
		Args: args,
	})
	// A retry after a lost reply finds the execution runnable with this
	// task's own epoch and attempt: the pause already took effect.
	_, err = t.settle(err, func(na *ExecutionNotActiveError) (Outcome, bool) {
		return Outcome{AlreadyApplied: true}, na.LifecyclePhase == PhaseRunnable && t.ownsAttempt(na)
	})
	return err
}
