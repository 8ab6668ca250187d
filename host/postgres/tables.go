package postgres

// The tables of FlowFabric's Postgres schema at migration 22, as facts
// (names, column order and types, defaults, keys, indexes, checks) from
// ../shared/reference/postgres.md §1-§3, for CreateSchema. The statements
// are generated from these descriptions; nothing here is FlowFabric's
// migration text, and the database it builds is recorded as ffscan's
// (ffscan.schema_origin), never in FlowFabric's ledger.

// table is one of the 34 tables.
type table struct {
	name string
	// children is how many hash partitions the table has (0: a plain
	// table); wide names the children with 3 digits (_p000), as the
	// worker-registry tables do.
	children int
	wide     bool
	columns  []string // "name type [constraints]", in physical order
	key      string   // primary key columns
	indexes  []index
}

// index is a secondary index on a table (on a partitioned parent, every
// child gets it).
type index struct {
	name string
	def  string // what follows "ON <table>", e.g. "(partition_key, x) WHERE x IS NOT NULL"
}

// partitions is the number of hash partitions of every partitioned table.
const partitions = 256

// plainPartitionKey is partition_key on the three plain outbox tables,
// which hold it as an integer rather than a smallint.
const (
	pk      = "partition_key smallint NOT NULL"
	plainPK = "partition_key integer NOT NULL"
)

// schemaTables lists the tables in creation order.
var schemaTables = []table{
	// Plain tables (§2.2).
	{name: "ff_waitpoint_hmac", columns: []string{
		"kid text NOT NULL", "secret bytea NOT NULL", "rotated_at_ms bigint NOT NULL", "active boolean NOT NULL DEFAULT true",
	}, key: "kid"},
	{name: "ff_lane_registry", columns: []string{
		"lane_id text NOT NULL", "registered_at_ms bigint NOT NULL", "registered_by text NOT NULL",
	}, key: "lane_id"},
	{name: "ff_partition_config", columns: []string{
		"singleton_lock boolean NOT NULL DEFAULT true CHECK (singleton_lock = true)",
		"num_flow_partitions integer NOT NULL", "num_budget_partitions integer NOT NULL",
		"num_quota_partitions integer NOT NULL", "ff_version text NOT NULL",
	}, key: "singleton_lock"},
	{name: "ff_migration_annotation", columns: []string{
		"version integer NOT NULL", "name text NOT NULL", "applied_at_ms bigint NOT NULL", "backward_compatible boolean NOT NULL",
	}, key: "version"},
	{name: "ff_suspend_dedup", columns: []string{
		pk, "idempotency_key text NOT NULL", "outcome_json jsonb NOT NULL", "created_at_ms bigint NOT NULL",
	}, key: "partition_key, idempotency_key"},
	{name: "ff_lease_event", columns: []string{
		"event_id bigserial NOT NULL", "execution_id text NOT NULL", "lease_id text", "event_type text NOT NULL",
		"occurred_at_ms bigint NOT NULL", plainPK, "namespace text", "instance_tag text",
	}, key: "event_id", indexes: outboxIndexes("ff_lease_event")},
	{name: "ff_signal_event", columns: []string{
		"event_id bigserial NOT NULL", "execution_id text NOT NULL", "signal_id text NOT NULL", "waitpoint_id text",
		"source_identity text", "delivered_at_ms bigint NOT NULL", plainPK, "namespace text", "instance_tag text",
	}, key: "event_id", indexes: outboxIndexes("ff_signal_event")},
	{name: "ff_operator_event", columns: []string{
		"event_id bigserial NOT NULL", "execution_id text NOT NULL",
		"event_type text NOT NULL CHECK (event_type IN ('priority_changed', 'replayed', 'flow_cancel_requested'))",
		"details jsonb", "occurred_at_ms bigint NOT NULL", plainPK, "namespace text", "instance_tag text",
	}, key: "event_id", indexes: outboxIndexes("ff_operator_event")},

	// Executions and flows (§3.1, §3.2, §3.5).
	{name: "ff_exec_core", children: partitions, columns: []string{
		pk, "execution_id uuid NOT NULL", "flow_id uuid", "lane_id text NOT NULL",
		"required_capabilities text[] NOT NULL DEFAULT '{}'", "attempt_index integer NOT NULL DEFAULT 0",
		"lifecycle_phase text NOT NULL", "ownership_state text NOT NULL", "eligibility_state text NOT NULL",
		"public_state text NOT NULL", "attempt_state text NOT NULL", "blocking_reason text",
		"cancellation_reason text", "cancelled_by text", "priority integer NOT NULL DEFAULT 0",
		"created_at_ms bigint NOT NULL", "terminal_at_ms bigint", "deadline_at_ms bigint", "payload bytea",
		"result bytea", "policy jsonb", "raw_fields jsonb NOT NULL DEFAULT '{}'::jsonb", "started_at_ms bigint",
		"lease_reclaim_count integer NOT NULL DEFAULT 0",
	}, key: "partition_key, execution_id", indexes: []index{
		{"ff_exec_core_lane_phase_idx", "(partition_key, lane_id, lifecycle_phase)"},
		{"ff_exec_core_caps_gin_idx", "USING gin (required_capabilities)"},
		{"ff_exec_core_flow_idx", "(partition_key, flow_id) WHERE flow_id IS NOT NULL"},
		{"ff_exec_core_deadline_idx", "(partition_key, deadline_at_ms) WHERE deadline_at_ms IS NOT NULL"},
	}},
	{name: "ff_flow_core", children: partitions, columns: []string{
		pk, "flow_id uuid NOT NULL", "graph_revision bigint NOT NULL DEFAULT 0", "public_flow_state text NOT NULL",
		"created_at_ms bigint NOT NULL", "terminal_at_ms bigint", "raw_fields jsonb NOT NULL DEFAULT '{}'::jsonb",
	}, key: "partition_key, flow_id"},
	{name: "ff_attempt", children: partitions, columns: []string{
		pk, "execution_id uuid NOT NULL", "attempt_index integer NOT NULL", "worker_id text", "worker_instance_id text",
		"lease_epoch bigint NOT NULL DEFAULT 0", "lease_expires_at_ms bigint", "started_at_ms bigint",
		"terminal_at_ms bigint", "outcome text", "usage jsonb", "policy jsonb",
		"raw_fields jsonb NOT NULL DEFAULT '{}'::jsonb",
	}, key: "partition_key, execution_id, attempt_index", indexes: []index{
		{"ff_attempt_lease_expiry_idx", "(partition_key, lease_expires_at_ms) WHERE lease_expires_at_ms IS NOT NULL"},
		{"ff_attempt_worker_idx", "(partition_key, worker_id) WHERE worker_id IS NOT NULL"},
	}},
	{name: "ff_edge", children: partitions, columns: []string{
		pk, "flow_id uuid NOT NULL", "edge_id uuid NOT NULL", "upstream_eid uuid NOT NULL",
		"downstream_eid uuid NOT NULL", "policy jsonb NOT NULL", "policy_version integer NOT NULL DEFAULT 0",
	}, key: "partition_key, flow_id, edge_id", indexes: []index{
		{"ff_edge_downstream_idx", "(partition_key, flow_id, downstream_eid) INCLUDE (upstream_eid, policy_version)"},
		{"ff_edge_upstream_idx", "(partition_key, flow_id, upstream_eid)"},
	}},
	{name: "ff_edge_group", children: partitions, columns: []string{
		pk, "flow_id uuid NOT NULL", "downstream_eid uuid NOT NULL", "policy jsonb NOT NULL",
		"k_target integer NOT NULL DEFAULT 0", "success_count integer NOT NULL DEFAULT 0",
		"fail_count integer NOT NULL DEFAULT 0", "skip_count integer NOT NULL DEFAULT 0",
		"running_count integer NOT NULL DEFAULT 0", "cancel_siblings_pending_flag boolean NOT NULL DEFAULT false",
		"cancel_siblings_pending_members text[] NOT NULL DEFAULT '{}'",
	}, key: "partition_key, flow_id, downstream_eid"},
	{name: "ff_pending_cancel_groups", children: partitions, columns: []string{
		pk, "flow_id uuid NOT NULL", "downstream_eid uuid NOT NULL", "enqueued_at_ms bigint NOT NULL",
	}, key: "partition_key, flow_id, downstream_eid", indexes: []index{
		{"ff_pending_cancel_groups_enqueued_idx", "(partition_key, enqueued_at_ms)"},
	}},
	{name: "ff_cancel_dispatch_outbox", children: partitions, columns: []string{
		pk, "flow_id uuid NOT NULL", "downstream_eid uuid NOT NULL", "target_exec_id uuid NOT NULL",
		"reason text NOT NULL", "enqueued_at_ms bigint NOT NULL",
	}, key: "partition_key, flow_id, downstream_eid, target_exec_id", indexes: []index{
		{"ff_cancel_dispatch_outbox_enqueued_idx", "(partition_key, enqueued_at_ms)"},
	}},

	// Suspensions and waitpoints (§3.4).
	{name: "ff_suspension_current", children: partitions, columns: []string{
		pk, "execution_id uuid NOT NULL", "suspension_id uuid NOT NULL", "suspended_at_ms bigint NOT NULL",
		"timeout_at_ms bigint", "reason_code text", "condition jsonb NOT NULL",
		"satisfied_set jsonb NOT NULL DEFAULT '[]'::jsonb", "member_map jsonb NOT NULL DEFAULT '{}'::jsonb",
		"timeout_behavior text",
	}, key: "partition_key, execution_id", indexes: []index{
		{"ff_suspension_current_suspended_at_idx", "(partition_key, suspended_at_ms)"},
		{"ff_suspension_current_timeout_idx", "(partition_key, timeout_at_ms) WHERE timeout_at_ms IS NOT NULL"},
	}},
	{name: "ff_waitpoint_pending", children: partitions, columns: []string{
		pk, "waitpoint_id uuid NOT NULL", "execution_id uuid NOT NULL", "token_kid text NOT NULL",
		"token text NOT NULL", "created_at_ms bigint NOT NULL", "expires_at_ms bigint", "condition jsonb",
		"waitpoint_key text NOT NULL DEFAULT ''", "state text NOT NULL DEFAULT 'pending'",
		"required_signal_names text[] NOT NULL DEFAULT '{}'", "activated_at_ms bigint",
	}, key: "partition_key, waitpoint_id", indexes: []index{
		{"ff_waitpoint_pending_expires_idx", "(partition_key, expires_at_ms) WHERE expires_at_ms IS NOT NULL"},
		{"ff_waitpoint_pending_exec_idx", "(partition_key, execution_id)"},
	}},

	// Streams (§3.11): no reconciler touches them.
	{name: "ff_stream_frame", children: partitions, columns: []string{
		pk, "execution_id uuid NOT NULL", "attempt_index integer NOT NULL", "ts_ms bigint NOT NULL",
		"seq integer NOT NULL", "fields jsonb NOT NULL", "mode text NOT NULL", "created_at_ms bigint NOT NULL",
	}, key: "partition_key, execution_id, attempt_index, ts_ms, seq", indexes: []index{
		{"ff_stream_frame_ts_seq_idx", "(partition_key, execution_id, attempt_index, ts_ms, seq)"},
	}},
	{name: "ff_stream_summary", children: partitions, columns: []string{
		pk, "execution_id uuid NOT NULL", "attempt_index integer NOT NULL", "document_json jsonb NOT NULL",
		"version integer NOT NULL DEFAULT 0", "patch_kind text", "last_updated_ms bigint NOT NULL",
		"first_applied_ms bigint NOT NULL",
	}, key: "partition_key, execution_id, attempt_index"},
	{name: "ff_stream_meta", children: partitions, columns: []string{
		pk, "execution_id uuid NOT NULL", "attempt_index integer NOT NULL",
		"ema_rate_hz double precision NOT NULL DEFAULT 0", "last_append_ts_ms bigint NOT NULL DEFAULT 0",
		"maxlen_applied_last integer NOT NULL DEFAULT 0",
	}, key: "partition_key, execution_id, attempt_index"},

	// The completion outbox (§3.3): one identity sequence across every
	// partition, through the parent.
	{name: "ff_completion_event", children: partitions, columns: []string{
		pk, "event_id bigint GENERATED ALWAYS AS IDENTITY", "execution_id uuid NOT NULL", "flow_id uuid",
		"outcome text NOT NULL", "namespace text", "instance_tag text", "occurred_at_ms bigint NOT NULL",
		"committed_at_ms bigint NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
		"dispatched_at_ms bigint",
	}, key: "partition_key, event_id", indexes: []index{
		{"ff_completion_event_event_id_idx", "(event_id)"},
		{"ff_completion_event_pending_dispatch_idx", "(partition_key, committed_at_ms) WHERE dispatched_at_ms IS NULL"},
		{"ff_completion_event_lookup_idx", "(partition_key, execution_id, occurred_at_ms)"},
	}},

	// Budgets (§3.8).
	{name: "ff_budget_policy", children: partitions, columns: []string{
		pk, "budget_id text NOT NULL", "policy_json jsonb NOT NULL", "created_at_ms bigint NOT NULL",
		"updated_at_ms bigint NOT NULL", "scope_type text NOT NULL DEFAULT ''", "scope_id text NOT NULL DEFAULT ''",
		"enforcement_mode text NOT NULL DEFAULT ''", "breach_count bigint NOT NULL DEFAULT 0",
		"soft_breach_count bigint NOT NULL DEFAULT 0", "last_breach_at_ms bigint", "last_breach_dim text",
		"next_reset_at_ms bigint",
	}, key: "partition_key, budget_id", indexes: []index{
		{"ff_budget_policy_reset_due_idx", "(partition_key, next_reset_at_ms) WHERE next_reset_at_ms IS NOT NULL"},
	}},
	{name: "ff_budget_usage", children: partitions, columns: []string{
		pk, "budget_id text NOT NULL", "dimensions_key text NOT NULL", "current_value bigint NOT NULL DEFAULT 0",
		"last_reset_at_ms bigint", "updated_at_ms bigint NOT NULL",
	}, key: "partition_key, budget_id, dimensions_key"},
	{name: "ff_budget_usage_dedup", children: partitions, columns: []string{
		pk, "dedup_key text NOT NULL", "outcome_json jsonb NOT NULL", "applied_at_ms bigint NOT NULL",
		"expires_at_ms bigint NOT NULL",
	}, key: "partition_key, dedup_key", indexes: []index{
		{"ff_budget_usage_dedup_expires_idx", "(partition_key, expires_at_ms)"},
	}},
	{name: "ff_budget_usage_by_exec", children: partitions, columns: []string{
		pk, "budget_id text NOT NULL", "execution_id uuid NOT NULL", "dimensions_key text NOT NULL",
		"delta_total bigint NOT NULL DEFAULT 0", "updated_at_ms bigint NOT NULL",
	}, key: "partition_key, budget_id, execution_id, dimensions_key", indexes: []index{
		{"ff_budget_usage_by_exec_release_idx", "(partition_key, budget_id, execution_id)"},
	}},

	// Quotas (§3.9).
	{name: "ff_quota_policy", children: partitions, columns: []string{
		pk, "quota_policy_id text NOT NULL", "requests_per_window_seconds bigint NOT NULL",
		"max_requests_per_window bigint NOT NULL", "active_concurrency_cap bigint NOT NULL",
		"active_concurrency bigint NOT NULL DEFAULT 0", "created_at_ms bigint NOT NULL", "updated_at_ms bigint NOT NULL",
	}, key: "partition_key, quota_policy_id"},
	{name: "ff_quota_window", children: partitions, columns: []string{
		pk, "quota_policy_id text NOT NULL", "dimension text NOT NULL DEFAULT ''", "admitted_at_ms bigint NOT NULL",
		"execution_id text NOT NULL",
	}, key: "partition_key, quota_policy_id, dimension, admitted_at_ms, execution_id"},
	{name: "ff_quota_admitted", children: partitions, columns: []string{
		pk, "quota_policy_id text NOT NULL", "execution_id text NOT NULL", "admitted_at_ms bigint NOT NULL",
		"expires_at_ms bigint NOT NULL",
	}, key: "partition_key, quota_policy_id, execution_id", indexes: []index{
		{"ff_quota_admitted_expires_idx", "(partition_key, expires_at_ms)"},
	}},

	// Flow cancel backlog (§3.6).
	{name: "ff_cancel_backlog", children: partitions, columns: []string{
		pk, "flow_id uuid NOT NULL", "requested_at_ms bigint NOT NULL", "requester text NOT NULL DEFAULT ''",
		"reason text NOT NULL DEFAULT ''", "grace_until_ms bigint", "cancellation_policy text NOT NULL",
		"status text NOT NULL DEFAULT 'pending'",
	}, key: "partition_key, flow_id", indexes: []index{
		{"ff_cancel_backlog_grace_idx", "(partition_key, grace_until_ms) WHERE grace_until_ms IS NOT NULL"},
	}},
	{name: "ff_cancel_backlog_member", children: partitions, columns: []string{
		pk, "flow_id uuid NOT NULL", "execution_id text NOT NULL",
	}, key: "partition_key, flow_id, execution_id"},

	// Claim grants (§3.7).
	{name: "ff_claim_grant", children: partitions, columns: []string{
		pk, "grant_id bytea NOT NULL", "execution_id uuid NOT NULL",
		"kind text NOT NULL CHECK (kind IN ('claim', 'reclaim'))", "worker_id text NOT NULL",
		"worker_instance_id text NOT NULL", "lane_id text", "capability_hash text",
		"worker_capabilities jsonb NOT NULL DEFAULT '[]'::jsonb", "route_snapshot_json text",
		"admission_summary text", "grant_ttl_ms bigint NOT NULL", "issued_at_ms bigint NOT NULL",
		"expires_at_ms bigint NOT NULL",
	}, key: "partition_key, grant_id", indexes: []index{
		{"ff_claim_grant_execution_idx", "(partition_key, execution_id)"},
		{"ff_claim_grant_expiry_idx", "(expires_at_ms)"},
	}},

	// The flow summary projection (§3.5).
	{name: "ff_flow_summary", children: partitions, columns: append([]string{
		pk, "flow_id uuid NOT NULL", "total_members bigint NOT NULL DEFAULT 0",
		"sampled_members integer NOT NULL DEFAULT 0",
	}, append(memberCounts("completed", "failed", "cancelled", "expired", "skipped", "active", "suspended",
		"waiting", "delayed", "rate_limited", "waiting_children"),
		"public_flow_state text NOT NULL", "last_summary_update_at bigint NOT NULL")...),
		key: "partition_key, flow_id"},

	// Worker registry (§3.10): partition_key is FNV-1a of the instance id.
	{name: "ff_worker_registry", children: partitions, wide: true, columns: []string{
		pk, "namespace text NOT NULL", "worker_instance_id text NOT NULL", "worker_id text NOT NULL",
		"lanes text[] NOT NULL", "capabilities_csv text NOT NULL", "last_heartbeat_ms bigint NOT NULL",
		"liveness_ttl_ms bigint NOT NULL", "registered_at_ms bigint NOT NULL",
	}, key: "partition_key, namespace, worker_instance_id", indexes: []index{
		{"ff_worker_registry_ns_inst_idx", "(namespace, worker_instance_id)"},
	}},
	{name: "ff_worker_registry_event", children: partitions, wide: true, columns: []string{
		pk, "namespace text NOT NULL", "worker_instance_id text NOT NULL", "event_kind text NOT NULL",
		"event_at_ms bigint NOT NULL", "reason text",
	}, key: "partition_key, namespace, worker_instance_id, event_at_ms, event_kind"},
}

// outboxIndexes are the three indexes every plain event outbox has.
func outboxIndexes(t string) []index {
	return []index{
		{t + "_partition_key_idx", "(partition_key, event_id)"},
		{t + "_namespace_idx", "(partition_key, namespace) WHERE namespace IS NOT NULL"},
		{t + "_instance_tag_idx", "(partition_key, instance_tag) WHERE instance_tag IS NOT NULL"},
	}
}

// memberCounts are the flow summary's members_<state> counters.
func memberCounts(states ...string) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = "members_" + s + " integer NOT NULL DEFAULT 0"
	}
	return out
}

// notifier is an AFTER INSERT trigger that wakes LISTENers (§6): the
// payload is a wake-up only, consumers read the rows.
type notifier struct {
	table, function, trigger string
	channel                  string // SQL expression of the channel name
	payload                  string // SQL expression of the payload
}

var schemaNotifiers = []notifier{
	{"ff_completion_event", "ff_notify_completion_event", "ff_completion_event_notify_trg", "'ff_completion'", "NEW.event_id::text"},
	{"ff_stream_frame", "ff_notify_stream_frame", "ff_stream_frame_notify_trg",
		"'ff_stream_' || NEW.execution_id::text || '_' || NEW.attempt_index::text", "NEW.ts_ms::text || '-' || NEW.seq::text"},
	{"ff_lease_event", "ff_notify_lease_event", "ff_lease_event_notify_trg", "'ff_lease_event'", "NEW.event_id::text"},
	{"ff_signal_event", "ff_notify_signal_event", "ff_signal_event_notify_trg", "'ff_signal_event'", "NEW.event_id::text"},
	{"ff_operator_event", "ff_notify_operator_event", "ff_operator_event_notify_trg", "'ff_operator_event'", "NEW.event_id::text"},
}
