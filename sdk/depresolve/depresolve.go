// Package depresolve resolves FlowFabric dependency edges: the push path
// that releases (or skips) the children of a finished flow member, and the
// repair of one blocked child that the dependency reconciler runs. Both the
// host's completion listener and the dependency-reconciler plugin use it,
// so the two paths cannot drift apart.
//
// A Resolver runs over an Executor, which batches commands; a plugin's
// scannerapi.Host is one, and the host's depexec.LibraryExecutor adapts its
// flowfabric library for in-process callers. Every batch is one pipelined
// round trip: resolving a level of the DAG costs a fixed number of round
// trips whatever the number of edges.
//
// Differences from FlowFabric's cascade (reference scanners.md 11.3, 8.3,
// pitfalls P7, P15, P19), all deliberate:
//   - the upstream's outcome is read from its core and must be terminal
//     (lifecycle terminal, outcome set); a replayed, running upstream is
//     left alone instead of being resolved with outcome "none";
//   - now_ms is the server's clock (TIME), never the local one;
//   - replies are classified by status: satisfied, impossible,
//     already_resolved, pending and already_fired are all resolutions;
//     Lua error codes and failed commands are counted by class and code,
//     never swallowed;
//   - a read that fails skips only the items that depended on it, for this
//     call; nothing is cached across calls (an upstream whose read failed
//     is not remembered as "not terminal");
//   - the lane of a child comes from its core; a failed read is never
//     replaced by "default";
//   - every unresolved edge of a reconciled child is examined, not the
//     first 20;
//   - flow keys are built on the member's own partition (members live in
//     their flow's partition), so no FCALL ever spans two slots.
package depresolve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/hashicorp/go-hclog"
)

// Commands and Functions are what a Resolver sends. A scanner that uses it
// declares them in its scannerapi.Info (Commands, Functions) so the host
// lets them through.
var (
	Commands  = []string{"TIME", "HGET", "HMGET", "SMEMBERS"}
	Functions = []string{"ff_resolve_dependency", "ff_promote_blocked_to_eligible"}
)

// Executor runs commands pipelined and returns one reply per command, in
// order. A failed command is a Reply with Err set; an error means the whole
// batch could not run. scannerapi.Host satisfies it.
type Executor interface {
	Exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error)
}

// DefaultMaxDepth is how many levels of skipped children a cascade follows
// below the finished execution (FlowFabric's limit).
const DefaultMaxDepth = 50

// DefaultMaxBatch bounds the commands sent in one Exec; larger batches are
// split (the host refuses batches over 10000 commands).
const DefaultMaxBatch = 1000

// ErrData classifies data that cannot be acted on: unparsable ids, an
// edge whose record is missing, a child outside the completion's flow.
const ErrData scannerapi.ErrorClass = "data"

// Options tune a Resolver. The zero value is usable.
type Options struct {
	// MaxDepth is how many levels of skipped children a cascade follows;
	// deeper ones are reported in Result.Left for the dependency
	// reconciler. Default DefaultMaxDepth.
	MaxDepth int
	// MaxBatch bounds one Exec. Default DefaultMaxBatch.
	MaxBatch int
	// Logger receives warnings (depth limit reached). Default: none.
	Logger hclog.Logger
}

// Resolver resolves dependency edges through an Executor. It holds no
// state between calls and is safe for concurrent use.
type Resolver struct {
	ex       Executor
	maxDepth int
	maxBatch int
	log      hclog.Logger
}

// New returns a Resolver running its commands on ex.
func New(ex Executor, opts Options) *Resolver {
	r := &Resolver{ex: ex, maxDepth: opts.MaxDepth, maxBatch: opts.MaxBatch, log: opts.Logger}
	if r.maxDepth <= 0 {
		r.maxDepth = DefaultMaxDepth
	}
	if r.maxBatch <= 0 {
		r.maxBatch = DefaultMaxBatch
	}
	if r.log == nil {
		r.log = hclog.NewNullLogger()
	}
	return r
}

// Completion is a flow member that reached a terminal state, as published
// on ff:dag:completions.
type Completion struct {
	Execution keys.ExecutionID
	Flow      keys.FlowID
	// Outcome is the published outcome. It is informational: Cascade
	// resolves with the outcome stored in the execution's core.
	Outcome string
}

// ParseCompletion decodes a ff:dag:completions message: a JSON object
// with execution_id, flow_id and (optional) outcome.
func ParseCompletion(payload []byte) (Completion, error) {
	var m struct {
		ExecutionID string `json:"execution_id"`
		FlowID      string `json:"flow_id"`
		Outcome     string `json:"outcome"`
	}
	if err := json.Unmarshal(payload, &m); err != nil {
		return Completion{}, fmt.Errorf("depresolve: completion message: %w", err)
	}
	eid, err := keys.ParseExecutionID(m.ExecutionID)
	if err != nil {
		return Completion{}, fmt.Errorf("depresolve: completion message: %w", err)
	}
	fid, err := keys.ParseFlowID(m.FlowID)
	if err != nil {
		return Completion{}, fmt.Errorf("depresolve: completion message: %w", err)
	}
	return Completion{Execution: eid, Flow: fid, Outcome: m.Outcome}, nil
}

// Result says what a call did. Counts are per edge unless stated.
type Result struct {
	// Resolved counts edges the library answered with a resolution
	// (the sum of the five statuses below).
	Resolved        int64
	Satisfied       int64
	Impossible      int64
	AlreadyResolved int64
	Pending         int64 // any_of/quorum group still undecided
	AlreadyFired    int64 // any_of/quorum group decided earlier
	// Skipped counts children the library made terminal "skipped"
	// because an edge became impossible.
	Skipped int64
	// Cascaded counts skipped children that were visited in turn: their
	// own outgoing edges (if any) were resolved.
	Cascaded int64
	// Promoted counts reconciled children with no unresolved edge that
	// were still blocked and have been released.
	Promoted int64
	// NotTerminal counts edges left alone because the upstream has not
	// finished (yet, or again after a replay).
	NotTerminal int64
	// Left lists skipped children deeper than MaxDepth whose edges were
	// not resolved; the dependency reconciler finds their children.
	Left []keys.ExecutionID
	// Errors counts failures by class (transport, server, refused, lua,
	// data) and code.
	Errors []scannerapi.ErrorCount
}

// ErrorTotal is the sum of the error counts.
func (r *Result) ErrorTotal() int64 {
	var n int64
	for _, e := range r.Errors {
		n += e.Count
	}
	return n
}

func (r *Result) addError(class scannerapi.ErrorClass, code string) {
	for i := range r.Errors {
		if r.Errors[i].Class == class && r.Errors[i].Code == code {
			r.Errors[i].Count++
			return
		}
	}
	r.Errors = append(r.Errors, scannerapi.ErrorCount{Class: class, Code: code, Count: 1})
}

// replyError counts a failed command; it reports whether rep failed.
func (r *Result) replyError(rep scannerapi.Reply, code string) bool {
	err := rep.AsError()
	if err == nil {
		return false
	}
	class := scannerapi.ErrServer
	var re *scannerapi.ReplyError
	if errors.As(err, &re) {
		class = re.Class
	}
	r.addError(class, code)
	return true
}

// AddTo merges the result into a scanner's ScanResult: Processed grows by
// the resolutions and promotions, errors are merged by class and code.
func (r *Result) AddTo(sr *scannerapi.ScanResult) {
	sr.Processed += r.Resolved + r.Promoted
	for _, e := range r.Errors {
		sr.AddError(e.Class, e.Code, e.Count)
	}
}

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
	// Round trip 1: TIME, each upstream's core and out-set.
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
	type half struct {
		up      node
		outcome string
		edge    keys.UUID
	}
	var halves []half
	for i, n := range frontier {
		core, out := reps[1+2*i], reps[2+2*i]
		if res.replyError(core, "read_upstream") || res.replyError(out, "read_out_edges") {
			continue
		}
		f, edges := texts(core), texts(out)
		if len(f) != 3 || out.Kind != scannerapi.KindArray {
			res.addError(ErrData, "unexpected_reply")
			continue
		}
		if len(edges) == 0 {
			continue
		}
		switch {
		case f[0] == "":
			res.addError(ErrData, "upstream_not_found")
			continue
		case f[2] != n.flow.String():
			res.addError(ErrData, "flow_mismatch")
			continue
		}
		if !terminal(f[0], f[1]) {
			res.NotTerminal += int64(len(edges))
			continue
		}
		for _, e := range edges {
			id, err := keys.ParseUUID(e)
			if err != nil {
				res.addError(ErrData, "bad_edge_id")
				continue
			}
			halves = append(halves, half{up: n, outcome: f[1], edge: id})
		}
	}
	if len(halves) == 0 {
		return nil, now, nil
	}

	// Round trip 2: the edge records.
	cmds = cmds[:0]
	for _, h := range halves {
		cmds = append(cmds, scannerapi.Command{"HMGET", keys.FlowIn(h.up.id.Partition(), h.up.flow).Edge(h.edge),
			"upstream_execution_id", "downstream_execution_id"})
	}
	if reps, err = r.exec(ctx, cmds); err != nil {
		return nil, "", err
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

	// Round trip 3: the children's cores (lane and attempt name keys).
	cores, err := r.readChildren(ctx, order, res)
	if err != nil {
		return nil, "", err
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
	return kept, now, nil
}

// childCore is what resolving needs from a child's core.
type childCore struct {
	flow        string
	lane        string
	attempt     uint32
	phase       string
	eligibility string
	ownership   string
}

var childFields = []string{"execution_id", "flow_id", "lane_id", "current_lane", "current_attempt_index",
	"lifecycle_phase", "eligibility_state", "ownership_state"}

// readChildren reads the cores of children in one round trip. A child
// whose read failed or whose core is missing is absent from the map (and
// counted).
func (r *Resolver) readChildren(ctx context.Context, children []keys.ExecutionID, res *Result) (map[keys.ExecutionID]childCore, error) {
	if len(children) == 0 {
		return nil, nil
	}
	cmds := make([]scannerapi.Command, len(children))
	for i, c := range children {
		cmds[i] = append(scannerapi.Command{"HMGET", keys.Exec(c).Core()}, childFields...)
	}
	reps, err := r.exec(ctx, cmds)
	if err != nil {
		return nil, err
	}
	out := make(map[keys.ExecutionID]childCore, len(children))
	for i, c := range children {
		if cc, ok := parseChildCore(reps[i], res); ok {
			out[c] = cc
		}
	}
	return out, nil
}

// parseChildCore reads a childFields HMGET reply, counting a failed read,
// a missing core or an unparsable attempt index.
func parseChildCore(rep scannerapi.Reply, res *Result) (childCore, bool) {
	if res.replyError(rep, "read_child") {
		return childCore{}, false
	}
	f := texts(rep)
	if len(f) != len(childFields) {
		res.addError(ErrData, "unexpected_reply")
		return childCore{}, false
	}
	if f[0] == "" {
		res.addError(ErrData, "child_not_found")
		return childCore{}, false
	}
	cc := childCore{flow: f[1], lane: coreLane(f[2], f[3]), phase: f[5], eligibility: f[6], ownership: f[7]}
	if f[4] != "" {
		n, err := strconv.ParseUint(f[4], 10, 32)
		if err != nil {
			res.addError(ErrData, "bad_attempt_index")
			return childCore{}, false
		}
		cc.attempt = uint32(n)
	}
	return cc, true
}

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
	// Round trip 1: TIME, each child's core and unresolved set.
	cmds := []scannerapi.Command{{"TIME"}}
	for _, c := range children {
		cmds = append(cmds,
			append(scannerapi.Command{"HMGET", keys.Exec(c).Core()}, childFields...),
			scannerapi.Command{"SMEMBERS", keys.Exec(c).DepsUnresolved()})
	}
	reps, err := r.exec(ctx, cmds)
	if err != nil {
		return res, err
	}
	now, ok := serverMillis(reps[0], &res)
	if !ok {
		return res, nil
	}
	type pending struct {
		child keys.ExecutionID
		core  childCore
		flow  keys.FlowID
		edge  keys.UUID
	}
	var deps []pending
	var promos []promotion
	for i, c := range children {
		cc, ok := parseChildCore(reps[1+2*i], &res)
		if !ok {
			continue
		}
		unresolved := reps[2+2*i]
		if res.replyError(unresolved, "read_unresolved") {
			continue
		}
		edges := texts(unresolved)
		if len(edges) == 0 {
			if cc.phase == "runnable" && cc.eligibility == "blocked_by_dependencies" && (cc.ownership == "" || cc.ownership == "unowned") {
				promos = append(promos, promotion{child: c, lane: cc.lane})
			}
			continue
		}
		fid, err := keys.ParseFlowID(cc.flow)
		if err != nil {
			// Unresolved edges on an execution without a flow: corruption.
			res.addError(ErrData, "missing_flow_id")
			continue
		}
		for _, e := range edges {
			id, err := keys.ParseUUID(e)
			if err != nil {
				res.addError(ErrData, "bad_edge_id")
				continue
			}
			deps = append(deps, pending{child: c, core: cc, flow: fid, edge: id})
		}
	}

	// Round trip 2: each dep record's upstream.
	var jobs []job
	var ups []keys.ExecutionID
	if len(deps) > 0 {
		cmds = cmds[:0]
		for _, d := range deps {
			cmds = append(cmds, scannerapi.Command{"HGET", keys.Exec(d.child).Dep(d.edge), "upstream_execution_id"})
		}
		if reps, err = r.exec(ctx, cmds); err != nil {
			return res, err
		}
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
	}

	// Round trip 3: the upstreams' cores, each at its own partition.
	if len(ups) > 0 {
		cmds = cmds[:0]
		for _, u := range ups {
			cmds = append(cmds, scannerapi.Command{"HMGET", keys.Exec(u).Core(), "lifecycle_phase", "terminal_outcome"})
		}
		if reps, err = r.exec(ctx, cmds); err != nil {
			return res, err
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
		jobs = kept
	}

	// Round trip 4: the FCALLs, then the cascade of skipped children.
	skipped, err := r.resolve(ctx, jobs, promos, now, &res)
	if err != nil {
		return res, err
	}
	if len(skipped) == 0 {
		return res, nil
	}
	return res, r.cascade(ctx, skipped, 1, &res)
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

// exec runs cmds in batches of at most maxBatch and checks the reply count.
func (r *Resolver) exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	out := make([]scannerapi.Reply, 0, len(cmds))
	for start := 0; start < len(cmds); start += r.maxBatch {
		chunk := cmds[start:min(start+r.maxBatch, len(cmds))]
		reps, err := r.ex.Exec(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("depresolve: exec %d commands: %w", len(chunk), err)
		}
		if len(reps) != len(chunk) {
			return nil, fmt.Errorf("depresolve: exec answered %d replies to %d commands", len(reps), len(chunk))
		}
		out = append(out, reps...)
	}
	return out, nil
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

// serverMillis reads a TIME reply as decimal ms (the library's now_ms).
func serverMillis(rep scannerapi.Reply, res *Result) (string, bool) {
	if res.replyError(rep, "time") {
		return "", false
	}
	t := texts(rep)
	if len(t) != 2 {
		res.addError(scannerapi.ErrServer, "time")
		return "", false
	}
	s, err1 := strconv.ParseInt(t[0], 10, 64)
	us, err2 := strconv.ParseInt(t[1], 10, 64)
	if err1 != nil || err2 != nil {
		res.addError(scannerapi.ErrServer, "time")
		return "", false
	}
	return strconv.FormatInt(s*1000+us/1000, 10), true
}

// texts returns an array reply's scalar elements as text (nil as "").
func texts(rep scannerapi.Reply) []string {
	out := make([]string, 0, len(rep.Array))
	for _, e := range rep.Array {
		s, _ := e.Text()
		out = append(out, s)
	}
	return out
}

// terminal reports a finished execution: lifecycle terminal with an
// outcome.
func terminal(phase, outcome string) bool {
	return phase == "terminal" && outcome != "" && outcome != "none"
}

// coreLane is the lane the library uses for an execution's index keys:
// lane_id, then current_lane, then "default" (H.core_lane). Only applied
// to fields read successfully from an existing core.
func coreLane(laneID, currentLane string) string {
	switch {
	case laneID != "":
		return laneID
	case currentLane != "":
		return currentLane
	}
	return "default"
}
