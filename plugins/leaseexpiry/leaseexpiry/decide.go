package leaseexpiry

import (
	"strconv"
	"strings"

	"github.com/ffscan/ffscan/sdk/scannerapi"
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
		if re, ok := err.(*scannerapi.ReplyError); ok {
			return outcome{kind: outFailed, class: re.Class, code: errorCode(re.Msg)}
		}
		return outcome{kind: outFailed, class: scannerapi.ErrServer, code: "malformed_reply"}
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

// errorCode makes a short metric code of a RESP error message: its first
// word when that is an upper-case error prefix (WRONGTYPE, NOSCRIPT, ERR),
// else "error".
func errorCode(msg string) string {
	w, _, _ := strings.Cut(msg, " ")
	if w == "" || len(w) > 24 {
		return "error"
	}
	for i := 0; i < len(w); i++ {
		if c := w[i]; !(c >= 'A' && c <= 'Z' || c == '_') {
			return "error"
		}
	}
	return w
}

// dryRunFields are the core fields a dry run reads to predict the function.
var dryRunFields = []string{"lifecycle_phase", "ownership_state", "lease_expires_at"}

// predict mirrors ff_mark_lease_expired_if_due on the core fields read by a
// dry run (HMGET core lifecycle_phase ownership_state lease_expires_at),
// with the host's now in place of the server's TIME.
func predict(r scannerapi.Reply, nowMs int64) outcome {
	if err := r.AsError(); err != nil {
		re := err.(*scannerapi.ReplyError)
		return outcome{kind: outFailed, class: re.Class, code: errorCode(re.Msg)}
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

// pagePos is a position in the due range of the index read newest first:
// the next page starts at score hi (inclusive), skipping the first off
// members that have exactly that score.
type pagePos struct {
	hi  float64
	off int
}

// advance returns the position after a page that started at from and
// returned these scores (descending).
func advance(from pagePos, scores []float64) pagePos {
	if len(scores) == 0 {
		return from
	}
	last := scores[len(scores)-1]
	n := 0
	for i := len(scores) - 1; i >= 0 && scores[i] == last; i-- {
		n++
	}
	if last == from.hi {
		n += from.off
	}
	return pagePos{hi: last, off: n}
}

func formatScore(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
