package cancelreconciler

import (
	"errors"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// This file holds the pure decision logic: what a member string is, which
// keys a member's cancel needs, what a reply means, and how the look-ahead
// pages the backlog. It does no I/O.

// coreFields are read from each member's exec_core before its cancel, in
// this order: execution_id tells an existing core from a missing one; the
// next four name the keys ff_cancel_execution needs; lifecycle_phase lets a
// dry run predict the outcome.
var coreFields = []string{"execution_id", "lane_id", "current_attempt_index",
	"current_waitpoint_id", "current_worker_instance_id", "lifecycle_phase"}

// memberCore is a member's pre-read core.
type memberCore struct {
	exists   bool
	lane     string
	attempt  string
	waitpt   string
	worker   string
	phase    string
	badReply bool // the HMGET reply did not have the expected shape
}

// parseCore reads the HMGET reply of coreFields. A failed command is the
// caller's business (check Reply.Failed first).
func parseCore(r scannerapi.Reply) memberCore {
	if r.Kind != scannerapi.KindArray || len(r.Array) != len(coreFields) {
		return memberCore{badReply: true}
	}
	f := make([]string, len(coreFields))
	exists := false
	for i, e := range r.Array {
		s, ok := e.Text()
		if !ok {
			return memberCore{badReply: true}
		}
		f[i] = s
		if !e.IsNil() {
			exists = true
		}
	}
	return memberCore{exists: exists, lane: f[1], attempt: f[2], waitpt: f[3], worker: f[4], phase: f[5]}
}

// Problems that keep a member's cancel from being built. They are counted
// (class invalid) and the member stays pending.
var (
	errNoLane        = errors.New("missing_lane")
	errBadLane       = errors.New("invalid_lane")
	errBadAttempt    = errors.New("invalid_attempt_index")
	errBadWaitpoint  = errors.New("invalid_waitpoint_id")
	errBadCoreFields = errors.New("malformed_core_read")
)

// cancelKeys builds ff_cancel_execution's 21 KEYS from the member's real
// core: its lane's index keys, its current attempt and stream meta, its
// current waitpoint and condition, and its worker's lease set. Where the
// core has no value the library reads nothing through that key, and we pass
// the placeholder FlowFabric's callers pass (attempt 0, the nil-UUID
// waitpoint, the empty worker instance). A missing lane on an existing core
// is corruption; we refuse to guess one (the lane decides which index
// entries the cancel removes).
func cancelKeys(id keys.ExecutionID, c memberCore) ([]string, error) {
	if c.badReply {
		return nil, errBadCoreFields
	}
	if c.lane == "" {
		return nil, errNoLane
	}
	if keys.ValidateLane(c.lane) != nil {
		return nil, errBadLane
	}
	var attempt uint32
	if c.attempt != "" {
		n, err := strconv.ParseUint(c.attempt, 10, 32)
		if err != nil {
			return nil, errBadAttempt
		}
		attempt = uint32(n)
	}
	var wp keys.UUID // the nil UUID when the execution has no waitpoint
	if c.waitpt != "" {
		u, err := keys.ParseUUID(c.waitpt)
		if err != nil || u.String() != c.waitpt {
			return nil, errBadWaitpoint
		}
		wp = u
	}
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	lane := c.lane
	return []string{
		ek.Core(), ek.Attempt(attempt), ek.StreamMeta(attempt), ek.LeaseCurrent(), ek.LeaseHistory(),
		pk.LeaseExpiry(), pk.WorkerLeases(c.worker), ek.SuspensionCurrent(),
		pk.Waitpoint(wp), pk.WaitpointCondition(wp), pk.SuspensionTimeout(), pk.LaneTerminal(lane),
		pk.AttemptTimeout(), pk.ExecutionDeadline(), pk.LaneEligible(lane), pk.LaneDelayed(lane),
		pk.LaneBlockedDependencies(lane), pk.LaneBlockedBudget(lane), pk.LaneBlockedQuota(lane),
		pk.LaneBlockedRoute(lane), pk.LaneBlockedOperator(lane),
	}, nil
}

// outcomeKind is what a member's cancel came to.
type outcomeKind int

const (
	outCancelled       outcomeKind = iota // cancelled now
	outAlreadyTerminal                    // execution_not_active: it had ended: done
	outNotFound                           // execution_not_found: nothing to cancel: done
	outLuaError                           // another {0, code}: not done, counted by code
	outFailed                             // no usable reply: not done, retried
)

// done reports whether the member's cancel is owed no longer (ack it).
func (k outcomeKind) done() bool {
	return k == outCancelled || k == outAlreadyTerminal || k == outNotFound
}

type outcome struct {
	kind  outcomeKind
	class scannerapi.ErrorClass // for outLuaError and outFailed
	code  string                // the Lua code or a short reason
}

// Lua codes that mean the member's cancel is done (pitfall P6: FlowFabric's
// Valkey path wrapped them as transport errors and retried them forever).
const (
	codeNotActive = "execution_not_active"
	codeNotFound  = "execution_not_found"
)

// classifyCancel reads one ff_cancel_execution reply by its Lua code.
func classifyCancel(r scannerapi.Reply) outcome {
	fr, err := scannerapi.ParseFunctionReply(r)
	if err != nil {
		return failedOutcome(err)
	}
	if fr.Success {
		return outcome{kind: outCancelled, code: fr.Status}
	}
	switch fr.Code {
	case codeNotActive:
		return outcome{kind: outAlreadyTerminal, code: fr.Code}
	case codeNotFound:
		return outcome{kind: outNotFound, code: fr.Code}
	}
	return outcome{kind: outLuaError, class: scannerapi.ErrLua, code: fr.Code}
}

// classifyAck reads one ff_ack_cancel_member reply: nil when it succeeded.
func classifyAck(r scannerapi.Reply) *outcome {
	fr, err := scannerapi.ParseFunctionReply(r)
	if err != nil {
		o := failedOutcome(err)
		return &o
	}
	if !fr.Success {
		return &outcome{kind: outLuaError, class: scannerapi.ErrLua, code: fr.Code}
	}
	return nil
}

// predict is the dry-run counterpart of classifyCancel, from the pre-read
// core alone.
func predict(c memberCore) outcome {
	switch {
	case !c.exists:
		return outcome{kind: outNotFound, code: codeNotFound}
	case c.phase == "terminal":
		return outcome{kind: outAlreadyTerminal, code: codeNotActive}
	}
	return outcome{kind: outCancelled, code: "would_cancel"}
}

func failedOutcome(err error) outcome {
	class, code := scanutil.Classify(err)
	return outcome{kind: outFailed, class: class, code: code}
}

// flowReason is the reason a member is cancelled with: the flow's
// cancel_reason, or FlowFabric's default when the field is absent (nil).
func flowReason(r scannerapi.Reply) string {
	if r.IsNil() {
		return DefaultReason
	}
	s, _ := r.Text()
	return s
}
