package unblock

import (
	"strconv"
	"strings"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// This file holds the pure decisions: what a blocked execution's core,
// its budgets, its quota and its namespace's workers say, and what the
// library's reply means. It does no I/O; the scan (scan.go) reads and
// calls, and Explain (explain.go) runs the scan.

// The three blocked sets and the blocking reason each expects.
var reasons = map[string]string{
	"budget": "waiting_for_budget",
	"quota":  "waiting_for_quota",
	"route":  "waiting_for_capable_worker",
}

// sourceNames are the sources, one per reason.
var sourceNames = []string{"budget", "quota", "route"}

// coreFields are read from each candidate's core.
var coreFields = []string{"execution_id", "blocking_reason", "namespace", "budget_ids", "quota_policy_id",
	"required_capabilities"}

// coreOf reads the HMGET of coreFields.
func coreOf(r scannerapi.Reply) map[string]string {
	core := map[string]string{}
	for i, f := range coreFields {
		if i < len(r.Array) {
			core[f], _ = r.Array[i].Text()
		}
	}
	return core
}

// coreStep is what an execution's core says the scan does with it.
type coreStep uint8

const (
	coreCheck       coreStep = iota // check what its reason needs (its source's check)
	coreGone                        // no core: remove the entry from its set
	coreFiltered                    // outside the scanner's filter: left blocked
	coreOtherReason                 // blocked for another reason (e.g. paused_by_flow_cancel): not ours
	coreNoNamespace                 // no namespace: never unblocked (no cross-tenant admission)
)

// judgeCore decides on an execution read from the set of source src;
// outside says the filter does not take it.
func judgeCore(core map[string]string, src string, outside bool) coreStep {
	switch {
	case core["execution_id"] == "":
		return coreGone
	case outside:
		return coreFiltered
	case core["blocking_reason"] != reasons[src]:
		return coreOtherReason
	case core["namespace"] == "":
		return coreNoNamespace
	}
	return coreCheck
}

// budgetIDs reads a core's budget_ids: the budgets to check, and how many
// entries are not budget ids (no such budget can exist: they block
// nothing).
func budgetIDs(raw string) (ids []keys.BudgetID, invalid int) {
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		id, form := keys.ClassifyBudgetID(s)
		if form != keys.IDCanonical {
			invalid++
			continue
		}
		ids = append(ids, id)
	}
	return ids, invalid
}

// breached reads a budget's limits and usage: a positive hard limit that
// usage has reached.
func breached(limits, usage scannerapi.Reply) bool {
	l, u := hashOf(limits), hashOf(usage)
	for f, v := range l {
		dim, ok := strings.CutPrefix(f, "hard:")
		if !ok {
			continue
		}
		limit, err := strconv.ParseFloat(v, 64)
		if err != nil || limit <= 0 {
			continue
		}
		used, _ := strconv.ParseFloat(u[dim], 64)
		if used >= limit {
			return true
		}
	}
	return false
}

// hashOf reads an HGETALL reply.
func hashOf(r scannerapi.Reply) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(r.Array); i += 2 {
		k, _ := r.Array[i].Text()
		v, _ := r.Array[i+1].Text()
		m[k] = v
	}
	return m
}

// quotaIDOf reads a core's quota_policy_id: ok is false when there is
// none to check, invalid when it is not a quota id (counted; it blocks
// nothing).
func quotaIDOf(raw string) (id keys.QuotaID, ok, invalid bool) {
	if raw == "" {
		return keys.QuotaID{}, false, false
	}
	u, form := keys.ClassifyBudgetID(raw) // a bare uuid, like a budget id
	if form != keys.IDCanonical {
		return keys.QuotaID{}, false, true
	}
	return keys.QuotaIDFrom(u.UUID()), true, false
}

// quotaDefFields are read from a quota's definition, for quotaLimits.
var quotaDefFields = []string{"max_requests_per_window", "requests_per_window_seconds", "active_concurrency_cap"}

// quotaCheck is a quota's definition, read before its window.
type quotaCheck struct {
	keys                        keys.QuotaKeys
	rate, windowSec, concurrent int64
}

// quotaLimits reads the HMGET of quotaDefFields (a window of 60 s when
// unset); limited is false when the quota limits neither rate nor
// concurrency.
func quotaLimits(r scannerapi.Reply) (q quotaCheck, limited bool) {
	num := func(i int, def int64) int64 {
		if i >= len(r.Array) {
			return def
		}
		s, _ := r.Array[i].Text()
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return def
		}
		return int64(n)
	}
	q = quotaCheck{rate: num(0, 0), windowSec: num(1, 60), concurrent: num(2, 0)}
	return q, q.rate > 0 || q.concurrent > 0
}

// quotaFull says whether the quota has no room: inWindow requests in its
// live window, concurrency (GET of its counter) admissions in use. It
// returns the reason ("" when there is room) and the use and limit that
// have no room.
func quotaFull(q quotaCheck, inWindow int64, concurrency scannerapi.Reply) (reason string, used, limit int64) {
	if q.rate > 0 && inWindow >= q.rate {
		return "quota_window_full", inWindow, q.rate
	}
	if q.concurrent > 0 {
		s, _ := concurrency.Text()
		n, _ := strconv.ParseFloat(s, 64)
		if int64(n) >= q.concurrent {
			return "quota_concurrency_full", int64(n), q.concurrent
		}
	}
	return "", 0, 0
}

// addCaps adds the capabilities of a worker's caps_csv to union.
func addCaps(union map[string]bool, csv string) {
	for _, tok := range strings.Split(csv, ",") {
		if tok != "" {
			union[tok] = true
		}
	}
}

// missingCapability returns the first required capability (of a core's
// required_capabilities) that no worker of the namespace advertises.
func missingCapability(required string, have map[string]bool) (string, bool) {
	for _, tok := range strings.Split(required, ",") {
		if tok != "" && !have[tok] {
			return tok, true
		}
	}
	return "", false
}

// outcomeKind is what ff_unblock_execution did.
type outcomeKind uint8

const (
	outUnblocked outcomeKind = iota // made eligible again
	outMovedOn                      // not eligible any more or gone since the read: nothing to do
	outLuaError                     // another {0, code}
	outFailed                       // no usable reply
)

type outcome struct {
	kind  outcomeKind
	class scannerapi.ErrorClass // for outLuaError and outFailed
	code  string
}

// classifyReply reads one ff_unblock_execution reply.
func classifyReply(r scannerapi.Reply) outcome {
	fr, err := scannerapi.ParseFunctionReply(r)
	switch {
	case err != nil:
		class, code := scanutil.Classify(err)
		return outcome{kind: outFailed, class: class, code: code}
	case fr.Success:
		return outcome{kind: outUnblocked}
	case fr.Code == "execution_not_eligible" || fr.Code == "execution_not_found":
		return outcome{kind: outMovedOn, code: fr.Code}
	}
	return outcome{kind: outLuaError, class: scannerapi.ErrLua, code: fr.Code}
}
