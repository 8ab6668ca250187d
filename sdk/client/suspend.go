package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// MatchMode says how many of a condition's signal names must arrive.
type MatchMode string

// Match modes of a signal condition.
const (
	// MatchAny resumes once MinCount signals matched (by default one).
	MatchAny MatchMode = "any"
	// MatchAll resumes once every name of the condition received a signal.
	MatchAll MatchMode = "all"
)

// TimeoutBehavior says what happens to a suspension whose timeout passes
// (the suspension_timeout scanner applies it).
type TimeoutBehavior string

// Timeout behaviours.
const (
	// TimeoutFail ends the execution as failed (the default).
	TimeoutFail TimeoutBehavior = "fail"
	// TimeoutCancel ends the execution as cancelled.
	TimeoutCancel TimeoutBehavior = "cancel"
	// TimeoutExpire ends the execution as expired.
	TimeoutExpire TimeoutBehavior = "expire"
	// TimeoutAutoResume resumes the execution as if its condition were met.
	TimeoutAutoResume TimeoutBehavior = "auto_resume_with_timeout_signal"
	// TimeoutEscalate keeps it suspended, paused for an operator's review.
	TimeoutEscalate TimeoutBehavior = "escalate"
)

// Suspension reasons FlowFabric knows; each maps to the blocking reason
// operators see while the execution waits. Any other reason is stored as
// given and shown as waiting_for_signal.
const (
	ReasonWaitingForSignal   = "waiting_for_signal"
	ReasonWaitingForApproval = "waiting_for_approval"
	ReasonWaitingForCallback = "waiting_for_callback"
	ReasonWaitingForTool     = "waiting_for_tool_result"
	ReasonOperatorReview     = "waiting_for_operator_review"
	ReasonManualPause        = "manual_pause"
)

// operatorOnly is the signal name no real signal carries: a condition on it
// is only ever resumed by an operator (FlowFabric's sentinel).
const operatorOnly = "__operator_only__"

// MaxSuspendTimeout bounds a suspension's timeout (a week, the longest a
// suspend's idempotency record is kept).
const MaxSuspendTimeout = 7 * 24 * time.Hour

// SuspendRequest describes a suspension of a claimed task.
type SuspendRequest struct {
	// Reason is the suspension's reason code (ReasonWaitingForSignal when
	// empty).
	Reason string
	// Signals names the signals that resume the execution; empty: any
	// signal does. Ignored with OperatorOnly.
	Signals []string
	// Mode is MatchAny (default) or MatchAll.
	Mode MatchMode
	// MinCount is how many matching signals MatchAny needs (default 1, at
	// most len(Signals) when names are given).
	MinCount int
	// OperatorOnly makes the suspension resumable only by an operator
	// (Client.Resume) or its timeout.
	OperatorOnly bool
	// Timeout ends the wait after this long (0: no timeout), applied as
	// OnTimeout says.
	Timeout time.Duration
	// OnTimeout is what the timeout does (TimeoutFail when empty).
	OnTimeout TimeoutBehavior
	// WaitpointKey is the waitpoint's external name ("wpk:<id>" when
	// empty). Ignored with Pending.
	WaitpointKey string
	// Pending activates a waitpoint created earlier with
	// CreatePendingWaitpoint: signals it buffered count at once.
	Pending *Waitpoint
	// ContinuationPointer is an opaque reference the resumed worker can
	// read back (e.g. where the task's checkpoint lives).
	ContinuationPointer string
}

// Waitpoint is what a signaller needs to reach a suspended (or soon
// suspended) execution: its id and key, and the HMAC token that
// authenticates signals to it.
type Waitpoint struct {
	ID    string
	Key   string
	Token string
}

// Suspension is the result of Task.Suspend.
type Suspension struct {
	ID        string
	Waitpoint Waitpoint
	// AlreadySatisfied: signals buffered on the pending waitpoint already
	// met the condition. Nothing was suspended; the task still holds its
	// lease and goes on.
	AlreadySatisfied bool
}

// conditionJSON is the resume condition in the form FlowFabric's callers
// store (keys sorted, as encoding/json writes a map).
func (r SuspendRequest) conditionJSON() string {
	names := r.Signals
	mode := r.Mode
	if r.OperatorOnly {
		names, mode = []string{operatorOnly}, MatchAll
	}
	if names == nil {
		names = []string{}
	}
	if mode == "" {
		mode = MatchAny
	}
	min := r.MinCount
	if min == 0 {
		min = 1
	}
	b, _ := json.Marshal(map[string]any{
		"allow_operator_override": true,
		"condition_type":          "signal_set",
		"minimum_signal_count":    min,
		"required_signal_names":   names,
		"signal_match_mode":       mode,
		"timeout_behavior":        r.onTimeout(),
	})
	return string(b)
}

const resumePolicyJSON = `{"close_waitpoint_on_resume":true,"consume_matched_signals":true,"resume_target":"runnable","retain_signal_buffer_until_closed":false}`

func (r SuspendRequest) onTimeout() TimeoutBehavior {
	if r.OnTimeout == "" {
		return TimeoutFail
	}
	return r.OnTimeout
}

func (r SuspendRequest) validate(limit int) error {
	if r.Reason != "" {
		if err := validateName("Reason", r.Reason, 64); err != nil {
			return err
		}
	}
	for i, n := range r.Signals {
		if err := validateName(fmt.Sprintf("Signals[%d]", i), n, 256); err != nil {
			return err
		}
		if n == operatorOnly {
			return invalid(fmt.Sprintf("Signals[%d]", i), "%s is reserved (use OperatorOnly)", operatorOnly)
		}
	}
	switch r.Mode {
	case "", MatchAny, MatchAll:
	default:
		return invalid("Mode", "%q is not any or all", r.Mode)
	}
	if r.MinCount < 0 || (len(r.Signals) > 0 && r.MinCount > len(r.Signals)) {
		return invalid("MinCount", "%d is outside 0..%d", r.MinCount, max(len(r.Signals), 1))
	}
	if r.MinCount > 1 && len(r.Signals) == 0 {
		// A wildcard condition has one matcher: it can never count more.
		return invalid("MinCount", "%d needs as many signal names", r.MinCount)
	}
	if r.Timeout < 0 || r.Timeout > MaxSuspendTimeout {
		return invalid("Timeout", "%s is outside 0..%s", r.Timeout, MaxSuspendTimeout)
	}
	if r.Timeout > 0 && r.Timeout < time.Millisecond {
		return invalid("Timeout", "%s is below a millisecond", r.Timeout)
	}
	switch r.OnTimeout {
	case "", TimeoutFail, TimeoutCancel, TimeoutExpire, TimeoutAutoResume, TimeoutEscalate:
	default:
		return invalid("OnTimeout", "%q is not a timeout behaviour", r.OnTimeout)
	}
	if r.Pending != nil {
		if _, err := keys.ParseUUID(r.Pending.ID); err != nil {
			return invalid("Pending.ID", "%v", err)
		}
	} else if r.WaitpointKey != "" {
		if err := validateName("WaitpointKey", r.WaitpointKey, 256); err != nil {
			return err
		}
	}
	return validateText("ContinuationPointer", r.ContinuationPointer, false, limit)
}

// validateName refuses names that are empty, too long, or hold control or
// space characters (they would silently never match).
func validateName(field, s string, max int) error {
	if err := validateText(field, s, true, max); err != nil {
		return err
	}
	for _, r := range s {
		if r == ' ' || r == '\t' {
			return invalid(field, "contains whitespace")
		}
	}
	return nil
}

// Suspend parks the task's execution on a waitpoint (ff_suspend_execution)
// until signals satisfy the condition (Client.DeliverSignal), an operator
// resumes it (Client.Resume), or its timeout applies. The attempt is not
// ended: once resumed, a worker continues it (claimed as resumed). The
// returned waitpoint carries the token signallers must present.
//
// On success the lease is released and the task is finished, unless the
// result is AlreadySatisfied (a pending waitpoint's buffered signals met
// the condition): then nothing was suspended and the task goes on. A call
// retried after a transport error returns the first call's outcome (the
// library keeps it under an idempotency key bound to this lease). Refusals
// that leave the lease in place (e.g. ErrHMACSecretNotInitialized,
// ErrPendingWaitpointExpired) keep the task running.
func (t *Task) Suspend(ctx context.Context, req SuspendRequest) (Suspension, error) {
	if t.isFinished() {
		return Suspension{}, ErrTaskFinished
	}
	if err := req.validate(t.w.c.limits.MaxReasonBytes); err != nil {
		return Suspension{}, err
	}
	ek, pk := keys.Exec(t.id), keys.FlowPart(t.id.Partition())
	t.mu.Lock()
	if t.suspendIdem == "" {
		t.suspendSeq++
		t.suspendIdem = t.attemptID + ":" + t.epoch + ":" + strconv.Itoa(t.suspendSeq)
		t.suspendID, t.suspendWP = keys.NewUUID(), keys.NewUUID()
	}
	idem, sid, wpid := t.suspendIdem, t.suspendID, t.suspendWP
	t.mu.Unlock()

	wpKey, usePending := req.WaitpointKey, ""
	if req.Pending != nil {
		wpid, _ = keys.ParseUUID(req.Pending.ID)
		wpKey, usePending = "", "1"
	} else if wpKey == "" {
		wpKey = "wpk:" + wpid.String()
	}
	reason := req.Reason
	if reason == "" {
		reason = ReasonWaitingForSignal
	}
	timeoutAt := ""
	dedupTTL := MaxSuspendTimeout
	if req.Timeout > 0 {
		now, err := t.w.c.serverNowMillis(ctx)
		if err != nil {
			return Suspension{}, err
		}
		timeoutAt = strconv.FormatInt(fieldInt64(now)+req.Timeout.Milliseconds(), 10)
		// The idempotency record outlives the timeout by a minute.
		dedupTTL = min(req.Timeout+time.Minute, MaxSuspendTimeout)
	}
	r, err := t.w.c.call(ctx, lua.Call{
		Function: "ff_suspend_execution",
		Keys: []string{ek.Core(), ek.Attempt(t.attemptIndex), ek.LeaseCurrent(), ek.LeaseHistory(),
			pk.LeaseExpiry(), pk.WorkerLeases(t.w.opts.InstanceID), ek.SuspensionCurrent(),
			pk.Waitpoint(wpid), pk.WaitpointSignals(wpid), pk.SuspensionTimeout(),
			pk.PendingWaitpointExpiry(), pk.LaneActive(t.lane), pk.LaneSuspended(t.lane),
			ek.Waitpoints(), pk.WaitpointCondition(wpid), pk.AttemptTimeout(), pk.WaitpointHMAC(),
			ek.SuspendDedup(idem)},
		Args: []string{t.id.String(), strconv.FormatUint(uint64(t.attemptIndex), 10), t.attemptID,
			t.leaseID, t.epoch, sid.String(), wpid.String(), wpKey, reason, "worker", timeoutAt,
			req.conditionJSON(), resumePolicyJSON, req.ContinuationPointer, usePending,
			string(req.onTimeout()), "1000", idem, strconv.FormatInt(dedupTTL.Milliseconds(), 10), "0"},
	})
	var se *ScriptError
	if err != nil && !errors.As(err, &se) {
		return Suspension{}, err // transport: a retry reuses the same key and ids
	}
	t.mu.Lock()
	t.suspendIdem = ""
	t.mu.Unlock()
	if err != nil {
		if leaseGone(err) {
			t.finish()
		}
		return Suspension{}, err
	}
	s := Suspension{
		ID:               r.field(0),
		Waitpoint:        Waitpoint{ID: r.field(1), Key: r.field(2), Token: r.field(3)},
		AlreadySatisfied: r.Status == StatusAlreadySatisfied,
	}
	if r.Status != StatusOK && r.Status != StatusAlreadySatisfied {
		return Suspension{}, fmt.Errorf("ff_suspend_execution: %w: status %q", ErrUnexpectedReply, r.Status)
	}
	if !s.AlreadySatisfied {
		t.finish()
	}
	return s, nil
}

// leaseGone says a library refusal means this task no longer holds its
// lease: continuing to renew it is pointless.
func leaseGone(err error) bool {
	for _, e := range []error{ErrStaleLease, ErrLeaseExpired, ErrLeaseRevoked, ErrExecutionNotActive,
		ErrNoActiveLease, ErrExecutionNotFound} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// CreatePendingWaitpoint creates a waitpoint before the task suspends
// (ff_create_pending_waitpoint), so signals sent while the task is still
// working are buffered instead of refused. Pass it to Suspend as
// SuspendRequest.Pending; a pending waitpoint not used within expiresIn
// expires (the pending-waitpoint-expiry scanner closes it). key is the
// waitpoint's external name ("wpk:<id>" when empty).
func (t *Task) CreatePendingWaitpoint(ctx context.Context, key string, expiresIn time.Duration) (Waitpoint, error) {
	if t.isFinished() {
		return Waitpoint{}, ErrTaskFinished
	}
	if expiresIn < time.Millisecond || expiresIn > MaxSuspendTimeout {
		return Waitpoint{}, invalid("expiresIn", "%s is outside 1ms..%s", expiresIn, MaxSuspendTimeout)
	}
	wpid := keys.NewUUID()
	if key == "" {
		key = "wpk:" + wpid.String()
	} else if err := validateName("key", key, 256); err != nil {
		return Waitpoint{}, err
	}
	now, err := t.w.c.serverNowMillis(ctx)
	if err != nil {
		return Waitpoint{}, err
	}
	pk := keys.FlowPart(t.id.Partition())
	r, err := t.w.c.call(ctx, lua.Call{
		Function: "ff_create_pending_waitpoint",
		Keys:     []string{keys.Exec(t.id).Core(), pk.Waitpoint(wpid), pk.PendingWaitpointExpiry(), pk.WaitpointHMAC()},
		Args: []string{t.id.String(), strconv.FormatUint(uint64(t.attemptIndex), 10), wpid.String(), key,
			strconv.FormatInt(fieldInt64(now)+expiresIn.Milliseconds(), 10)},
	})
	if err != nil {
		return Waitpoint{}, err
	}
	return Waitpoint{ID: r.field(0), Key: r.field(1), Token: r.field(2)}, nil
}
