package scanutil

import (
	"errors"
	"slices"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Cancelling an execution from a scanner (ff_cancel_execution), as the
// cancel reconciler and the edge-cancel dispatcher do: read the fields of
// its core that name the keys the cancel needs, build those keys from the
// execution's real state, and read the reply by its Lua code.

// CancelCoreFields are read (HMGET, in this order) from an execution's
// core before its cancel: execution_id tells an existing core from a
// missing one, the next four name the keys ff_cancel_execution needs, and
// lifecycle_phase lets a dry run predict the outcome. Each call returns a
// new slice, which the caller may append to.
func CancelCoreFields() []string { return slices.Clone(cancelCoreFields) }

var cancelCoreFields = []string{"execution_id", "lane_id", "current_attempt_index",
	"current_waitpoint_id", "current_worker_instance_id", "lifecycle_phase"}

// CancelCore is an execution's core as read with CancelCoreFields.
type CancelCore struct {
	Exists    bool // any field was set: the core exists
	Lane      string
	Attempt   string
	Waitpoint string
	Worker    string
	Phase     string
	BadReply  bool // the HMGET reply did not have the expected shape
}

// ParseCancelCore reads the HMGET reply of CancelCoreFields. A failed
// command is the caller's business (check Reply.Failed first).
func ParseCancelCore(r scannerapi.Reply) CancelCore {
	if r.Kind != scannerapi.KindArray || len(r.Array) != len(cancelCoreFields) {
		return CancelCore{BadReply: true}
	}
	f := make([]string, len(cancelCoreFields))
	exists := false
	for i, e := range r.Array {
		s, ok := e.Text()
		if !ok {
			return CancelCore{BadReply: true}
		}
		f[i] = s
		if !e.IsNil() {
			exists = true
		}
	}
	return CancelCore{Exists: exists, Lane: f[1], Attempt: f[2], Waitpoint: f[3], Worker: f[4], Phase: f[5]}
}

// Problems that keep a cancel from being built; their text is the error
// code a scanner counts (class invalid).
var (
	ErrCancelNoLane        = errors.New("missing_lane")
	ErrCancelBadLane       = errors.New("invalid_lane")
	ErrCancelBadAttempt    = errors.New("invalid_attempt_index")
	ErrCancelBadWaitpoint  = errors.New("invalid_waitpoint_id")
	ErrCancelBadCoreFields = errors.New("malformed_core_read")
)

// CancelKeys builds ff_cancel_execution's 21 KEYS from the execution's
// real core: its lane's index keys, its current attempt and stream meta,
// its current waitpoint and condition, and its worker's lease set. Where
// the core has no value the library reads nothing through that key, and
// the placeholder FlowFabric's callers pass is used (attempt 0, the
// nil-UUID waitpoint, the empty worker instance). A missing lane on an
// existing core is corruption: no lane is guessed (the lane decides which
// index entries the cancel removes).
func CancelKeys(id keys.ExecutionID, c CancelCore) ([]string, error) {
	if c.BadReply {
		return nil, ErrCancelBadCoreFields
	}
	if c.Lane == "" {
		return nil, ErrCancelNoLane
	}
	if keys.ValidateLane(c.Lane) != nil {
		return nil, ErrCancelBadLane
	}
	var attempt uint32
	if c.Attempt != "" {
		n, err := strconv.ParseUint(c.Attempt, 10, 32)
		if err != nil {
			return nil, ErrCancelBadAttempt
		}
		attempt = uint32(n)
	}
	var wp keys.UUID // the nil UUID when the execution has no waitpoint
	if c.Waitpoint != "" {
		u, err := keys.ParseUUID(c.Waitpoint)
		if err != nil || u.String() != c.Waitpoint {
			return nil, ErrCancelBadWaitpoint
		}
		wp = u
	}
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	lane := c.Lane
	return []string{
		ek.Core(), ek.Attempt(attempt), ek.StreamMeta(attempt), ek.LeaseCurrent(), ek.LeaseHistory(),
		pk.LeaseExpiry(), pk.WorkerLeases(c.Worker), ek.SuspensionCurrent(),
		pk.Waitpoint(wp), pk.WaitpointCondition(wp), pk.SuspensionTimeout(), pk.LaneTerminal(lane),
		pk.AttemptTimeout(), pk.ExecutionDeadline(), pk.LaneEligible(lane), pk.LaneDelayed(lane),
		pk.LaneBlockedDependencies(lane), pk.LaneBlockedBudget(lane), pk.LaneBlockedQuota(lane),
		pk.LaneBlockedRoute(lane), pk.LaneBlockedOperator(lane),
	}, nil
}

// CancelScope is the FunctionScope of ff_cancel_execution as CancelCall
// calls it: the keys CancelKeys builds, for any execution of a flow
// partition. A scanner that cancels declares it in Info.FunctionScopes.
func CancelScope() scannerapi.FunctionScope {
	ks, err := CancelKeys(AnyExecution(), CancelCore{Lane: AnyLane, Attempt: itoa(AnyIndex), Waitpoint: AnyUUID().String(), Worker: AnyName})
	if err != nil {
		panic(err) // the placeholders are valid values
	}
	return scannerapi.FunctionScope{Function: CancelFunction, Patterns: ScopePatterns(nil, ks...)}
}

// CancelFunction is the library function CancelCall calls.
const CancelFunction = "ff_cancel_execution"

// CancelCall is the FCALL ff_cancel_execution with the given keys, reason
// and source (operator_override for scanners: no lease fence).
func CancelCall(id keys.ExecutionID, cancelKeys []string, reason, source string) scannerapi.Command {
	return scannerapi.FCall(CancelFunction, cancelKeys, id.String(), reason, source, "", "")
}

// CancelKind is what one cancel came to.
type CancelKind int

// Cancel outcomes.
const (
	CancelCancelled       CancelKind = iota // cancelled now
	CancelAlreadyTerminal                   // execution_not_active: it had ended
	CancelNotFound                          // execution_not_found: nothing to cancel
	CancelLuaError                          // another {0, code}: not done, counted by code
	CancelFailed                            // no usable reply: not done, retried
)

// Done reports whether nothing more is owed: the execution is cancelled,
// had already ended, or does not exist.
func (k CancelKind) Done() bool {
	return k == CancelCancelled || k == CancelAlreadyTerminal || k == CancelNotFound
}

// CancelResult is one ff_cancel_execution reply, classified.
type CancelResult struct {
	Kind  CancelKind
	Class scannerapi.ErrorClass // for CancelLuaError and CancelFailed
	Code  string                // the status, the Lua code or a short reason
}

// Lua codes that mean a cancel is done (FlowFabric's Valkey path wrapped
// them as transport errors and retried them forever: its pitfall P6).
const (
	CodeExecutionNotActive = "execution_not_active"
	CodeExecutionNotFound  = "execution_not_found"
)

// ClassifyCancel reads one ff_cancel_execution reply by its Lua code.
func ClassifyCancel(r scannerapi.Reply) CancelResult {
	fr, err := scannerapi.ParseFunctionReply(r)
	if err != nil {
		class, code := Classify(err)
		return CancelResult{Kind: CancelFailed, Class: class, Code: code}
	}
	if fr.Success {
		return CancelResult{Kind: CancelCancelled, Code: fr.Status}
	}
	switch fr.Code {
	case CodeExecutionNotActive:
		return CancelResult{Kind: CancelAlreadyTerminal, Code: fr.Code}
	case CodeExecutionNotFound:
		return CancelResult{Kind: CancelNotFound, Code: fr.Code}
	}
	return CancelResult{Kind: CancelLuaError, Class: scannerapi.ErrLua, Code: fr.Code}
}

// PredictCancel is the dry-run counterpart of ClassifyCancel, from the
// pre-read core alone.
func PredictCancel(c CancelCore) CancelResult {
	switch {
	case !c.Exists:
		return CancelResult{Kind: CancelNotFound, Code: CodeExecutionNotFound}
	case c.Phase == "terminal":
		return CancelResult{Kind: CancelAlreadyTerminal, Code: CodeExecutionNotActive}
	}
	return CancelResult{Kind: CancelCancelled, Code: "would_cancel"}
}
