package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/valkey-io/valkey-go"
)

// DefaultIdempotencyTTL is how long an idempotency key is remembered when
// CreateRequest.IdempotencyTTL is zero (FlowFabric's caller sends 24 h).
const DefaultIdempotencyTTL = 24 * time.Hour

// CreateRequest describes one execution to create.
type CreateRequest struct {
	// ID is a caller-chosen id (deterministic mint). Zero mints a fresh id
	// in the lane's partition, or in the flow's when Flow is set.
	ID keys.ExecutionID
	// Flow makes the execution a member of an existing flow. Its id is
	// then minted in the flow's partition so both share a cluster slot.
	Flow *keys.FlowID

	Lane      string // required; FlowFabric's lane rules (section 2)
	Namespace string // default: the client's namespace
	Kind      string // free-form execution kind, handed to the worker
	Priority  int    // MinPriority..MaxPriority, higher first
	Payload   []byte // input handed to the worker
	Tags      map[string]string

	// Delay or DelayUntil (not both) make the execution eligible later.
	Delay      time.Duration
	DelayUntil time.Time
	// Deadline is the absolute time after which the execution expires.
	Deadline time.Time

	Retry                *RetryPolicy  // nil: a failure is terminal
	AttemptTimeout       time.Duration // per attempt, armed at claim; 0: none
	MaxReclaims          int           // lease-expiry reclaims before failing; 0: library default (100)
	RequiredCapabilities []string      // tokens a worker must advertise

	// IdempotencyKey makes a repeated create return the first execution
	// (Duplicate) instead of creating another. Scope: one partition, as
	// in FlowFabric (for solo executions that is the lane's partition).
	IdempotencyKey string
	IdempotencyTTL time.Duration // default DefaultIdempotencyTTL
}

// CreateResult is the outcome of CreateExecution.
type CreateResult struct {
	ID          keys.ExecutionID
	Duplicate   bool   // an execution with this id or idempotency key existed
	PublicState string // waiting or delayed for a fresh execution; "" on Duplicate
}

// prepared is a validated CreateRequest, ready to become KEYS/ARGV.
type prepared struct {
	id        keys.ExecutionID
	ns        string
	tagsJSON  string
	policy    string
	delayMs   int64
	deadline  int64
	idemTTLms int64
}

// CreateExecution validates the request and creates the execution with one
// ff_create_execution (plus ff_add_execution_to_flow in the same round trip
// for a flow member). Nothing is written when validation fails.
func (c *Client) CreateExecution(ctx context.Context, req CreateRequest) (CreateResult, error) {
	p, err := c.prepare(req, time.Now())
	if err != nil {
		return CreateResult{}, err
	}
	create := c.createCall(req, p)
	if req.Flow == nil {
		r, err := c.call(ctx, create)
		if err != nil {
			return CreateResult{}, err
		}
		return createResult(p.id, r)
	}
	return c.createInFlow(ctx, *req.Flow, p, create)
}

func (c *Client) prepare(req CreateRequest, now time.Time) (prepared, error) {
	p := prepared{id: req.ID, ns: req.Namespace}
	if p.ns == "" {
		p.ns = c.ns
	}
	if err := validateLane("Lane", req.Lane); err != nil {
		return p, err
	}
	if err := validateText("Namespace", p.ns, true, 256); err != nil {
		return p, err
	}
	if err := validateText("Kind", req.Kind, false, 256); err != nil {
		return p, err
	}
	if err := validatePriority("Priority", req.Priority); err != nil {
		return p, err
	}
	if len(req.Payload) > c.limits.MaxPayloadBytes {
		return p, invalid("Payload", "%d bytes, at most %d allowed", len(req.Payload), c.limits.MaxPayloadBytes)
	}
	tags, err := c.tagsJSON(req.Tags)
	if err != nil {
		return p, err
	}
	p.tagsJSON = tags
	if p.delayMs, err = delayMillis(req.Delay, req.DelayUntil, now); err != nil {
		return p, err
	}
	if !req.Deadline.IsZero() {
		if !req.Deadline.After(now) {
			return p, invalid("Deadline", "%v is not in the future", req.Deadline)
		}
		p.deadline = req.Deadline.UnixMilli()
	}
	if p.policy, err = c.policyJSON(req); err != nil {
		return p, err
	}
	if err := c.prepareIdempotency(req, &p); err != nil {
		return p, err
	}
	return p, c.prepareID(req, &p)
}

func delayMillis(d time.Duration, until, now time.Time) (int64, error) {
	switch {
	case d != 0 && !until.IsZero():
		return 0, invalid("Delay", "set either Delay or DelayUntil, not both")
	case d < 0:
		return 0, invalid("Delay", "%v is negative", d)
	case d > 0:
		return now.Add(d).UnixMilli(), nil
	case !until.IsZero():
		return until.UnixMilli(), nil
	}
	return 0, nil
}

func (c *Client) prepareIdempotency(req CreateRequest, p *prepared) error {
	if req.IdempotencyKey == "" {
		if req.IdempotencyTTL != 0 {
			return invalid("IdempotencyTTL", "set without an IdempotencyKey")
		}
		return nil
	}
	if err := validateText("IdempotencyKey", req.IdempotencyKey, true, c.limits.MaxIdempotencyKeyBytes); err != nil {
		return err
	}
	ttl := req.IdempotencyTTL
	if ttl == 0 {
		ttl = DefaultIdempotencyTTL
	}
	if ttl < time.Millisecond {
		return invalid("IdempotencyTTL", "%v is below 1ms", ttl)
	}
	p.idemTTLms = ttl.Milliseconds()
	return nil
}

// prepareID mints the id or checks a caller's: a flow member must live in
// its flow's partition, or the create and the membership FCALLs would span
// two slots.
func (c *Client) prepareID(req CreateRequest, p *prepared) error {
	if req.Flow != nil {
		want := c.parts.FlowPartition(*req.Flow)
		if p.id.IsZero() {
			p.id = keys.NewExecutionIDForFlow(c.parts, *req.Flow)
		} else if p.id.Partition() != want {
			return invalid("ID", "%s is in %s but flow %s lives in %s", p.id, p.id.Partition(), req.Flow, want)
		}
		return nil
	}
	if p.id.IsZero() {
		p.id = keys.NewSoloExecutionID(c.parts, req.Lane)
	}
	return nil
}

func (c *Client) tagsJSON(tags map[string]string) (string, error) {
	if len(tags) == 0 {
		return "", nil
	}
	if len(tags) > c.limits.MaxTags {
		return "", invalid("Tags", "%d tags, at most %d allowed", len(tags), c.limits.MaxTags)
	}
	total := 0
	for k, v := range tags {
		if err := validateText(fmt.Sprintf("Tags[%q]", k), k, true, 256); err != nil {
			return "", err
		}
		// JSON would silently replace invalid UTF-8 with U+FFFD.
		if err := validateText(fmt.Sprintf("Tags[%q]", k), v, false, c.limits.MaxTagBytes); err != nil {
			return "", err
		}
		total += len(k) + len(v)
	}
	if total > c.limits.MaxTagBytes {
		return "", invalid("Tags", "%d bytes of keys and values, at most %d allowed", total, c.limits.MaxTagBytes)
	}
	b, err := json.Marshal(tags)
	return string(b), err
}

func (c *Client) policyJSON(req CreateRequest) (string, error) {
	pol := policyJSON{Priority: req.Priority, MaxReclaimCount: req.MaxReclaims}
	if req.MaxReclaims < 0 {
		return "", invalid("MaxReclaims", "%d is negative", req.MaxReclaims)
	}
	if req.Retry != nil {
		if err := req.Retry.validate("Retry"); err != nil {
			return "", err
		}
		pol.RetryPolicy = req.Retry.toJSON()
	}
	switch {
	case req.AttemptTimeout < 0:
		return "", invalid("AttemptTimeout", "%v is negative", req.AttemptTimeout)
	case req.AttemptTimeout > 0:
		pol.TimeoutPolicy = &timeoutPolicyJSON{AttemptTimeoutMs: max(req.AttemptTimeout.Milliseconds(), 1)}
	}
	if len(req.RequiredCapabilities) > 0 {
		csv, err := capabilityCSV("RequiredCapabilities", req.RequiredCapabilities)
		if err != nil {
			return "", err
		}
		pol.RoutingRequirements = &routingRequirements{RequiredCapabilities: splitCSV(csv)}
	}
	b, err := json.Marshal(pol)
	return string(b), err
}

// createCall builds ff_create_execution: KEYS (8) core, payload, policy,
// tags, eligible-or-delayed, idem-or-noop, execution_deadline,
// all_executions; ARGV (13) eid, namespace, lane, kind, priority, creator,
// policy_json, payload, delay_until, dedup_ttl_ms, tags_json, deadline_at,
// partition_id.
func (c *Client) createCall(req CreateRequest, p prepared) lua.Call {
	ek := keys.Exec(p.id)
	pk := keys.FlowPart(p.id.Partition())
	sched := pk.LaneEligible(req.Lane)
	if p.delayMs > 0 {
		sched = pk.LaneDelayed(req.Lane)
	}
	idem, ttl := pk.Noop(), ""
	if req.IdempotencyKey != "" {
		idem, ttl = pk.Idem(p.ns, req.IdempotencyKey), strconv.FormatInt(p.idemTTLms, 10)
	}
	return lua.Call{
		Function: "ff_create_execution",
		Keys: []string{ek.Core(), ek.Payload(), ek.Policy(), ek.Tags(), sched, idem,
			pk.ExecutionDeadline(), pk.AllExecutions()},
		Args: []string{p.id.String(), p.ns, req.Lane, req.Kind, strconv.Itoa(req.Priority), c.ident,
			p.policy, string(req.Payload), optMillis(p.delayMs), ttl, p.tagsJSON, optMillis(p.deadline),
			strconv.Itoa(int(p.id.Partition().Index))},
	}
}

func optMillis(ms int64) string {
	if ms == 0 {
		return ""
	}
	return strconv.FormatInt(ms, 10)
}

func createResult(want keys.ExecutionID, r reply) (CreateResult, error) {
	switch r.Status {
	case StatusOK:
		return CreateResult{ID: want, PublicState: r.field(1)}, nil
	case StatusDuplicate:
		id, err := keys.ParseExecutionID(r.field(0))
		if err != nil {
			return CreateResult{}, fmt.Errorf("ff_create_execution: duplicate of an unparsable id: %w", err)
		}
		return CreateResult{ID: id, Duplicate: true}, nil
	}
	return CreateResult{}, fmt.Errorf("ff_create_execution: %w: status %q", ErrUnexpectedReply, r.Status)
}

// createInFlow creates a flow member: a read of the flow first (a missing
// or finished flow is refused before anything is written), then the create
// and the membership pipelined in one round trip on the flow's slot. If the
// membership still fails (the flow finished in between), the fresh
// execution is cancelled so no orphan runs outside its flow.
func (c *Client) createInFlow(ctx context.Context, fid keys.FlowID, p prepared, create lua.Call) (CreateResult, error) {
	fk := keys.Flow(c.parts, fid)
	state, err := c.vk.Do(ctx, c.vk.B().Hget().Key(fk.Core()).Field("public_flow_state").Build()).ToString()
	switch {
	case valkey.IsValkeyNil(err):
		return CreateResult{}, fmt.Errorf("client: flow %s: %w", fid, ErrFlowNotFound)
	case err != nil:
		return CreateResult{}, fmt.Errorf("client: read flow %s: %w", fid, err)
	case flowTerminal(state):
		return CreateResult{}, fmt.Errorf("client: flow %s is %s: %w", fid, state, ErrFlowAlreadyTerminal)
	}
	res := c.lib.DoMulti(ctx, create, c.addToFlowCall(fid, p.id))
	r, err := parseReply(create.Function, res[0])
	if err != nil {
		return CreateResult{}, err
	}
	out, err := createResult(p.id, r)
	if err != nil {
		return out, err
	}
	_, addErr := parseReply("ff_add_execution_to_flow", res[1])
	if out.Duplicate && out.ID != p.id {
		// The pipelined add named our unused id; add the existing one.
		_, addErr = c.call(ctx, c.addToFlowCall(fid, out.ID))
	}
	if addErr == nil {
		return out, nil
	}
	if !out.Duplicate {
		if _, cerr := c.Cancel(ctx, out.ID, CancelOptions{Reason: "flow membership failed: " + addErr.Error()}); cerr != nil {
			return out, fmt.Errorf("client: execution %s created but not added to flow %s (%w); cancelling it failed too: %v", out.ID, fid, addErr, cerr)
		}
		return out, fmt.Errorf("client: execution %s was not added to flow %s and has been cancelled: %w", out.ID, fid, addErr)
	}
	return out, fmt.Errorf("client: existing execution %s not added to flow %s: %w", out.ID, fid, addErr)
}

// addToFlowCall builds ff_add_execution_to_flow: KEYS (4) flow core,
// members, flow_index, exec core; ARGV (3) fid, eid, now (ignored).
func (c *Client) addToFlowCall(fid keys.FlowID, id keys.ExecutionID) lua.Call {
	fk := keys.Flow(c.parts, fid)
	return lua.Call{
		Function: "ff_add_execution_to_flow",
		Keys:     []string{fk.Core(), fk.Members(), keys.FlowPart(id.Partition()).FlowIndex(), keys.Exec(id).Core()},
		Args:     []string{fid.String(), id.String(), strconv.FormatInt(time.Now().UnixMilli(), 10)},
	}
}

func flowTerminal(state string) bool {
	return state == "cancelled" || state == "completed" || state == "failed"
}
