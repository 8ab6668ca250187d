package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// sentinel is the comparable value behind every ErrXxx code sentinel. It is
// a string type so that sentinel(code) built anywhere equals the exported
// variable of that code.
type sentinel Code

// Error names the code.
func (s sentinel) Error() string { return "flowfabric: " + string(s) }

// ScriptError is a Lua error reply {0, code, detail...}: a logical refusal
// by the library, not a transport failure. Usually nothing was written, but
// a few codes commit writes first (lease_expired marks the lease expired,
// capability_mismatch stamps last_capability_mismatch_at,
// max_retries_exhausted from reclaim fails the execution).
type ScriptError struct {
	Function string   // the FCALL that answered
	Code     Code     // the Lua error code
	Detail   []string // the detail fields after the code, as strings
}

// Error is "<function>: <code> (<details>)".
func (e *ScriptError) Error() string {
	var b strings.Builder
	b.WriteString(e.Function)
	b.WriteString(": ")
	b.WriteString(string(e.Code))
	if len(e.Detail) > 0 {
		b.WriteString(" (")
		b.WriteString(strings.Join(e.Detail, ", "))
		b.WriteString(")")
	}
	return b.String()
}

// Is matches the sentinel of the error's code, so errors.Is(err,
// ErrStaleLease) holds for any stale_lease reply.
func (e *ScriptError) Is(target error) bool {
	s, ok := target.(sentinel)
	return ok && Code(s) == e.Code
}

func (e *ScriptError) detail(i int) string {
	if i < len(e.Detail) {
		return e.Detail[i]
	}
	return ""
}

// ExecutionNotActiveError is the execution_not_active reply with its four
// reconciliation details. A worker uses them to tell a replay of its own
// committed call (same epoch and attempt, expected outcome) from a real
// conflict.
type ExecutionNotActiveError struct {
	*ScriptError
	TerminalOutcome string // e.g. success, failed, cancelled, or none
	LeaseEpoch      string // current_lease_epoch
	LifecyclePhase  string // e.g. terminal, runnable
	AttemptID       string // current_attempt_id ("" after a retry was scheduled)
}

// Unwrap exposes the underlying *ScriptError to errors.As.
func (e *ExecutionNotActiveError) Unwrap() error { return e.ScriptError }

// CapabilityMismatchError is the capability_mismatch reply: the worker's
// capabilities lack Missing (sorted) of the execution's requirements.
type CapabilityMismatchError struct {
	*ScriptError
	Missing []string
}

// Unwrap exposes the underlying *ScriptError to errors.As.
func (e *CapabilityMismatchError) Unwrap() error { return e.ScriptError }

// InvalidCapabilitiesError is the invalid_capabilities reply. Side is
// "worker" or "required"; Problem is e.g. comma_in_token or too_many_bytes.
type InvalidCapabilitiesError struct {
	*ScriptError
	Side    string
	Problem string
}

// Unwrap exposes the underlying *ScriptError to errors.As.
func (e *InvalidCapabilitiesError) Unwrap() error { return e.ScriptError }

// MaxRetriesExhaustedError is reclaim's max_retries_exhausted reply. The
// library has already failed the execution (failure_reason
// max_reclaims_exceeded) when it answers this.
type MaxRetriesExhaustedError struct {
	*ScriptError
	Cap int // the reclaim cap that was reached
}

// Unwrap exposes the underlying *ScriptError to errors.As.
func (e *MaxRetriesExhaustedError) Unwrap() error { return e.ScriptError }

// DifferentFlowError is already_member_of_different_flow. FlowFabric embeds
// the owning flow id in the code string itself
// ("already_member_of_different_flow:<fid>"); the parser splits it off so
// Code stays the plain code.
type DifferentFlowError struct {
	*ScriptError
	FlowID string
}

// Unwrap exposes the underlying *ScriptError to errors.As.
func (e *DifferentFlowError) Unwrap() error { return e.ScriptError }

// DepsNotSatisfiedError is deps_not_satisfied with its two counts.
type DepsNotSatisfiedError struct {
	*ScriptError
	Unsatisfied int // unsatisfied required edges
	Unresolved  int // edges still unresolved
}

// Unwrap exposes the underlying *ScriptError to errors.As.
func (e *DepsNotSatisfiedError) Unwrap() error { return e.ScriptError }

// newScriptError turns a raw error reply into the most specific error type
// for its code. This is the only place that knows the detail layouts.
func newScriptError(function, rawCode string, detail []string) error {
	code := rawCode
	var flowID string
	if rest, ok := strings.CutPrefix(rawCode, string(CodeAlreadyMemberOfDifferentFlow)+":"); ok {
		code, flowID = string(CodeAlreadyMemberOfDifferentFlow), rest
	}
	se := &ScriptError{Function: function, Code: Code(code), Detail: detail}
	switch se.Code {
	case CodeExecutionNotActive:
		return &ExecutionNotActiveError{ScriptError: se,
			TerminalOutcome: se.detail(0), LeaseEpoch: se.detail(1),
			LifecyclePhase: se.detail(2), AttemptID: se.detail(3)}
	case CodeCapabilityMismatch:
		var missing []string
		if d := se.detail(0); d != "" {
			missing = strings.Split(d, ",")
		}
		return &CapabilityMismatchError{ScriptError: se, Missing: missing}
	case CodeInvalidCapabilities:
		side, problem, _ := strings.Cut(se.detail(0), ":")
		return &InvalidCapabilitiesError{ScriptError: se, Side: side, Problem: problem}
	case CodeMaxRetriesExhausted:
		n, _ := strconv.Atoi(se.detail(0))
		return &MaxRetriesExhaustedError{ScriptError: se, Cap: n}
	case CodeAlreadyMemberOfDifferentFlow:
		if flowID == "" {
			flowID = se.detail(0)
		}
		return &DifferentFlowError{ScriptError: se, FlowID: flowID}
	case CodeDepsNotSatisfied:
		a, _ := strconv.Atoi(se.detail(0))
		b, _ := strconv.Atoi(se.detail(1))
		return &DepsNotSatisfiedError{ScriptError: se, Unsatisfied: a, Unresolved: b}
	}
	return se
}

// ErrInvalidArgument matches every *ValidationError.
var ErrInvalidArgument = errors.New("invalid argument")

// ValidationError rejects a caller's value before anything is sent to
// Valkey. Field names the offending input as the caller spells it in Go
// (e.g. "Priority", "Capabilities[2]").
type ValidationError struct {
	Field  string
	Reason string
}

// Error names the field and the reason.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidArgument) hold.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidArgument }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ErrUnexpectedReply reports a reply whose shape the client does not
// understand (a library of another contract level, or a bug).
var ErrUnexpectedReply = errors.New("unexpected reply shape")
