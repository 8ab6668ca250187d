package depresolve

import (
	"context"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// ReconcileChild repairs one child blocked on dependencies; see
// ReconcileChildren.
func (r *Resolver) ReconcileChild(ctx context.Context, child keys.ExecutionID) (Result, error) {
	return r.ReconcileChildren(ctx, []keys.ExecutionID{child})
}

// ReconcileChildren is the dependency reconciler's repair of children
// blocked on dependencies, for pushes that were lost. For every child it
// reads all its unresolved edges, each edge's upstream, and the upstreams'
// cores at their own partitions, then resolves every edge whose upstream
// has finished, with its real outcome. A child with no unresolved edge
// that is still blocked is released (ff_promote_blocked_to_eligible). A
// child that gets skipped is cascaded from like a completion, so its own
// children do not wait for another reconciler pass.
//
// All children are handled together: four pipelined round trips in all
// (children's cores, unresolved sets and the clock; the dep records; the
// upstreams' cores; the FCALLs), plus the cascade of skipped children.
func (r *Resolver) ReconcileChildren(ctx context.Context, children []keys.ExecutionID) (Result, error) {
	var res Result
	children = distinct(children)
	if len(children) == 0 {
		return res, nil
	}
	deps, promos, now, err := r.blockedOn(ctx, children, &res)
	if err != nil || now == "" {
		return res, err
	}
	jobs, ups, err := r.depJobs(ctx, deps, &res)
	if err == nil {
		jobs, err = r.finishedUpstreams(ctx, jobs, ups, &res)
	}
	if err != nil {
		return res, err
	}
	// Round trip 4: the FCALLs, then the cascade of skipped children.
	skipped, err := r.resolve(ctx, jobs, promos, now, &res)
	if err != nil || len(skipped) == 0 {
		return res, err
	}
	return res, r.cascade(ctx, skipped, 1, &res)
}

// pendingDep is one unresolved edge of a reconciled child.
type pendingDep struct {
	child keys.ExecutionID
	core  childCore
	flow  keys.FlowID
	edge  keys.UUID
}

// blockedOn is round trip 1: TIME, each child's core and unresolved set.
// It returns the children's unresolved edges, the children to release (no
// edge left, still blocked) and the server time ("" when TIME failed:
// nothing is resolved without the server's clock).
func (r *Resolver) blockedOn(ctx context.Context, children []keys.ExecutionID, res *Result) ([]pendingDep, []promotion, string, error) {
	cmds := []scannerapi.Command{{"TIME"}}
	for _, c := range children {
		cmds = append(cmds,
			append(scannerapi.Command{"HMGET", keys.Exec(c).Core()}, childFields...),
			scannerapi.Command{"SMEMBERS", keys.Exec(c).DepsUnresolved()})
	}
	reps, err := r.exec(ctx, cmds)
	if err != nil {
		return nil, nil, "", err
	}
	now, ok := serverMillis(reps[0], res)
	if !ok {
		return nil, nil, "", nil
	}
	var deps []pendingDep
	var promos []promotion
	for i, c := range children {
		cc, ok := parseChildCore(reps[1+2*i], res)
		if !ok {
			continue
		}
		unresolved := reps[2+2*i]
		if res.replyError(unresolved, "read_unresolved") {
			continue
		}
		edges := texts(unresolved)
		if len(edges) == 0 {
			if stillBlocked(cc) {
				promos = append(promos, promotion{child: c, lane: cc.lane})
			}
			continue
		}
		deps = append(deps, unresolvedDeps(c, cc, edges, res)...)
	}
	return deps, promos, now, nil
}

// stillBlocked reports a child waiting on dependencies that nobody owns:
// with no unresolved edge left, it is released.
func stillBlocked(cc childCore) bool {
	return cc.phase == "runnable" && cc.eligibility == "blocked_by_dependencies" && (cc.ownership == "" || cc.ownership == "unowned")
}

// unresolvedDeps turns a child's unresolved edge ids into its pending
// deps (bad ids, and edges on an execution without a flow, counted).
func unresolvedDeps(c keys.ExecutionID, cc childCore, edges []string, res *Result) []pendingDep {
	fid, err := keys.ParseFlowID(cc.flow)
	if err != nil {
		// Unresolved edges on an execution without a flow: corruption.
		res.addError(ErrData, "missing_flow_id")
		return nil
	}
	var deps []pendingDep
	for _, e := range edges {
		id, err := keys.ParseUUID(e)
		if err != nil {
			res.addError(ErrData, "bad_edge_id")
			continue
		}
		deps = append(deps, pendingDep{child: c, core: cc, flow: fid, edge: id})
	}
	return deps
}

// depJobs is round trip 2: each dep record's upstream. It returns the jobs
// and their upstreams, each once, in order.
func (r *Resolver) depJobs(ctx context.Context, deps []pendingDep, res *Result) ([]job, []keys.ExecutionID, error) {
	if len(deps) == 0 {
		return nil, nil, nil
	}
	cmds := make([]scannerapi.Command, 0, len(deps))
	for _, d := range deps {
		cmds = append(cmds, scannerapi.Command{"HGET", keys.Exec(d.child).Dep(d.edge), "upstream_execution_id"})
	}
	reps, err := r.exec(ctx, cmds)
	if err != nil {
		return nil, nil, err
	}
	var jobs []job
	var ups []keys.ExecutionID
	seen := map[keys.ExecutionID]bool{}
	for i, d := range deps {
		if res.replyError(reps[i], "read_dep") {
			continue
		}
		s, _ := reps[i].Text()
		up, err := keys.ParseExecutionID(s)
		if err != nil {
			res.addError(ErrData, "bad_upstream_id")
			continue
		}
		jobs = append(jobs, job{edge: d.edge, flow: d.flow, up: up, child: d.child, lane: d.core.lane, attempt: d.core.attempt})
		if !seen[up] {
			seen[up] = true
			ups = append(ups, up)
		}
	}
	return jobs, ups, nil
}

// finishedUpstreams is round trip 3: the upstreams' cores, each at its own
// partition. It keeps the jobs whose upstream finished, with its outcome;
// an upstream still running is counted NotTerminal, one whose read failed
// is counted as an error and retried on the next pass (never taken for
// "not finished").
func (r *Resolver) finishedUpstreams(ctx context.Context, jobs []job, ups []keys.ExecutionID, res *Result) ([]job, error) {
	if len(ups) == 0 {
		return jobs, nil
	}
	cmds := make([]scannerapi.Command, 0, len(ups))
	for _, u := range ups {
		cmds = append(cmds, scannerapi.Command{"HMGET", keys.Exec(u).Core(), "lifecycle_phase", "terminal_outcome"})
	}
	reps, err := r.exec(ctx, cmds)
	if err != nil {
		return nil, err
	}
	outcome := map[keys.ExecutionID]string{}
	failed := map[keys.ExecutionID]bool{}
	for i, u := range ups {
		if res.replyError(reps[i], "read_upstream") {
			failed[u] = true
			continue
		}
		f := texts(reps[i])
		if len(f) == 2 && terminal(f[0], f[1]) {
			outcome[u] = f[1]
		}
	}
	kept := jobs[:0]
	for _, j := range jobs {
		switch {
		case failed[j.up]:
			// Counted above; retried on the next pass.
		case outcome[j.up] == "":
			res.NotTerminal++
		default:
			j.outcome = outcome[j.up]
			kept = append(kept, j)
		}
	}
	return kept, nil
}

func distinct(ids []keys.ExecutionID) []keys.ExecutionID {
	seen := make(map[keys.ExecutionID]bool, len(ids))
	out := make([]keys.ExecutionID, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
