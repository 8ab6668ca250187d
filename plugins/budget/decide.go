package budget

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// This file holds the pure decision logic of both scanners: what an index
// member is, what a reply means, and whether a budget is breached. It does
// no I/O.

// failureCode is the error code of a failed command: "wrongtype" for a
// WRONGTYPE error (a key of the wrong type, data that will not fix itself),
// else fallback.
func failureCode(err error, fallback string) string {
	var re *scannerapi.ReplyError
	if errors.As(err, &re) && strings.HasPrefix(re.Msg, "WRONGTYPE") {
		return "wrongtype"
	}
	return fallback
}

// failureClass is the class of a failed command's error.
func failureClass(err error) scannerapi.ErrorClass {
	class, _ := scanutil.Classify(err)
	return class
}

// resetKind is what ff_reset_budget did to one budget.
type resetKind int

const (
	resetDone     resetKind = iota // usage zeroed; rescheduled or unscheduled
	resetLuaError                  // {0, code}
	resetFailed                    // no usable reply (transport, server, refused, malformed)
)

// resetOutcome is one ff_reset_budget reply, classified.
type resetOutcome struct {
	kind      resetKind
	nextReset int64                 // resetDone: the next reset time in ms, 0 when unscheduled
	class     scannerapi.ErrorClass // resetLuaError, resetFailed
	code      string
}

// classifyReset reads the reply of one ff_reset_budget FCALL: {1, "OK",
// next_reset_at} or {0, code, ...}.
func classifyReset(r scannerapi.Reply) resetOutcome {
	fr, err := scannerapi.ParseFunctionReply(r)
	if err != nil {
		if errors.Is(err, scannerapi.ErrMalformedReply) {
			return resetOutcome{kind: resetFailed, class: scannerapi.ErrServer, code: "malformed_reply"}
		}
		return resetOutcome{kind: resetFailed, class: failureClass(err), code: failureCode(err, ResetFunction)}
	}
	if !fr.Success {
		return resetOutcome{kind: resetLuaError, class: scannerapi.ErrLua, code: fr.Code}
	}
	next, err := strconv.ParseInt(fr.Field(0), 10, 64)
	if err != nil || fr.Status != scannerapi.StatusOK {
		return resetOutcome{kind: resetFailed, class: scannerapi.ErrServer, code: "malformed_reply"}
	}
	return resetOutcome{kind: resetDone, nextReset: next}
}

// hashOf reads an HGETALL reply: a flat field, value list (RESP2, and RESP3
// maps as the host converts them).
func hashOf(r scannerapi.Reply) (map[string]string, error) {
	if err := r.AsError(); err != nil {
		return nil, err
	}
	if r.Kind == scannerapi.KindNil {
		return map[string]string{}, nil
	}
	if r.Kind != scannerapi.KindArray || len(r.Array)%2 != 0 {
		return nil, fmt.Errorf("%w: HGETALL reply is not a field/value list", scannerapi.ErrMalformedReply)
	}
	h := make(map[string]string, len(r.Array)/2)
	for i := 0; i < len(r.Array); i += 2 {
		k, ok1 := r.Array[i].Text()
		v, ok2 := r.Array[i+1].Text()
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: HGETALL reply holds a non-scalar", scannerapi.ErrMalformedReply)
		}
		h[k] = v
	}
	return h, nil
}

// BreachedAtField is the marker the reconciler keeps in a lifetime
// budget's usage hash while usage is over a hard limit.
const BreachedAtField = "breached_at"

// action is what the reconciler does to one budget.
type action int

const (
	actNone      action = iota // consistent already
	actPrune                   // definition gone: drop the id from the indexes
	actResetting               // resets periodically: not reconciled
	actNoLimits                // no limits: nothing to reconcile
	actMark                    // over a hard limit and unmarked: set breached_at
	actClear                   // marked but no longer over: remove breached_at
)

func (a action) String() string {
	return [...]string{"none", "prune", "resetting", "no_limits", "mark", "clear"}[a]
}

// decideBudget is the reconciler's rule for one budget (scanners.md 9.2),
// given its three hashes, all read without error. An empty definition is an
// orphan. A budget whose definition has a reset_interval_ms other than ""
// or "0" resets periodically and is left alone. Otherwise it is breached
// when some hard:<dim> limit is a number > 0 and the usage of <dim> (a
// missing or unparsable value counts as 0) is strictly greater; a limit
// that is not a number counts as no limit, soft limits are ignored, and the
// marker itself plays no part in the decision, only in what to write.
func decideBudget(def, usage, limits map[string]string) action {
	if len(def) == 0 {
		return actPrune
	}
	if iv := def["reset_interval_ms"]; iv != "" && iv != "0" {
		return actResetting
	}
	if len(limits) == 0 {
		return actNoLimits
	}
	_, marked := usage[BreachedAtField]
	switch breached := overHardLimit(usage, limits); {
	case breached && !marked:
		return actMark
	case !breached && marked:
		return actClear
	}
	return actNone
}

// overHardLimit reports whether some dimension's usage is strictly above
// its positive hard limit.
func overHardLimit(usage, limits map[string]string) bool {
	for f, raw := range limits {
		dim, ok := strings.CutPrefix(f, "hard:")
		if !ok {
			continue
		}
		limit, ok := number(raw)
		if !ok || limit <= 0 {
			continue
		}
		used, ok := number(usage[dim])
		if !ok {
			used = 0
		}
		if used > limit {
			return true
		}
	}
	return false
}

// number parses a stored counter or limit the way the library's tonumber
// reads it: decimal integers and decimal fractions. NaN and infinities are
// not numbers here.
func number(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return float64(n), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}
