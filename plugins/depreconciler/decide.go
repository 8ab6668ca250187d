package depreconciler

import (
	"strings"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// This file holds the pure logic: what an index member is, which execution
// a command concerns, and how a dry run's intercepted FCALLs are accounted.
// It does no I/O.

// execKeyPrefix starts every per-execution key:
// ff:exec:<routing tag>:<eid>:<suffix>, the eid itself tagged ("{fp:N}:<uuid>").
const execKeyPrefix = "ff:exec:"

// uuidLen is the length of a canonical uuid.
const uuidLen = 36

// execOfKey returns the execution a per-execution key belongs to.
func execOfKey(key string) (keys.ExecutionID, bool) {
	rest, ok := strings.CutPrefix(key, execKeyPrefix)
	if !ok {
		return keys.ExecutionID{}, false
	}
	// Skip the routing tag "{fp:N}:".
	i := strings.Index(rest, "}:")
	if i < 0 {
		return keys.ExecutionID{}, false
	}
	rest = rest[i+2:]
	j := strings.Index(rest, "}:")
	if j < 0 || len(rest) < j+2+uuidLen {
		return keys.ExecutionID{}, false
	}
	id, err := keys.ParseExecutionID(rest[:j+2+uuidLen])
	if err != nil {
		return keys.ExecutionID{}, false
	}
	return id, true
}

// isUpstreamRead reports the read of a dep record's upstream:
// HGET ff:exec:...:dep:<edge> upstream_execution_id.
func isUpstreamRead(c scannerapi.Command) bool {
	return len(c) == 3 && strings.EqualFold(c[0], "HGET") && c[2] == "upstream_execution_id" &&
		strings.HasPrefix(c[1], execKeyPrefix) && strings.Contains(c[1], ":dep:")
}

// dryRunReason is the error text of an FCALL held back in a dry run.
const dryRunReason = "dry run: not sent"

// dryRunReply is what a held-back FCALL answers.
func dryRunReply() scannerapi.Reply {
	return scannerapi.Reply{Kind: scannerapi.KindError, Err: dryRunReason, ErrClass: scannerapi.ErrRefused}
}

// withoutHeldBack removes n "refused" errors with no code (what the
// resolver records for a held-back FCALL) from errs.
func withoutHeldBack(errs []scannerapi.ErrorCount, n int64) []scannerapi.ErrorCount {
	out := make([]scannerapi.ErrorCount, 0, len(errs))
	for _, e := range errs {
		if n > 0 && e.Class == scannerapi.ErrRefused && e.Code == "" {
			d := min(n, e.Count)
			e.Count -= d
			n -= d
		}
		if e.Count > 0 {
			out = append(out, e)
		}
	}
	return out
}

// tracked reports whether a failed reply should count against the child
// it concerns in the failure tracker: a command that got no reply
// (transport) or a server error (a wrong-type key that will fail every
// time). A refusal by the host is a configuration problem, not the child's.
func tracked(r scannerapi.Reply) (scannerapi.ErrorClass, bool) {
	if !r.Failed() {
		return "", false
	}
	class := r.ErrClass
	if class == "" {
		class = scannerapi.ErrServer
	}
	return class, class == scannerapi.ErrTransport || class == scannerapi.ErrServer
}
