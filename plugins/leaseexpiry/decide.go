package leaseexpiry

import (
	"strconv"

	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// This file holds the pure decision logic: what a candidate member is, and
// what a reply means. It does no I/O.

// outcomeKind is what ff_mark_lease_expired_if_due did (or, in a dry run,
// would do) to one execution.
type outcomeKind int

const (
	outMarked   outcomeKind = iota // lease marked expired now
	outStuck                       // nothing to do; the entry stays in the index with its score (already expired or revoked)
	outCleaned                     // stale entry: the function removed it from the index
	outNotDue                      // renewed since it was read; the entry moved
	outLuaError                    // {0, code}
	outFailed                      // no usable reply (transport, server, refused, malformed)
)

type outcome struct {
	kind  outcomeKind
	class scannerapi.ErrorClass // for outLuaError / outFailed
	code  string                // Lua code, the function's detail, or a short reason
}

// Detail strings of ff_mark_lease_expired_if_due's successful replies.
const (
	detailMarked         = "marked_expired"
	detailNotActive      = "not_active"
	detailAlreadyExpired = "already_expired"
	detailAlreadyRevoked = "already_revoked"
	detailUnowned        = "unowned"             // active but unowned: the function dropped the entry
	detailNotFound       = "execution_not_found" // the execution is gone: the function dropped the entry
	detailNotYetExpired  = "not_yet_expired"
)

// classifyReply reads the reply of one ff_mark_lease_expired_if_due FCALL.
func classifyReply(r scannerapi.Reply) outcome {
	fr, err := scannerapi.ParseFunctionReply(r)
	if err != nil {
		class, code := scanutil.Classify(err)
		return outcome{kind: outFailed, class: class, code: code}
	}
	if !fr.Success {
		return outcome{kind: outLuaError, class: scannerapi.ErrLua, code: fr.Code}
	}
	detail := fr.Field(0)
	switch detail {
	case detailMarked:
		return outcome{kind: outMarked, code: detail}
	case detailNotActive, detailUnowned, detailNotFound:
		return outcome{kind: outCleaned, code: detail}
	case detailNotYetExpired:
		return outcome{kind: outNotDue, code: detail}
	case detailAlreadyExpired, detailAlreadyRevoked:
		return outcome{kind: outStuck, code: detail}
	}
	// A success we do not know: the function re-validated and committed
	// whatever it did; do not retry it, but do not remember it either.
	return outcome{kind: outNotDue, code: "unknown:" + detail}
}

// dryRunFields are the core fields a dry run reads to predict the function.
var dryRunFields = []string{"lifecycle_phase", "ownership_state", "lease_expires_at"}

// predict mirrors ff_mark_lease_expired_if_due on the core fields read by a
// dry run (HMGET core lifecycle_phase ownership_state lease_expires_at),
// with the host's now in place of the server's TIME.
func predict(r scannerapi.Reply, nowMs int64) outcome {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		return outcome{kind: outFailed, class: class, code: code}
	}
	if r.Kind != scannerapi.KindArray || len(r.Array) != len(dryRunFields) {
		return outcome{kind: outFailed, class: scannerapi.ErrServer, code: "malformed_reply"}
	}
	field := func(i int) string { s, _ := r.Array[i].Text(); return s }
	phase, owner, exp := field(0), field(1), field(2)
	switch {
	case phase != "active":
		return outcome{kind: outCleaned, code: detailNotActive}
	case owner == "lease_expired_reclaimable":
		return outcome{kind: outStuck, code: detailAlreadyExpired}
	case owner == "lease_revoked":
		return outcome{kind: outStuck, code: detailAlreadyRevoked}
	case owner == "unowned":
		return outcome{kind: outCleaned, code: detailUnowned}
	}
	e, err := strconv.ParseFloat(exp, 64)
	if err != nil || e > float64(nowMs) {
		return outcome{kind: outNotDue, code: detailNotYetExpired}
	}
	return outcome{kind: outMarked, code: detailMarked}
}
