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
