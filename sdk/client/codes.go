package client

// Code is a FlowFabric Lua error code: the string in slot 2 of a {0, ...}
// reply. The list follows the reference's section 6.4 (codes the library
// emits); a code not listed here still arrives as a *ScriptError.
type Code string

// Lease and fence codes.
const (
	// CodeStaleLease means the caller's lease id, epoch or attempt no longer matches the execution (another owner took over).
	CodeStaleLease Code = "stale_lease"
	// CodeLeaseExpired means the lease ran out; write paths mark it expired before answering (a committed write).
	CodeLeaseExpired Code = "lease_expired"
	// CodeLeaseRevoked means an operator revoked the lease.
	CodeLeaseRevoked Code = "lease_revoked"
	// CodeExecutionNotActive means the execution is not active (usually terminal); see ExecutionNotActiveError for the details.
	CodeExecutionNotActive Code = "execution_not_active"
	// CodeNoActiveLease means the execution is active but holds no lease.
	CodeNoActiveLease Code = "no_active_lease"
	// CodeFenceRequired means a worker call came without a lease fence.
	CodeFenceRequired Code = "fence_required"
	// CodePartialFenceTriple means only part of the (lease id, epoch, attempt id) fence was given.
	CodePartialFenceTriple Code = "partial_fence_triple"
	// CodeActiveAttemptExists means an attempt is already running (invariant A3).
	CodeActiveAttemptExists Code = "active_attempt_exists"
	// CodeLeaseConflict means another lease conflicts with the request.
	CodeLeaseConflict Code = "lease_conflict"
)

// Claim and grant codes.
const (
	// CodeExecutionNotLeaseable means the execution is not runnable and unowned.
	CodeExecutionNotLeaseable Code = "execution_not_leaseable"
	// CodeUseClaimResumedExecution means the execution continues an interrupted attempt: claim it with ff_claim_resumed_execution.
	CodeUseClaimResumedExecution Code = "use_claim_resumed_execution"
	// CodeNotAResumedExecution means resume-claim of an execution that has no interrupted attempt.
	CodeNotAResumedExecution Code = "not_a_resumed_execution"
	// CodeInvalidClaimGrant means no grant for this worker (missing, consumed or issued to another worker id).
	CodeInvalidClaimGrant Code = "invalid_claim_grant"
	// CodeClaimGrantExpired means the grant's TTL elapsed.
	CodeClaimGrantExpired Code = "claim_grant_expired"
	// CodeGrantAlreadyExists means another grant is outstanding for the execution.
	CodeGrantAlreadyExists Code = "grant_already_exists"
	// CodeExecutionNotEligible means the execution is not eligible now (delayed, blocked or not runnable).
	CodeExecutionNotEligible Code = "execution_not_eligible"
	// CodeExecutionNotInEligibleSet means the execution is not in the lane's eligible set (wrong lane or stale index).
	CodeExecutionNotInEligibleSet Code = "execution_not_in_eligible_set"
	// CodeExecutionNotReclaimable means the execution's lease is neither expired nor revoked.
	CodeExecutionNotReclaimable Code = "execution_not_reclaimable"
	// CodeCapabilityMismatch means the worker lacks required capabilities; see CapabilityMismatchError.
	CodeCapabilityMismatch Code = "capability_mismatch"
	// CodeInvalidCapabilities means a capability list breaks the token rules; see InvalidCapabilitiesError.
	CodeInvalidCapabilities Code = "invalid_capabilities"
	// CodeInvalidPolicyJSON means the execution policy JSON is malformed.
	CodeInvalidPolicyJSON Code = "invalid_policy_json"
	// CodeMaxRetriesExhausted means the reclaim cap was reached and the execution was failed (committed); see MaxRetriesExhaustedError.
	CodeMaxRetriesExhausted Code = "max_retries_exhausted"
)

// General codes.
const (
	// CodeExecutionNotFound means no execution with this id.
	CodeExecutionNotFound Code = "execution_not_found"
	// CodeInvalidInput means an argument was rejected by the library (detail says which).
	CodeInvalidInput Code = "invalid_input"
	// CodeInvalidArgs means the call's argument list has the wrong shape.
	CodeInvalidArgs Code = "invalid_args"
	// CodeInvalidTagKey means a tag key is not of the form <caller>.<field>.
	CodeInvalidTagKey Code = "invalid_tag_key"
	// CodeCorruption means stored state is inconsistent.
	CodeCorruption Code = "corruption"
	// CodeInvariantViolation means a library invariant would be broken.
	CodeInvariantViolation Code = "invariant_violation"
	// CodeRetentionLimitExceeded means a retention limit was exceeded.
	CodeRetentionLimitExceeded Code = "retention_limit_exceeded"
	// CodeStreamClosed means the attempt stream is closed.
	CodeStreamClosed Code = "stream_closed"
	// CodeStaleOwnerCannotAppend means a frame append came from a stale owner.
	CodeStaleOwnerCannotAppend Code = "stale_owner_cannot_append"
)

// Suspension, waitpoints and signals codes.
const (
	// CodeExecutionNotSuspended means the execution is not suspended.
	CodeExecutionNotSuspended Code = "execution_not_suspended"
	// CodeAlreadySuspended means the execution already has an open suspension.
	CodeAlreadySuspended Code = "already_suspended"
	// CodeInvalidLeaseForSuspend means suspend needs the full valid lease.
	CodeInvalidLeaseForSuspend Code = "invalid_lease_for_suspend"
	// CodeWaitpointNotFound means no such waitpoint.
	CodeWaitpointNotFound Code = "waitpoint_not_found"
	// CodeWaitpointNotPending means the waitpoint is not pending.
	CodeWaitpointNotPending Code = "waitpoint_not_pending"
	// CodeWaitpointNotOpen means the waitpoint is not open.
	CodeWaitpointNotOpen Code = "waitpoint_not_open"
	// CodeWaitpointAlreadyExists means a waitpoint with this id exists.
	CodeWaitpointAlreadyExists Code = "waitpoint_already_exists"
	// CodeWaitpointClosed means the waitpoint is closed.
	CodeWaitpointClosed Code = "waitpoint_closed"
	// CodeWaitpointNotTokenBound means the waitpoint has no token.
	CodeWaitpointNotTokenBound Code = "waitpoint_not_token_bound"
	// CodePendingWaitpointExpired means the pending waitpoint expired.
	CodePendingWaitpointExpired Code = "pending_waitpoint_expired"
	// CodeInvalidWaitpointForExecution means the waitpoint belongs to another execution.
	CodeInvalidWaitpointForExecution Code = "invalid_waitpoint_for_execution"
	// CodeWaitpointPendingUseBufferScript means the waitpoint is pending: buffer the signal instead.
	CodeWaitpointPendingUseBufferScript Code = "waitpoint_pending_use_buffer_script"
	// CodeTargetNotSignalable means the execution cannot take signals.
	CodeTargetNotSignalable Code = "target_not_signalable"
	// CodeSignalLimitExceeded means the execution reached its signal limit.
	CodeSignalLimitExceeded Code = "signal_limit_exceeded"
	// CodeAdditionalWaitpointBindingMalformed means an extra waitpoint binding is malformed.
	CodeAdditionalWaitpointBindingMalformed Code = "additional_waitpoint_binding_malformed"
	// CodeUsePendingWithExtrasUnsupported means a pending waitpoint cannot be combined with extra waitpoints.
	CodeUsePendingWithExtrasUnsupported Code = "use_pending_with_extras_unsupported"
)

// Waitpoint HMAC codes.
const (
	// CodeInvalidToken means the waitpoint token is invalid (or the waitpoint is missing).
	CodeInvalidToken Code = "invalid_token"
	// CodeTokenExpired means the waitpoint token expired.
	CodeTokenExpired Code = "token_expired"
	// CodeMissingToken means no waitpoint token was given.
	CodeMissingToken Code = "missing_token"
	// CodeHMACSecretNotInitialized means the partition has no HMAC secret.
	CodeHMACSecretNotInitialized Code = "hmac_secret_not_initialized"
	// CodeInvalidSecret means the HMAC secret is invalid.
	CodeInvalidSecret Code = "invalid_secret"
	// CodeInvalidKeysMissingHMAC means the HMAC keystore key was not passed.
	CodeInvalidKeysMissingHMAC Code = "invalid_keys_missing_hmac"
	// CodeInvalidKid means the key id is invalid.
	CodeInvalidKid Code = "invalid_kid"
	// CodeInvalidSecretHex means the secret is not hexadecimal.
	CodeInvalidSecretHex Code = "invalid_secret_hex"
	// CodeInvalidGraceMs means the grace period is invalid.
	CodeInvalidGraceMs Code = "invalid_grace_ms"
	// CodeRotationConflict means a concurrent secret rotation conflicts (detail: kid).
	CodeRotationConflict Code = "rotation_conflict"
)

// Flows and dependencies codes.
const (
	// CodeFlowNotFound means no flow with this id.
	CodeFlowNotFound Code = "flow_not_found"
	// CodeFlowAlreadyTerminal means the flow is already terminal.
	CodeFlowAlreadyTerminal Code = "flow_already_terminal"
	// CodeExecutionNotInFlow means the execution is not a member of the flow.
	CodeExecutionNotInFlow Code = "execution_not_in_flow"
	// CodeExecutionAlreadyInFlow means the execution is already in the flow.
	CodeExecutionAlreadyInFlow Code = "execution_already_in_flow"
	// CodeAlreadyMemberOfDifferentFlow means the execution belongs to another flow; see DifferentFlowError (the Lua code embeds the flow id).
	CodeAlreadyMemberOfDifferentFlow Code = "already_member_of_different_flow"
	// CodeSelfReferencingEdge means an edge from an execution to itself.
	CodeSelfReferencingEdge Code = "self_referencing_edge"
	// CodeStaleGraphRevision means the flow graph changed since the caller read it.
	CodeStaleGraphRevision Code = "stale_graph_revision"
	// CodeCycleDetected means the edge would create a cycle.
	CodeCycleDetected Code = "cycle_detected"
	// CodeDependencyAlreadyExists means the edge exists.
	CodeDependencyAlreadyExists Code = "dependency_already_exists"
	// CodeInvalidDependency means the dependency is invalid.
	CodeInvalidDependency Code = "invalid_dependency"
	// CodeDepsNotSatisfied means dependencies remain unresolved (details: two counts).
	CodeDepsNotSatisfied Code = "deps_not_satisfied"
	// CodeNotBlockedByDeps means the execution is not blocked by dependencies.
	CodeNotBlockedByDeps Code = "not_blocked_by_deps"
	// CodeNotRunnable means the execution is not runnable.
	CodeNotRunnable Code = "not_runnable"
	// CodeTerminal means the execution is terminal.
	CodeTerminal Code = "terminal"
	// CodeExecutionNotTerminal means the execution is not terminal.
	CodeExecutionNotTerminal Code = "execution_not_terminal"
	// CodeMaxReplaysExhausted means the replay cap was reached.
	CodeMaxReplaysExhausted Code = "max_replays_exhausted"
)

// Admission codes.
const (
	// CodeInvalidBlockingReason means the admission block reason is not one the library knows.
	CodeInvalidBlockingReason Code = "invalid_blocking_reason"
)

// Sentinels for errors.Is: every *ScriptError matches the sentinel of its
// code, e.g. errors.Is(err, ErrStaleLease).
var (
	// ErrStaleLease matches a stale_lease reply.
	ErrStaleLease error = sentinel(CodeStaleLease)
	// ErrLeaseExpired matches a lease_expired reply.
	ErrLeaseExpired error = sentinel(CodeLeaseExpired)
	// ErrLeaseRevoked matches a lease_revoked reply.
	ErrLeaseRevoked error = sentinel(CodeLeaseRevoked)
	// ErrExecutionNotActive matches a execution_not_active reply.
	ErrExecutionNotActive error = sentinel(CodeExecutionNotActive)
	// ErrNoActiveLease matches a no_active_lease reply.
	ErrNoActiveLease error = sentinel(CodeNoActiveLease)
	// ErrFenceRequired matches a fence_required reply.
	ErrFenceRequired error = sentinel(CodeFenceRequired)
	// ErrPartialFenceTriple matches a partial_fence_triple reply.
	ErrPartialFenceTriple error = sentinel(CodePartialFenceTriple)
	// ErrActiveAttemptExists matches a active_attempt_exists reply.
	ErrActiveAttemptExists error = sentinel(CodeActiveAttemptExists)
	// ErrLeaseConflict matches a lease_conflict reply.
	ErrLeaseConflict error = sentinel(CodeLeaseConflict)
	// ErrExecutionNotLeaseable matches a execution_not_leaseable reply.
	ErrExecutionNotLeaseable error = sentinel(CodeExecutionNotLeaseable)
	// ErrUseClaimResumedExecution matches a use_claim_resumed_execution reply.
	ErrUseClaimResumedExecution error = sentinel(CodeUseClaimResumedExecution)
	// ErrNotAResumedExecution matches a not_a_resumed_execution reply.
	ErrNotAResumedExecution error = sentinel(CodeNotAResumedExecution)
	// ErrInvalidClaimGrant matches a invalid_claim_grant reply.
	ErrInvalidClaimGrant error = sentinel(CodeInvalidClaimGrant)
	// ErrClaimGrantExpired matches a claim_grant_expired reply.
	ErrClaimGrantExpired error = sentinel(CodeClaimGrantExpired)
	// ErrGrantAlreadyExists matches a grant_already_exists reply.
	ErrGrantAlreadyExists error = sentinel(CodeGrantAlreadyExists)
	// ErrExecutionNotEligible matches a execution_not_eligible reply.
	ErrExecutionNotEligible error = sentinel(CodeExecutionNotEligible)
	// ErrExecutionNotInEligibleSet matches a execution_not_in_eligible_set reply.
	ErrExecutionNotInEligibleSet error = sentinel(CodeExecutionNotInEligibleSet)
	// ErrExecutionNotReclaimable matches a execution_not_reclaimable reply.
	ErrExecutionNotReclaimable error = sentinel(CodeExecutionNotReclaimable)
	// ErrCapabilityMismatch matches a capability_mismatch reply.
	ErrCapabilityMismatch error = sentinel(CodeCapabilityMismatch)
	// ErrInvalidCapabilities matches a invalid_capabilities reply.
	ErrInvalidCapabilities error = sentinel(CodeInvalidCapabilities)
	// ErrInvalidPolicyJSON matches a invalid_policy_json reply.
	ErrInvalidPolicyJSON error = sentinel(CodeInvalidPolicyJSON)
	// ErrMaxRetriesExhausted matches a max_retries_exhausted reply.
	ErrMaxRetriesExhausted error = sentinel(CodeMaxRetriesExhausted)
	// ErrExecutionNotFound matches a execution_not_found reply.
	ErrExecutionNotFound error = sentinel(CodeExecutionNotFound)
	// ErrInvalidInput matches a invalid_input reply.
	ErrInvalidInput error = sentinel(CodeInvalidInput)
	// ErrInvalidArgs matches a invalid_args reply.
	ErrInvalidArgs error = sentinel(CodeInvalidArgs)
	// ErrInvalidTagKey matches a invalid_tag_key reply.
	ErrInvalidTagKey error = sentinel(CodeInvalidTagKey)
	// ErrCorruption matches a corruption reply.
	ErrCorruption error = sentinel(CodeCorruption)
	// ErrInvariantViolation matches a invariant_violation reply.
	ErrInvariantViolation error = sentinel(CodeInvariantViolation)
	// ErrRetentionLimitExceeded matches a retention_limit_exceeded reply.
	ErrRetentionLimitExceeded error = sentinel(CodeRetentionLimitExceeded)
	// ErrStreamClosed matches a stream_closed reply.
	ErrStreamClosed error = sentinel(CodeStreamClosed)
	// ErrStaleOwnerCannotAppend matches a stale_owner_cannot_append reply.
	ErrStaleOwnerCannotAppend error = sentinel(CodeStaleOwnerCannotAppend)
	// ErrExecutionNotSuspended matches a execution_not_suspended reply.
	ErrExecutionNotSuspended error = sentinel(CodeExecutionNotSuspended)
	// ErrAlreadySuspended matches a already_suspended reply.
	ErrAlreadySuspended error = sentinel(CodeAlreadySuspended)
	// ErrInvalidLeaseForSuspend matches a invalid_lease_for_suspend reply.
	ErrInvalidLeaseForSuspend error = sentinel(CodeInvalidLeaseForSuspend)
	// ErrWaitpointNotFound matches a waitpoint_not_found reply.
	ErrWaitpointNotFound error = sentinel(CodeWaitpointNotFound)
	// ErrWaitpointNotPending matches a waitpoint_not_pending reply.
	ErrWaitpointNotPending error = sentinel(CodeWaitpointNotPending)
	// ErrWaitpointNotOpen matches a waitpoint_not_open reply.
	ErrWaitpointNotOpen error = sentinel(CodeWaitpointNotOpen)
	// ErrWaitpointAlreadyExists matches a waitpoint_already_exists reply.
	ErrWaitpointAlreadyExists error = sentinel(CodeWaitpointAlreadyExists)
	// ErrWaitpointClosed matches a waitpoint_closed reply.
	ErrWaitpointClosed error = sentinel(CodeWaitpointClosed)
	// ErrWaitpointNotTokenBound matches a waitpoint_not_token_bound reply.
	ErrWaitpointNotTokenBound error = sentinel(CodeWaitpointNotTokenBound)
	// ErrPendingWaitpointExpired matches a pending_waitpoint_expired reply.
	ErrPendingWaitpointExpired error = sentinel(CodePendingWaitpointExpired)
	// ErrInvalidWaitpointForExecution matches a invalid_waitpoint_for_execution reply.
	ErrInvalidWaitpointForExecution error = sentinel(CodeInvalidWaitpointForExecution)
	// ErrWaitpointPendingUseBufferScript matches a waitpoint_pending_use_buffer_script reply.
	ErrWaitpointPendingUseBufferScript error = sentinel(CodeWaitpointPendingUseBufferScript)
	// ErrTargetNotSignalable matches a target_not_signalable reply.
	ErrTargetNotSignalable error = sentinel(CodeTargetNotSignalable)
	// ErrSignalLimitExceeded matches a signal_limit_exceeded reply.
	ErrSignalLimitExceeded error = sentinel(CodeSignalLimitExceeded)
	// ErrAdditionalWaitpointBindingMalformed matches a additional_waitpoint_binding_malformed reply.
	ErrAdditionalWaitpointBindingMalformed error = sentinel(CodeAdditionalWaitpointBindingMalformed)
	// ErrUsePendingWithExtrasUnsupported matches a use_pending_with_extras_unsupported reply.
	ErrUsePendingWithExtrasUnsupported error = sentinel(CodeUsePendingWithExtrasUnsupported)
	// ErrInvalidToken matches a invalid_token reply.
	ErrInvalidToken error = sentinel(CodeInvalidToken)
	// ErrTokenExpired matches a token_expired reply.
	ErrTokenExpired error = sentinel(CodeTokenExpired)
	// ErrMissingToken matches a missing_token reply.
	ErrMissingToken error = sentinel(CodeMissingToken)
	// ErrHMACSecretNotInitialized matches a hmac_secret_not_initialized reply.
	ErrHMACSecretNotInitialized error = sentinel(CodeHMACSecretNotInitialized)
	// ErrInvalidSecret matches a invalid_secret reply.
	ErrInvalidSecret error = sentinel(CodeInvalidSecret)
	// ErrInvalidKeysMissingHMAC matches a invalid_keys_missing_hmac reply.
	ErrInvalidKeysMissingHMAC error = sentinel(CodeInvalidKeysMissingHMAC)
	// ErrInvalidKid matches a invalid_kid reply.
	ErrInvalidKid error = sentinel(CodeInvalidKid)
	// ErrInvalidSecretHex matches a invalid_secret_hex reply.
	ErrInvalidSecretHex error = sentinel(CodeInvalidSecretHex)
	// ErrInvalidGraceMs matches a invalid_grace_ms reply.
	ErrInvalidGraceMs error = sentinel(CodeInvalidGraceMs)
	// ErrRotationConflict matches a rotation_conflict reply.
	ErrRotationConflict error = sentinel(CodeRotationConflict)
	// ErrFlowNotFound matches a flow_not_found reply.
	ErrFlowNotFound error = sentinel(CodeFlowNotFound)
	// ErrFlowAlreadyTerminal matches a flow_already_terminal reply.
	ErrFlowAlreadyTerminal error = sentinel(CodeFlowAlreadyTerminal)
	// ErrExecutionNotInFlow matches a execution_not_in_flow reply.
	ErrExecutionNotInFlow error = sentinel(CodeExecutionNotInFlow)
	// ErrExecutionAlreadyInFlow matches a execution_already_in_flow reply.
	ErrExecutionAlreadyInFlow error = sentinel(CodeExecutionAlreadyInFlow)
	// ErrAlreadyMemberOfDifferentFlow matches a already_member_of_different_flow reply.
	ErrAlreadyMemberOfDifferentFlow error = sentinel(CodeAlreadyMemberOfDifferentFlow)
	// ErrSelfReferencingEdge matches a self_referencing_edge reply.
	ErrSelfReferencingEdge error = sentinel(CodeSelfReferencingEdge)
	// ErrStaleGraphRevision matches a stale_graph_revision reply.
	ErrStaleGraphRevision error = sentinel(CodeStaleGraphRevision)
	// ErrCycleDetected matches a cycle_detected reply.
	ErrCycleDetected error = sentinel(CodeCycleDetected)
	// ErrDependencyAlreadyExists matches a dependency_already_exists reply.
	ErrDependencyAlreadyExists error = sentinel(CodeDependencyAlreadyExists)
	// ErrInvalidDependency matches a invalid_dependency reply.
	ErrInvalidDependency error = sentinel(CodeInvalidDependency)
	// ErrDepsNotSatisfied matches a deps_not_satisfied reply.
	ErrDepsNotSatisfied error = sentinel(CodeDepsNotSatisfied)
	// ErrNotBlockedByDeps matches a not_blocked_by_deps reply.
	ErrNotBlockedByDeps error = sentinel(CodeNotBlockedByDeps)
	// ErrNotRunnable matches a not_runnable reply.
	ErrNotRunnable error = sentinel(CodeNotRunnable)
	// ErrTerminal matches a terminal reply.
	ErrTerminal error = sentinel(CodeTerminal)
	// ErrExecutionNotTerminal matches a execution_not_terminal reply.
	ErrExecutionNotTerminal error = sentinel(CodeExecutionNotTerminal)
	// ErrMaxReplaysExhausted matches a max_replays_exhausted reply.
	ErrMaxReplaysExhausted error = sentinel(CodeMaxReplaysExhausted)
	// ErrInvalidBlockingReason matches a invalid_blocking_reason reply.
	ErrInvalidBlockingReason error = sentinel(CodeInvalidBlockingReason)
)
