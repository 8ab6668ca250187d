package depresolve

import (
	"context"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Sub-statuses of a successful ff_resolve_dependency.
const (
	statusSatisfied       = "satisfied"
	statusImpossible      = "impossible"
	statusAlreadyResolved = "already_resolved"
	statusPending         = "pending"
	statusAlreadyFired    = "already_fired"
	childSkipped          = "child_skipped"
)

// resolve runs one pipelined batch of ff_resolve_dependency (and
// ff_promote_blocked_to_eligible) calls, counts the replies and returns the
// children the library skipped.
func (r *Resolver) resolve(ctx context.Context, jobs []job, promos []promotion, now string, res *Result) ([]node, error) {
	if len(jobs)+len(promos) == 0 {
		return nil, nil
	}
	cmds := make([]scannerapi.Command, 0, len(jobs)+len(promos))
	for _, j := range jobs {
		cmds = append(cmds, resolveCall(j, now))
	}
	for _, p := range promos {
		cmds = append(cmds, promoteCall(p, now))
	}
	reps, err := r.exec(ctx, cmds)
	if err != nil {
		return nil, err
	}
	var skipped []node
	for i, j := range jobs {
		fr, ok := functionReply(reps[i], res)
		if !ok {
			continue
		}
		if !fr.Success {
			res.addError(scannerapi.ErrLua, fr.Code)
			continue
		}
		switch fr.Field(0) {
		case statusSatisfied:
			res.Satisfied++
		case statusImpossible:
			res.Impossible++
		case statusAlreadyResolved:
			res.AlreadyResolved++
		case statusPending:
			res.Pending++
		case statusAlreadyFired:
			res.AlreadyFired++
		default:
			res.addError(scannerapi.ErrLua, "unexpected_status")
			continue
		}
		res.Resolved++
		if fr.Field(1) == childSkipped {
			res.Skipped++
			skipped = append(skipped, node{id: j.child, flow: j.flow})
		}
	}
	for i := range promos {
		fr, ok := functionReply(reps[len(jobs)+i], res)
		if !ok {
			continue
		}
		switch {
		case fr.Success:
			res.Promoted++
		case promoteRace[fr.Code]:
			// The child moved on since it was read: nothing to repair.
		default:
			res.addError(scannerapi.ErrLua, fr.Code)
		}
	}
	return skipped, nil
}

// promoteRace are promote refusals that mean the child changed since it
// was read (finished, claimed, or got a new edge).
var promoteRace = map[string]bool{
	"not_blocked_by_deps": true, "not_runnable": true, "terminal": true,
	"deps_not_satisfied": true, "execution_not_found": true,
}

// resolveCall builds ff_resolve_dependency: KEYS (14) child core,
// deps_meta, deps_unresolved, dep(edge), lane eligible, lane terminal, lane
// blocked:dependencies, attempt(current), stream_meta(current), child
// payload, upstream result (on the child's tag), flow edgegroup(child),
// flow in(child), pending_cancel_groups; ARGV (5) edge_id, upstream
// outcome, now_ms, fid, child eid. Every key is on the child's slot.
func resolveCall(j job, now string) scannerapi.Command {
	ek, pk := keys.Exec(j.child), keys.FlowPart(j.child.Partition())
	fk := keys.FlowIn(j.child.Partition(), j.flow)
	// FlowFabric builds the upstream's result key on the child's tag. For
	// a member of the child's partition that is the upstream's real result
	// key; otherwise it names a key that never exists, which the
	// partition's noop key reproduces (COPY copies nothing) without
	// spelling a key by hand.
	upResult := pk.Noop()
	if j.up.Partition() == j.child.Partition() {
		upResult = keys.Exec(j.up).Result()
	}
	return scannerapi.FCall("ff_resolve_dependency",
		[]string{ek.Core(), ek.DepsMeta(), ek.DepsUnresolved(), ek.Dep(j.edge), pk.LaneEligible(j.lane),
			pk.LaneTerminal(j.lane), pk.LaneBlockedDependencies(j.lane), ek.Attempt(j.attempt),
			ek.StreamMeta(j.attempt), ek.Payload(), upResult, fk.EdgeGroup(j.child), fk.In(j.child),
			pk.PendingCancelGroups()},
		j.edge.String(), j.outcome, now, j.flow.String(), j.child.String())
}

// promoteCall builds ff_promote_blocked_to_eligible: KEYS (5) core, lane
// blocked:dependencies, lane eligible, deps_meta, deps_unresolved; ARGV (2)
// eid, now_ms.
func promoteCall(p promotion, now string) scannerapi.Command {
	ek, pk := keys.Exec(p.child), keys.FlowPart(p.child.Partition())
	return scannerapi.FCall("ff_promote_blocked_to_eligible",
		[]string{ek.Core(), pk.LaneBlockedDependencies(p.lane), pk.LaneEligible(p.lane), ek.DepsMeta(),
			ek.DepsUnresolved()},
		p.child.String(), now)
}

// functionReply parses an FCALL reply, counting a failed command or a
// malformed reply.
func functionReply(rep scannerapi.Reply, res *Result) (scannerapi.FunctionReply, bool) {
	if res.replyError(rep, "") {
		return scannerapi.FunctionReply{}, false
	}
	fr, err := scannerapi.ParseFunctionReply(rep)
	if err != nil {
		res.addError(scannerapi.ErrServer, "malformed_reply")
		return scannerapi.FunctionReply{}, false
	}
	return fr, true
}
