package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/valkey-io/valkey-go"
)

// DefaultFlowKind is the flow_kind of a flow created without a Kind.
const DefaultFlowKind = "dag"

// DependencySuccessOnly is FlowFabric's default dependency_kind: the child
// may run only if the upstream succeeded. The library stores the kind but
// does not interpret it (every edge behaves as success-only).
const DependencySuccessOnly = "success_only"

// CreateFlowRequest describes a flow (a DAG container) to create.
type CreateFlowRequest struct {
	// ID is a caller-chosen flow id; zero mints one. A flow and all its
	// members live on the partition CRC16(raw id) mod the flow count.
	ID        keys.FlowID
	Namespace string // default: the client's namespace
	Kind      string // free form; default DefaultFlowKind
}

// CreateFlowResult is the outcome of CreateFlow.
type CreateFlowResult struct {
	ID      keys.FlowID
	Existed bool // a flow with this id existed; nothing was changed
}

// CreateFlow creates an empty, open flow with one ff_create_flow.
// Creating an existing id is not an error: Existed is set.
func (c *Client) CreateFlow(ctx context.Context, req CreateFlowRequest) (CreateFlowResult, error) {
	ns, kind := req.Namespace, req.Kind
	if ns == "" {
		ns = c.ns
	}
	if kind == "" {
		kind = DefaultFlowKind
	}
	if err := validateText("Namespace", ns, true, 256); err != nil {
		return CreateFlowResult{}, err
	}
	if err := validateText("Kind", kind, true, 256); err != nil {
		return CreateFlowResult{}, err
	}
	fid := req.ID
	if fid.UUID().IsZero() {
		fid = keys.NewFlowID()
	}
	fk := keys.Flow(c.parts, fid)
	r, err := c.call(ctx, lua.Call{
		Function: "ff_create_flow",
		Keys:     []string{fk.Core(), fk.Members(), keys.FlowPart(c.parts.FlowPartition(fid)).FlowIndex()},
		Args:     []string{fid.String(), kind, ns, nowMillis()},
	})
	if err != nil {
		return CreateFlowResult{}, err
	}
	switch r.Status {
	case StatusOK:
		return CreateFlowResult{ID: fid}, nil
	case StatusAlreadySatisfied:
		return CreateFlowResult{ID: fid, Existed: true}, nil
	}
	return CreateFlowResult{}, fmt.Errorf("ff_create_flow: %w: status %q", ErrUnexpectedReply, r.Status)
}

// AddMemberResult is the outcome of AddFlowMember.
type AddMemberResult struct {
	NodeCount     int64 // the flow's node_count after the call
	AlreadyMember bool  // the execution was a member already; nothing changed
}

// AddFlowMember adds an execution created elsewhere to a flow. To create a
// member directly, use CreateExecution with CreateRequest.Flow, which mints
// the id in the flow's partition.
//
// The execution must live in the flow's partition: every call that later
// touches the execution and the flow together (edges, resolution, cancel)
// is one FCALL, and FCALL keys must share a slot. FlowFabric does not check
// this and such a flow works only on a single node; the client refuses it
// with a *ValidationError before writing anything.
//
// Errors from the library are typed: ErrFlowNotFound,
// ErrFlowAlreadyTerminal, ErrExecutionNotFound and *DifferentFlowError
// (errors.Is(err, ErrAlreadyMemberOfDifferentFlow)) naming the owning flow.
func (c *Client) AddFlowMember(ctx context.Context, fid keys.FlowID, id keys.ExecutionID) (AddMemberResult, error) {
	if id.IsZero() {
		return AddMemberResult{}, invalid("id", "zero execution id")
	}
	if want := c.parts.FlowPartition(fid); id.Partition() != want {
		return AddMemberResult{}, invalid("id", "%s is in %s but flow %s lives in %s; a member must share its flow's partition", id, id.Partition(), fid, want)
	}
	r, err := c.call(ctx, c.addToFlowCall(fid, id))
	if err != nil {
		return AddMemberResult{}, err
	}
	n, _ := strconv.ParseInt(r.field(1), 10, 64)
	switch r.Status {
	case StatusOK:
		return AddMemberResult{NodeCount: n}, nil
	case StatusAlreadySatisfied:
		return AddMemberResult{NodeCount: n, AlreadyMember: true}, nil
	}
	return AddMemberResult{}, fmt.Errorf("ff_add_execution_to_flow: %w: status %q", ErrUnexpectedReply, r.Status)
}

// FlowSnapshot is a flow's record (flow_core) plus set sizes, read in one
// round trip.
type FlowSnapshot struct {
	ID            keys.FlowID
	Namespace     string
	Kind          string
	State         string // public_flow_state: open or cancelled (the library writes no other)
	GraphRevision int64  // +1 per member added and per edge staged
	NodeCount     int64
	EdgeCount     int64
	CreatedAt     time.Time
	LastMutation  time.Time

	// Set by CancelFlow.
	CancelledAt        time.Time
	CancelReason       string
	CancellationPolicy CancelPolicy

	MemberCount    int64 // SCARD of the members set
	PendingCancels int64 // members whose cancel is still owed (cancel_all)
}

// ReadFlow reads a flow's record and the sizes of its member and
// pending-cancel sets. A missing flow is ErrFlowNotFound.
func (c *Client) ReadFlow(ctx context.Context, fid keys.FlowID) (FlowSnapshot, error) {
	fk := keys.Flow(c.parts, fid)
	res := c.vk.DoMulti(ctx,
		c.vk.B().Hgetall().Key(fk.Core()).Build(),
		c.vk.B().Scard().Key(fk.Members()).Build(),
		c.vk.B().Scard().Key(fk.PendingCancels()).Build())
	core, err := res[0].AsStrMap()
	if err != nil {
		return FlowSnapshot{}, fmt.Errorf("client: read flow %s: %w", fid, err)
	}
	if len(core) == 0 {
		return FlowSnapshot{}, fmt.Errorf("client: flow %s: %w", fid, ErrFlowNotFound)
	}
	members, err := res[1].AsInt64()
	if err != nil {
		return FlowSnapshot{}, fmt.Errorf("client: read flow %s members: %w", fid, err)
	}
	pending, err := res[2].AsInt64()
	if err != nil {
		return FlowSnapshot{}, fmt.Errorf("client: read flow %s pending cancels: %w", fid, err)
	}
	return FlowSnapshot{
		ID:                 fid,
		Namespace:          core["namespace"],
		Kind:               core["flow_kind"],
		State:              core["public_flow_state"],
		GraphRevision:      fieldInt64(core["graph_revision"]),
		NodeCount:          fieldInt64(core["node_count"]),
		EdgeCount:          fieldInt64(core["edge_count"]),
		CreatedAt:          msTime(core["created_at"]),
		LastMutation:       msTime(core["last_mutation_at"]),
		CancelledAt:        msTime(core["cancelled_at"]),
		CancelReason:       core["cancel_reason"],
		CancellationPolicy: CancelPolicy(core["cancellation_policy"]),
		MemberCount:        members,
		PendingCancels:     pending,
	}, nil
}

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

// CancelPolicy is a flow's cancellation_policy.
type CancelPolicy string

// Cancellation policies, as the library stores them.
const (
	// CancelAll cancels every member: ff_cancel_flow queues every member in
	// the flow's pending_cancels and the flow in its partition's
	// cancel_backlog (due after the grace window), for the cancel
	// reconciler or DrainFlowCancels.
	CancelAll CancelPolicy = "cancel_all"
	// CancelPending records the policy; the library queues nothing. With
	// CancelFlowOptions.Wait the client cancels the members that are not
	// running (lifecycle runnable) and leaves running ones to finish.
	CancelPending CancelPolicy = "cancel_pending"
	// CancelFlowOnly marks the flow cancelled (no new members or edges)
	// and leaves every member alone.
	CancelFlowOnly CancelPolicy = "flow_only"
)

// DefaultCancelGrace is the library's grace window when none is given:
// the cancel reconciler leaves a cancelled flow to its primary dispatch for
// this long.
const DefaultCancelGrace = 30 * time.Second

// Member cancels issued for a cancelled flow: source flow_cascade (the
// library then publishes no completion, so the push path does not race the
// cancel by skipping children that are being cancelled anyway) and the
// reason FlowFabric's dispatcher stores.
const (
	flowCancelSource   = "flow_cascade"
	flowCancelReason   = "flow_cancelled"
	overrideSource     = "operator_override"
	drainBatch         = 500
	maxDrainErrorsKept = 8
)

// CancelFlowOptions tune CancelFlow.
type CancelFlowOptions struct {
	Reason string       // stored as the flow's cancel_reason
	Policy CancelPolicy // default CancelAll

	// Grace is how long the cancel reconciler waits before it takes over
	// the member cancels of a CancelAll flow. nil: the library default
	// (DefaultCancelGrace). Whole milliseconds, 0 or more.
	Grace *time.Duration

	// Wait makes CancelFlow cancel the members itself before it returns
	// (CancelAll: every pending member, each acknowledged; CancelPending:
	// the members that are not running). Without Wait the call returns as
	// soon as the flow is marked cancelled and the member cancels are left
	// to the cancel reconciler once the grace window has passed (or to
	// DrainFlowCancels).
	Wait bool
}

// CancelFlowResult is the outcome of CancelFlow.
type CancelFlowResult struct {
	Policy  CancelPolicy
	Members []keys.ExecutionID // every member at cancel time (set order)
	// Drain is what Wait did (nil without Wait).
	Drain *DrainResult
}

// CancelFlow marks a flow cancelled with one ff_cancel_flow and, with
// opts.Wait, cancels its members before returning. A missing flow is
// ErrFlowNotFound, an already cancelled one ErrFlowAlreadyTerminal.
//
// With Wait, an error is returned when a member could not be cancelled
// (Drain says how many); the flow stays cancelled and the members left
// stay queued for the cancel reconciler.
func (c *Client) CancelFlow(ctx context.Context, fid keys.FlowID, opts CancelFlowOptions) (CancelFlowResult, error) {
	if opts.Policy == "" {
		opts.Policy = CancelAll
	}
	switch opts.Policy {
	case CancelAll, CancelPending, CancelFlowOnly:
	default:
		return CancelFlowResult{}, invalid("Policy", "%q is not one of cancel_all, cancel_pending, flow_only", opts.Policy)
	}
	if err := validateText("Reason", opts.Reason, false, c.limits.MaxReasonBytes); err != nil {
		return CancelFlowResult{}, err
	}
	grace := ""
	if opts.Grace != nil {
		g := *opts.Grace
		if g < 0 || g%time.Millisecond != 0 {
			return CancelFlowResult{}, invalid("Grace", "%v must be whole milliseconds, 0 or more", g)
		}
		grace = strconv.FormatInt(g.Milliseconds(), 10)
	}
	fk, pk := keys.Flow(c.parts, fid), keys.FlowPart(c.parts.FlowPartition(fid))
	r, err := c.call(ctx, lua.Call{
		Function: "ff_cancel_flow",
		Keys:     []string{fk.Core(), fk.Members(), pk.FlowIndex(), fk.PendingCancels(), pk.CancelBacklog()},
		Args:     []string{fid.String(), opts.Reason, string(opts.Policy), nowMillis(), grace},
	})
	if err != nil {
		return CancelFlowResult{}, err
	}
	out := CancelFlowResult{Policy: CancelPolicy(r.field(0))}
	for _, m := range r.Fields[min(1, len(r.Fields)):] {
		if id, perr := keys.ParseExecutionID(m); perr == nil {
			out.Members = append(out.Members, id)
		}
	}
	if !opts.Wait {
		return out, nil
	}
	switch opts.Policy {
	case CancelAll:
		d, err := c.DrainFlowCancels(ctx, fid)
		out.Drain = &d
		return out, err
	case CancelPending:
		var d DrainResult
		c.cancelMembers(ctx, fid, out.Members, memberCancel{onlyRunnable: true}, &d)
		out.Drain = &d
		return out, d.err()
	}
	return out, nil
}

// DrainResult counts what a member-cancel pass did.
type DrainResult struct {
	Cancelled       int // cancelled now
	AlreadyTerminal int // had ended on its own (execution_not_active): done
	NotFound        int // no such execution (execution_not_found, or an unparsable id): done
	Skipped         int // running members CancelPending leaves alone
	Failed          int // could not be cancelled or acknowledged; still pending
	Remaining       int64
	Errors          []error // the first few failures
}

func (d *DrainResult) fail(err error) {
	d.Failed++
	if len(d.Errors) < maxDrainErrorsKept {
		d.Errors = append(d.Errors, err)
	}
}

func (d *DrainResult) err() error {
	if d.Failed == 0 {
		return nil
	}
	return fmt.Errorf("client: %d member cancel(s) failed: %w", d.Failed, errors.Join(d.Errors...))
}

// DrainFlowCancels does the member cancels owed by a CancelAll flow now,
// the same work the cancel reconciler does after the grace window: for
// each member in the flow's pending_cancels it reads the member's core (its
// lane, attempt, waitpoint and worker decide the keys), cancels it with
// ff_cancel_execution and acknowledges it with ff_ack_cancel_member, which
// also removes the flow from the cancel backlog with the last member.
//
// A member that already ended (execution_not_active) or no longer exists
// (execution_not_found) is done and acknowledged too; only transport
// errors and other refusals leave a member pending (Failed, and an error
// is returned). Work is pipelined in batches: one round trip for the core
// reads, one for the cancels and one for the acknowledgements.
func (c *Client) DrainFlowCancels(ctx context.Context, fid keys.FlowID) (DrainResult, error) {
	var d DrainResult
	fk := keys.Flow(c.parts, fid)
	members, err := c.sscanAll(ctx, fk.PendingCancels())
	if err != nil {
		return d, fmt.Errorf("client: read pending cancels of flow %s: %w", fid, err)
	}
	var ids []keys.ExecutionID
	var invalidIDs []string
	for _, m := range members {
		if id, perr := keys.ParseExecutionID(m); perr == nil {
			ids = append(ids, id)
		} else {
			invalidIDs = append(invalidIDs, m)
		}
	}
	// An id that does not parse can never be cancelled; acknowledge it so
	// it does not keep the flow in the backlog forever.
	d.NotFound += c.ackMembers(ctx, fid, invalidIDs, &d)
	c.cancelMembers(ctx, fid, ids, memberCancel{ack: true}, &d)
	d.Remaining, err = c.vk.Do(ctx, c.vk.B().Scard().Key(fk.PendingCancels()).Build()).AsInt64()
	if err != nil {
		d.fail(fmt.Errorf("client: count pending cancels of flow %s: %w", fid, err))
	}
	return d, d.err()
}

type memberCancel struct {
	ack          bool // acknowledge done members in pending_cancels
	onlyRunnable bool // leave members that are not runnable alone
}

// memberCoreFields are read to build ff_cancel_execution's KEYS from the
// member's real state.
var memberCoreFields = []string{"execution_id", "lane_id", "current_lane", "current_attempt_index",
	"current_waitpoint_id", "current_worker_instance_id", "lifecycle_phase"}

// cancelMembers cancels members in batches and, with opts.ack,
// acknowledges each one that is done.
func (c *Client) cancelMembers(ctx context.Context, fid keys.FlowID, ids []keys.ExecutionID, opts memberCancel, d *DrainResult) {
	for start := 0; start < len(ids); start += drainBatch {
		batch := ids[start:min(start+drainBatch, len(ids))]
		reads := make(valkey.Commands, len(batch))
		for i, id := range batch {
			reads[i] = c.vk.B().Hmget().Key(keys.Exec(id).Core()).Field(memberCoreFields...).Build()
		}
		var done []string
		var calls []lua.Call
		var callIDs []keys.ExecutionID
		for i, res := range c.vk.DoMulti(ctx, reads...) {
			id := batch[i]
			f, err := arrayStrings(res)
			switch {
			case err != nil:
				d.fail(fmt.Errorf("read member %s: %w", id, err))
			case f[0] == "":
				d.NotFound++
				done = append(done, id.String())
			case opts.onlyRunnable && f[6] != "runnable":
				d.Skipped++
			default:
				core := map[string]string{"lane_id": coreLane(f[1], f[2]), "current_attempt_index": f[3],
					"current_waitpoint_id": f[4], "current_worker_instance_id": f[5]}
				calls = append(calls, cancelCall(id, core, flowCancelReason, flowCancelSource, "", ""))
				callIDs = append(callIDs, id)
			}
		}
		var retry []lua.Call
		var retryIDs []keys.ExecutionID
		for i, res := range c.lib.DoMulti(ctx, calls...) {
			id := callIDs[i]
			if errors.Is(replyErr(calls[i].Function, res), ErrLeaseRevoked) {
				// flow_cascade is refused on a revoked lease; an operator
				// override cancels it (and publishes its completion).
				call := calls[i]
				call.Args = append([]string(nil), call.Args...)
				call.Args[2] = overrideSource
				retry, retryIDs = append(retry, call), append(retryIDs, id)
				continue
			}
			if c.classifyMemberCancel(id, calls[i].Function, res, d) {
				done = append(done, id.String())
			}
		}
		for i, res := range c.lib.DoMulti(ctx, retry...) {
			if c.classifyMemberCancel(retryIDs[i], retry[i].Function, res, d) {
				done = append(done, retryIDs[i].String())
			}
		}
		if opts.ack {
			c.ackMembers(ctx, fid, done, d)
		}
	}
}

// classifyMemberCancel counts one member cancel and reports whether the
// member is done. FlowFabric's Valkey path treated already-terminal and
// missing members as transient (pitfall P6); here the Lua code decides.
func (c *Client) classifyMemberCancel(id keys.ExecutionID, function string, res valkey.ValkeyResult, d *DrainResult) bool {
	err := replyErr(function, res)
	switch {
	case err == nil:
		d.Cancelled++
	case errors.Is(err, ErrExecutionNotActive):
		d.AlreadyTerminal++
	case errors.Is(err, ErrExecutionNotFound):
		d.NotFound++
	default:
		d.fail(fmt.Errorf("cancel member %s: %w", id, err))
		return false
	}
	return true
}

func replyErr(function string, res valkey.ValkeyResult) error {
	_, err := parseReply(function, res)
	return err
}

// ackMembers acknowledges members with ff_ack_cancel_member, pipelined,
// and returns how many were acknowledged. A failed acknowledgement leaves
// the member pending (it is retried by the next drain or by the cancel
// reconciler, and cancelling it again is harmless).
func (c *Client) ackMembers(ctx context.Context, fid keys.FlowID, members []string, d *DrainResult) int {
	if len(members) == 0 {
		return 0
	}
	acked := 0
	fk, pk := keys.Flow(c.parts, fid), keys.FlowPart(c.parts.FlowPartition(fid))
	calls := make([]lua.Call, len(members))
	for i, m := range members {
		calls[i] = lua.Call{
			Function: "ff_ack_cancel_member",
			Keys:     []string{fk.PendingCancels(), pk.CancelBacklog()},
			Args:     []string{m, fid.String()},
		}
	}
	for i, res := range c.lib.DoMulti(ctx, calls...) {
		if err := replyErr(calls[i].Function, res); err != nil {
			d.fail(fmt.Errorf("acknowledge member %s: %w", members[i], err))
			continue
		}
		acked++
	}
	return acked
}

// sscanAll reads a whole set with SSCAN (no single huge reply), without
// duplicates.
func (c *Client) sscanAll(ctx context.Context, key string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	var cursor uint64
	for {
		e, err := c.vk.Do(ctx, c.vk.B().Sscan().Key(key).Cursor(cursor).Count(drainBatch).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		for _, m := range e.Elements {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
		if e.Cursor == 0 {
			return out, nil
		}
		cursor = e.Cursor
	}
}

// coreLane is the lane the library uses for an execution's index keys:
// lane_id, then current_lane, then "default" (H.core_lane). It is only
// applied to fields that were read successfully from an existing core.
func coreLane(laneID, currentLane string) string {
	switch {
	case laneID != "":
		return laneID
	case currentLane != "":
		return currentLane
	}
	return "default"
}

// arrayStrings reads an array reply (e.g. HMGET) as strings; nil
// elements become "".
func arrayStrings(res valkey.ValkeyResult) ([]string, error) {
	arr, err := res.ToArray()
	if err != nil {
		return nil, err
	}
	return messageStrings(arr)
}

// timeReplyMillis reads a TIME reply as decimal milliseconds.
func timeReplyMillis(res valkey.ValkeyResult) (string, error) {
	t, err := res.AsStrSlice()
	if err != nil || len(t) != 2 {
		return "", fmt.Errorf("client: TIME: %w", errors.Join(err, ErrUnexpectedReply))
	}
	s, err1 := strconv.ParseInt(t[0], 10, 64)
	us, err2 := strconv.ParseInt(t[1], 10, 64)
	if err1 != nil || err2 != nil {
		return "", fmt.Errorf("client: TIME: %w: %q", ErrUnexpectedReply, t)
	}
	return strconv.FormatInt(s*1000+us/1000, 10), nil
}

// serverNowMillis reads the server clock (TIME) in ms.
func (c *Client) serverNowMillis(ctx context.Context) (string, error) {
	return timeReplyMillis(c.vk.Do(ctx, c.vk.B().Time().Build()))
}

func fieldInt64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
