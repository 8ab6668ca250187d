package edgecancel

import (
	"strings"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// This file holds the pure decisions of both scanners: what a
// pending_cancel_groups member and an edge group's fields are, which
// siblings a group cancels, which keys the group functions take, and
// what their replies mean. It does no I/O; the scans are in dispatcher.go
// and reconciler.go, what both share in edgecancel.go.

// groupFields are read from an edge group, in this order.
var groupFields = []string{"cancel_siblings_reason", "cancel_siblings_pending_members", "cancel_siblings_pending_flag"}

// tuple is one pending_cancel_groups member, parsed.
type tuple struct {
	raw        string
	flow       keys.FlowID
	downstream keys.ExecutionID
}

// parseTuple splits "<fid>|<eid>". It returns the form of the weaker part:
// invalid tuples can never name a group and are removed; non-canonical
// spellings are left and counted.
func parseTuple(s string) (tuple, keys.IDForm) {
	f, e, ok := strings.Cut(s, "|")
	if !ok || f == "" || e == "" {
		return tuple{}, keys.IDInvalid
	}
	fid, ff := keys.ClassifyFlowID(f)
	eid, ef := keys.ClassifyExecutionID(e)
	switch {
	case ff == keys.IDInvalid || ef == keys.IDInvalid:
		return tuple{}, keys.IDInvalid
	case ff != keys.IDCanonical || ef != keys.IDCanonical:
		return tuple{}, keys.IDNonCanonical
	}
	return tuple{raw: s, flow: fid, downstream: eid}, keys.IDCanonical
}

// parseMember is parseTuple as the intake's parser.
func parseMember(s string, _ keys.Partition) (tuple, keys.IDForm) { return parseTuple(s) }

// groupKeys are the drain and reconcile functions' KEYS.
func groupKeys(part keys.Partition, t tuple) []string {
	return []string{keys.FlowPart(part).PendingCancelGroups(), keys.FlowIn(part, t.flow).EdgeGroup(t.downstream)}
}

// group is an edge group's pending-cancel fields.
type group struct {
	exists        bool
	reason        string
	members, flag string
}

func groupOf(r scannerapi.Reply) group {
	var g group
	for i, e := range r.Array {
		v, _ := e.Text()
		if !e.IsNil() {
			g.exists = true
		}
		switch i {
		case 0:
			g.reason = v
		case 1:
			g.members = v
		case 2:
			g.flag = v
		}
	}
	return g
}

// cancelReason is the reason the group's siblings are cancelled with.
func cancelReason(g group) string {
	if g.reason == "" {
		return DefaultReason
	}
	return g.reason
}

// siblingsOf lists the siblings a group asks to cancel this cycle: at most
// MaxSiblings, more saying some wait for the next cycle. A group with
// neither flag nor members has none and goes straight to the drain.
func siblingsOf(g group) (raws []string, more bool) {
	if g.flag == "" && g.members == "" {
		return nil, false
	}
	for _, raw := range strings.Split(g.members, "|") {
		if raw == "" {
			continue
		}
		if len(raws) == MaxSiblings {
			return raws, true
		}
		raws = append(raws, raw)
	}
	return raws, false
}

// predictReconcile is the dry-run view of ff_reconcile_sibling_cancel_group
// on a group's fields: drop (and why) when the function drops the tuple;
// otherwise the function decides from the siblings' states.
func predictReconcile(g group) (why string, drop bool) {
	switch {
	case !g.exists:
		return "edge group missing", true
	case g.flag != "true":
		return "flag cleared", true
	}
	return "", false
}

// outcomeKind is what a group function did.
type outcomeKind uint8

const (
	outDone       outcomeKind = iota // the drain done, or the reconcile's sremmed_stale / completed_drain
	outNoOp                          // the reconcile's no_op: the dispatcher owns a running group
	outUnexpected                    // the reconcile succeeded with a status we do not know
	outFailed                        // no usable reply, or {0, code}
)

type outcome struct {
	kind  outcomeKind
	class scannerapi.ErrorClass // for outUnexpected and outFailed
	code  string
}

// classifyDrain reads one ff_drain_sibling_cancel_group reply.
func classifyDrain(r scannerapi.Reply) outcome {
	fr, err := scannerapi.ParseFunctionReply(r)
	switch {
	case err != nil:
		class, code := scanutil.Classify(err)
		return outcome{kind: outFailed, class: class, code: code}
	case !fr.Success:
		return outcome{kind: outFailed, class: scannerapi.ErrLua, code: fr.Code}
	}
	return outcome{kind: outDone}
}

// classifyReconcile reads one ff_reconcile_sibling_cancel_group reply:
// sremmed_stale and completed_drain are work done, no_op is not; a
// status we do not know is counted as unexpected_status.
func classifyReconcile(r scannerapi.Reply) outcome {
	o := classifyDrain(r)
	if o.kind == outFailed {
		return o
	}
	fr, _ := scannerapi.ParseFunctionReply(r)
	switch fr.Field(0) {
	case "sremmed_stale", "completed_drain":
		return outcome{kind: outDone, code: fr.Field(0)}
	case "no_op":
		return outcome{kind: outNoOp, code: "no_op"}
	}
	return outcome{kind: outUnexpected, class: scannerapi.ErrServer, code: "unexpected_status"}
}
