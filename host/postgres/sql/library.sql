-- ffscan's function library on a FlowFabric Postgres database.
--
-- The host installs this file into the schema "ffscan" at boot (see
-- library.go) and records it in ffscan.library; FlowFabric's own objects
-- and its migration ledger are never touched. The functions find
-- FlowFabric's tables through the caller's search_path, the one in which
-- the host recognised the schema.
--
-- Shape, as the Lua library is to Valkey: the host reads candidates with
-- a candidate function (every partition of a cycle in one query), the
-- plugin decides, and each action is one call of an action function in a
-- transaction of its own. An action locks the rows it may change
-- (FOR UPDATE, attempt row before execution row, as FlowFabric's writers
-- do), re-checks the candidate's condition against the database clock and
-- acts or does nothing, so a stale candidate or a second host racing on
-- the same row cannot do harm. Replies have the shape of FlowFabric's Lua
-- replies: {'1', detail, ...} on success (a no-op is a success with its
-- reason), {'0', code} on refusal.

-- now_ms is the database's clock in Unix milliseconds. Every function
-- compares against it, never a host's clock (FlowFabric's reconcilers use
-- their own process clock: pitfall PG16).
CREATE OR REPLACE FUNCTION ffscan.now_ms() RETURNS bigint
LANGUAGE sql VOLATILE
AS $fn$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $fn$;

-- max_retries reads policy.retry_policy.max_retries as FlowFabric's
-- attempt_timeout does: a JSON unsigned integer, anything else (missing,
-- a string, negative, fractional) counts as 0.
CREATE OR REPLACE FUNCTION ffscan.max_retries(policy jsonb) RETURNS numeric
LANGUAGE sql IMMUTABLE
AS $fn$
	SELECT CASE
		WHEN jsonb_typeof(policy -> 'retry_policy' -> 'max_retries') = 'number'
			AND (policy -> 'retry_policy' ->> 'max_retries')::numeric >= 0
			AND (policy -> 'retry_policy' ->> 'max_retries')::numeric
				= trunc((policy -> 'retry_policy' ->> 'max_retries')::numeric)
		THEN (policy -> 'retry_policy' ->> 'max_retries')::numeric
		ELSE 0
	END
$fn$;

-- Candidate functions take the partitions to read and the most rows per
-- partition, and return (partition_key, member, score): the member names
-- what to act on, the score orders it (a due time in ms, for the lag).

-- lapsed_leases is attempt_timeout's candidate read: per partition in
-- parts, the attempts whose lease lapsed before now on executions that are
-- active, oldest lease first, at most per_partition each (postgres.md
-- §4.2). The member is '<execution uuid>/<attempt index>'; the score the
-- lease's expiry. One index scan of ff_attempt_lease_expiry_idx per
-- partition.
CREATE OR REPLACE FUNCTION ffscan.lapsed_leases(parts smallint[], per_partition integer)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql VOLATILE
AS $fn$
	SELECT c.partition_key, c.execution_id::text || '/' || c.attempt_index::text, c.lease_expires_at_ms
	FROM unnest(parts) AS p(k)
	CROSS JOIN LATERAL (
		SELECT a.partition_key, a.execution_id, a.attempt_index, a.lease_expires_at_ms
		FROM ff_attempt a
		JOIN ff_exec_core e ON e.partition_key = a.partition_key AND e.execution_id = a.execution_id
		WHERE a.partition_key = p.k
			AND a.lease_expires_at_ms IS NOT NULL
			AND a.lease_expires_at_ms < ffscan.now_ms()
			AND e.lifecycle_phase = 'active'
		ORDER BY a.lease_expires_at_ms
		LIMIT per_partition
	) AS c
$fn$;

-- expire_lapsed_lease decides a lapsed attempt lease of an active
-- execution: retry while the execution's attempt_index is below
-- policy.retry_policy.max_retries, else terminal with an 'expired'
-- completion event (postgres.md §4.2 and §7.2). It is the one owner of
-- that decision (FlowFabric's lease_expiry re-queues the same lapse
-- without counting a retry, so a worker dying on every attempt loops for
-- ever: PG3), and it fences the lost lease (PG4): the attempt's
-- lease_epoch goes up by one and its worker_instance_id is cleared, so a
-- worker that comes back cannot complete, fail or renew on it.
--
-- Replies: {'1','retried',<new attempt index>}, {'1','terminal'}, or a
-- no-op {'1', reason}: attempt_not_found, lease_released (the lease was
-- cleared meanwhile), lease_renewed (it no longer lapsed),
-- execution_not_found, not_active.
CREATE OR REPLACE FUNCTION ffscan.expire_lapsed_lease(pk smallint, eid uuid, att integer)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	lease bigint;
	phase text;
	cur_index integer;
	pol jsonb;
	flow uuid;
	raw jsonb;
	retry boolean;
BEGIN
	SELECT a.lease_expires_at_ms INTO lease
	FROM ff_attempt a
	WHERE a.partition_key = pk AND a.execution_id = eid AND a.attempt_index = att
	FOR UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'attempt_not_found'];
	END IF;
	IF lease IS NULL THEN
		RETURN ARRAY['1', 'lease_released'];
	END IF;
	IF lease >= now_ms THEN
		RETURN ARRAY['1', 'lease_renewed'];
	END IF;

	SELECT e.lifecycle_phase, e.attempt_index, e.policy, e.flow_id, e.raw_fields
	INTO phase, cur_index, pol, flow, raw
	FROM ff_exec_core e
	WHERE e.partition_key = pk AND e.execution_id = eid
	FOR UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'execution_not_found'];
	END IF;
	IF phase <> 'active' THEN
		RETURN ARRAY['1', 'not_active'];
	END IF;

	-- FlowFabric compares the execution's pointer, not the scanned
	-- attempt's index.
	retry := cur_index < ffscan.max_retries(pol);

	UPDATE ff_attempt a SET
		outcome = 'interrupted',
		lease_expires_at_ms = NULL,
		terminal_at_ms = now_ms,
		lease_epoch = a.lease_epoch + 1,
		worker_instance_id = NULL
	WHERE a.partition_key = pk AND a.execution_id = eid AND a.attempt_index = att;

	IF retry THEN
		UPDATE ff_exec_core e SET
			lifecycle_phase = 'runnable',
			ownership_state = 'unowned',
			eligibility_state = 'eligible_now',
			attempt_state = 'pending_retry_attempt',
			attempt_index = e.attempt_index + 1,
			raw_fields = e.raw_fields || jsonb_build_object('last_failure_message', 'attempt_timeout')
		WHERE e.partition_key = pk AND e.execution_id = eid;
	ELSE
		-- public_state is left as it is, as FlowFabric leaves it (PG7).
		UPDATE ff_exec_core e SET
			lifecycle_phase = 'terminal',
			ownership_state = 'unowned',
			eligibility_state = 'not_applicable',
			attempt_state = 'attempt_terminal',
			terminal_at_ms = now_ms,
			raw_fields = e.raw_fields || jsonb_build_object('last_failure_message', 'attempt_timeout')
		WHERE e.partition_key = pk AND e.execution_id = eid;
		INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
		VALUES (pk, eid, flow, 'expired', NULL, NULL, now_ms);
	END IF;

	-- The lease outbox carries the filter columns copied from the
	-- execution, as FlowFabric's lease producers write them.
	INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
	VALUES (eid::text, NULL, 'expired', now_ms, pk, raw ->> 'namespace', raw -> 'tags' ->> 'cairn.instance_id');

	IF retry THEN
		RETURN ARRAY['1', 'retried', (cur_index + 1)::text];
	END IF;
	RETURN ARRAY['1', 'terminal'];
END
$fn$;
