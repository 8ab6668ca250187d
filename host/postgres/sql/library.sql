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
--
-- Every candidate and action function takes the host's namespace /
-- instance-tag filter as its last three arguments (see keeps; NULL: no
-- filter). Candidate reads leave out other tenants' rows, and an action
-- asked about one answers the no-op {'1','filtered'}.

-- now_ms is the database's clock in Unix milliseconds. Every function
-- compares against it, never a host's clock (FlowFabric's reconcilers use
-- their own process clock: pitfall PG16).
CREATE OR REPLACE FUNCTION ffscan.now_ms() RETURNS bigint
LANGUAGE sql VOLATILE
AS $fn$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $fn$;

-- few_partitions is how many partitions a candidate function reads one
-- query each (see below).
CREATE OR REPLACE FUNCTION ffscan.few_partitions() RETURNS integer
LANGUAGE sql IMMUTABLE
AS $fn$ SELECT 16 $fn$;

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

-- keeps is the host's namespace / instance-tag filter (postgres.namespace,
-- postgres.instance_tag) applied to an execution's raw_fields: the
-- namespace must be the JSON string filter_namespace, and the tags object
-- must map filter_tag_key to the JSON string filter_tag_value. A NULL
-- filter part keeps everything; a missing execution (raw NULL) or a
-- raw_fields of another shape is not kept by a set filter. Every candidate
-- and action function takes the three filter arguments (NULL: none), so
-- one convention applies to every reconciler (FlowFabric has three, and
-- half of its reconcilers ignore the filter: PG12, PG13).
CREATE OR REPLACE FUNCTION ffscan.keeps(raw jsonb, filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS boolean
LANGUAGE sql STABLE
AS $fn$
	SELECT (filter_namespace IS NULL OR (raw -> 'namespace') = to_jsonb(filter_namespace)) IS TRUE
		AND (filter_tag_key IS NULL OR (raw -> 'tags' -> filter_tag_key) = to_jsonb(filter_tag_value)) IS TRUE
$fn$;

-- filtered says whether a filter is set at all (the functions skip the
-- reads the filter needs when it is not).
CREATE OR REPLACE FUNCTION ffscan.filtered(filter_namespace text, filter_tag_key text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $fn$ SELECT filter_namespace IS NOT NULL OR filter_tag_key IS NOT NULL $fn$;

-- keeps_execution applies the filter to an execution by its key: true
-- when no filter is set, else when the execution exists and keeps() keeps
-- it (an execution that is gone cannot be told to be the host's). It is
-- PL/pgSQL and asks nothing of the database when no filter is set; its
-- lookup is planned for the partition it is given (a custom plan). As an
-- SQL function it was planned at every call over all 256 partitions of
-- ff_exec_core, filter or not: 40-60 ms a call, called for every row of a
-- completion read and in every dispatch.
CREATE OR REPLACE FUNCTION ffscan.keeps_execution(pk integer, eid uuid, filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $fn$
DECLARE
	raw jsonb;
BEGIN
	IF NOT ffscan.filtered(filter_namespace, filter_tag_key) THEN
		RETURN true;
	END IF;
	SELECT x.raw_fields INTO raw FROM ff_exec_core x WHERE x.partition_key = pk AND x.execution_id = eid;
	RETURN FOUND AND ffscan.keeps(raw, filter_namespace, filter_tag_key, filter_tag_value);
END
$fn$;

-- Candidate functions take the partitions to read, the most rows per
-- partition and how many partitions the family has (only the worker
-- registry, whose partitions are not the host's, needs it), and return
-- (partition_key, member, score): the member names what to act on, the
-- score orders it (a due time in ms, for the lag).
--
-- Each is two functions. <name>_in(partition, ...) is the read of one
-- partition: an SQL function PostgreSQL inlines into the query that calls
-- it. <name>(parts, ...) is PL/pgSQL, without JIT (the plan's estimated
-- cost over every partition crosses jit_above_cost, and compiling it took
-- PostgreSQL 15 about 12 s), and reads its partitions in one of two ways,
-- by how many there are:
-- - few (up to ffscan.few_partitions(): a wake-up's handful): one query
--   per partition, planned at each run for its key (EXECUTE), so the plan
--   names that key's child alone (0.2-0.4 ms per partition and function
--   on an idle PostgreSQL 15, where one query over every partition takes
--   1.4-4 ms however few it reads). No plan is kept, so none is
--   invalidated: a vacuum or analyze of any child (autovacuum) drops
--   every plan over the table, and the first run after re-plans all 256
--   children (200 ms measured for a due read with its next-due read);
-- - more: one query over every partition of the tables, unnested, each
--   narrowed to one child at run time, planned once per connection (a
--   generic plan, force_generic_plan) and started once for the whole
--   read.
-- Both read the same rows, in the order of parts.
--
-- Each time-scored candidate function <name> (lapsed_leases, stale_leases,
-- deadlines_passed, delays_due, waitpoints_expired, suspensions_timed_out,
-- budgets_due, workers_expired) has a companion <name>_next(parts,
-- partition_count, as_of_ms, filter...) returning, per partition asked,
-- at most one row (partition_key, member, due_at_ms): the entry that is
-- due next. It is the earliest entry that meets every condition of <name>
-- (phase, eligibility, state, joins, filter) except that it is not due at
-- as_of_ms, the exact complement of <name>'s time bound there (< or <=,
-- on the same stored or computed time), and due_at_ms is the first
-- database millisecond at which <name>'s bound holds for it: the time
-- itself for an inclusive bound (delays_due, budgets_due), one past it
-- for a strict one. as_of_ms is the clock the caller read before the due
-- read (NULL: now_ms()), so that an entry coming due while the two run is
-- in one of them: an entry <name> left out because it was not due when
-- its row was read was not due at as_of_ms either. The host reads both in
-- one query and wakes the partition at due_at_ms (a wake-up, as the
-- Valkey sources' rank read gives it). One more index probe (LIMIT 1) per
-- partition, on the index the due read uses. The functions that are not
-- time-scored (completions_undispatched, a 15 s safety net behind the
-- completion listener; completions_pending; cancel_groups_pending) have
-- none: their scanners keep polling.

-- lapsed_leases is attempt_timeout's candidate read: per partition in
-- parts, the attempts whose lease lapsed before now on executions that are
-- active, oldest lease first, at most per_partition each (postgres.md
-- §4.2). The member is '<execution uuid>/<attempt index>'; the score the
-- lease's expiry. One index scan of ff_attempt_lease_expiry_idx per
-- partition.
CREATE OR REPLACE FUNCTION ffscan.lapsed_leases_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text || '/' || c.attempt_index::text, c.lease_expires_at_ms
		FROM (
			SELECT a.partition_key, a.execution_id, a.attempt_index, a.lease_expires_at_ms
			FROM ff_attempt a
			JOIN ff_exec_core e ON e.partition_key = a.partition_key AND e.execution_id = a.execution_id
			WHERE a.partition_key = read_pk
				AND a.lease_expires_at_ms IS NOT NULL
				AND a.lease_expires_at_ms < ffscan.now_ms()
				AND e.lifecycle_phase = 'active'
				AND ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value)
			ORDER BY a.lease_expires_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.lapsed_leases(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.lapsed_leases_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.lapsed_leases_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- lapsed_leases_next: per partition, the lease lapsed_leases returns next:
-- the earliest lease of an active execution that has not lapsed at
-- as_of_ms (lease >= as_of_ms), and when it lapses (lease + 1).
CREATE OR REPLACE FUNCTION ffscan.lapsed_leases_next_in(read_pk smallint, read_as_of bigint,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text || '/' || c.attempt_index::text, least(c.lease_expires_at_ms, 9223372036854775806) + 1
		FROM (
			SELECT a.partition_key, a.execution_id, a.attempt_index, a.lease_expires_at_ms
			FROM ff_attempt a
			JOIN ff_exec_core e ON e.partition_key = a.partition_key AND e.execution_id = a.execution_id
			WHERE a.partition_key = read_pk
				AND a.lease_expires_at_ms IS NOT NULL
				AND a.lease_expires_at_ms >= read_as_of
				AND e.lifecycle_phase = 'active'
				AND ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value)
			ORDER BY a.lease_expires_at_ms
			LIMIT 1
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.lapsed_leases_next(parts smallint[], partition_count integer, as_of_ms bigint,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	t bigint := coalesce(as_of_ms, ffscan.now_ms());
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.lapsed_leases_next_in($1, $2, $3, $4, $5)'
				USING one, t, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.lapsed_leases_next_in(p.k, t, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
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
-- execution_not_found, not_active; {'0','malformed_raw_fields'} for an
-- execution whose raw_fields is not a JSON object (nothing is changed).
CREATE OR REPLACE FUNCTION ffscan.expire_lapsed_lease(pk smallint, eid uuid, att integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
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
	IF NOT ffscan.keeps(raw, filter_namespace, filter_tag_key, filter_tag_value) THEN
		RETURN ARRAY['1', 'filtered'];
	END IF;
	IF phase <> 'active' THEN
		RETURN ARRAY['1', 'not_active'];
	END IF;
	IF jsonb_typeof(raw) IS DISTINCT FROM 'object' THEN
		-- Merging into it would turn it into an array: refuse, change
		-- nothing.
		RETURN ARRAY['0', 'malformed_raw_fields'];
	END IF;

	-- FlowFabric compares the execution's pointer, not the scanned
	-- attempt's index.
	retry := cur_index < ffscan.max_retries(pol);

	PERFORM ffscan.fence_lease(pk, eid, att, 'interrupted', now_ms, true);

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

	PERFORM ffscan.lease_event(pk, eid, 'expired', raw, now_ms);

	IF retry THEN
		RETURN ARRAY['1', 'retried', (cur_index + 1)::text];
	END IF;
	RETURN ARRAY['1', 'terminal'];
END
$fn$;

-- expire_lapsed_leases decides a batch of lapsed attempt leases of one
-- partition in one statement, and so in one transaction: each item exactly
-- as expire_lapsed_lease decides it (the same rows written, the same
-- reply), one row (ord, reply) per item, ord the item's place (from 1) in
-- the arrays given. It is the host's, not a plugin's: the host runs a
-- scanner's PGCALLs of expire_lapsed_lease on one partition through it
-- (library version 7), so a partition's lapses cost one transaction, and
-- one commit, per batch instead of one per lapse. Every terminal expiry
-- inserts a completion event, whose trigger NOTIFYs ff_completion, and a
-- transaction that notified takes the notification queue's lock at its
-- commit, one commit at a time: one per lapse, that lock set the pace of
-- several hosts' expiries (docs/performance-history.md, issue 45). The items are
-- decided in (execution, attempt) order, so two batches that share
-- executions lock them in one order (the host retries a deadlock, which
-- only two lapsed attempts of one execution in two batches could make).
CREATE OR REPLACE FUNCTION ffscan.expire_lapsed_leases(pk smallint, eids uuid[], atts integer[],
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (ord integer, reply text[])
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	it record;
BEGIN
	IF coalesce(cardinality(eids), 0) <> coalesce(cardinality(atts), 0) THEN
		RAISE EXCEPTION 'expire_lapsed_leases: % executions and % attempt indexes', cardinality(eids), cardinality(atts);
	END IF;
	FOR it IN
		SELECT u.n::integer AS n, u.e, u.a
		FROM unnest(eids, atts) WITH ORDINALITY AS u(e, a, n)
		ORDER BY u.e, u.a, u.n
	LOOP
		ord := it.n;
		reply := ffscan.expire_lapsed_lease(pk, it.e, it.a, filter_namespace, filter_tag_key, filter_tag_value);
		RETURN NEXT;
	END LOOP;
END
$fn$;

-- fence_lease ends an attempt's lease: the lease is cleared, the
-- lease_epoch goes up by one and worker_instance_id is cleared, so the
-- worker that held it cannot complete, fail or renew on it any more (PG4:
-- FlowFabric's reconcilers leave both, and its worker calls fence on the
-- epoch alone). Returns whether the attempt row exists.
CREATE OR REPLACE FUNCTION ffscan.fence_lease(pk smallint, eid uuid, att integer, new_outcome text, now_ms bigint, set_terminal boolean)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $fn$
BEGIN
	UPDATE ff_attempt a SET
		outcome = new_outcome,
		lease_expires_at_ms = NULL,
		terminal_at_ms = CASE WHEN set_terminal THEN now_ms ELSE a.terminal_at_ms END,
		lease_epoch = a.lease_epoch + 1,
		worker_instance_id = NULL
	WHERE a.partition_key = pk AND a.execution_id = eid AND a.attempt_index = att;
	RETURN FOUND;
END
$fn$;

-- lease_event writes FlowFabric's lease outbox row, with the filter
-- columns copied from the execution's raw_fields (NULL when there is none).
CREATE OR REPLACE FUNCTION ffscan.lease_event(pk smallint, eid uuid, kind text, raw jsonb, now_ms bigint)
RETURNS void
LANGUAGE sql VOLATILE
AS $fn$
	INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
	VALUES (eid::text, NULL, kind, now_ms, pk, raw ->> 'namespace', raw -> 'tags' ->> 'cairn.instance_id')
$fn$;

-- ---------------------------------------------------------------------
-- lease_expiry (postgres.md §4.1), one owner per lapse (PG3).
--
-- FlowFabric's lease_expiry and attempt_timeout both act on every lapsed
-- lease of an active execution, and when lease_expiry wins no retry is
-- counted, so a worker that dies on every attempt loops for ever. Here
-- attempt_timeout (expire_lapsed_lease) owns the lapses of active
-- executions; lease_expiry clears the lapsed leases left on executions
-- that are not active (or are gone), as FlowFabric's does for them.

-- stale_leases: lapsed leases whose execution is not active or missing;
-- member '<execution uuid>/<attempt index>', score the lease's expiry.
CREATE OR REPLACE FUNCTION ffscan.stale_leases_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text || '/' || c.attempt_index::text, c.lease_expires_at_ms
		FROM (
			SELECT a.partition_key, a.execution_id, a.attempt_index, a.lease_expires_at_ms
			FROM ff_attempt a
			LEFT JOIN ff_exec_core e ON e.partition_key = a.partition_key AND e.execution_id = a.execution_id
			WHERE a.partition_key = read_pk
				AND a.lease_expires_at_ms IS NOT NULL
				AND a.lease_expires_at_ms < ffscan.now_ms()
				AND (e.execution_id IS NULL OR (e.lifecycle_phase <> 'active' AND ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value)))
			ORDER BY a.lease_expires_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.stale_leases(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.stale_leases_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.stale_leases_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- stale_leases_next: per partition, the earliest lease on an execution that
-- is not active (or missing) that has not lapsed at as_of_ms, and when it
-- lapses (lease + 1).
CREATE OR REPLACE FUNCTION ffscan.stale_leases_next_in(read_pk smallint, read_as_of bigint,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text || '/' || c.attempt_index::text, least(c.lease_expires_at_ms, 9223372036854775806) + 1
		FROM (
			SELECT a.partition_key, a.execution_id, a.attempt_index, a.lease_expires_at_ms
			FROM ff_attempt a
			LEFT JOIN ff_exec_core e ON e.partition_key = a.partition_key AND e.execution_id = a.execution_id
			WHERE a.partition_key = read_pk
				AND a.lease_expires_at_ms IS NOT NULL
				AND a.lease_expires_at_ms >= read_as_of
				AND (e.execution_id IS NULL OR (e.lifecycle_phase <> 'active' AND ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value)))
			ORDER BY a.lease_expires_at_ms
			LIMIT 1
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.stale_leases_next(parts smallint[], partition_count integer, as_of_ms bigint,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	t bigint := coalesce(as_of_ms, ffscan.now_ms());
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.stale_leases_next_in($1, $2, $3, $4, $5)'
				USING one, t, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.stale_leases_next_in(p.k, t, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- release_stale_lease: {'1','released'}, or a no-op {'1', reason}:
-- attempt_not_found, lease_released, lease_renewed, active (the lapse is
-- attempt_timeout's).
CREATE OR REPLACE FUNCTION ffscan.release_stale_lease(pk smallint, eid uuid, att integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	lease bigint;
	phase text;
	raw jsonb;
BEGIN
	SELECT a.lease_expires_at_ms INTO lease FROM ff_attempt a
	WHERE a.partition_key = pk AND a.execution_id = eid AND a.attempt_index = att FOR UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'attempt_not_found'];
	END IF;
	IF lease IS NULL THEN
		RETURN ARRAY['1', 'lease_released'];
	END IF;
	IF lease >= now_ms THEN
		RETURN ARRAY['1', 'lease_renewed'];
	END IF;
	SELECT e.lifecycle_phase, e.raw_fields INTO phase, raw FROM ff_exec_core e
	WHERE e.partition_key = pk AND e.execution_id = eid FOR UPDATE;
	-- An attempt whose execution is gone belongs to no tenant: any host
	-- releases it.
	IF FOUND AND NOT ffscan.keeps(raw, filter_namespace, filter_tag_key, filter_tag_value) THEN
		RETURN ARRAY['1', 'filtered'];
	END IF;
	IF FOUND AND phase = 'active' THEN
		RETURN ARRAY['1', 'active'];
	END IF;
	PERFORM ffscan.fence_lease(pk, eid, att, 'lease_expired_reclaimable', now_ms, false);
	PERFORM ffscan.lease_event(pk, eid, 'expired', raw, now_ms);
	RETURN ARRAY['1', 'released'];
END
$fn$;

-- ---------------------------------------------------------------------
-- execution_deadline (postgres.md §4.4; never scheduled by FlowFabric,
-- PG1).

-- deadlines_passed: active executions whose deadline passed; member the
-- execution uuid, score the deadline.
CREATE OR REPLACE FUNCTION ffscan.deadlines_passed_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text, c.deadline_at_ms
		FROM (
			SELECT e.partition_key, e.execution_id, e.deadline_at_ms
			FROM ff_exec_core e
			WHERE e.partition_key = read_pk
				AND e.deadline_at_ms IS NOT NULL
				AND e.deadline_at_ms < ffscan.now_ms()
				AND e.lifecycle_phase = 'active'
				AND ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value)
			ORDER BY e.deadline_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.deadlines_passed(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.deadlines_passed_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.deadlines_passed_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- deadlines_passed_next: per partition, the earliest deadline of an active
-- execution that has not passed at as_of_ms, and when it passes
-- (deadline + 1).
CREATE OR REPLACE FUNCTION ffscan.deadlines_passed_next_in(read_pk smallint, read_as_of bigint,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text, least(c.deadline_at_ms, 9223372036854775806) + 1
		FROM (
			SELECT e.partition_key, e.execution_id, e.deadline_at_ms
			FROM ff_exec_core e
			WHERE e.partition_key = read_pk
				AND e.deadline_at_ms IS NOT NULL
				AND e.deadline_at_ms >= read_as_of
				AND e.lifecycle_phase = 'active'
				AND ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value)
			ORDER BY e.deadline_at_ms
			LIMIT 1
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.deadlines_passed_next(parts smallint[], partition_count integer, as_of_ms bigint,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	t bigint := coalesce(as_of_ms, ffscan.now_ms());
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.deadlines_passed_next_in($1, $2, $3, $4, $5)'
				USING one, t, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.deadlines_passed_next_in(p.k, t, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- expire_execution_deadline ends an active execution whose deadline
-- passed: its current attempt interrupted (and fenced), the execution
-- terminal with an 'expired' completion and a lease event. Replies
-- {'1','expired'} or a no-op {'1', reason}: execution_not_found,
-- not_active, not_due.
CREATE OR REPLACE FUNCTION ffscan.expire_execution_deadline(pk smallint, eid uuid,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	e record;
BEGIN
	SELECT x.lifecycle_phase, x.deadline_at_ms, x.attempt_index, x.flow_id, x.raw_fields INTO e
	FROM ff_exec_core x WHERE x.partition_key = pk AND x.execution_id = eid FOR UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'execution_not_found'];
	END IF;
	IF NOT ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value) THEN
		RETURN ARRAY['1', 'filtered'];
	END IF;
	IF e.lifecycle_phase <> 'active' THEN
		RETURN ARRAY['1', 'not_active'];
	END IF;
	IF e.deadline_at_ms IS NULL OR e.deadline_at_ms >= now_ms THEN
		RETURN ARRAY['1', 'not_due'];
	END IF;
	IF jsonb_typeof(e.raw_fields) IS DISTINCT FROM 'object' THEN
		RETURN ARRAY['0', 'malformed_raw_fields'];
	END IF;
	-- The execution's pointer may name no attempt row (PG5): then no
	-- lease is cleared, as FlowFabric's does.
	PERFORM ffscan.fence_lease(pk, eid, e.attempt_index, 'interrupted', now_ms, true);
	UPDATE ff_exec_core x SET
		lifecycle_phase = 'terminal',
		ownership_state = 'unowned',
		eligibility_state = 'not_applicable',
		attempt_state = 'attempt_terminal',
		terminal_at_ms = now_ms,
		raw_fields = x.raw_fields || jsonb_build_object('last_failure_message', 'execution_deadline')
	WHERE x.partition_key = pk AND x.execution_id = eid;
	INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
	VALUES (pk, eid, e.flow_id, 'expired', NULL, NULL, now_ms);
	PERFORM ffscan.lease_event(pk, eid, 'expired', e.raw_fields, now_ms);
	RETURN ARRAY['1', 'expired'];
END
$fn$;

-- ---------------------------------------------------------------------
-- delayed_promoter (postgres.md §4.5; never scheduled by FlowFabric,
-- PG1).

-- delays_due: runnable executions waiting for a time (attempt::delay
-- keeps it in deadline_at_ms) that came; member the execution uuid.
CREATE OR REPLACE FUNCTION ffscan.delays_due_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text, c.deadline_at_ms
		FROM (
			SELECT e.partition_key, e.execution_id, e.deadline_at_ms
			FROM ff_exec_core e
			WHERE e.partition_key = read_pk
				AND e.deadline_at_ms IS NOT NULL
				AND e.deadline_at_ms <= ffscan.now_ms()
				AND e.lifecycle_phase = 'runnable'
				AND e.eligibility_state = 'not_eligible_until_time'
				AND ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value)
			ORDER BY e.deadline_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.delays_due(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.delays_due_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.delays_due_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- delays_due_next: per partition, the earliest delayed execution whose time
-- has not come at as_of_ms (deadline > as_of_ms), and when it comes (the
-- deadline itself: delays_due's bound is inclusive).
CREATE OR REPLACE FUNCTION ffscan.delays_due_next_in(read_pk smallint, read_as_of bigint,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text, c.deadline_at_ms
		FROM (
			SELECT e.partition_key, e.execution_id, e.deadline_at_ms
			FROM ff_exec_core e
			WHERE e.partition_key = read_pk
				AND e.deadline_at_ms IS NOT NULL
				AND e.deadline_at_ms > read_as_of
				AND e.lifecycle_phase = 'runnable'
				AND e.eligibility_state = 'not_eligible_until_time'
				AND ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value)
			ORDER BY e.deadline_at_ms
			LIMIT 1
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.delays_due_next(parts smallint[], partition_count integer, as_of_ms bigint,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	t bigint := coalesce(as_of_ms, ffscan.now_ms());
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.delays_due_next_in($1, $2, $3, $4, $5)'
				USING one, t, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.delays_due_next_in(p.k, t, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- promote_delayed makes a delayed execution eligible, as FlowFabric's
-- promote_delayed does (deadline_at_ms, which held the delay, is cleared).
-- Replies {'1','promoted'} or a no-op {'1', reason}: execution_not_found,
-- not_delayed, not_due.
CREATE OR REPLACE FUNCTION ffscan.promote_delayed(pk smallint, eid uuid,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	e record;
BEGIN
	SELECT x.lifecycle_phase, x.eligibility_state, x.deadline_at_ms, x.raw_fields INTO e
	FROM ff_exec_core x WHERE x.partition_key = pk AND x.execution_id = eid FOR UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'execution_not_found'];
	END IF;
	IF NOT ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value) THEN
		RETURN ARRAY['1', 'filtered'];
	END IF;
	IF e.lifecycle_phase <> 'runnable' OR e.eligibility_state <> 'not_eligible_until_time' THEN
		RETURN ARRAY['1', 'not_delayed'];
	END IF;
	IF e.deadline_at_ms IS NULL OR e.deadline_at_ms > now_ms THEN
		RETURN ARRAY['1', 'not_due'];
	END IF;
	UPDATE ff_exec_core x SET eligibility_state = 'eligible_now', deadline_at_ms = NULL
	WHERE x.partition_key = pk AND x.execution_id = eid;
	RETURN ARRAY['1', 'promoted'];
END
$fn$;

-- ---------------------------------------------------------------------
-- pending_wp_expiry (postgres.md §4.6; never scheduled by FlowFabric,
-- PG1).
--
-- Only waitpoints still 'pending' expire here: an 'active' one belongs to
-- a suspension, whose timeout (expires_at_ms is the suspension's timeout)
-- suspension_timeout handles; FlowFabric's would delete it too (PG9).

-- waitpoints_expired: pending waitpoints past their expiry; member the
-- waitpoint uuid, score the expiry.
CREATE OR REPLACE FUNCTION ffscan.waitpoints_expired_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.waitpoint_id::text, c.expires_at_ms
		FROM (
			SELECT w.partition_key, w.waitpoint_id, w.expires_at_ms
			FROM ff_waitpoint_pending w
			LEFT JOIN ff_exec_core e ON e.partition_key = w.partition_key AND e.execution_id = w.execution_id
			WHERE w.partition_key = read_pk
				AND w.expires_at_ms IS NOT NULL
				AND w.expires_at_ms < ffscan.now_ms()
				AND w.state = 'pending'
				AND (e.execution_id IS NULL OR ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value))
			ORDER BY w.expires_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.waitpoints_expired(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.waitpoints_expired_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.waitpoints_expired_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- waitpoints_expired_next: per partition, the earliest pending waitpoint
-- that has not expired at as_of_ms, and when it expires (expiry + 1).
CREATE OR REPLACE FUNCTION ffscan.waitpoints_expired_next_in(read_pk smallint, read_as_of bigint,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.waitpoint_id::text, least(c.expires_at_ms, 9223372036854775806) + 1
		FROM (
			SELECT w.partition_key, w.waitpoint_id, w.expires_at_ms
			FROM ff_waitpoint_pending w
			LEFT JOIN ff_exec_core e ON e.partition_key = w.partition_key AND e.execution_id = w.execution_id
			WHERE w.partition_key = read_pk
				AND w.expires_at_ms IS NOT NULL
				AND w.expires_at_ms >= read_as_of
				AND w.state = 'pending'
				AND (e.execution_id IS NULL OR ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value))
			ORDER BY w.expires_at_ms
			LIMIT 1
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.waitpoints_expired_next(parts smallint[], partition_count integer, as_of_ms bigint,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	t bigint := coalesce(as_of_ms, ffscan.now_ms());
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.waitpoints_expired_next_in($1, $2, $3, $4, $5)'
				USING one, t, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.waitpoints_expired_next_in(p.k, t, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- expire_pending_waitpoint deletes a pending waitpoint past its expiry and
-- marks it in its execution's current suspension, if there is one, as
-- FlowFabric's close_waitpoint does ({status:'never_committed', ...} under
-- the waitpoint's key). Replies {'1','expired'} or a no-op {'1', reason}:
-- waitpoint_not_found, not_pending, not_due.
CREATE OR REPLACE FUNCTION ffscan.expire_pending_waitpoint(pk smallint, wpid uuid,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	w record;
	mm jsonb;
	raw jsonb;
BEGIN
	SELECT x.execution_id, x.expires_at_ms, x.state, x.waitpoint_key INTO w
	FROM ff_waitpoint_pending x WHERE x.partition_key = pk AND x.waitpoint_id = wpid FOR UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'waitpoint_not_found'];
	END IF;
	IF w.state <> 'pending' THEN
		RETURN ARRAY['1', 'not_pending'];
	END IF;
	IF w.expires_at_ms IS NULL OR w.expires_at_ms >= now_ms THEN
		RETURN ARRAY['1', 'not_due'];
	END IF;
	IF ffscan.filtered(filter_namespace, filter_tag_key) THEN
		-- A waitpoint whose execution is gone belongs to no tenant.
		SELECT x.raw_fields INTO raw FROM ff_exec_core x WHERE x.partition_key = pk AND x.execution_id = w.execution_id;
		IF FOUND AND NOT ffscan.keeps(raw, filter_namespace, filter_tag_key, filter_tag_value) THEN
			RETURN ARRAY['1', 'filtered'];
		END IF;
	END IF;
	DELETE FROM ff_waitpoint_pending x WHERE x.partition_key = pk AND x.waitpoint_id = wpid;
	SELECT s.member_map INTO mm FROM ff_suspension_current s
	WHERE s.partition_key = pk AND s.execution_id = w.execution_id FOR UPDATE;
	IF FOUND THEN
		IF jsonb_typeof(mm) IS DISTINCT FROM 'object' THEN
			mm := '{}'::jsonb;
		END IF;
		UPDATE ff_suspension_current s SET member_map = mm || jsonb_build_object(
			coalesce(nullif(w.waitpoint_key, ''), wpid::text),
			jsonb_build_object('status', 'never_committed', 'closed_at_ms', now_ms, 'source', 'pending_wp_expiry'))
		WHERE s.partition_key = pk AND s.execution_id = w.execution_id;
	END IF;
	RETURN ARRAY['1', 'expired'];
END
$fn$;

-- ---------------------------------------------------------------------
-- suspension_timeout (postgres.md §4.3), acting only on the suspension it
-- was read for and only while the execution is suspended (PG8), with the
-- behaviour read under the row lock (PG9).

-- suspensions_timed_out: suspensions past their timeout; member
-- '<execution uuid>/<suspension uuid>', score the timeout.
CREATE OR REPLACE FUNCTION ffscan.suspensions_timed_out_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text || '/' || c.suspension_id::text, c.timeout_at_ms
		FROM (
			SELECT s.partition_key, s.execution_id, s.suspension_id, s.timeout_at_ms
			FROM ff_suspension_current s
			LEFT JOIN ff_exec_core e ON e.partition_key = s.partition_key AND e.execution_id = s.execution_id
			WHERE s.partition_key = read_pk
				AND s.timeout_at_ms IS NOT NULL
				AND s.timeout_at_ms < ffscan.now_ms()
				AND (e.execution_id IS NULL OR ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value))
			ORDER BY s.timeout_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.suspensions_timed_out(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.suspensions_timed_out_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.suspensions_timed_out_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- suspensions_timed_out_next: per partition, the earliest suspension that
-- has not timed out at as_of_ms, and when it does (timeout + 1).
CREATE OR REPLACE FUNCTION ffscan.suspensions_timed_out_next_in(read_pk smallint, read_as_of bigint,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.execution_id::text || '/' || c.suspension_id::text, least(c.timeout_at_ms, 9223372036854775806) + 1
		FROM (
			SELECT s.partition_key, s.execution_id, s.suspension_id, s.timeout_at_ms
			FROM ff_suspension_current s
			LEFT JOIN ff_exec_core e ON e.partition_key = s.partition_key AND e.execution_id = s.execution_id
			WHERE s.partition_key = read_pk
				AND s.timeout_at_ms IS NOT NULL
				AND s.timeout_at_ms >= read_as_of
				AND (e.execution_id IS NULL OR ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value))
			ORDER BY s.timeout_at_ms
			LIMIT 1
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.suspensions_timed_out_next(parts smallint[], partition_count integer, as_of_ms bigint,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	t bigint := coalesce(as_of_ms, ffscan.now_ms());
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.suspensions_timed_out_next_in($1, $2, $3, $4, $5)'
				USING one, t, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.suspensions_timed_out_next_in(p.k, t, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- expire_suspension applies a suspension's timeout behaviour (NULL counts
-- as 'fail'), as FlowFabric's suspension_timeout does:
-- auto_resume_with_timeout_signal appends the timeout to
-- member_map.__timeout__ and clears the timeout ({'1','timeout_signal'});
-- anything else ends the execution ({'1','terminal'}) with
-- cancellation_reason suspension_timeout_<behaviour> (fail for unknown
-- behaviours), deletes the suspension and writes a completion event
-- ('cancelled' for cancel, else 'expired').
--
-- A suspension that is no longer current (replaced, or its execution
-- resumed: FlowFabric keeps the row with its timeout, PG8) never ends the
-- execution: a replaced one is left alone ({'1','suspension_replaced'}),
-- and the stale timeout of an execution that is not suspended any more is
-- cleared so it is not read again ({'1','stale_suspension'}). Other no-ops:
-- suspension_not_found, not_due.
CREATE OR REPLACE FUNCTION ffscan.expire_suspension(pk smallint, eid uuid, sid uuid,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	s record;
	e record;
	behaviour text;
	mm jsonb;
BEGIN
	SELECT x.suspension_id, x.timeout_at_ms, x.timeout_behavior, x.member_map INTO s
	FROM ff_suspension_current x WHERE x.partition_key = pk AND x.execution_id = eid FOR UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'suspension_not_found'];
	END IF;
	IF s.suspension_id <> sid THEN
		RETURN ARRAY['1', 'suspension_replaced'];
	END IF;
	IF s.timeout_at_ms IS NULL OR s.timeout_at_ms >= now_ms THEN
		RETURN ARRAY['1', 'not_due'];
	END IF;
	SELECT x.lifecycle_phase, x.flow_id, x.raw_fields INTO e
	FROM ff_exec_core x WHERE x.partition_key = pk AND x.execution_id = eid FOR UPDATE;
	-- A suspension whose execution is gone belongs to no tenant.
	IF FOUND AND NOT ffscan.keeps(e.raw_fields, filter_namespace, filter_tag_key, filter_tag_value) THEN
		RETURN ARRAY['1', 'filtered'];
	END IF;
	IF NOT FOUND OR e.lifecycle_phase <> 'suspended' THEN
		UPDATE ff_suspension_current x SET timeout_at_ms = NULL
		WHERE x.partition_key = pk AND x.execution_id = eid;
		RETURN ARRAY['1', 'stale_suspension'];
	END IF;
	behaviour := coalesce(s.timeout_behavior, 'fail');
	IF behaviour = 'auto_resume_with_timeout_signal' THEN
		mm := s.member_map;
		IF jsonb_typeof(mm) IS DISTINCT FROM 'object' THEN
			mm := '{}'::jsonb;
		END IF;
		IF jsonb_typeof(mm -> '__timeout__') IS DISTINCT FROM 'array' THEN
			mm := mm || jsonb_build_object('__timeout__', '[]'::jsonb);
		END IF;
		mm := jsonb_set(mm, '{__timeout__}', (mm -> '__timeout__') || jsonb_build_array(jsonb_build_object(
			'signal_name', 'timeout', 'payload', NULL, 'delivered_at_ms', now_ms, 'source', 'suspension_timeout')));
		UPDATE ff_suspension_current x SET member_map = mm, timeout_at_ms = NULL
		WHERE x.partition_key = pk AND x.execution_id = eid;
		RETURN ARRAY['1', 'timeout_signal'];
	END IF;
	IF jsonb_typeof(e.raw_fields) IS DISTINCT FROM 'object' THEN
		RETURN ARRAY['0', 'malformed_raw_fields'];
	END IF;
	UPDATE ff_exec_core x SET
		lifecycle_phase = 'terminal',
		ownership_state = 'unowned',
		eligibility_state = 'not_applicable',
		attempt_state = 'attempt_terminal',
		terminal_at_ms = now_ms,
		cancellation_reason = 'suspension_timeout_' || CASE WHEN behaviour IN ('cancel', 'expire', 'escalate') THEN behaviour ELSE 'fail' END,
		raw_fields = x.raw_fields || jsonb_build_object('last_failure_message', 'suspension_timeout')
	WHERE x.partition_key = pk AND x.execution_id = eid;
	DELETE FROM ff_suspension_current x WHERE x.partition_key = pk AND x.execution_id = eid;
	INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
	VALUES (pk, eid, e.flow_id, CASE WHEN behaviour = 'cancel' THEN 'cancelled' ELSE 'expired' END, NULL, NULL, now_ms);
	RETURN ARRAY['1', 'terminal'];
END
$fn$;

-- ---------------------------------------------------------------------
-- budget_reset (postgres.md §4.7): budget partitions.

-- budgets_due: budgets whose scheduled reset came; member the budget id,
-- score the reset time.
CREATE OR REPLACE FUNCTION ffscan.budgets_due_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	-- Budgets belong to no execution: the filter does not apply.
	SELECT c.partition_key, c.budget_id, c.next_reset_at_ms
		FROM (
			SELECT b.partition_key, b.budget_id, b.next_reset_at_ms
			FROM ff_budget_policy b
			WHERE b.partition_key = read_pk
				AND b.next_reset_at_ms IS NOT NULL
				AND b.next_reset_at_ms <= ffscan.now_ms()
			ORDER BY b.next_reset_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.budgets_due(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.budgets_due_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.budgets_due_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- budgets_due_next: per partition, the earliest scheduled reset that has
-- not come at as_of_ms (reset > as_of_ms), and when it comes (the reset
-- time itself: budgets_due's bound is inclusive).
CREATE OR REPLACE FUNCTION ffscan.budgets_due_next_in(read_pk smallint, read_as_of bigint,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.budget_id, c.next_reset_at_ms
		FROM (
			SELECT b.partition_key, b.budget_id, b.next_reset_at_ms
			FROM ff_budget_policy b
			WHERE b.partition_key = read_pk
				AND b.next_reset_at_ms IS NOT NULL
				AND b.next_reset_at_ms > read_as_of
			ORDER BY b.next_reset_at_ms
			LIMIT 1
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.budgets_due_next(parts smallint[], partition_count integer, as_of_ms bigint,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	t bigint := coalesce(as_of_ms, ffscan.now_ms());
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.budgets_due_next_in($1, $2, $3, $4, $5)'
				USING one, t, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.budgets_due_next_in(p.k, t, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- reset_budget zeroes a due budget's usage and schedules its next reset
-- (now + policy_json.reset_interval_ms when that is a positive integer,
-- else none), clearing the last breach; breach counters, per-execution
-- usage and dedup rows are kept. The host runs it SERIALIZABLE, as
-- FlowFabric does. Replies {'1','reset'} or a no-op {'1', reason}:
-- budget_not_found, not_due.
CREATE OR REPLACE FUNCTION ffscan.reset_budget(pk smallint, bid text,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	due bigint;
	pol jsonb;
	interval_ms numeric;
BEGIN
	SELECT b.next_reset_at_ms, b.policy_json INTO due, pol FROM ff_budget_policy b
	WHERE b.partition_key = pk AND b.budget_id = bid FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'budget_not_found'];
	END IF;
	IF due IS NULL OR due > now_ms THEN
		RETURN ARRAY['1', 'not_due'];
	END IF;
	UPDATE ff_budget_usage u SET current_value = 0, last_reset_at_ms = now_ms, updated_at_ms = now_ms
	WHERE u.partition_key = pk AND u.budget_id = bid;
	IF jsonb_typeof(pol -> 'reset_interval_ms') = 'number' THEN
		interval_ms := (pol ->> 'reset_interval_ms')::numeric;
	END IF;
	UPDATE ff_budget_policy b SET
		last_breach_at_ms = NULL,
		last_breach_dim = NULL,
		updated_at_ms = now_ms,
		next_reset_at_ms = CASE WHEN interval_ms > 0 AND interval_ms = trunc(interval_ms) AND interval_ms < 9e15
			THEN now_ms + interval_ms::bigint ELSE NULL END
	WHERE b.partition_key = pk AND b.budget_id = bid;
	RETURN ARRAY['1', 'reset'];
END
$fn$;

-- ---------------------------------------------------------------------
-- dependency (postgres.md §4.8): completion events to DAG edges.
--
-- One transaction per event does every hop and marks the event
-- dispatched last: a failure (a conflict, a crash) leaves the event
-- undispatched with nothing applied, and the next attempt does all of it.
-- FlowFabric marks the event first, in a statement of its own, then
-- advances each edge in its own transaction, so a failed hop loses the
-- remaining edges for good (PG10). The host runs it SERIALIZABLE, as
-- FlowFabric runs each hop, and retries a conflict.

-- completions_undispatched: the safety net's read, completion events not
-- dispatched 15 s after their commit (FlowFabric's ff-server threshold);
-- member the event id, score the commit time. Per partition, on the
-- pending-dispatch index (FlowFabric's read spans every partition).
CREATE OR REPLACE FUNCTION ffscan.completions_undispatched_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.event_id::text, c.committed_at_ms
		FROM (
			SELECT ev.partition_key, ev.event_id, ev.committed_at_ms
			FROM ff_completion_event ev
			WHERE ev.partition_key = read_pk
				AND ev.dispatched_at_ms IS NULL
				AND ev.committed_at_ms < ffscan.now_ms() - 15000
				AND ffscan.keeps_execution(ev.partition_key, ev.execution_id, filter_namespace, filter_tag_key, filter_tag_value)
			ORDER BY ev.committed_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.completions_undispatched(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.completions_undispatched_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.completions_undispatched_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- dispatch_completion advances every edge out of the event's execution
-- (FlowFabric's advance_edge_group, hop by hop) and marks the event
-- dispatched. Replies {'1','dispatched',<edges advanced>} or a no-op
-- {'1', reason}: event_not_found, already_dispatched.
-- Its statements are planned for the one partition they touch (custom
-- plans: a generic plan over 256 partitions locks every one of them at
-- each run).
CREATE OR REPLACE FUNCTION ffscan.dispatch_completion(pk smallint, ev bigint,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_custom_plan
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	e record;
	edge record;
	g record;
	succ integer;
	fails integer;
	skips integer;
	run integer;
	total integer;
	kind text;
	k bigint;
	cancel_siblings boolean;
	decision text;
	advanced integer := 0;
	members text[];
BEGIN
	SELECT x.execution_id, x.flow_id, x.outcome, x.dispatched_at_ms INTO e
	FROM ff_completion_event x WHERE x.partition_key = pk AND x.event_id = ev FOR UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'event_not_found'];
	END IF;
	IF e.dispatched_at_ms IS NOT NULL THEN
		RETURN ARRAY['1', 'already_dispatched'];
	END IF;
	-- The event is the completed execution's tenant's; without its row
	-- that cannot be told, and the event is left.
	IF NOT ffscan.keeps_execution(pk, e.execution_id, filter_namespace, filter_tag_key, filter_tag_value) THEN
		RETURN ARRAY['1', 'filtered'];
	END IF;
	IF e.flow_id IS NOT NULL THEN
		FOR edge IN
			SELECT d.downstream_eid FROM ff_edge d
			WHERE d.partition_key = pk AND d.flow_id = e.flow_id AND d.upstream_eid = e.execution_id
			ORDER BY d.downstream_eid, d.edge_id
		LOOP
			SELECT x.policy, x.success_count, x.fail_count, x.skip_count, x.running_count, x.cancel_siblings_pending_flag INTO g
			FROM ff_edge_group x
			WHERE x.partition_key = pk AND x.flow_id = e.flow_id AND x.downstream_eid = edge.downstream_eid
			FOR UPDATE;
			IF NOT FOUND THEN
				CONTINUE;
			END IF;
			advanced := advanced + 1;
			succ := g.success_count;
			fails := g.fail_count;
			skips := g.skip_count;
			run := g.running_count;
			IF run > 0 THEN
				run := run - 1;
			END IF;
			-- success and skipped have buckets of their own; any other
			-- outcome (failed, expired, cancelled, resumable...) fails.
			IF e.outcome = 'success' THEN
				succ := succ + 1;
			ELSIF e.outcome = 'skipped' THEN
				skips := skips + 1;
			ELSE
				fails := fails + 1;
			END IF;
			total := succ + fails + skips + greatest(run, 0);
			UPDATE ff_edge_group x SET success_count = succ, fail_count = fails, skip_count = skips, running_count = greatest(run, 0)
			WHERE x.partition_key = pk AND x.flow_id = e.flow_id AND x.downstream_eid = edge.downstream_eid;

			-- The policy as FlowFabric decodes it: an unknown or missing kind
			-- is all_of; quorum's k a JSON integer that fits 32 bits, else 1;
			-- only on_satisfied "let_run" keeps the siblings running.
			kind := coalesce(g.policy ->> 'kind', 'all_of');
			cancel_siblings := (g.policy ->> 'on_satisfied') IS DISTINCT FROM 'let_run';
			decision := 'pending';
			IF kind = 'any_of' THEN
				IF succ >= 1 THEN
					decision := 'satisfied';
				ELSIF fails + skips >= total AND total > 0 THEN
					decision := 'impossible';
				END IF;
			ELSIF kind = 'quorum' THEN
				k := 1;
				IF jsonb_typeof(g.policy -> 'k') = 'number'
					AND (g.policy ->> 'k')::numeric = trunc((g.policy ->> 'k')::numeric)
					AND (g.policy ->> 'k')::numeric BETWEEN 0 AND 4294967295 THEN
					k := (g.policy ->> 'k')::bigint;
				END IF;
				IF succ >= k THEN
					decision := 'satisfied';
				ELSIF total - (fails + skips) < k THEN
					decision := 'impossible';
				END IF;
			ELSE
				cancel_siblings := false;
				IF succ = total AND total > 0 THEN
					decision := 'satisfied';
				ELSIF fails + skips > 0 THEN
					decision := 'impossible';
				END IF;
			END IF;

			IF decision = 'satisfied' THEN
				UPDATE ff_exec_core x SET
					eligibility_state = 'eligible_now',
					lifecycle_phase = CASE WHEN x.lifecycle_phase = 'blocked' THEN 'runnable' ELSE x.lifecycle_phase END
				WHERE x.partition_key = pk AND x.execution_id = edge.downstream_eid
					AND x.lifecycle_phase NOT IN ('terminal', 'cancelled');
				IF cancel_siblings AND NOT g.cancel_siblings_pending_flag THEN
					SELECT coalesce(array_agg(DISTINCT d.upstream_eid::text ORDER BY d.upstream_eid::text), '{}') INTO members
					FROM ff_edge d
					JOIN ff_exec_core x ON x.partition_key = d.partition_key AND x.execution_id = d.upstream_eid
					WHERE d.partition_key = pk AND d.flow_id = e.flow_id AND d.downstream_eid = edge.downstream_eid
						AND d.upstream_eid <> e.execution_id
						AND x.lifecycle_phase NOT IN ('terminal', 'cancelled')
						AND x.public_state <> 'skipped';
					INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms)
					VALUES (pk, e.flow_id, edge.downstream_eid, now_ms) ON CONFLICT DO NOTHING;
					UPDATE ff_edge_group x SET cancel_siblings_pending_flag = true, cancel_siblings_pending_members = members
					WHERE x.partition_key = pk AND x.flow_id = e.flow_id AND x.downstream_eid = edge.downstream_eid;
				END IF;
			ELSIF decision = 'impossible' THEN
				UPDATE ff_exec_core x SET
					lifecycle_phase = 'terminal',
					eligibility_state = 'not_applicable',
					public_state = 'skipped',
					attempt_state = 'attempt_terminal',
					terminal_at_ms = coalesce(x.terminal_at_ms, now_ms)
				WHERE x.partition_key = pk AND x.execution_id = edge.downstream_eid
					AND x.lifecycle_phase NOT IN ('terminal', 'cancelled');
				IF FOUND THEN
					INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
					VALUES (pk, edge.downstream_eid, e.flow_id, 'skipped', NULL, NULL, now_ms);
				END IF;
			END IF;
		END LOOP;
	END IF;
	UPDATE ff_completion_event x SET dispatched_at_ms = now_ms WHERE x.partition_key = pk AND x.event_id = ev;
	RETURN ARRAY['1', 'dispatched', advanced::text];
END
$fn$;

-- dispatch_completions dispatches a batch of completion events of one
-- partition, in the order given, in the caller's transaction: each one
-- exactly as dispatch_completion does it (the same rows written, the same
-- reply), one row (event_id, reply) per event. It is the host's, not a
-- plugin's (a plugin's PGCALL is one action per transaction): the
-- completion listener's drain dispatches a partition's pending events in
-- one statement, one transaction, instead of one transaction per event.
-- The host runs it, and dispatch_completion, at READ COMMITTED, where
-- neither needs more: each reads the rows it counts from under their row
-- locks (the event, then its edge groups in downstream order, FOR UPDATE:
-- the newest version, a concurrent dispatch of the same rows waits), and
-- the rows it changes without a lock (the downstream executions) are
-- changed by statements that re-check their conditions on the newest
-- version. So no dispatch fails on a serialization failure, and none has
-- to be run again.
CREATE OR REPLACE FUNCTION ffscan.dispatch_completions(pk smallint, evs bigint[],
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (event_id bigint, reply text[])
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	ev bigint;
BEGIN
	FOREACH ev IN ARRAY coalesce(evs, '{}'::bigint[]) LOOP
		event_id := ev;
		reply := ffscan.dispatch_completion(pk, ev, filter_namespace, filter_tag_key, filter_tag_value);
		RETURN NEXT;
	END LOOP;
END
$fn$;

-- completion_partition finds the partition of a completion event from its
-- id alone (a NOTIFY carries only the id): one probe of the event-id index
-- per partition.
CREATE OR REPLACE FUNCTION ffscan.completion_partition(ev bigint)
RETURNS smallint
LANGUAGE sql STABLE
AS $fn$ SELECT x.partition_key FROM ff_completion_event x WHERE x.event_id = ev LIMIT 1 $fn$;

-- route_completion passes a completion event to the host that owns its
-- partition, among hosts that share the partitions: it finds the event's
-- partition (completion_partition) and notifies channel (the share's own,
-- which every host of the share listens to) with '<partition>/<event id>',
-- so that only the owner dispatches it and the others do not have to look
-- it up. It returns the partition (NULL: no such event, nothing sent).
-- One host routes each event (the owner of flow partition event id mod the
-- partition count), so an event costs one lookup however many hosts share.
CREATE OR REPLACE FUNCTION ffscan.route_completion(ev bigint, channel text)
RETURNS smallint
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	pk smallint := ffscan.completion_partition(ev);
BEGIN
	IF pk IS NOT NULL THEN
		PERFORM pg_notify(channel, pk::text || '/' || ev::text);
	END IF;
	RETURN pk;
END
$fn$;

-- completions_pending: the completion listener's catch-up read after it
-- (re)connects, events not dispatched yet whatever their age, in the
-- partitions the host owns; member the event id, score the commit time.
CREATE OR REPLACE FUNCTION ffscan.completions_pending_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.event_id::text, c.committed_at_ms
		FROM (
			SELECT ev.partition_key, ev.event_id, ev.committed_at_ms
			FROM ff_completion_event ev
			WHERE ev.partition_key = read_pk
				AND ev.dispatched_at_ms IS NULL
				AND ffscan.keeps_execution(ev.partition_key, ev.execution_id, filter_namespace, filter_tag_key, filter_tag_value)
			ORDER BY ev.committed_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.completions_pending(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.completions_pending_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.completions_pending_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- ---------------------------------------------------------------------
-- edge_cancel_dispatcher and edge_cancel_reconciler (postgres.md §4.9,
-- §4.10): groups with pending sibling cancels, per partition.

-- cancel_groups_pending: member '<flow uuid>/<downstream uuid>', score
-- the enqueue time.
CREATE OR REPLACE FUNCTION ffscan.cancel_groups_pending_in(read_pk smallint, per_partition integer,
	filter_namespace text, filter_tag_key text, filter_tag_value text)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE sql STABLE
AS $fn$
	SELECT c.partition_key, c.flow_id::text || '/' || c.downstream_eid::text, c.enqueued_at_ms
		FROM (
			SELECT q.partition_key, q.flow_id, q.downstream_eid, q.enqueued_at_ms
			FROM ff_pending_cancel_groups q
			WHERE q.partition_key = read_pk
				AND ffscan.keeps_execution(q.partition_key, q.downstream_eid, filter_namespace, filter_tag_key, filter_tag_value)
			ORDER BY q.enqueued_at_ms
			LIMIT per_partition
		) AS c
$fn$;

CREATE OR REPLACE FUNCTION ffscan.cancel_groups_pending(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	one smallint;
BEGIN
	IF cardinality(parts) <= ffscan.few_partitions() THEN
		FOREACH one IN ARRAY parts LOOP
			RETURN QUERY EXECUTE 'SELECT * FROM ffscan.cancel_groups_pending_in($1, $2, $3, $4, $5)'
				USING one, per_partition, filter_namespace, filter_tag_key, filter_tag_value;
		END LOOP;
	ELSE
		RETURN QUERY SELECT c.* FROM unnest(parts) AS p(k)
			CROSS JOIN LATERAL ffscan.cancel_groups_pending_in(p.k, per_partition, filter_namespace, filter_tag_key, filter_tag_value) AS c;
	END IF;
END
$fn$;

-- dispatch_sibling_cancels cancels the group's listed siblings that have
-- not ended, clears the flag and drops the pending row. Replies
-- {'1','dispatched',<cancelled>} or a no-op {'1', reason}: skipped_locked
-- (another dispatcher holds the group), orphaned (no group: the pending
-- row is dropped, and counted as done), skipped_for_reconciler (the flag
-- is off). Siblings whose id does not parse are skipped, as FlowFabric
-- skips them.
CREATE OR REPLACE FUNCTION ffscan.dispatch_sibling_cancels(pk smallint, flow uuid, downstream uuid,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	g record;
	m text;
	n integer := 0;
	cnt integer;
BEGIN
	-- The group is its downstream execution's tenant's.
	IF NOT ffscan.keeps_execution(pk, downstream, filter_namespace, filter_tag_key, filter_tag_value) THEN
		RETURN ARRAY['1', 'filtered'];
	END IF;
	SELECT x.cancel_siblings_pending_flag AS flag, x.cancel_siblings_pending_members AS members INTO g
	FROM ff_edge_group x WHERE x.partition_key = pk AND x.flow_id = flow AND x.downstream_eid = downstream
	FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		PERFORM 1 FROM ff_edge_group x WHERE x.partition_key = pk AND x.flow_id = flow AND x.downstream_eid = downstream;
		IF FOUND THEN
			RETURN ARRAY['1', 'skipped_locked'];
		END IF;
		DELETE FROM ff_pending_cancel_groups q WHERE q.partition_key = pk AND q.flow_id = flow AND q.downstream_eid = downstream;
		RETURN ARRAY['1', 'orphaned'];
	END IF;
	IF NOT g.flag THEN
		RETURN ARRAY['1', 'skipped_for_reconciler'];
	END IF;
	FOREACH m IN ARRAY g.members LOOP
		IF m !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
			CONTINUE;
		END IF;
		UPDATE ff_exec_core x SET
			lifecycle_phase = 'terminal',
			ownership_state = 'unowned',
			eligibility_state = 'not_applicable',
			public_state = 'cancelled',
			attempt_state = 'cancelled',
			terminal_at_ms = coalesce(x.terminal_at_ms, now_ms),
			cancellation_reason = coalesce(x.cancellation_reason, 'sibling_quorum_satisfied'),
			cancelled_by = coalesce(x.cancelled_by, 'engine'),
			raw_fields = CASE WHEN jsonb_typeof(x.raw_fields) = 'object'
				THEN x.raw_fields || jsonb_build_object('last_mutation_at', now_ms::text) ELSE x.raw_fields END
		WHERE x.partition_key = pk AND x.execution_id = m::uuid
			AND x.lifecycle_phase NOT IN ('terminal', 'cancelled');
		GET DIAGNOSTICS cnt = ROW_COUNT;
		n := n + cnt;
	END LOOP;
	UPDATE ff_edge_group x SET cancel_siblings_pending_flag = false, cancel_siblings_pending_members = '{}'
	WHERE x.partition_key = pk AND x.flow_id = flow AND x.downstream_eid = downstream;
	DELETE FROM ff_pending_cancel_groups q WHERE q.partition_key = pk AND q.flow_id = flow AND q.downstream_eid = downstream;
	RETURN ARRAY['1', 'dispatched', n::text];
END
$fn$;

-- reconcile_sibling_cancels is the safety net: it never cancels. A group
-- whose flag is off, or whose listed siblings have all ended (a missing
-- row counts as ended), has its flag cleared and its pending row dropped
-- ({'1','completed_drain'} or {'1','sremmed_stale'}). Otherwise the
-- dispatcher owns it ({'1','no_op'}).
CREATE OR REPLACE FUNCTION ffscan.reconcile_sibling_cancels(pk smallint, flow uuid, downstream uuid,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	g record;
	live integer;
BEGIN
	-- The group is its downstream execution's tenant's.
	IF NOT ffscan.keeps_execution(pk, downstream, filter_namespace, filter_tag_key, filter_tag_value) THEN
		RETURN ARRAY['1', 'filtered'];
	END IF;
	SELECT x.cancel_siblings_pending_flag AS flag, x.cancel_siblings_pending_members AS members INTO g
	FROM ff_edge_group x WHERE x.partition_key = pk AND x.flow_id = flow AND x.downstream_eid = downstream
	FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		PERFORM 1 FROM ff_edge_group x WHERE x.partition_key = pk AND x.flow_id = flow AND x.downstream_eid = downstream;
		IF FOUND THEN
			RETURN ARRAY['1', 'no_op'];
		END IF;
		DELETE FROM ff_pending_cancel_groups q WHERE q.partition_key = pk AND q.flow_id = flow AND q.downstream_eid = downstream;
		RETURN ARRAY['1', 'sremmed_stale'];
	END IF;
	IF NOT g.flag THEN
		DELETE FROM ff_pending_cancel_groups q WHERE q.partition_key = pk AND q.flow_id = flow AND q.downstream_eid = downstream;
		RETURN ARRAY['1', 'sremmed_stale'];
	END IF;
	SELECT count(*) INTO live FROM ff_exec_core x
	WHERE x.partition_key = pk
		AND x.execution_id::text = ANY (g.members)
		AND x.lifecycle_phase NOT IN ('terminal', 'cancelled');
	IF live > 0 THEN
		RETURN ARRAY['1', 'no_op'];
	END IF;
	UPDATE ff_edge_group x SET cancel_siblings_pending_flag = false, cancel_siblings_pending_members = '{}'
	WHERE x.partition_key = pk AND x.flow_id = flow AND x.downstream_eid = downstream;
	DELETE FROM ff_pending_cancel_groups q WHERE q.partition_key = pk AND q.flow_id = flow AND q.downstream_eid = downstream;
	RETURN ARRAY['1', 'completed_drain'];
END
$fn$;

-- ---------------------------------------------------------------------
-- worker_registry_ttl_sweep (postgres.md §4.11).
--
-- The registry has 256 partitions of its own (FNV-1a of the instance id),
-- whatever the host's flow partition count F: flow partition i sweeps the
-- registry partitions w with w mod F = i, so every registry partition is
-- swept once per cycle by whichever host owns its flow partition.

-- workers_expired: registrations whose heartbeat is older than their TTL;
-- member '<registry partition>/' followed by the JSON array [namespace,
-- instance id] (both free text), score the time they expired.
CREATE OR REPLACE FUNCTION ffscan.workers_expired(parts smallint[], per_partition integer, partition_count integer,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, score bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
	-- One registry partition at a time (w.partition_key = g.w), so that
	-- each read is pruned to its one child; "partition_key IN (SELECT
	-- generate_series(...))" cannot be, and read all 256 children for
	-- every flow partition.
	RETURN QUERY
	SELECT p.k, c.partition_key::text || '/' || jsonb_build_array(c.namespace, c.worker_instance_id)::text, c.expired_at
		FROM unnest(parts) AS p(k)
		CROSS JOIN LATERAL (
			SELECT r.partition_key, r.namespace, r.worker_instance_id, r.expired_at
			FROM generate_series(p.k, 255, greatest(partition_count, 1)) AS g(w)
			CROSS JOIN LATERAL (
				SELECT w.partition_key, w.namespace, w.worker_instance_id, w.last_heartbeat_ms + w.liveness_ttl_ms AS expired_at
				FROM ff_worker_registry w
				WHERE w.partition_key = g.w::smallint
					AND w.last_heartbeat_ms + w.liveness_ttl_ms < ffscan.now_ms()
					AND (filter_namespace IS NULL OR w.namespace = filter_namespace)
				ORDER BY expired_at
				LIMIT per_partition
			) AS r
			ORDER BY r.expired_at
			LIMIT per_partition
		) AS c;
END
$fn$;

-- workers_expired_next: per flow partition, over the registry partitions
-- it sweeps, the earliest registration that has not expired at as_of_ms
-- (heartbeat + TTL >= as_of_ms), and when it expires (heartbeat + TTL +
-- 1). The registry has no index on that sum: like workers_expired, it
-- reads each registry child once.
CREATE OR REPLACE FUNCTION ffscan.workers_expired_next(parts smallint[], partition_count integer, as_of_ms bigint,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS TABLE (partition_key smallint, member text, due_at_ms bigint)
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
	t bigint := coalesce(as_of_ms, ffscan.now_ms());
BEGIN
	RETURN QUERY
	SELECT p.k, c.partition_key::text || '/' || jsonb_build_array(c.namespace, c.worker_instance_id)::text, least(c.expired_at, 9223372036854775806) + 1
		FROM unnest(parts) AS p(k)
		CROSS JOIN LATERAL (
			SELECT r.partition_key, r.namespace, r.worker_instance_id, r.expired_at
			FROM generate_series(p.k, 255, greatest(partition_count, 1)) AS g(w)
			CROSS JOIN LATERAL (
				SELECT w.partition_key, w.namespace, w.worker_instance_id, w.last_heartbeat_ms + w.liveness_ttl_ms AS expired_at
				FROM ff_worker_registry w
				WHERE w.partition_key = g.w::smallint
					AND w.last_heartbeat_ms + w.liveness_ttl_ms >= t
					AND (filter_namespace IS NULL OR w.namespace = filter_namespace)
				ORDER BY expired_at
				LIMIT 1
			) AS r
			ORDER BY r.expired_at
			LIMIT 1
		) AS c;
END
$fn$;

-- sweep_worker deletes a registration whose heartbeat is still older than
-- its TTL and records a ttl_swept event (on conflict nothing), as
-- FlowFabric's sweep statement does. Replies {'1','swept'} or a no-op
-- {'1', reason}: worker_not_found, alive (it heartbeat since the read).
CREATE OR REPLACE FUNCTION ffscan.sweep_worker(flow_pk smallint, member text,
	filter_namespace text DEFAULT NULL, filter_tag_key text DEFAULT NULL, filter_tag_value text DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	now_ms bigint := ffscan.now_ms();
	wpk smallint;
	ident jsonb;
	ns text;
	inst text;
	hb bigint;
	ttl bigint;
BEGIN
	wpk := split_part(member, '/', 1)::smallint;
	ident := substr(member, length(split_part(member, '/', 1)) + 2)::jsonb;
	IF jsonb_typeof(ident) IS DISTINCT FROM 'array' OR jsonb_array_length(ident) <> 2 THEN
		RAISE EXCEPTION 'sweep_worker: member % is not <partition>/[namespace, instance]', member USING ERRCODE = '22023';
	END IF;
	ns := ident ->> 0;
	inst := ident ->> 1;
	-- Registrations carry a namespace and no tags: only the namespace
	-- filter applies.
	IF filter_namespace IS NOT NULL AND ns IS DISTINCT FROM filter_namespace THEN
		RETURN ARRAY['1', 'filtered'];
	END IF;
	SELECT w.last_heartbeat_ms, w.liveness_ttl_ms INTO hb, ttl FROM ff_worker_registry w
	WHERE w.partition_key = wpk AND w.namespace = ns AND w.worker_instance_id = inst FOR UPDATE;
	IF NOT FOUND THEN
		RETURN ARRAY['1', 'worker_not_found'];
	END IF;
	IF hb + ttl >= now_ms THEN
		RETURN ARRAY['1', 'alive'];
	END IF;
	DELETE FROM ff_worker_registry w WHERE w.partition_key = wpk AND w.namespace = ns AND w.worker_instance_id = inst;
	INSERT INTO ff_worker_registry_event (partition_key, namespace, worker_instance_id, event_kind, event_at_ms, reason)
	VALUES (wpk, ns, inst, 'ttl_swept', now_ms, NULL) ON CONFLICT DO NOTHING;
	RETURN ARRAY['1', 'swept'];
END
$fn$;

-- ---------------------------------------------------------------------
-- Partition sharing among the hosts of one database (host/sharing, its
-- Postgres store host/sharing/pgstore): which hosts are alive, and which
-- host holds which partition, in two tables of ffscan's own (never
-- FlowFabric's). The hosts decide the assignment themselves (rendezvous
-- hashing over the members these functions return); the functions only
-- keep the entries, each call one statement, with every expiry by the
-- database's clock (now_ms), the one clock all the hosts share. No
-- advisory lock and no session state: a pooler that gives each
-- transaction another server connection (PgBouncer in transaction mode)
-- changes nothing.
--
-- A share is a group of hosts: those with the same namespace /
-- instance-tag filter (share_group names it). Hosts of different filters
-- serve different tenants' rows, so each group divides every partition
-- among its own members.

CREATE TABLE IF NOT EXISTS ffscan.share_member (
	share_group text NOT NULL,
	host_id text NOT NULL,
	-- The partition counts the host runs with ('<flow>/<budget>/<quota>'):
	-- hosts that disagree would leave partitions to nobody, so a host
	-- refuses to share with one that counts otherwise.
	partitions text NOT NULL,
	joined_at_ms bigint NOT NULL,
	expires_at_ms bigint NOT NULL,
	PRIMARY KEY (share_group, host_id)
);

CREATE TABLE IF NOT EXISTS ffscan.share_owner (
	share_group text NOT NULL,
	family text NOT NULL,
	partition_index smallint NOT NULL,
	host_id text NOT NULL,
	-- When host_id took the entry (its renewals keep it), and until when it
	-- holds it.
	taken_at_ms bigint NOT NULL,
	expires_at_ms bigint NOT NULL,
	PRIMARY KEY (share_group, family, partition_index)
);

-- share_renew records member me of share grp until ttl_ms from now,
-- removes the members whose time passed (those another host is removing
-- or renewing right now are skipped, not waited for), and returns the
-- live members with their partition counts.
CREATE OR REPLACE FUNCTION ffscan.share_renew(grp text, me text, parts text, ttl_ms bigint)
RETURNS TABLE (host_id text, partitions text)
LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
	now_ms bigint := ffscan.now_ms();
BEGIN
	INSERT INTO ffscan.share_member AS m (share_group, host_id, partitions, joined_at_ms, expires_at_ms)
	VALUES (grp, me, parts, now_ms, now_ms + ttl_ms)
	ON CONFLICT (share_group, host_id) DO UPDATE SET partitions = excluded.partitions, expires_at_ms = excluded.expires_at_ms;
	DELETE FROM ffscan.share_member m WHERE (m.share_group, m.host_id) IN (
		SELECT x.share_group, x.host_id FROM ffscan.share_member x
		WHERE x.share_group = grp AND x.expires_at_ms <= now_ms
		ORDER BY x.host_id FOR UPDATE SKIP LOCKED);
	RETURN QUERY SELECT m.host_id, m.partitions FROM ffscan.share_member m
		WHERE m.share_group = grp AND m.expires_at_ms > now_ms ORDER BY m.host_id;
END
$fn$;

-- share_hold takes for me, until ttl_ms from now, each partition (fams[i],
-- idxs[i]) whose entry is absent, lapsed, or already me's (a renewal), and
-- returns those me holds afterwards. An entry another host holds and that
-- has not lapsed is left to it: under a concurrent take the row lock makes
-- the second taker re-read the first one's entry and leave it. Rows are
-- locked in (family, index) order, as share_release locks them, so two
-- hosts never wait on each other in a cycle.
CREATE OR REPLACE FUNCTION ffscan.share_hold(grp text, me text, ttl_ms bigint, fams text[], idxs smallint[])
RETURNS TABLE (family text, partition_index smallint)
LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
	now_ms bigint := ffscan.now_ms();
BEGIN
	RETURN QUERY
	INSERT INTO ffscan.share_owner AS o (share_group, family, partition_index, host_id, taken_at_ms, expires_at_ms)
	SELECT grp, u.f, u.i, me, now_ms, now_ms + ttl_ms FROM unnest(fams, idxs) AS u(f, i) ORDER BY u.f, u.i
	ON CONFLICT (share_group, family, partition_index) DO UPDATE
		SET host_id = excluded.host_id, expires_at_ms = excluded.expires_at_ms,
			taken_at_ms = CASE WHEN o.host_id = excluded.host_id THEN o.taken_at_ms ELSE excluded.taken_at_ms END
		WHERE o.host_id = excluded.host_id OR o.expires_at_ms < now_ms
	RETURNING o.family, o.partition_index;
END
$fn$;

-- share_release removes the entries of the partitions (fams[i], idxs[i])
-- that me holds, and returns how many.
CREATE OR REPLACE FUNCTION ffscan.share_release(grp text, me text, fams text[], idxs smallint[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
	n integer;
BEGIN
	DELETE FROM ffscan.share_owner o WHERE (o.share_group, o.family, o.partition_index) IN (
		SELECT x.share_group, x.family, x.partition_index FROM ffscan.share_owner x
		JOIN unnest(fams, idxs) AS u(f, i) ON x.family = u.f AND x.partition_index = u.i
		WHERE x.share_group = grp AND x.host_id = me
		ORDER BY x.family, x.partition_index FOR UPDATE OF x);
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$fn$;

-- share_leave forgets member me of share grp at once.
CREATE OR REPLACE FUNCTION ffscan.share_leave(grp text, me text)
RETURNS void
LANGUAGE sql VOLATILE
AS $fn$ DELETE FROM ffscan.share_member m WHERE m.share_group = grp AND m.host_id = me $fn$;

-- The audit trail of a host without Valkey (host/audit, postgres.go):
-- what scanners did (each PGCALL that ran, with its outcome) and what
-- operators did, one row each, in a table of ffscan's own (since library
-- version 6). Each row's time is the database's clock at the insert (the
-- one clock the hosts sharing the database share), its id orders rows of
-- the same time. A text the entry leaves empty is NULL. The hosts write
-- and read it with plain statements (a batch is one multi-row INSERT from
-- arrays that also deletes the rows past the size bound, by id; the trim
-- by age deletes by time): no function of the library is involved.
-- An upgrade keeps its rows.
CREATE TABLE IF NOT EXISTS ffscan.audit_entry (
	id bigserial PRIMARY KEY,
	at timestamptz NOT NULL DEFAULT clock_timestamp(),
	-- 'scanner' or 'operator'.
	kind text NOT NULL,
	host text,
	-- An operator's action, its channel and who asked for it.
	action text,
	channel text,
	who text,
	-- A scanner's action (and the scanner an operator's action was on).
	scanner text,
	digest text,
	command text,
	-- The execution as "{fp:N}:uuid", as FlowFabric's Valkey ids and the
	-- host's API name it.
	execution text,
	key text,
	outcome text,
	detail text
);

-- One execution's history, newest first (explain, GET /v1/audit?execution).
CREATE INDEX IF NOT EXISTS audit_entry_execution_at ON ffscan.audit_entry (execution, at) WHERE execution IS NOT NULL;
-- The latest entries, the since bound, and the trim by age.
CREATE INDEX IF NOT EXISTS audit_entry_at ON ffscan.audit_entry (at);
