package client

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScriptErrorsMatchSentinelsAndDetailTypes(t *testing.T) {
	t.Parallel()
	err := newScriptError("ff_complete_execution", "execution_not_active", []string{"success", "3", "terminal", "att-1"})
	assert.ErrorIs(t, err, ErrExecutionNotActive)
	assert.NotErrorIs(t, err, ErrStaleLease)
	var na *ExecutionNotActiveError
	require.ErrorAs(t, err, &na)
	assert.Equal(t, ExecutionNotActiveError{ScriptError: na.ScriptError, TerminalOutcome: "success", LeaseEpoch: "3", LifecyclePhase: "terminal", AttemptID: "att-1"}, *na)
	var se *ScriptError
	require.ErrorAs(t, err, &se, "every typed error unwraps to *ScriptError")
	assert.Equal(t, CodeExecutionNotActive, se.Code)
	assert.Equal(t, "ff_complete_execution: execution_not_active (success, 3, terminal, att-1)", err.Error())

	err = newScriptError("ff_issue_claim_grant", "capability_mismatch", []string{"cuda,gpu"})
	var cm *CapabilityMismatchError
	require.ErrorAs(t, err, &cm)
	assert.Equal(t, []string{"cuda", "gpu"}, cm.Missing)
	assert.ErrorIs(t, err, ErrCapabilityMismatch)

	err = newScriptError("ff_issue_claim_grant", "invalid_capabilities", []string{"worker:too_many_bytes"})
	var ic *InvalidCapabilitiesError
	require.ErrorAs(t, err, &ic)
	assert.Equal(t, "worker", ic.Side)
	assert.Equal(t, "too_many_bytes", ic.Problem)

	err = newScriptError("ff_reclaim_execution", "max_retries_exhausted", []string{"2"})
	var mr *MaxRetriesExhaustedError
	require.ErrorAs(t, err, &mr)
	assert.Equal(t, 2, mr.Cap)

	err = newScriptError("ff_add_execution_to_flow", "already_member_of_different_flow:1b4e28ba-2fa1-11d2-883f-0016d3cca427", nil)
	var df *DifferentFlowError
	require.ErrorAs(t, err, &df)
	assert.Equal(t, "1b4e28ba-2fa1-11d2-883f-0016d3cca427", df.FlowID)
	assert.Equal(t, CodeAlreadyMemberOfDifferentFlow, df.Code)
	assert.ErrorIs(t, err, ErrAlreadyMemberOfDifferentFlow)

	err = newScriptError("ff_promote_blocked_to_eligible", "deps_not_satisfied", []string{"1", "2"})
	var dn *DepsNotSatisfiedError
	require.ErrorAs(t, err, &dn)
	assert.Equal(t, 1, dn.Unsatisfied)
	assert.Equal(t, 2, dn.Unresolved)

	err = newScriptError("ff_x", "some_future_code", []string{"d"})
	require.ErrorAs(t, err, &se)
	assert.Equal(t, Code("some_future_code"), se.Code)
	assert.False(t, errors.Is(err, ErrInvalidArgument))
}

func TestValidationErrorIsInvalidArgument(t *testing.T) {
	t.Parallel()
	err := invalid("Priority", "%d is outside", 9001)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.Equal(t, "invalid Priority: 9001 is outside", err.Error())
}

func TestCapabilityCSVSortsAndDedupes(t *testing.T) {
	t.Parallel()
	csv, err := capabilityCSV("Capabilities", []string{"b", "a", "b", "东京-gpu"})
	require.NoError(t, err)
	assert.Equal(t, "a,b,东京-gpu", csv)
	_, err = capabilityCSV("Capabilities", []string{"x\u00a0y"})
	assert.ErrorIs(t, err, ErrInvalidArgument, "a non-breaking space is whitespace")
}

func TestStoredPolicyParsing(t *testing.T) {
	t.Parallel()
	retry, timeout := parseStoredPolicy(`{"retry_policy":{"max_retries":2,"backoff":{"type":"fixed","delay_ms":5}},"timeout_policy":{"attempt_timeout_ms":700}}`)
	assert.JSONEq(t, `{"max_retries":2,"backoff":{"type":"fixed","delay_ms":5}}`, retry)
	assert.Equal(t, int64(700), timeout)
	retry, timeout = parseStoredPolicy(`not json`)
	assert.Empty(t, retry)
	assert.Zero(t, timeout)
	retry, _ = parseStoredPolicy(`{"retry_policy":null}`)
	assert.Empty(t, retry)
}
