package keys

import (
	"fmt"
	"strconv"
)

// Global keys and the pub/sub channel (untagged).
const (
	// ConfigPartitions is the HASH recording the deployment's partition counts.
	ConfigPartitions = "ff:config:partitions"
	// LanesIndex is the SET of lane ids seeded at boot.
	LanesIndex = "ff:idx:lanes"
	// DagCompletionsChannel carries {execution_id, flow_id, outcome} JSON
	// for every terminal transition of a flow member (plain PUBLISH).
	DagCompletionsChannel = "ff:dag:completions"
	// Prefix is the prefix of every key of the layout. The host only lets
	// plugins touch keys under it.
	Prefix = "ff:"
)

// WorkerAlive is the registration guard of a worker instance (STRING, PX).
func WorkerAlive(namespace, instanceID string) string {
	return "ff:worker:" + namespace + ":" + instanceID + ":alive"
}

// WorkerCaps is the HASH describing a worker instance's lanes and capabilities.
func WorkerCaps(namespace, instanceID string) string {
	return "ff:worker:" + namespace + ":" + instanceID + ":caps"
}

// WorkersIndex is the SET of worker instance ids of a namespace.
func WorkersIndex(namespace string) string { return "ff:idx:" + namespace + ":workers" }

// ValidateLane applies FlowFabric's ingress rule for lane ids: non-empty, at
// most 64 bytes, every byte printable ASCII (0x20..0x7E; a space is allowed).
func ValidateLane(lane string) error {
	if lane == "" {
		return fmt.Errorf("lane: must not be empty")
	}
	if len(lane) > 64 {
		return fmt.Errorf("lane %q: %d bytes, at most 64 allowed", lane, len(lane))
	}
	for i := 0; i < len(lane); i++ {
		if c := lane[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("lane %q: byte 0x%02x at offset %d is not printable ASCII", lane, c, i)
		}
	}
	return nil
}

// ExecKeys builds the keys of one execution. Exec keys are double-tagged:
// "ff:exec:" + tag + ":" + eid + suffix, and the eid itself starts with the
// tag, e.g. ff:exec:{fp:24}:{fp:24}:<uuid>:core. Attempt and stream keys
// follow the same shape.
type ExecKeys struct {
	tagged string // "{fp:N}:" + eid, shared by all exec/attempt/stream keys
	tag    string
	eid    string
}

// Exec returns the key builder of an execution.
func Exec(id ExecutionID) ExecKeys {
	tag := id.Partition().Tag()
	eid := id.String()
	return ExecKeys{tagged: tag + ":" + eid, tag: tag, eid: eid}
}

// ID is the execution id the keys belong to, in canonical form.
func (k ExecKeys) ID() string { return k.eid }

// Tag is the execution's partition tag.
func (k ExecKeys) Tag() string { return k.tag }

func (k ExecKeys) exec(suffix string) string { return "ff:exec:" + k.tagged + ":" + suffix }

// Core is the HASH of the authoritative execution record.
func (k ExecKeys) Core() string { return k.exec("core") }

// Payload is the input payload STRING.
func (k ExecKeys) Payload() string { return k.exec("payload") }

// Result is the result STRING.
func (k ExecKeys) Result() string { return k.exec("result") }

// Policy is the execution policy JSON STRING.
func (k ExecKeys) Policy() string { return k.exec("policy") }

// Tags is the HASH of execution tags.
func (k ExecKeys) Tags() string { return k.exec("tags") }

// LeaseCurrent is the HASH of the live lease.
func (k ExecKeys) LeaseCurrent() string { return k.exec("lease:current") }

// LeaseHistory is the STREAM of lease events.
func (k ExecKeys) LeaseHistory() string { return k.exec("lease:history") }

// ClaimGrant is the HASH of an outstanding claim or reclaim grant.
func (k ExecKeys) ClaimGrant() string { return k.exec("claim_grant") }

// Attempts is the ZSET of attempt indexes scored by start time.
func (k ExecKeys) Attempts() string { return k.exec("attempts") }

// SuspensionCurrent is the HASH of the current or last suspension.
func (k ExecKeys) SuspensionCurrent() string { return k.exec("suspension:current") }

// SuspensionSatisfiedSet is the SET of composite-condition satisfier tokens.
func (k ExecKeys) SuspensionSatisfiedSet() string {
	return k.exec("suspension:current:satisfied_set")
}

// SuspensionSatisfiedSignals is the SET of signal ids that added a satisfier
// token (derived by the Lua code from the satisfied set's key).
func (k ExecKeys) SuspensionSatisfiedSignals() string {
	return k.exec("suspension:current:satisfied_set:signals")
}

// SuspensionMemberMap is the HASH mapping composite-condition members.
func (k ExecKeys) SuspensionMemberMap() string { return k.exec("suspension:current:member_map") }

// Waitpoints is the SET of waitpoint ids ever bound to this execution.
func (k ExecKeys) Waitpoints() string { return k.exec("waitpoints") }

// Signals is the ZSET of signal ids scored by accept time.
func (k ExecKeys) Signals() string { return k.exec("signals") }

// DepsMeta is the HASH summarising inbound dependencies.
func (k ExecKeys) DepsMeta() string { return k.exec("deps:meta") }

// Dep is the HASH of one inbound edge's state on this (child) execution.
func (k ExecKeys) Dep(edge UUID) string { return k.exec("dep:" + edge.String()) }

// DepsUnresolved is the SET of inbound edge ids not yet resolved.
func (k ExecKeys) DepsUnresolved() string { return k.exec("deps:unresolved") }

// DepsAllEdges is the SET of every inbound edge id ever applied.
func (k ExecKeys) DepsAllEdges() string { return k.exec("deps:all_edges") }

// SuspendDedup is the HASH recording a suspend call's idempotent outcome.
func (k ExecKeys) SuspendDedup(idempotencyKey string) string {
	return "ff:dedup:suspend:" + k.tagged + ":" + idempotencyKey
}

func (k ExecKeys) attempt(i uint32) string {
	return "ff:attempt:" + k.tagged + ":" + strconv.FormatUint(uint64(i), 10)
}

// Attempt is the HASH of attempt i (0-based).
func (k ExecKeys) Attempt(i uint32) string { return k.attempt(i) }

// AttemptUsage is the usage HASH of attempt i.
func (k ExecKeys) AttemptUsage(i uint32) string { return k.attempt(i) + ":usage" }

// AttemptPolicy is the flattened attempt-policy HASH of attempt i.
func (k ExecKeys) AttemptPolicy(i uint32) string { return k.attempt(i) + ":policy" }

// AttemptSummary is the rolling summary HASH of attempt i's stream. Its
// prefix is ff:attempt:, not ff:stream:.
func (k ExecKeys) AttemptSummary(i uint32) string { return k.attempt(i) + ":summary" }

// Stream is the output STREAM of attempt i.
func (k ExecKeys) Stream(i uint32) string {
	return "ff:stream:" + k.tagged + ":" + strconv.FormatUint(uint64(i), 10)
}

// StreamMeta is the metadata HASH of attempt i's stream.
func (k ExecKeys) StreamMeta(i uint32) string { return k.Stream(i) + ":meta" }

// FlowPartKeys builds the per-partition keys of a flow partition {fp:N}:
// indexes, waitpoints, signals and dedup records.
type FlowPartKeys struct{ tag string }

// FlowPart returns the keys of flow partition p. Only p.Index is used: the
// family is always fp, whatever p.Family says.
func FlowPart(p Partition) FlowPartKeys {
	return FlowPartKeys{tag: Partition{Family: FamilyFlow, Index: p.Index}.Tag()}
}

// Tag is the partition's hash tag.
func (k FlowPartKeys) Tag() string { return k.tag }

func (k FlowPartKeys) idx(suffix string) string { return "ff:idx:" + k.tag + ":" + suffix }

func (k FlowPartKeys) lane(lane, suffix string) string {
	return "ff:idx:" + k.tag + ":lane:" + lane + ":" + suffix
}

// LaneEligible is the ZSET of claimable executions of a lane, scored
// -(priority*1e12)+created_at.
func (k FlowPartKeys) LaneEligible(lane string) string { return k.lane(lane, "eligible") }

// LaneDelayed is the ZSET of delayed executions scored by due time.
func (k FlowPartKeys) LaneDelayed(lane string) string { return k.lane(lane, "delayed") }

// LaneActive is the ZSET of leased executions scored by the lease expiry at
// acquisition.
func (k FlowPartKeys) LaneActive(lane string) string { return k.lane(lane, "active") }

// LaneTerminal is the ZSET of terminal executions scored by terminal time.
func (k FlowPartKeys) LaneTerminal(lane string) string { return k.lane(lane, "terminal") }

// LaneSuspended is the ZSET of suspended executions scored by timeout.
func (k FlowPartKeys) LaneSuspended(lane string) string { return k.lane(lane, "suspended") }

// LaneBlockedDependencies is the ZSET of executions waiting on upstreams.
func (k FlowPartKeys) LaneBlockedDependencies(lane string) string {
	return k.lane(lane, "blocked:dependencies")
}

// LaneBlockedBudget is the ZSET of executions blocked by a budget.
func (k FlowPartKeys) LaneBlockedBudget(lane string) string { return k.lane(lane, "blocked:budget") }

// LaneBlockedQuota is the ZSET of executions blocked by a quota.
func (k FlowPartKeys) LaneBlockedQuota(lane string) string { return k.lane(lane, "blocked:quota") }

// LaneBlockedRoute is the ZSET of executions no capable worker can take.
func (k FlowPartKeys) LaneBlockedRoute(lane string) string { return k.lane(lane, "blocked:route") }

// LaneBlockedOperator is the ZSET of executions paused by an operator.
func (k FlowPartKeys) LaneBlockedOperator(lane string) string {
	return k.lane(lane, "blocked:operator")
}

// LeaseExpiry is the ZSET of leased executions scored by lease expiry.
func (k FlowPartKeys) LeaseExpiry() string { return k.idx("lease_expiry") }

// AttemptTimeout is the ZSET of running attempts scored by their timeout.
func (k FlowPartKeys) AttemptTimeout() string { return k.idx("attempt_timeout") }

// ExecutionDeadline is the ZSET of executions scored by absolute deadline.
func (k FlowPartKeys) ExecutionDeadline() string { return k.idx("execution_deadline") }

// SuspensionTimeout is the ZSET of suspended executions with a timeout.
func (k FlowPartKeys) SuspensionTimeout() string { return k.idx("suspension_timeout") }

// PendingWaitpointExpiry is the ZSET of pending waitpoint ids by expiry.
func (k FlowPartKeys) PendingWaitpointExpiry() string { return k.idx("pending_waitpoint_expiry") }

// AllExecutions is the SET of every execution created in the partition.
func (k FlowPartKeys) AllExecutions() string { return k.idx("all_executions") }

// WorkerLeases is the SET of executions leased by a worker instance. An
// empty instance id gives the placeholder timeout scanners pass.
func (k FlowPartKeys) WorkerLeases(instanceID string) string {
	return k.idx("worker:" + instanceID + ":leases")
}

// FlowIndex is the SET of flow ids homed on the partition.
func (k FlowPartKeys) FlowIndex() string { return k.idx("flow_index") }

// CancelBacklog is the ZSET of cancelled flows scored by grace deadline.
func (k FlowPartKeys) CancelBacklog() string { return k.idx("cancel_backlog") }

// PendingCancelGroups is the SET of "<fid>|<downstream eid>" tuples.
func (k FlowPartKeys) PendingCancelGroups() string { return k.idx("pending_cancel_groups") }

// WaitpointHMAC is the HMAC keystore HASH (replicated on every partition).
func (k FlowPartKeys) WaitpointHMAC() string { return "ff:sec:" + k.tag + ":waitpoint_hmac" }

// SignalDelivery is the STREAM every signal delivery appends to.
func (k FlowPartKeys) SignalDelivery() string { return "ff:part:" + k.tag + ":signal_delivery" }

// LeaseHistory is the reserved partition lease-history STREAM (no producer).
func (k FlowPartKeys) LeaseHistory() string { return "ff:part:" + k.tag + ":lease_history" }

// Noop is the same-slot placeholder for unused KEYS slots; the Lua code
// treats any key containing "ff:noop:" as absent.
func (k FlowPartKeys) Noop() string { return "ff:noop:" + k.tag }

// Idem is the idempotency STRING of an execution create (per partition).
func (k FlowPartKeys) Idem(namespace, idempotencyKey string) string {
	return "ff:idem:" + k.tag + ":" + namespace + ":" + idempotencyKey
}

// Waitpoint is the HASH of a waitpoint (single tag, no eid).
func (k FlowPartKeys) Waitpoint(wp UUID) string { return "ff:wp:" + k.tag + ":" + wp.String() }

// WaitpointSignals is the STREAM of signals received by a waitpoint.
func (k FlowPartKeys) WaitpointSignals(wp UUID) string { return k.Waitpoint(wp) + ":signals" }

// WaitpointCondition is the HASH of a waitpoint's resume-condition state.
func (k FlowPartKeys) WaitpointCondition(wp UUID) string { return k.Waitpoint(wp) + ":condition" }

// Signal is the HASH of a signal.
func (k FlowPartKeys) Signal(sig UUID) string { return "ff:signal:" + k.tag + ":" + sig.String() }

// SignalPayload is the payload STRING of a signal.
func (k FlowPartKeys) SignalPayload(sig UUID) string { return k.Signal(sig) + ":payload" }

// SignalDedup is the STRING holding the first signal id for an idempotency
// key on a waitpoint.
func (k FlowPartKeys) SignalDedup(wp UUID, idempotencyKey string) string {
	return "ff:sigdedup:" + k.tag + ":" + wp.String() + ":" + idempotencyKey
}

// FlowKeys builds the keys of one flow, in its partition.
type FlowKeys struct {
	base string // "ff:flow:{fp:N}:<fid>"
	tag  string
}

// Flow returns the key builder of a flow, placing it with the config.
func Flow(c PartitionConfig, id FlowID) FlowKeys { return FlowIn(c.FlowPartition(id), id) }

// FlowIn returns the key builder of a flow whose partition is already known
// (e.g. read from an index of that partition).
func FlowIn(p Partition, id FlowID) FlowKeys {
	tag := Partition{Family: FamilyFlow, Index: p.Index}.Tag()
	return FlowKeys{base: "ff:flow:" + tag + ":" + id.String(), tag: tag}
}

// Tag is the flow's partition tag.
func (k FlowKeys) Tag() string { return k.tag }

// Core is the flow record HASH.
func (k FlowKeys) Core() string { return k.base + ":core" }

// Members is the SET of member execution ids.
func (k FlowKeys) Members() string { return k.base + ":members" }

// Tags is the HASH of namespaced flow tags.
func (k FlowKeys) Tags() string { return k.base + ":tags" }

// Summary is the projection HASH written by the flow projector.
func (k FlowKeys) Summary() string { return k.base + ":summary" }

// PendingCancels is the SET of members whose cancel is still owed.
func (k FlowKeys) PendingCancels() string { return k.base + ":pending_cancels" }

// Edge is the immutable edge record HASH.
func (k FlowKeys) Edge(edge UUID) string { return k.base + ":edge:" + edge.String() }

// Grant is the edge grant key FlowFabric passes to stage_dependency_edge but
// never reads or writes.
func (k FlowKeys) Grant(edge UUID) string { return k.base + ":grant:" + edge.String() }

// Out is the SET of outgoing edge ids of an upstream execution.
func (k FlowKeys) Out(upstream ExecutionID) string { return k.base + ":out:" + upstream.String() }

// In is the SET of incoming edge ids of a downstream execution.
func (k FlowKeys) In(downstream ExecutionID) string { return k.base + ":in:" + downstream.String() }

// EdgeGroup is the inbound edge-group HASH of a downstream execution.
func (k FlowKeys) EdgeGroup(downstream ExecutionID) string {
	return k.base + ":edgegroup:" + downstream.String()
}

// BudgetPartKeys builds the per-partition keys of a budget partition {b:M}.
type BudgetPartKeys struct{ tag string }

// BudgetPart returns the keys of budget partition p (only p.Index is used).
func BudgetPart(p Partition) BudgetPartKeys {
	return BudgetPartKeys{tag: Partition{Family: FamilyBudget, Index: p.Index}.Tag()}
}

// Tag is the partition's hash tag.
func (k BudgetPartKeys) Tag() string { return k.tag }

// BudgetResets is the ZSET of budget ids scored by next reset time.
func (k BudgetPartKeys) BudgetResets() string { return "ff:idx:" + k.tag + ":budget_resets" }

// BudgetPolicies is the SET of budget ids homed on the partition.
func (k BudgetPartKeys) BudgetPolicies() string { return "ff:idx:" + k.tag + ":budget_policies" }

// UsageDedup is the idempotency STRING of a usage report. FlowFabric's
// caller passes this full key in ARGV, not KEYS.
func (k BudgetPartKeys) UsageDedup(dedupID string) string {
	return "ff:usagededup:" + k.tag + ":" + dedupID
}

// BudgetKeys builds the keys of one budget.
type BudgetKeys struct {
	base string
	part BudgetPartKeys
}

// Budget returns the key builder of a budget, placing it with the config.
func Budget(c PartitionConfig, id BudgetID) BudgetKeys { return BudgetIn(c.BudgetPartition(id), id) }

// BudgetIn returns the key builder of a budget whose partition is known.
func BudgetIn(p Partition, id BudgetID) BudgetKeys {
	part := BudgetPart(p)
	return BudgetKeys{base: "ff:budget:" + part.tag + ":" + id.String(), part: part}
}

// Partition returns the keys of the budget's partition.
func (k BudgetKeys) Partition() BudgetPartKeys { return k.part }

// Definition is the budget definition HASH.
func (k BudgetKeys) Definition() string { return k.base }

// Limits is the HASH of hard:<dim> / soft:<dim> limits.
func (k BudgetKeys) Limits() string { return k.base + ":limits" }

// Usage is the HASH of running totals per dimension.
func (k BudgetKeys) Usage() string { return k.base + ":usage" }

// ByExec is the per-execution spend ledger HASH.
func (k BudgetKeys) ByExec(id ExecutionID) string { return k.base + ":by_exec:" + id.String() }

// ByExecIndex is the SET of executions with a ledger entry.
func (k BudgetKeys) ByExecIndex() string { return k.base + ":by_exec:index" }

// QuotaPartKeys builds the per-partition keys of a quota partition {q:K}.
type QuotaPartKeys struct{ tag string }

// QuotaPart returns the keys of quota partition p (only p.Index is used).
func QuotaPart(p Partition) QuotaPartKeys {
	return QuotaPartKeys{tag: Partition{Family: FamilyQuota, Index: p.Index}.Tag()}
}

// Tag is the partition's hash tag.
func (k QuotaPartKeys) Tag() string { return k.tag }

// QuotaPolicies is the SET of quota policy ids homed on the partition.
func (k QuotaPartKeys) QuotaPolicies() string { return "ff:idx:" + k.tag + ":quota_policies" }

// QuotaKeys builds the keys of one quota policy.
type QuotaKeys struct {
	base string
	part QuotaPartKeys
}

// Quota returns the key builder of a quota policy, placing it with the config.
func Quota(c PartitionConfig, id QuotaID) QuotaKeys { return QuotaIn(c.QuotaPartition(id), id) }

// QuotaIn returns the key builder of a quota policy whose partition is known.
func QuotaIn(p Partition, id QuotaID) QuotaKeys {
	part := QuotaPart(p)
	return QuotaKeys{base: "ff:quota:" + part.tag + ":" + id.String(), part: part}
}

// Partition returns the keys of the quota policy's partition.
func (k QuotaKeys) Partition() QuotaPartKeys { return k.part }

// Definition is the quota definition HASH.
func (k QuotaKeys) Definition() string { return k.base }

// Window is the sliding-window ZSET of a dimension (in practice always
// "requests_per_window").
func (k QuotaKeys) Window(dimension string) string { return k.base + ":window:" + dimension }

// Concurrency is the STRING counter of concurrent admissions.
func (k QuotaKeys) Concurrency() string { return k.base + ":concurrency" }

// Admitted is the admission guard STRING of an execution.
func (k QuotaKeys) Admitted(id ExecutionID) string { return k.base + ":admitted:" + id.String() }

// AdmittedSet is the SET of admitted executions.
func (k QuotaKeys) AdmittedSet() string { return k.base + ":admitted_set" }
