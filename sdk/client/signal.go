package client

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// Signal effects reported by DeliverSignal.
const (
	// EffectAppended: recorded; the condition needs more signals.
	EffectAppended = "appended_to_waitpoint"
	// EffectResumed: the condition is met and the execution resumed.
	EffectResumed = "resume_condition_satisfied"
	// EffectNoMatch: recorded, but no name of the condition matched.
	EffectNoMatch = "no_op"
	// EffectBuffered: the waitpoint is still pending; the signal counts
	// once the task suspends on it.
	EffectBuffered = "buffered_for_pending_waitpoint"
)

// Signal is one signal to a waitpoint.
type Signal struct {
	// Name is what resume conditions match (required).
	Name string
	// Category, SourceType and SourceIdentity describe where it came from
	// (SourceType defaults to "external_api").
	Category       string
	SourceType     string
	SourceIdentity string
	// Payload is stored beside the signal (optional), with
	// PayloadEncoding ("json" when empty).
	Payload         []byte
	PayloadEncoding string
	// IdempotencyKey makes redelivery safe: for a day, a signal with the
	// same key to the same waitpoint is answered with the first signal's
	// id and not recorded again.
	IdempotencyKey string
	// CorrelationID is stored for the caller's own tracing.
	CorrelationID string
	// ResumeDelay makes a resuming signal park the execution in the delayed
	// set for this long before it can run.
	ResumeDelay time.Duration
}

// Delivery is the outcome of DeliverSignal.
type Delivery struct {
	SignalID string
	// Effect is one of the Effect* constants (composite conditions may
	// report others, e.g. appended_to_waitpoint_duplicate).
	Effect string
	// Duplicate: the idempotency key was seen before; SignalID is the
	// first signal's id and nothing was recorded.
	Duplicate bool
}

// Library defaults FlowFabric's own callers send.
const (
	signalDedupTTL   = 24 * time.Hour
	signalStreamCap  = "1000"
	maxSignalsPerRun = "10000"
)

func (s Signal) validate(limits Limits) error {
	if err := validateName("Name", s.Name, 256); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"Category", s.Category}, {"SourceType", s.SourceType},
		{"SourceIdentity", s.SourceIdentity}, {"PayloadEncoding", s.PayloadEncoding}, {"CorrelationID", s.CorrelationID}} {
		if err := validateText(f.name, f.v, false, 256); err != nil {
			return err
		}
	}
	if len(s.Payload) > limits.MaxPayloadBytes {
		return invalid("Payload", "%d bytes, at most %d allowed", len(s.Payload), limits.MaxPayloadBytes)
	}
	if err := validateText("IdempotencyKey", s.IdempotencyKey, false, limits.MaxIdempotencyKeyBytes); err != nil {
		return err
	}
	if s.ResumeDelay < 0 || s.ResumeDelay > MaxSuspendTimeout {
		return invalid("ResumeDelay", "%s is outside 0..%s", s.ResumeDelay, MaxSuspendTimeout)
	}
	return nil
}

// DeliverSignal sends a signal to a waitpoint of an execution
// (ff_deliver_signal), authenticated by the waitpoint's token. A signal
// that satisfies the resume condition resumes the execution
// (EffectResumed). A waitpoint that is still pending (the task has not
// suspended yet) takes the signal into its buffer instead
// (ff_buffer_signal_for_pending_waitpoint, EffectBuffered).
//
// A wrong or unknown token, or a waitpoint that does not exist, is
// ErrInvalidToken (ErrTokenExpired once a rotated-out key's grace ended);
// an execution that ended, or a closed waitpoint of an execution that is
// not suspended, is ErrTargetNotSignalable; a closed waitpoint of a
// suspended one ErrWaitpointClosed. Nothing is recorded on any of these.
func (c *Client) DeliverSignal(ctx context.Context, id keys.ExecutionID, wp Waitpoint, s Signal) (Delivery, error) {
	if err := s.validate(c.limits); err != nil {
		return Delivery{}, err
	}
	wpid, err := keys.ParseUUID(wp.ID)
	if err != nil {
		return Delivery{}, invalid("Waitpoint.ID", "%v", err)
	}
	if err := validateText("Waitpoint.Token", wp.Token, true, 512); err != nil {
		return Delivery{}, err
	}
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	core, err := c.coreFields(ctx, id, "lane_id")
	if err != nil {
		return Delivery{}, err
	}
	lane := core["lane_id"]
	sigid := keys.NewUUID()
	idemKey := pk.Noop()
	if s.IdempotencyKey != "" {
		idemKey = pk.SignalDedup(wpid, s.IdempotencyKey)
	}
	sourceType := s.SourceType
	if sourceType == "" {
		sourceType = "external_api"
	}
	encoding := s.PayloadEncoding
	if encoding == "" {
		encoding = "json"
	}
	args := []string{sigid.String(), id.String(), wpid.String(), s.Name, s.Category, sourceType,
		s.SourceIdentity, string(s.Payload), encoding, s.IdempotencyKey, s.CorrelationID, "waitpoint", "",
		strconv.FormatInt(signalDedupTTL.Milliseconds(), 10), strconv.FormatInt(s.ResumeDelay.Milliseconds(), 10),
		signalStreamCap, maxSignalsPerRun, wp.Token}
	common := []string{ek.Core(), pk.WaitpointCondition(wpid), pk.WaitpointSignals(wpid), ek.Signals(),
		pk.Signal(sigid), pk.SignalPayload(sigid), idemKey, pk.Waitpoint(wpid)}
	r, err := c.call(ctx, lua.Call{
		Function: "ff_deliver_signal",
		Keys: append(append([]string{}, common...), ek.SuspensionCurrent(), pk.LaneEligible(lane),
			pk.LaneSuspended(lane), pk.LaneDelayed(lane), pk.SuspensionTimeout(), pk.WaitpointHMAC(),
			pk.SignalDelivery()),
		Args: args,
	})
	if errors.Is(err, ErrWaitpointPendingUseBufferScript) {
		r, err = c.call(ctx, lua.Call{
			Function: "ff_buffer_signal_for_pending_waitpoint",
			Keys:     append(append([]string{}, common...), pk.WaitpointHMAC()),
			Args:     args,
		})
	}
	if err != nil {
		return Delivery{}, err
	}
	if r.Status == StatusDuplicate {
		return Delivery{SignalID: r.field(0), Duplicate: true}, nil
	}
	return Delivery{SignalID: r.field(0), Effect: r.field(1)}, nil
}

// Resume resumes a suspended execution whatever its condition says
// (ff_resume_execution, an operator's override): it becomes eligible at
// once, or after delay. Its waitpoints close. An execution that is not
// suspended is ErrExecutionNotSuspended.
func (c *Client) Resume(ctx context.Context, id keys.ExecutionID, delay time.Duration) error {
	if delay < 0 || delay > MaxSuspendTimeout {
		return invalid("delay", "%s is outside 0..%s", delay, MaxSuspendTimeout)
	}
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	core, err := c.coreFields(ctx, id, "lane_id", "current_waitpoint_id")
	if err != nil {
		return err
	}
	lane := core["lane_id"]
	// Without a current waitpoint the library answers before it uses the
	// waitpoint keys; the nil UUID names no real waitpoint.
	wpid, _ := keys.ParseUUID(core["current_waitpoint_id"])
	_, err = c.call(ctx, lua.Call{
		Function: "ff_resume_execution",
		Keys: []string{ek.Core(), ek.SuspensionCurrent(), pk.Waitpoint(wpid), pk.WaitpointSignals(wpid),
			pk.SuspensionTimeout(), pk.LaneEligible(lane), pk.LaneDelayed(lane), pk.LaneSuspended(lane)},
		Args: []string{id.String(), "operator", strconv.FormatInt(delay.Milliseconds(), 10)},
	})
	return err
}

// CloseWaitpoint closes a pending or active waitpoint
// (ff_close_waitpoint), e.g. a pending one the task will not suspend on
// after all; signals to it are refused from then on. Closing a closed
// waitpoint again succeeds; one that does not exist is
// ErrWaitpointNotFound. reason defaults to proactive_close.
func (c *Client) CloseWaitpoint(ctx context.Context, id keys.ExecutionID, waitpointID, reason string) error {
	wpid, err := keys.ParseUUID(waitpointID)
	if err != nil {
		return invalid("waitpointID", "%v", err)
	}
	if reason == "" {
		reason = "proactive_close"
	}
	if err := validateText("reason", reason, true, c.limits.MaxReasonBytes); err != nil {
		return err
	}
	pk := keys.FlowPart(id.Partition())
	_, err = c.call(ctx, lua.Call{
		Function: "ff_close_waitpoint",
		Keys:     []string{keys.Exec(id).Core(), pk.Waitpoint(wpid), pk.PendingWaitpointExpiry()},
		Args:     []string{wpid.String(), reason},
	})
	return err
}
