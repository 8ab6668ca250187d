package timers

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// This file holds the pure decisions the timers share: what an entry's
// reads say before the call (judgeLocated, judgeRead: the one decision
// the scan and Explain both take), what the library's replies mean, and
// the readings of core and policy fields the specs' calls use. It does
// no I/O; the scan is in timers.go, each timer's call in specs.go.

// step is what an item's reads decide, before the call: the one decision
// the scan and Explain both take (judgeLocated, judgeRead).
type step int

const (
	stepAct      step = iota // go on to the call
	stepRead                 // read the execution first (a located waitpoint, with a filter)
	stepFailed               // a read failed (reply)
	stepGone                 // no longer due, or gone: nothing to do (P5)
	stepFiltered             // outside the filter
	stepRecord               // settled without a call: record o
)

type judged struct {
	step   step
	reply  scannerapi.Reply // stepFailed
	o      outcome          // stepRecord
	detail string
}

// judgeLocated decides a pending waitpoint from its HMGET (execution_id,
// state) and its index score re-read; it sets it.eid.
func judgeLocated(it *item, wp, score scannerapi.Reply, now int64, filter scannerapi.Filter) judged {
	for _, r := range []scannerapi.Reply{wp, score} {
		if r.Failed() {
			return judged{step: stepFailed, reply: r}
		}
	}
	f := fields([]string{"execution_id", "state"}, wp)
	if !stillDue(score, now) {
		return judged{step: stepGone}
	}
	if f["execution_id"] == "" && f["state"] == "" {
		// The waitpoint is gone: the call answers waitpoint_not_found
		// and the entry is removed.
		return judged{step: stepAct, detail: "waitpoint_gone"}
	}
	if f["state"] == "active" {
		// Activated by a suspension (which normally removes the entry):
		// the suspension's timeout owns it now.
		return judged{step: stepRecord, o: outcome{kind: outStuck, code: "active"}}
	}
	id, kind := keys.ClassifyExecutionID(f["execution_id"])
	if kind != keys.IDCanonical {
		return judged{step: stepRecord, o: outcome{kind: outFailed, class: scannerapi.ErrInvalid, code: "invalid_execution_id"}, detail: f["execution_id"]}
	}
	it.eid = id
	if filter.IsNoop() {
		return judged{step: stepAct}
	}
	return judged{step: stepRead}
}

// judgeRead decides an item from its reads (readCommands' replies, the
// filter's apart) and fills it.core and it.extra for the call.
func (s *Timer) judgeRead(it *item, rs, filterReplies []scannerapi.Reply, now int64, filter scannerapi.Filter) judged {
	for _, r := range rs {
		if r.Failed() {
			return judged{step: stepFailed, reply: r}
		}
	}
	if !filter.IsNoop() && !filter.Decide(filterReplies) {
		return judged{step: stepFiltered}
	}
	i := 0
	if len(s.sp.coreReads) > 0 {
		it.core = fields(s.sp.coreReads, rs[i])
		i++
	}
	if s.sp.name == SuspensionTimeoutName {
		it.extra = fields(suspensionReads, rs[i])
		i++
	}
	if s.sp.name == AttemptTimeoutName {
		policy, _ := rs[i].Text()
		it.extra = map[string]string{"policy": policy}
		i++
	}
	if s.sp.recheckScore && !stillDue(rs[i], now) {
		return judged{step: stepGone}
	}
	return judged{step: stepAct}
}

// fields maps an HMGET reply onto its field names ("" for nil).
func fields(names []string, r scannerapi.Reply) map[string]string {
	m := make(map[string]string, len(names))
	for i, n := range names {
		if i < len(r.Array) {
			m[n], _ = r.Array[i].Text()
		}
	}
	return m
}

// stillDue reads a ZSCORE re-check: present and at most now.
func stillDue(r scannerapi.Reply, now int64) bool {
	if r.Kind == scannerapi.KindNil {
		return false
	}
	var score float64
	switch r.Kind {
	case scannerapi.KindFloat:
		score = r.Float
	case scannerapi.KindInt:
		score = float64(r.Int)
	default:
		s, _ := r.Text()
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return false
		}
		score = f
	}
	return score <= float64(now)
}

// leaseMovedOn are the fail refusals that mean the attempt's lease is no
// longer the one read.
var leaseMovedOn = map[string]bool{"lease_expired": true, "lease_revoked": true, "stale_lease": true,
	"execution_not_active": true, "no_active_lease": true}

// retriesLeft reads an execution policy (JSON) and its retry count: the
// retry policy to fail with, and whether it allows another attempt
// (retry_count < max_retries, the library's rule).
func retriesLeft(policy, retryCount string) (string, bool) {
	var p struct {
		Retry json.RawMessage `json:"retry_policy"`
	}
	if policy == "" || json.Unmarshal([]byte(policy), &p) != nil || len(p.Retry) == 0 || string(p.Retry) == "null" {
		return "", false
	}
	var r struct {
		MaxRetries float64 `json:"max_retries"`
	}
	if json.Unmarshal(p.Retry, &r) != nil {
		return "", false
	}
	n, _ := strconv.ParseFloat(retryCount, 64)
	return string(p.Retry), n < r.MaxRetries
}

// suspensionReads are the suspension fields suspension_timeout reads.
var suspensionReads = []string{"suspension_id", "waitpoint_id", "closed_at"}

// coreLane is the lane for the call's lane keys. A missing core gets a
// placeholder (the function answers before it uses them); a core without
// a lane is not guessed at.
func coreLane(it *item) (string, string) {
	if it.core["execution_id"] == "" {
		return "default", ""
	}
	if it.core["lane_id"] == "" {
		return "", "core_without_lane"
	}
	return it.core["lane_id"], ""
}

// attemptIndex reads current_attempt_index; "" (never claimed) names a
// placeholder attempt the function does not touch.
func attemptIndex(s string) uint32 {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

// outKind is what one library call did to its entry.
type outKind int

const (
	outActed    outKind = iota // the timer fired
	outCleaned                 // a stale entry; the library removed it
	outStuck                   // the library left a due entry in place
	outRemove                  // the entry points at nothing; remove it
	outLuaError                // {0, code}
	outFailed                  // no usable reply
)

// outcome is one call's reply, classified.
type outcome struct {
	kind  outKind
	class scannerapi.ErrorClass
	code  string
}

// statusClassifier reads {1, "OK", status, ...} replies by their status.
func statusClassifier(statuses map[string]outKind) func(*item, scannerapi.Reply) outcome {
	return func(_ *item, r scannerapi.Reply) outcome {
		fr, err := scannerapi.ParseFunctionReply(r)
		if err != nil {
			return failedOutcome(err)
		}
		if !fr.Success {
			return outcome{kind: outLuaError, class: scannerapi.ErrLua, code: fr.Code}
		}
		if k, ok := statuses[fr.Field(0)]; ok && fr.Status == scannerapi.StatusOK {
			return outcome{kind: k, code: fr.Field(0)}
		}
		return outcome{kind: outFailed, class: scannerapi.ErrServer, code: "unexpected_status"}
	}
}

func failedOutcome(err error) outcome {
	if errors.Is(err, scannerapi.ErrMalformedReply) {
		return outcome{kind: outFailed, class: scannerapi.ErrServer, code: "malformed_reply"}
	}
	class, code := scanutil.Classify(err)
	return outcome{kind: outFailed, class: class, code: code}
}
