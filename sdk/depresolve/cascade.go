package depresolve

import (
	"context"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// node is an execution whose outgoing edges are to be resolved.
type node struct {
	id   keys.ExecutionID
	flow keys.FlowID
}

// Cascade resolves the outgoing edges of a finished flow member, then
// those of every child the library skipped as a result, level by level
// down to MaxDepth. Each level costs four pipelined round trips (the
// upstreams' cores, out-sets and the server clock; the edge records; the
// children's cores; the FCALLs), whatever its number of edges.
//
// The error is non-nil only when a whole batch could not be run (the
// result then covers the work done so far); per-edge failures are counted
// in Result.Errors.
func (r *Resolver) Cascade(ctx context.Context, c Completion) (Result, error) {
	var res Result
	err := r.cascade(ctx, []node{{id: c.Execution, flow: c.Flow}}, 0, &res)
	return res, err
}

// cascade resolves the outgoing edges of frontier (at depth) and follows
// skipped children.
func (r *Resolver) cascade(ctx context.Context, frontier []node, depth int, res *Result) error {
	seen := map[keys.ExecutionID]bool{}
	for _, n := range frontier {
		seen[n.id] = true
	}
	for ; len(frontier) > 0; depth++ {
		if depth > r.maxDepth {
			for _, n := range frontier {
				res.Left = append(res.Left, n.id)
			}
			r.log.Warn("dependency cascade reached its depth limit; the dependency reconciler will resolve the rest",
				"max_depth", r.maxDepth, "left", len(frontier))
			return nil
		}
		if depth > 0 {
			res.Cascaded += int64(len(frontier))
		}
		jobs, now, err := r.outgoing(ctx, frontier, res)
		if err != nil {
			return err
		}
		skipped, err := r.resolve(ctx, jobs, nil, now, res)
		if err != nil {
			return err
		}
		frontier = frontier[:0:0]
		for _, n := range skipped {
			if !seen[n.id] {
				seen[n.id] = true
				frontier = append(frontier, n)
			}
		}
	}
	return nil
}

// job is one edge to resolve on its child.
type job struct {
	edge    keys.UUID
	flow    keys.FlowID
	up      keys.ExecutionID
	outcome string // the upstream's terminal outcome
	child   keys.ExecutionID
	lane    string
	attempt uint32
}

// promotion is a reconciled child with nothing left unresolved.
type promotion struct {
	child keys.ExecutionID
	lane  string
}

// outgoing reads, for each upstream of the frontier, its terminal outcome
// and out-set, then the edge records, then the children's cores, and
// returns the edges to resolve and the server time.
func (r *Resolver) outgoing(ctx context.Context, frontier []node, res *Result) ([]job, string, error) {
	halves, now, err := r.outEdges(ctx, frontier, res)
	if err != nil || len(halves) == 0 {
		return nil, now, err
	}
	jobs, children, err := r.edgeJobs(ctx, halves, res)
	if err == nil {
		jobs, err = r.withChildCores(ctx, jobs, children, res)
	}
	if err != nil {
		return nil, "", err
	}
	return jobs, now, nil
}

// half is an outgoing edge of a finished upstream whose record is not read
// yet.
type half struct {
	up      node
	outcome string
	edge    keys.UUID
}

// outEdges is round trip 1: TIME, each upstream's core and out-set. It
// returns the edges of the upstreams that finished, and the server time
// ("" when TIME failed: nothing is resolved without the server's clock).
func (r *Resolver) outEdges(ctx context.Context, frontier []node, res *Result) ([]half, string, error) {
	cmds := []scannerapi.Command{{"TIME"}}
	for _, n := range frontier {
		cmds = append(cmds,
			scannerapi.Command{"HMGET", keys.Exec(n.id).Core(), "lifecycle_phase", "terminal_outcome", "flow_id"},
			scannerapi.Command{"SMEMBERS", keys.FlowIn(n.id.Partition(), n.flow).Out(n.id)})
	}
	reps, err := r.exec(ctx, cmds)
	if err != nil {
		return nil, "", err
	}
	now, ok := serverMillis(reps[0], res)
	if !ok {
		return nil, "", nil
	}
	var halves []half
	for i, n := range frontier {
		halves = append(halves, finishedEdges(n, reps[1+2*i], reps[2+2*i], res)...)
	}
	return halves, now, nil
}

// finishedEdges reads an upstream's core and out-set replies: its edges
// when it finished, none (counted) otherwise.
func finishedEdges(n node, core, out scannerapi.Reply, res *Result) []half {
	if res.replyError(core, "read_upstream") || res.replyError(out, "read_out_edges") {
		return nil
	}
	f, edges := texts(core), texts(out)
	switch {
	case len(f) != 3 || out.Kind != scannerapi.KindArray:
		res.addError(ErrData, "unexpected_reply")
		return nil
	case len(edges) == 0:
		return nil
	case f[0] == "":
		res.addError(ErrData, "upstream_not_found")
		return nil
	case f[2] != n.flow.String():
		res.addError(ErrData, "flow_mismatch")
		return nil
	case !terminal(f[0], f[1]):
		res.NotTerminal += int64(len(edges))
		return nil
	}
	var halves []half
	for _, e := range edges {
		id, err := keys.ParseUUID(e)
		if err != nil {
			res.addError(ErrData, "bad_edge_id")
			continue
		}
		halves = append(halves, half{up: n, outcome: f[1], edge: id})
	}
	return halves
}

// edgeJobs is round trip 2: the edge records. It returns the jobs and
// their children, each once, in order.
func (r *Resolver) edgeJobs(ctx context.Context, halves []half, res *Result) ([]job, []keys.ExecutionID, error) {
	cmds := make([]scannerapi.Command, 0, len(halves))
	for _, h := range halves {
		cmds = append(cmds, scannerapi.Command{"HMGET", keys.FlowIn(h.up.id.Partition(), h.up.flow).Edge(h.edge),
			"upstream_execution_id", "downstream_execution_id"})
	}
	reps, err := r.exec(ctx, cmds)
	if err != nil {
		return nil, nil, err
	}
	var jobs []job
	children := map[keys.ExecutionID]bool{}
	var order []keys.ExecutionID
	for i, h := range halves {
		if res.replyError(reps[i], "read_edge") {
			continue
		}
		f := texts(reps[i])
		if len(f) != 2 || f[1] == "" {
			res.addError(ErrData, "edge_missing")
			continue
		}
		if f[0] != h.up.id.String() {
			res.addError(ErrData, "edge_upstream_mismatch")
			continue
		}
		child, err := keys.ParseExecutionID(f[1])
		if err != nil {
			res.addError(ErrData, "bad_child_id")
			continue
		}
		jobs = append(jobs, job{edge: h.edge, flow: h.up.flow, up: h.up.id, outcome: h.outcome, child: child})
		if !children[child] {
			children[child] = true
			order = append(order, child)
		}
	}
	return jobs, order, nil
}

// withChildCores is round trip 3: the children's cores, whose lane and
// attempt name the FCALL's keys. A job whose child could not be read, or
// is in another flow, is dropped (counted).
func (r *Resolver) withChildCores(ctx context.Context, jobs []job, children []keys.ExecutionID, res *Result) ([]job, error) {
	cores, err := r.readChildren(ctx, children, res)
	if err != nil {
		return nil, err
	}
	kept := jobs[:0]
	for _, j := range jobs {
		c, ok := cores[j.child]
		if !ok {
			continue
		}
		if c.flow != j.flow.String() {
			res.addError(ErrData, "child_flow_mismatch")
			continue
		}
		j.lane, j.attempt = c.lane, c.attempt
		kept = append(kept, j)
	}
	return kept, nil
}
