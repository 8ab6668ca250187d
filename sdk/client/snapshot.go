package client

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/valkey-io/valkey-go"
)

// Lifecycle phases (exec_core lifecycle_phase).
const (
	PhaseRunnable  = "runnable"
	PhaseActive    = "active"
	PhaseSuspended = "suspended"
	PhaseTerminal  = "terminal"
)

// Ownership states (exec_core ownership_state).
const (
	OwnershipUnowned                 = "unowned"
	OwnershipLeased                  = "leased"
	OwnershipLeaseExpiredReclaimable = "lease_expired_reclaimable"
	OwnershipLeaseRevoked            = "lease_revoked"
)

// Terminal outcomes (exec_core terminal_outcome).
const (
	OutcomeNone      = "none"
	OutcomeSuccess   = "success"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
	OutcomeExpired   = "expired"
	OutcomeSkipped   = "skipped"
)

// ExecutionState is a typed snapshot of exec_core. Missing and empty
// fields read the same (FlowFabric blanks fields instead of deleting them);
// times are zero when unset. Raw keeps every stored field.
type ExecutionState struct {
	ID        keys.ExecutionID
	Namespace string
	Lane      string
	Kind      string
	Priority  int
	Creator   string
	FlowID    string // bare flow uuid, "" for a solo execution

	LifecyclePhase   string
	OwnershipState   string
	EligibilityState string
	BlockingReason   string
	BlockingDetail   string
	TerminalOutcome  string
	AttemptState     string
	PublicState      string

	TotalAttempts       int
	CurrentAttemptIndex int // -1 before the first claim
	CurrentAttemptID    string
	CurrentLeaseID      string
	LeaseEpoch          uint64
	WorkerID            string
	WorkerInstanceID    string
	CurrentLane         string

	RetryCount   int
	ReplayCount  int
	ReclaimCount int

	CreatedAt        time.Time
	StartedAt        time.Time
	CompletedAt      time.Time
	LastTransitionAt time.Time
	LeaseExpiresAt   time.Time
	DelayUntil       time.Time

	RequiredCapabilities []string
	FailureReason        string
	CancellationReason   string
	CancelledBy          string
	ProgressPct          string
	ProgressMessage      string

	Raw map[string]string
}

// Terminal reports a finished execution.
func (s *ExecutionState) Terminal() bool { return s.LifecyclePhase == PhaseTerminal }

// GetExecution reads an execution's exec_core. A missing execution is
// ErrExecutionNotFound.
func (c *Client) GetExecution(ctx context.Context, id keys.ExecutionID) (*ExecutionState, error) {
	h, err := c.vk.Do(ctx, c.vk.B().Hgetall().Key(keys.Exec(id).Core()).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("client: read execution %s: %w", id, err)
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("client: execution %s: %w", id, ErrExecutionNotFound)
	}
	return stateFromCore(id, h), nil
}

// Result reads the result a worker stored when completing. A completion
// without a result, like a missing execution, gives (nil, nil).
func (c *Client) Result(ctx context.Context, id keys.ExecutionID) ([]byte, error) {
	b, err := c.vk.Do(ctx, c.vk.B().Get().Key(keys.Exec(id).Result()).Build()).AsBytes()
	if valkey.IsValkeyNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: read result of %s: %w", id, err)
	}
	return b, nil
}

func stateFromCore(id keys.ExecutionID, h map[string]string) *ExecutionState {
	s := &ExecutionState{
		ID: id, Namespace: h["namespace"], Lane: h["lane_id"], Kind: h["execution_kind"],
		Priority: atoi(h["priority"]), Creator: h["creator_identity"], FlowID: h["flow_id"],
		LifecyclePhase: h["lifecycle_phase"], OwnershipState: h["ownership_state"],
		EligibilityState: h["eligibility_state"], BlockingReason: h["blocking_reason"],
		BlockingDetail: h["blocking_detail"], TerminalOutcome: h["terminal_outcome"],
		AttemptState: h["attempt_state"], PublicState: h["public_state"],
		TotalAttempts: atoi(h["total_attempt_count"]), CurrentAttemptIndex: -1,
		CurrentAttemptID: h["current_attempt_id"], CurrentLeaseID: h["current_lease_id"],
		WorkerID: h["current_worker_id"], WorkerInstanceID: h["current_worker_instance_id"],
		CurrentLane: h["current_lane"], RetryCount: atoi(h["retry_count"]),
		ReplayCount: atoi(h["replay_count"]), ReclaimCount: atoi(h["lease_reclaim_count"]),
		CreatedAt: msTime(h["created_at"]), StartedAt: msTime(h["started_at"]),
		CompletedAt: msTime(h["completed_at"]), LastTransitionAt: msTime(h["last_transition_at"]),
		LeaseExpiresAt: msTime(h["lease_expires_at"]), DelayUntil: msTime(h["delay_until"]),
		RequiredCapabilities: splitCSV(h["required_capabilities"]),
		FailureReason:        h["failure_reason"], CancellationReason: h["cancellation_reason"],
		CancelledBy: h["cancelled_by"], ProgressPct: h["progress_pct"],
		ProgressMessage: h["progress_message"], Raw: h,
	}
	if v, err := strconv.Atoi(h["current_attempt_index"]); err == nil {
		s.CurrentAttemptIndex = v
	}
	s.LeaseEpoch, _ = strconv.ParseUint(h["current_lease_epoch"], 10, 64)
	return s
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// msTime reads a stored ms timestamp. Lua's tostring can write large
// numbers in exponent form (1.7952382974745e+12), so floats are accepted.
func msTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(n)
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		return time.UnixMilli(int64(f))
	}
	return time.Time{}
}
