package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// Outcome is what ending a task did.
type Outcome struct {
	// AlreadyApplied: this call found its own earlier commit (a replay
	// after a lost reply) and changed nothing.
	AlreadyApplied bool
	// RetryScheduled (Fail only): the execution will run again after
	// DelayUntil (zero when AlreadyApplied: the stored time is not
	// returned on that path).
	RetryScheduled bool
	DelayUntil     time.Time
}

// Complete ends the execution successfully, storing result (may be nil).
// The lease keeps being renewed during the call.
func (t *Task) Complete(ctx context.Context, result []byte) (Outcome, error) {
	if t.isFinished() {
		return Outcome{}, ErrTaskFinished
	}
	ek, pk := keys.Exec(t.id), keys.FlowPart(t.id.Partition())
	// KEYS (12): core, attempt, lease_expiry, worker_leases, terminal,
	// lease_current, lease_history, active, stream_meta, result,
	// attempt_timeout, execution_deadline. ARGV (5): eid, lease_id, epoch,
	// attempt_id, result.
	_, err := t.w.c.call(ctx, lua.Call{
		Function: "ff_complete_execution",
		Keys: []string{ek.Core(), ek.Attempt(t.attemptIndex), pk.LeaseExpiry(), pk.WorkerLeases(t.w.opts.InstanceID),
			pk.LaneTerminal(t.lane), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LaneActive(t.lane),
			ek.StreamMeta(t.attemptIndex), ek.Result(), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{t.id.String(), t.leaseID, t.epoch, t.attemptID, string(result)},
	})
	return t.settle(err, func(na *ExecutionNotActiveError) (Outcome, bool) {
		return Outcome{AlreadyApplied: true}, na.TerminalOutcome == OutcomeSuccess && t.ownsAttempt(na)
	})
}

// FailOptions refine Fail.
type FailOptions struct {
	// Category is stored as the attempt's failure_category.
	Category string
	// Retry overrides the execution's stored retry policy for this call.
	Retry *RetryPolicy
	// NoRetry fails terminally whatever the policy says.
	NoRetry bool
}

// Fail ends the attempt as failed. If the retry policy (stored at create,
// or FailOptions.Retry) has retries left, the execution is scheduled again
// after its backoff (Outcome.RetryScheduled); otherwise it fails
// terminally.
func (t *Task) Fail(ctx context.Context, reason string, opts FailOptions) (Outcome, error) {
	if t.isFinished() {
		return Outcome{}, ErrTaskFinished
	}
	if err := validateText("reason", reason, false, t.w.c.limits.MaxReasonBytes); err != nil {
		return Outcome{}, err
	}
	retry := t.retryJSON
	switch {
	case opts.NoRetry:
		retry = ""
	case opts.Retry != nil:
		if err := opts.Retry.validate("Retry"); err != nil {
			return Outcome{}, err
		}
		b, err := jsonString(opts.Retry.toJSON())
		if err != nil {
			return Outcome{}, err
		}
		retry = b
	}
	ek, pk := keys.Exec(t.id), keys.FlowPart(t.id.Partition())
	// KEYS (12): core, attempt, lease_expiry, worker_leases, terminal,
	// delayed, lease_current, lease_history, active, stream_meta,
	// attempt_timeout, execution_deadline. ARGV (7): eid, lease_id, epoch,
	// attempt_id, reason, category, retry_policy_json.
	r, err := t.w.c.call(ctx, lua.Call{
		Function: "ff_fail_execution",
		Keys: []string{ek.Core(), ek.Attempt(t.attemptIndex), pk.LeaseExpiry(), pk.WorkerLeases(t.w.opts.InstanceID),
			pk.LaneTerminal(t.lane), pk.LaneDelayed(t.lane), ek.LeaseCurrent(), ek.LeaseHistory(),
			pk.LaneActive(t.lane), ek.StreamMeta(t.attemptIndex), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{t.id.String(), t.leaseID, t.epoch, t.attemptID, reason, opts.Category, retry},
	})
	out, err := t.settle(err, func(na *ExecutionNotActiveError) (Outcome, bool) {
		// A replay finds either the terminal failure of this attempt or the
		// scheduled retry (which clears current_attempt_id, so only the
		// epoch identifies it).
		if na.LeaseEpoch != t.epoch {
			return Outcome{}, false
		}
		switch {
		case na.LifecyclePhase == PhaseTerminal && na.TerminalOutcome == OutcomeFailed && na.AttemptID == t.attemptID:
			return Outcome{AlreadyApplied: true}, true
		case na.LifecyclePhase == PhaseRunnable:
			return Outcome{AlreadyApplied: true, RetryScheduled: true}, true
		}
		return Outcome{}, false
	})
	if err != nil || out.AlreadyApplied {
		return out, err
	}
	switch r.field(0) {
	case "retry_scheduled":
		out.RetryScheduled = true
		out.DelayUntil = msTime(r.field(1))
	case "terminal_failed":
	default:
		return out, fmt.Errorf("ff_fail_execution: %w: %q", ErrUnexpectedReply, r.field(0))
	}
	return out, nil
}

// Cancel ends the execution as cancelled, fenced by this task's lease.
func (t *Task) Cancel(ctx context.Context, reason string) (Outcome, error) {
	if t.isFinished() {
		return Outcome{}, ErrTaskFinished
	}
	if err := validateText("reason", reason, false, t.w.c.limits.MaxReasonBytes); err != nil {
		return Outcome{}, err
	}
	core := map[string]string{
		"lane_id":                    t.lane,
		"current_worker_instance_id": t.w.opts.InstanceID,
		"current_attempt_index":      strconv.FormatUint(uint64(t.attemptIndex), 10),
	}
	_, err := t.w.c.call(ctx, cancelCall(t.id, core, reason, "worker", t.leaseID, t.epoch))
	return t.settle(err, func(na *ExecutionNotActiveError) (Outcome, bool) {
		return Outcome{AlreadyApplied: true}, na.TerminalOutcome == OutcomeCancelled && t.ownsAttempt(na)
	})
}

// ownsAttempt says an execution_not_active reply describes this task's own
// lease and attempt (so the terminal state is this task's doing).
func (t *Task) ownsAttempt(na *ExecutionNotActiveError) bool {
	return na.LeaseEpoch == t.epoch && na.AttemptID == t.attemptID
}

// settle turns an ending call's result into the task's fate. Success or a
// replay of this task's own commit finishes it; any other library verdict
// also finishes it (the lease is gone or never was: retrying cannot help);
// a transport error leaves it running so the caller can retry the same
// call, which the library makes safe.
func (t *Task) settle(err error, replay func(*ExecutionNotActiveError) (Outcome, bool)) (Outcome, error) {
	var na *ExecutionNotActiveError
	if errors.As(err, &na) {
		if out, ok := replay(na); ok {
			t.finish()
			return out, nil
		}
	}
	var se *ScriptError
	if err == nil || errors.As(err, &se) {
		t.finish()
	}
	return Outcome{}, err
}

func (t *Task) finish() {
	if t.markFinished() {
		t.end(ErrTaskFinished)
	}
}
