package client

// This file is a flow's dependency edges: AddDependency, staged as
// FlowFabric's callers stage them (graph revision, then apply).

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/valkey-io/valkey-go"
)

// DependencySuccessOnly is FlowFabric's default dependency_kind: the child
// may run only if the upstream succeeded. The library stores the kind but
// does not interpret it (every edge behaves as success-only).
const DependencySuccessOnly = "success_only"

// DependencyRequest describes one dependency edge: Downstream may start
// only after Upstream has succeeded. Both must be members of Flow.
type DependencyRequest struct {
	Flow       keys.FlowID
	Upstream   keys.ExecutionID
	Downstream keys.ExecutionID

	// ID is the edge id. Zero mints one. Set it to make the call safe to
	// retry: a retry of a call that staged the edge but failed before
	// applying it (or whose reply was lost) finds the same edge and
	// finishes the job instead of failing with dependency_already_exists.
	ID keys.UUID

	// Kind is stored as dependency_kind; default DependencySuccessOnly.
	Kind string

	// DataRef, when not empty, turns on data passing: when the edge is
	// satisfied, the library copies the upstream's result over the
	// downstream's payload (the child's input becomes the parent's
	// output). The value is stored on the edge as data_passing_ref; the
	// library treats it as an opaque label.
	DataRef string
}

// DependencyResult is the outcome of AddDependency.
type DependencyResult struct {
	ID            keys.UUID
	GraphRevision int64 // the flow's graph_revision after staging
	Unresolved    int64 // the child's unsatisfied_required_count after applying
	// AlreadyApplied: the edge existed (same ID, same ends) and was
	// already applied to the child; nothing changed.
	AlreadyApplied bool
	// Resumed: the edge had been staged by an earlier call with the same
	// ID; this call applied it.
	Resumed bool
}

// EdgeEndpointError says why one end of a dependency edge cannot take part
// in it. It unwraps to ErrExecutionNotFound, ErrExecutionNotInFlow or
// ErrAlreadyMemberOfDifferentFlow.
type EdgeEndpointError struct {
	Side      string // "upstream" or "downstream"
	Execution keys.ExecutionID
	Flow      keys.FlowID // the flow the edge was meant for
	OtherFlow string      // the owning flow, for ErrAlreadyMemberOfDifferentFlow
	Err       error
}

func (e *EdgeEndpointError) Error() string {
	if e.OtherFlow != "" {
		return fmt.Sprintf("client: %s %s belongs to flow %s, not %s: %v", e.Side, e.Execution, e.OtherFlow, e.Flow, e.Err)
	}
	return fmt.Sprintf("client: %s %s of flow %s: %v", e.Side, e.Execution, e.Flow, e.Err)
}

// Unwrap returns the sentinel.
func (e *EdgeEndpointError) Unwrap() error { return e.Err }

// AddDependency adds the edge Upstream -> Downstream to a flow: it stages
// the edge in the flow graph at the current graph revision
// (ff_stage_dependency_edge) and then applies it to the child
// (ff_apply_dependency_to_child), which blocks a waiting child until the
// edge resolves. If the graph changed between the read and the stage
// (stale_graph_revision), the revision is read again and the stage retried
// once.
//
// Nothing is written when the edge is refused. Refusals are typed:
// *EdgeEndpointError for an unknown execution (ErrExecutionNotFound), a
// non-member (ErrExecutionNotInFlow) or a member of another flow
// (ErrAlreadyMemberOfDifferentFlow); and the library's own codes
// ErrSelfReferencingEdge, ErrCycleDetected, ErrDependencyAlreadyExists,
// ErrStaleGraphRevision (after the retry), ErrFlowNotFound and
// ErrFlowAlreadyTerminal.
//
// now_ms of both calls is the server's clock (TIME), like every time the
// client stores.
func (c *Client) AddDependency(ctx context.Context, req DependencyRequest) (DependencyResult, error) {
	if req.Upstream.IsZero() {
		return DependencyResult{}, invalid("Upstream", "zero execution id")
	}
	if req.Downstream.IsZero() {
		return DependencyResult{}, invalid("Downstream", "zero execution id")
	}
	if req.Kind == "" {
		req.Kind = DependencySuccessOnly
	}
	if err := validateText("Kind", req.Kind, true, 256); err != nil {
		return DependencyResult{}, err
	}
	if err := validateText("DataRef", req.DataRef, false, 1024); err != nil {
		return DependencyResult{}, err
	}
	callerID := !req.ID.IsZero()
	if !callerID {
		req.ID = keys.NewUUID()
	}

	pre, err := c.readEdgeEnds(ctx, req, callerID)
	if err != nil {
		return DependencyResult{}, err
	}
	stage := c.stageCall(req, pre.revision, pre.now)
	r, err := c.call(ctx, stage)
	if errors.Is(err, ErrStaleGraphRevision) {
		rev, rerr := c.graphRevision(ctx, req.Flow)
		if rerr != nil {
			return DependencyResult{}, rerr
		}
		r, err = c.call(ctx, c.stageCall(req, rev, pre.now))
	}
	out := DependencyResult{ID: req.ID}
	switch {
	case err == nil:
		out.GraphRevision = fieldInt64(r.field(1))
	case errors.Is(err, ErrDependencyAlreadyExists) && callerID:
		rev, rerr := c.sameStagedEdge(ctx, req)
		if rerr != nil {
			return DependencyResult{}, errors.Join(err, rerr)
		}
		out.GraphRevision, out.Resumed = rev, true
	default:
		return DependencyResult{}, err
	}

	a, err := c.call(ctx, c.applyCall(req, pre.lane, strconv.FormatInt(out.GraphRevision, 10), pre.now))
	if err != nil {
		return out, fmt.Errorf("client: edge %s is staged in flow %s but was not applied to %s (retry AddDependency with the same ID): %w", req.ID, req.Flow, req.Downstream, err)
	}
	if a.field(0) == "already_applied" {
		out.AlreadyApplied = true
		out.Resumed = false
		return out, nil
	}
	out.Unresolved = fieldInt64(a.field(0))
	return out, nil
}

// edgeEnds is what AddDependency reads before staging.
type edgeEnds struct {
	revision string // graph_revision, verbatim (the library compares strings)
	lane     string // the child's lane, for its eligible/blocked index keys
	now      string // server time, ms
}

// readEdgeEnds reads the flow, both executions and the server clock in one
// round trip and turns every refusal it can see into a typed error, so the
// caller learns which end is wrong; the library re-checks all of it.
func (c *Client) readEdgeEnds(ctx context.Context, req DependencyRequest, callerID bool) (edgeEnds, error) {
	fk := keys.Flow(c.parts, req.Flow)
	res := c.vk.DoMulti(ctx,
		c.vk.B().Hmget().Key(fk.Core()).Field("flow_id", "public_flow_state", "graph_revision").Build(),
		c.vk.B().Hmget().Key(keys.Exec(req.Upstream).Core()).Field("execution_id", "flow_id").Build(),
		c.vk.B().Hmget().Key(keys.Exec(req.Downstream).Core()).Field("execution_id", "flow_id", "lane_id", "current_lane").Build(),
		c.vk.B().Time().Build(),
		c.vk.B().Sinter().Key(fk.Out(req.Upstream), fk.In(req.Downstream)).Build())
	var out edgeEnds
	flow, err := arrayStrings(res[0])
	if err != nil {
		return out, fmt.Errorf("client: read flow %s: %w", req.Flow, err)
	}
	switch {
	case flow[0] == "":
		return out, fmt.Errorf("client: flow %s: %w", req.Flow, ErrFlowNotFound)
	case flowTerminal(flow[1]):
		return out, fmt.Errorf("client: flow %s is %s: %w", req.Flow, flow[1], ErrFlowAlreadyTerminal)
	}
	out.revision = flow[2]
	if out.now, err = timeReplyMillis(res[3]); err != nil {
		return out, err
	}
	if req.Upstream == req.Downstream {
		return out, nil // the library answers self_referencing_edge
	}
	for i, end := range []struct {
		side string
		id   keys.ExecutionID
	}{{"upstream", req.Upstream}, {"downstream", req.Downstream}} {
		core, err := arrayStrings(res[1+i])
		if err != nil {
			return out, fmt.Errorf("client: read %s %s: %w", end.side, end.id, err)
		}
		if err := c.checkEdgeEnd(req.Flow, end.side, end.id, core[0], core[1]); err != nil {
			return out, err
		}
		if i == 1 {
			out.lane = coreLane(core[2], core[3])
		}
	}
	// The library refuses only a reused edge id; a second edge between the
	// same two executions would make the child wait on both. The client
	// refuses it, except for a retry of the same edge.
	existing, err := res[4].AsStrSlice()
	if err != nil {
		return out, fmt.Errorf("client: read edges between %s and %s: %w", req.Upstream, req.Downstream, err)
	}
	for _, e := range existing {
		if !callerID || e != req.ID.String() {
			return out, fmt.Errorf("client: flow %s already has edge %s from %s to %s: %w", req.Flow, e, req.Upstream, req.Downstream, ErrDependencyAlreadyExists)
		}
	}
	return out, nil
}

func (c *Client) checkEdgeEnd(fid keys.FlowID, side string, id keys.ExecutionID, eid, flowID string) error {
	e := &EdgeEndpointError{Side: side, Execution: id, Flow: fid}
	switch {
	case eid == "":
		e.Err = ErrExecutionNotFound
	case flowID == "":
		e.Err = ErrExecutionNotInFlow
	case flowID != fid.String():
		e.Err, e.OtherFlow = ErrAlreadyMemberOfDifferentFlow, flowID
	case id.Partition() != c.parts.FlowPartition(fid):
		return invalid(side, "%s is a member of flow %s but lives in %s, not the flow's %s; edges across slots are not supported", id, fid, id.Partition(), c.parts.FlowPartition(fid))
	default:
		return nil
	}
	return e
}

// graphRevision re-reads a flow's graph_revision after a stale stage.
func (c *Client) graphRevision(ctx context.Context, fid keys.FlowID) (string, error) {
	rev, err := c.vk.Do(ctx, c.vk.B().Hget().Key(keys.Flow(c.parts, fid).Core()).Field("graph_revision").Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return "", fmt.Errorf("client: flow %s: %w", fid, ErrFlowNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("client: read graph revision of flow %s: %w", fid, err)
	}
	return rev, nil
}

// sameStagedEdge checks that an existing edge with the caller's id is the
// one the caller asks for, and returns the current graph revision for the
// apply (deps_meta records it).
func (c *Client) sameStagedEdge(ctx context.Context, req DependencyRequest) (int64, error) {
	fk := keys.Flow(c.parts, req.Flow)
	res := c.vk.DoMulti(ctx,
		c.vk.B().Hmget().Key(fk.Edge(req.ID)).Field("upstream_execution_id", "downstream_execution_id", "dependency_kind", "data_passing_ref").Build(),
		c.vk.B().Hget().Key(fk.Core()).Field("graph_revision").Build())
	edge, err := arrayStrings(res[0])
	if err != nil {
		return 0, fmt.Errorf("client: read edge %s: %w", req.ID, err)
	}
	if edge[0] != req.Upstream.String() || edge[1] != req.Downstream.String() || edge[2] != req.Kind || edge[3] != req.DataRef {
		return 0, fmt.Errorf("client: edge %s exists with other ends or options (%s -> %s, kind %q, data_ref %q)", req.ID, edge[0], edge[1], edge[2], edge[3])
	}
	rev, err := res[1].ToString()
	if err != nil {
		return 0, fmt.Errorf("client: read graph revision of flow %s: %w", req.Flow, err)
	}
	return fieldInt64(rev), nil
}

// stageCall builds ff_stage_dependency_edge: KEYS (6) flow core, members,
// edge, out(upstream), in(downstream), grant (never used by the library);
// ARGV (8) fid, edge_id, upstream, downstream, kind, data_ref,
// expected_revision, now_ms.
func (c *Client) stageCall(req DependencyRequest, revision, now string) lua.Call {
	fk := keys.Flow(c.parts, req.Flow)
	return lua.Call{
		Function: "ff_stage_dependency_edge",
		Keys: []string{fk.Core(), fk.Members(), fk.Edge(req.ID), fk.Out(req.Upstream), fk.In(req.Downstream),
			fk.Grant(req.ID)},
		Args: []string{req.Flow.String(), req.ID.String(), req.Upstream.String(), req.Downstream.String(),
			req.Kind, req.DataRef, revision, now},
	}
}

// applyCall builds ff_apply_dependency_to_child: KEYS (8) child core,
// deps_meta, deps_unresolved, dep(edge), lane eligible, lane
// blocked:dependencies, deps_all_edges, flow edgegroup(child); ARGV (7)
// fid, edge_id, upstream, graph_revision, kind, data_ref, now_ms.
func (c *Client) applyCall(req DependencyRequest, lane, revision, now string) lua.Call {
	ek, pk, fk := keys.Exec(req.Downstream), keys.FlowPart(req.Downstream.Partition()), keys.Flow(c.parts, req.Flow)
	return lua.Call{
		Function: "ff_apply_dependency_to_child",
		Keys: []string{ek.Core(), ek.DepsMeta(), ek.DepsUnresolved(), ek.Dep(req.ID), pk.LaneEligible(lane),
			pk.LaneBlockedDependencies(lane), ek.DepsAllEdges(), fk.EdgeGroup(req.Downstream)},
		Args: []string{req.Flow.String(), req.ID.String(), req.Upstream.String(), revision, req.Kind, req.DataRef, now},
	}
}
