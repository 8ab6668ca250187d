-- Flows (hash tag of the flow's {fp:N}): flow containers, dependency edges
-- and their resolution on the child, flow eligibility, and cancel_flow.
-- A flow's members live on the flow's partition, so exec_core and the flow
-- keys of one call always share a slot; keys this file builds itself (edge
-- hashes, sibling cores, out-sets) are taken from the tag of a KEYS entry.
--
-- Clocks: create/add/cancel_flow stamp server time and ignore their ARGV
-- now_ms; staging, applying, resolving and promoting use the ARGV now_ms
-- (the callers resolve on their own clocks and the vectors pin that).

-- Shared helpers come from H (00_helpers.lua); this table holds only the
-- flow-specific ones and keeps this file at one top-level local.
local ffflow = {}

function ffflow.flow_is_terminal(state)
  return state == 'cancelled' or state == 'completed' or state == 'failed'
end

-- ffflow.release_child(core_key, core, eid, eligible_key, blocked_key, now)
-- -> a dependency-blocked child made claimable (the caller has checked
-- that it may be). attempt_state is kept (a resumed or replayed child must
-- keep its kind of next attempt) except that an empty or "none" one
-- becomes a pending first attempt. now is written as given.
function ffflow.release_child(core_key, core, eid, eligible_key, blocked_key, now)
  local attempt_state = core.attempt_state
  if not H.is_set(attempt_state) or attempt_state == 'none' then
    attempt_state = 'pending_first_attempt'
  end
  redis.call('HSET', core_key,
    'lifecycle_phase', core.lifecycle_phase,
    'ownership_state', core.ownership_state or 'unowned',
    'eligibility_state', 'eligible_now',
    'blocking_reason', 'waiting_for_worker',
    'blocking_detail', '',
    'terminal_outcome', 'none',
    'attempt_state', attempt_state,
    'public_state', 'waiting',
    'last_transition_at', now,
    'last_mutation_at', now)
  redis.call('ZREM', blocked_key, eid)
  redis.call('ZADD', eligible_key, H.eligible_score(core.priority, core.created_at), eid)
end

-- ffflow.releasable(core) -> whether a resolved dependency makes the child
-- claimable: runnable, unowned, not terminal, blocked by dependencies.
function ffflow.releasable(core)
  return core.lifecycle_phase == 'runnable' and core.ownership_state == 'unowned'
    and core.terminal_outcome == 'none' and core.eligibility_state == 'blocked_by_dependencies'
end

-- A child whose dependencies can no longer be met is skipped: terminal with
-- outcome skipped at the caller's now (when its outcome is still none,
-- whatever its phase). A running or interrupted attempt is ended in the
-- caller's attempt key; its lease and active-index entries are left for
-- the scanners. KEYS as ff_resolve_dependency's. Returns whether skipped.
function ffflow.skip_child(keys, core, now)
  if core.terminal_outcome ~= 'none' then return false end
  local attempt_state = core.attempt_state or 'none'
  if attempt_state == 'running_attempt' or attempt_state == 'attempt_interrupted' then
    attempt_state = 'attempt_terminal'
    redis.call('HSET', keys[8],
      'attempt_state', 'ended_cancelled',
      'ended_at', now,
      'failure_reason', 'dependency_impossible')
    if redis.call('EXISTS', keys[9]) == 1 then
      redis.call('HSET', keys[9], 'closed_at', now, 'closed_reason', 'dependency_impossible')
    end
  elseif H.is_set(attempt_state) and attempt_state ~= 'none' then
    attempt_state = 'none'
  end
  local eid = core.execution_id or ''
  redis.call('HSET', keys[1],
    'lifecycle_phase', 'terminal',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_applicable',
    'blocking_reason', 'none',
    'blocking_detail', '',
    'terminal_outcome', 'skipped',
    'attempt_state', attempt_state,
    'public_state', 'skipped',
    'completed_at', now,
    'last_transition_at', now,
    'last_mutation_at', now)
  redis.call('ZREM', keys[7], eid)
  redis.call('ZADD', keys[6], tonumber(now), eid)
  if H.is_set(core.flow_id) and H.is_set(core.execution_id) then
    H.publish_completion(core.execution_id, core.flow_id, 'skipped')
  end
  return true
end

-- ffflow.copy_result(keys, dep, core) -> "data_injected" when the edge
-- passes data and the child is not terminal and the upstream's result
-- was copied over the child's input, else "".
function ffflow.copy_result(keys, dep, core)
  if H.is_set(dep.data_passing_ref) and core.terminal_outcome == 'none'
      and redis.call('COPY', keys[11], keys[10], 'REPLACE') == 1 then
    return 'data_injected'
  end
  return ''
end

-- Upstreams of the child's inbound edges (KEYS[13], in set order) that are
-- still running: the siblings a fired group with on_satisfied
-- cancel_remaining asks the dispatcher to cancel. Edge hashes and sibling
-- cores are named from the edge group key's tag and the flow id.
function ffflow.running_siblings(keys, fid)
  local tag = H.tag_of(keys[12] or '') or ''
  local out = {}
  if not H.is_set(keys[13]) or not H.is_set(fid) then return out end
  local edge_prefix = 'ff:flow:' .. tag .. ':' .. fid .. ':edge:'
  for _, e in ipairs(redis.call('SMEMBERS', keys[13])) do
    local up = redis.call('HGET', edge_prefix .. e, 'upstream_execution_id')
    if H.is_set(up) then
      local phase = redis.call('HGET', 'ff:exec:' .. tag .. ':' .. up .. ':core', 'lifecycle_phase')
      if H.is_set(phase) and phase ~= 'terminal' then out[#out + 1] = up end
    end
  end
  return out
end

-- any_of / quorum resolution: the edge and the group's counter are
-- recorded (the child's dependency counters are left to the group), the
-- group fires once (satisfied when k edges succeeded, impossible when too
-- many failed), and only then is the child released or skipped.
function ffflow.resolve_group(keys, args, dep, variant, now)
  local edge_id, outcome, fid, down = args[1], args[2], args[4] or '', args[5] or ''
  local bucket = 'failed'
  if outcome == 'success' then bucket = 'succeeded' elseif outcome == 'skipped' then bucket = 'skipped' end
  redis.call('HSET', keys[4], 'state', bucket == 'succeeded' and 'satisfied' or 'impossible',
    'last_resolved_at', now)
  redis.call('SREM', keys[3], edge_id)
  redis.call('HINCRBY', keys[12], bucket, 1)

  local g = H.hgetall(keys[12])
  local n = tonumber(g.n or '0') or 0
  local succeeded = tonumber(g.succeeded or '0') or 0
  local failed = tonumber(g.failed or '0') or 0
  local skipped = tonumber(g.skipped or '0') or 0
  local k = 1
  if variant ~= 'any_of' then
    k = tonumber(g.k or '1') or 1
    if k < 1 then k = 1 end
  end
  if succeeded + failed + skipped > n then
    return H.err('invariant_violation', 'edgegroup counters exceed n: '
      .. tostring(succeeded + failed + skipped) .. '/' .. tostring(n))
  end
  local prior = g.group_state or 'pending'
  if prior == 'satisfied' or prior == 'impossible' or prior == 'cancelled' then
    return H.ok('already_fired', '')
  end
  local verdict
  if succeeded >= k then
    verdict = 'satisfied'
  elseif failed + skipped > n - k then
    verdict = 'impossible'
  else
    return H.ok('pending', '')
  end

  redis.call('HSET', keys[12], 'group_state', verdict)
  if verdict == 'satisfied' then redis.call('HSET', keys[12], 'satisfied_at', now) end
  if (g.on_satisfied or '') == 'cancel_remaining' then
    redis.call('HSET', keys[12],
      'cancel_siblings_pending_flag', 'true',
      'cancel_siblings_reason',
      verdict == 'satisfied' and 'sibling_quorum_satisfied' or 'sibling_quorum_impossible')
    redis.call('HSET', keys[12], 'cancel_siblings_pending_members',
      table.concat(ffflow.running_siblings(keys, fid), '|'))
    if H.is_set(keys[14]) and H.is_set(fid) and H.is_set(down) then
      redis.call('SADD', keys[14], fid .. '|' .. down)
    end
  end

  local core = H.hgetall(keys[1])
  if next(core) == nil then return H.ok(verdict, '') end
  if verdict == 'satisfied' then
    local injected = ''
    if bucket == 'succeeded' then injected = ffflow.copy_result(keys, dep, core) end
    if ffflow.releasable(core) then
      ffflow.release_child(keys[1], core, core.execution_id or '', keys[5], keys[7], now)
    end
    return H.ok('satisfied', injected)
  end
  return H.ok('impossible', ffflow.skip_child(keys, core, now) and 'child_skipped' or '')
end

-- ff_create_flow
-- KEYS: flow core, members, flow_index
-- ARGV: fid, kind, namespace, now_ms (ignored: server time)
redis.register_function('ff_create_flow', function(keys, args)
  local fid = args[1]
  -- Indexed before the existence check so a lost SADD heals on retry.
  redis.call('SADD', keys[3], fid)
  if redis.call('EXISTS', keys[1]) == 1 then
    return {1, 'ALREADY_SATISFIED', fid}
  end
  local now = H.now_ms()
  redis.call('HSET', keys[1],
    'flow_id', fid,
    'flow_kind', args[2],
    'namespace', args[3],
    'graph_revision', 0,
    'node_count', 0,
    'edge_count', 0,
    'public_flow_state', 'open',
    'created_at', now,
    'last_mutation_at', now)
  return {1, 'OK', fid}
end)

-- ff_add_execution_to_flow
-- KEYS: flow core, members, flow_index, exec core
-- ARGV: fid, eid, now_ms (ignored: server time)
redis.register_function('ff_add_execution_to_flow', function(keys, args)
  local fid, eid = args[1], args[2]
  -- FlowFabric's order: the flow (missing, then terminal, even for a
  -- member), the execution, then membership.
  local flow = H.hgetall(keys[1])
  if next(flow) == nil then
    return {0, 'flow_not_found'}
  end
  if ffflow.flow_is_terminal(flow.public_flow_state) then
    return {0, 'flow_already_terminal'}
  end
  if redis.call('EXISTS', keys[4]) == 0 then
    return {0, 'execution_not_found'}
  end
  -- A live flow is (re)listed in the index before anything else is written.
  redis.call('SADD', keys[3], fid)
  local current = redis.call('HGET', keys[4], 'flow_id')
  if redis.call('SISMEMBER', keys[2], eid) == 1 then
    if H.is_set(current) and current ~= fid then
      return {0, 'already_member_of_different_flow:' .. current}
    end
    -- A member already: the back-pointer is (re)stamped, nothing counted.
    redis.call('HSET', keys[4], 'flow_id', fid)
    return {1, 'ALREADY_SATISFIED', eid, flow.node_count or '0'}
  end
  if H.is_set(current) and current ~= fid then
    -- The owning flow is part of the code string itself (a FlowFabric quirk).
    return {0, 'already_member_of_different_flow:' .. current}
  end

  local now = H.now_ms()
  redis.call('SADD', keys[2], eid)
  redis.call('HSET', keys[4], 'flow_id', fid)
  local nodes = redis.call('HINCRBY', keys[1], 'node_count', 1)
  redis.call('HINCRBY', keys[1], 'graph_revision', 1)
  redis.call('HSET', keys[1], 'last_mutation_at', now)
  return {1, 'OK', eid, H.int(nodes)}
end)

-- ff_stage_dependency_edge
-- KEYS: flow core, members, edge, out(upstream), in(downstream), grant (unused)
-- ARGV: fid, edge_id, upstream eid, downstream eid, kind, data_ref,
--       expected graph_revision, now_ms
redis.register_function('ff_stage_dependency_edge', function(keys, args)
  local fid, edge_id, up, down = args[1], args[2], args[3], args[4]
  local kind, data_ref, expected = args[5], args[6] or '', args[7]
  if up == down then
    return {0, 'self_referencing_edge'}
  end
  local flow = H.hgetall(keys[1])
  if next(flow) == nil then
    return {0, 'flow_not_found'}
  end
  if ffflow.flow_is_terminal(flow.public_flow_state) then
    return {0, 'flow_already_terminal'}
  end
  -- Optimistic concurrency on the graph: an exact string match.
  if (flow.graph_revision or '0') ~= expected then
    return {0, 'stale_graph_revision'}
  end
  if redis.call('SISMEMBER', keys[2], up) == 0 or redis.call('SISMEMBER', keys[2], down) == 0 then
    return {0, 'execution_not_in_flow'}
  end
  -- The new edge closes a cycle iff the upstream is reachable from the
  -- downstream. Breadth-first over out-sets; past 1000 nodes we refuse
  -- rather than risk admitting a cycle.
  local prefix = string.sub(keys[1], 1, -6) -- the flow core key without ':core'
  local seen, queue, head = {[down] = true}, {down}, 1
  while head <= #queue do
    if head > 1000 then
      return {0, 'cycle_detected'}
    end
    local node = queue[head]
    head = head + 1
    for _, e in ipairs(redis.call('SMEMBERS', prefix .. ':out:' .. node)) do
      local nxt = redis.call('HGET', prefix .. ':edge:' .. e, 'downstream_execution_id')
      if nxt == up then
        return {0, 'cycle_detected'}
      end
      if H.is_set(nxt) and not seen[nxt] then
        seen[nxt] = true
        queue[#queue + 1] = nxt
      end
    end
  end
  if redis.call('EXISTS', keys[3]) == 1 then
    return {0, 'dependency_already_exists'}
  end
  -- Validated where FlowFabric first uses it (before any write); stored
  -- as given.
  local _, bad_now = H.require_number(args[8], 'now_ms')
  if bad_now then return bad_now end
  local now = args[8]

  -- Only a missing kind defaults (FlowFabric stores an empty one as given).
  if kind == nil then kind = 'success_only' end
  redis.call('HSET', keys[3],
    'edge_id', edge_id,
    'flow_id', fid,
    'upstream_execution_id', up,
    'downstream_execution_id', down,
    'dependency_kind', kind,
    'satisfaction_condition', 'all_required',
    'data_passing_ref', data_ref,
    'edge_state', 'pending',
    'created_at', now,
    'created_by', 'engine')
  redis.call('SADD', keys[4], edge_id)
  redis.call('SADD', keys[5], edge_id)
  local rev = redis.call('HINCRBY', keys[1], 'graph_revision', 1)
  redis.call('HINCRBY', keys[1], 'edge_count', 1)
  redis.call('HSET', keys[1], 'last_mutation_at', now)
  return {1, 'OK', edge_id, H.int(rev)}
end)

-- ff_apply_dependency_to_child
-- KEYS: exec core, deps_meta, deps_unresolved, dep, eligible,
--       blocked:dependencies, deps_all_edges, edgegroup
-- ARGV: fid, edge_id, upstream eid, graph revision, kind, data_ref, now_ms
redis.register_function('ff_apply_dependency_to_child', function(keys, args)
  local fid, edge_id, up, rev = args[1], args[2], args[3], args[4]
  local kind, data_ref = args[5], args[6] or ''
  local core = H.hgetall(keys[1])
  if next(core) == nil then
    return {0, 'execution_not_found'}
  end
  if H.is_set(core.flow_id) and core.flow_id ~= fid then
    return {0, 'execution_already_in_flow'}
  end
  -- One application per edge: the dep hash is the marker.
  if redis.call('EXISTS', keys[4]) == 1 then
    return {1, 'OK', 'already_applied'}
  end
  -- FlowFabric stores now_ms as given without reading it as a number; a
  -- value that is not one is refused here, before any write.
  local _, bad_now = H.require_number(args[7], 'now_ms')
  if bad_now then return bad_now end
  local now = args[7]

  local eid = core.execution_id or ''
  -- Only a missing kind defaults (FlowFabric stores an empty one as given).
  if kind == nil then kind = 'success_only' end
  redis.call('HSET', keys[4],
    'edge_id', edge_id,
    'flow_id', fid,
    'upstream_execution_id', up,
    'downstream_execution_id', eid,
    'dependency_kind', kind,
    'state', 'unsatisfied',
    'data_passing_ref', data_ref,
    'last_resolved_at', '')
  redis.call('SADD', keys[3], edge_id)
  redis.call('SADD', keys[7], edge_id)
  local count = redis.call('HINCRBY', keys[2], 'unsatisfied_required_count', 1)
  redis.call('HSET', keys[2],
    'flow_id', fid,
    'last_flow_graph_revision', rev,
    'last_dependency_update_at', now)

  -- No policy yet means the implicit all_of group of this first edge; an
  -- explicit policy (set before the first edge) keeps it and only counts
  -- the new edge.
  if H.is_set(keys[8]) then
    if not redis.call('HGET', keys[8], 'policy_variant') then
      redis.call('HSET', keys[8], 'policy_variant', 'all_of', 'n', '1', 'succeeded', '0',
        'group_state', 'pending')
    else
      redis.call('HINCRBY', keys[8], 'n', 1)
    end
  end

  -- Only a runnable child is held back; only eligible is left (a delayed or
  -- admission-blocked child keeps that entry, as FlowFabric does).
  if core.lifecycle_phase == 'runnable' and core.terminal_outcome == 'none' then
    redis.call('HSET', keys[1],
      'lifecycle_phase', core.lifecycle_phase,
      'ownership_state', core.ownership_state or 'unowned',
      'eligibility_state', 'blocked_by_dependencies',
      'blocking_reason', 'waiting_for_children',
      'blocking_detail', H.int(count) .. ' dep(s) unresolved incl ' .. edge_id,
      'terminal_outcome', 'none',
      'attempt_state', core.attempt_state or 'pending_first_attempt',
      'public_state', 'waiting_children',
      'last_transition_at', now,
      'last_mutation_at', now)
    redis.call('ZREM', keys[5], eid)
    redis.call('ZADD', keys[6], tonumber(core.created_at or '0') or 0, eid)
  end
  return {1, 'OK', H.int(count)}
end)

-- ff_resolve_dependency
-- KEYS: exec core, deps_meta, deps_unresolved, dep, eligible, terminal,
--       blocked:dependencies, attempt(current), stream_meta(current),
--       downstream payload, upstream result, edgegroup, in(downstream),
--       pending_cancel_groups
-- ARGV: edge_id, upstream outcome, now_ms, fid, downstream eid
-- Replies OK with satisfied plus "data_injected" (the upstream's result
-- was copied into the child's input) or "", impossible plus
-- "child_skipped" or "", or already_resolved; any_of/quorum groups may
-- also answer pending or already_fired. A vanished child does not stop
-- the resolution: the edge and counters are still recorded and the reply
-- carries no child effect, as in FlowFabric.
redis.register_function('ff_resolve_dependency', function(keys, args)
  local edge_id, outcome = args[1], args[2]
  local dep = H.hgetall(keys[4])
  if next(dep) == nil then
    return {0, 'invalid_dependency'}
  end
  if dep.state == 'satisfied' or dep.state == 'impossible' then
    return {1, 'OK', 'already_resolved'}
  end
  -- FlowFabric stores now_ms as given (and fails indexing a skipped child
  -- on one that is not a number); refused here, before any write.
  local _, bad_now = H.require_number(args[3], 'now_ms')
  if bad_now then return bad_now end
  local now = args[3]

  local group_exists = H.is_set(keys[12]) and redis.call('EXISTS', keys[12]) == 1
  local variant = group_exists and redis.call('HGET', keys[12], 'policy_variant')
  if variant == 'any_of' or variant == 'quorum' then
    return ffflow.resolve_group(keys, args, dep, variant, now)
  end

  -- all_of (or no group hash at all): every edge must succeed.
  if outcome == 'success' then
    redis.call('HSET', keys[4], 'state', 'satisfied', 'last_resolved_at', now)
    redis.call('SREM', keys[3], edge_id)
    local remaining = redis.call('HINCRBY', keys[2], 'unsatisfied_required_count', -1)
    redis.call('HSET', keys[2], 'last_dependency_update_at', now)
    if group_exists then
      redis.call('HINCRBY', keys[12], 'succeeded', 1)
      -- FlowFabric's rule: the group is satisfied when the child's
      -- unsatisfied count reaches 0.
      if remaining == 0 then
        redis.call('HSET', keys[12], 'group_state', 'satisfied')
      end
    end
    local core = H.hgetall(keys[1])
    if next(core) == nil then return {1, 'OK', 'satisfied', ''} end
    -- Data passing: the child's input becomes the upstream's result.
    local injected = ffflow.copy_result(keys, dep, core)
    if remaining == 0 and ffflow.releasable(core) then
      ffflow.release_child(keys[1], core, core.execution_id or '', keys[5], keys[7], now)
    end
    return {1, 'OK', 'satisfied', injected}
  end

  redis.call('HSET', keys[4], 'state', 'impossible', 'last_resolved_at', now)
  redis.call('SREM', keys[3], edge_id)
  redis.call('HINCRBY', keys[2], 'unsatisfied_required_count', -1)
  redis.call('HINCRBY', keys[2], 'impossible_required_count', 1)
  redis.call('HSET', keys[2], 'last_dependency_update_at', now)
  if group_exists then
    redis.call('HINCRBY', keys[12], 'failed', 1)
    redis.call('HSET', keys[12], 'group_state', 'impossible')
  end
  local core = H.hgetall(keys[1])
  if next(core) == nil then return {1, 'OK', 'impossible', ''} end
  return {1, 'OK', 'impossible', ffflow.skip_child(keys, core, now) and 'child_skipped' or ''}
end)

-- ff_evaluate_flow_eligibility (read only)
-- KEYS: exec core, deps_meta
-- Replies OK with one of not_found, not_runnable, owned, terminal,
-- impossible, blocked_by_dependencies, eligible.
redis.register_function('ff_evaluate_flow_eligibility', function(keys, args)
  local core = H.hgetall(keys[1])
  if next(core) == nil then
    return {1, 'OK', 'not_found'}
  end
  if core.lifecycle_phase ~= 'runnable' then
    return {1, 'OK', 'not_runnable'}
  end
  if core.ownership_state ~= 'unowned' then
    return {1, 'OK', 'owned'}
  end
  if core.terminal_outcome ~= 'none' then
    return {1, 'OK', 'terminal'}
  end
  local meta = H.hgetall(keys[2])
  if (tonumber(meta.impossible_required_count or '0') or 0) > 0 then
    return {1, 'OK', 'impossible'}
  end
  if (tonumber(meta.unsatisfied_required_count or '0') or 0) > 0 then
    return {1, 'OK', 'blocked_by_dependencies'}
  end
  return {1, 'OK', 'eligible'}
end)

-- ff_promote_blocked_to_eligible
-- KEYS: exec core, blocked:dependencies, eligible, deps_meta, deps_unresolved
-- ARGV: eid, now_ms
-- The reconciler's repair for a child whose last dependency resolved but
-- which was never released.
redis.register_function('ff_promote_blocked_to_eligible', function(keys, args)
  local core = H.hgetall(keys[1])
  if next(core) == nil then
    return {0, 'execution_not_found'}
  end
  -- FlowFabric's order: lifecycle, eligibility, then terminal outcome.
  if core.lifecycle_phase ~= 'runnable' then
    return {0, 'not_runnable'}
  end
  if core.eligibility_state ~= 'blocked_by_dependencies' then
    return {0, 'not_blocked_by_deps'}
  end
  if core.terminal_outcome ~= 'none' then
    return {0, 'terminal'}
  end
  local unsatisfied = tonumber(redis.call('HGET', keys[4], 'unsatisfied_required_count') or '0') or 0
  local unresolved = redis.call('SCARD', keys[5])
  if unsatisfied > 0 or unresolved > 0 then
    return {0, 'deps_not_satisfied', tostring(unsatisfied), H.int(unresolved)}
  end
  -- FlowFabric stores now_ms as given without reading it as a number; a
  -- value that is not one is refused here, before any write.
  local _, bad_now = H.require_number(args[2], 'now_ms')
  if bad_now then return bad_now end
  ffflow.release_child(keys[1], core, args[1], keys[3], keys[2], args[2])
  return {1, 'OK'}
end)

-- ff_cancel_flow
-- KEYS: flow core, members, flow_index (unused), pending_cancels,
--       cancel_backlog
-- ARGV: fid, reason, policy, now_ms (ignored: server time), grace_ms
--       ("" = 30000)
-- Marks the flow cancelled and returns the policy and the members. Only
-- cancel_all queues the members for the cancel dispatcher; the flow stays in
-- flow_index (the projector removes it once every member is terminal).
redis.register_function('ff_cancel_flow', function(keys, args)
  local fid, reason, policy = args[1], args[2], args[3]
  local grace = 30000
  if H.is_set(args[5]) then
    grace = tonumber(args[5])
    if grace == nil or grace ~= grace or grace < 0 or grace > 9007199254740991
        or grace ~= math.floor(grace) then
      return {0, 'invalid_grace_ms'}
    end
  end
  local flow = H.hgetall(keys[1])
  if next(flow) == nil then
    return {0, 'flow_not_found'}
  end
  if ffflow.flow_is_terminal(flow.public_flow_state) then
    return {0, 'flow_already_terminal'}
  end

  local now = H.now_ms()
  redis.call('HSET', keys[1],
    'public_flow_state', 'cancelled',
    'cancelled_at', now,
    'cancel_reason', reason,
    'cancellation_policy', policy,
    'last_mutation_at', now)

  local members = redis.call('SMEMBERS', keys[2])
  if policy == 'cancel_all' and #members > 0 then
    -- Chunked so one SADD never carries an unbounded argument list.
    for i = 1, #members, 1000 do
      local cmd = {'SADD', keys[4]}
      for j = i, math.min(i + 999, #members) do
        cmd[#cmd + 1] = members[j]
      end
      redis.call(unpack(cmd))
    end
    redis.call('ZADD', keys[5], now + grace, fid)
  end

  local reply = {1, 'OK', policy}
  for _, m in ipairs(members) do
    reply[#reply + 1] = m
  end
  return reply
end)

-- ff_ack_cancel_member
-- KEYS: pending_cancels, cancel_backlog
-- ARGV: eid, fid
-- The backlog entry goes with the last owed cancel.
redis.register_function('ff_ack_cancel_member', function(keys, args)
  redis.call('SREM', keys[1], args[1])
  if redis.call('EXISTS', keys[1]) == 0 then
    redis.call('ZREM', keys[2], args[2])
  end
  return {1, 'OK'}
end)

-- ff_set_flow_tags
-- KEYS: flow core, flow tags. ARGV: key1, value1, key2, value2, ...
-- Reply: OK, <pairs written>. Tags live in the flow's own tags hash. The
-- first call also moves tags an older layout kept on the flow core (fields
-- named like tags) into it and marks the core tags_migrated=1, so later
-- calls skip that scan.
redis.register_function('ff_set_flow_tags', function(keys, args)
  -- FlowFabric's order: argument shape, existence, then each key.
  local e = H.tag_pairs_error(args)
  if e then return e end
  if redis.call('EXISTS', keys[1]) == 0 then return H.err('flow_not_found') end
  e = H.tag_key_error(args)
  if e then return e end
  if redis.call('HGET', keys[1], 'tags_migrated') ~= '1' then
    local flat = redis.call('HGETALL', keys[1])
    local moved, names = {}, {}
    for i = 1, #flat, 2 do
      if string.find(flat[i], H.TAG_KEY) then
        moved[#moved + 1] = flat[i]
        moved[#moved + 1] = flat[i + 1]
        names[#names + 1] = flat[i]
      end
    end
    if #moved > 0 then
      redis.call('HSET', keys[2], unpack(moved))
      redis.call('HDEL', keys[1], unpack(names))
    end
    redis.call('HSET', keys[1], 'tags_migrated', '1')
  end
  redis.call('HSET', keys[2], unpack(args))
  redis.call('HSET', keys[1], 'last_mutation_at', H.int(H.now_ms()))
  return H.ok(H.int(#args / 2))
end)

-- ff_set_edge_group_policy
-- KEYS: flow core, edge group (of the downstream execution). ARGV:
-- policy_variant (all_of | any_of | quorum), on_satisfied
-- (cancel_remaining | let_run; required for any_of and quorum), k (quorum
-- size, at least 1 for quorum), now_ms. Reply: OK, set | OK, already_set.
-- The policy is fixed once an edge into the group was applied.
redis.register_function('ff_set_edge_group_policy', function(keys, args)
  local variant = args[1]
  local on_satisfied = args[2] or ''
  if redis.call('EXISTS', keys[1]) == 0 then return H.err('flow_not_found') end
  if variant ~= 'all_of' and variant ~= 'any_of' and variant ~= 'quorum' then
    return H.err('invalid_input', 'unsupported_policy_variant: ' .. tostring(variant))
  end
  local k = tonumber(args[3] or '0') or 0
  if variant == 'quorum' and k < 1 then
    return H.err('invalid_input', 'quorum k must be >= 1')
  end
  if variant ~= 'all_of' and on_satisfied ~= 'cancel_remaining' and on_satisfied ~= 'let_run' then
    return H.err('invalid_input', 'on_satisfied required for any_of/quorum: cancel_remaining | let_run')
  end
  if (tonumber(redis.call('HGET', keys[2], 'n') or '0') or 0) > 0 then
    return H.err('invalid_input', 'edge_group_policy_already_fixed: dependencies already staged')
  end
  -- Restating the stored variant changes nothing (on_satisfied and k
  -- included), as in FlowFabric.
  if redis.call('HGET', keys[2], 'policy_variant') == variant then
    return H.ok('already_set')
  end
  local k_s = tostring(k) -- as Lua prints it, as FlowFabric stores it
  redis.call('HSET', keys[2],
    'policy_variant', variant,
    'on_satisfied', on_satisfied,
    'k', k_s,
    'n', '0',
    'succeeded', '0',
    'failed', '0',
    'skipped', '0',
    'group_state', 'pending',
    'created_at', args[4] or '')
  return H.ok('set')
end)

-- The sibling-cancel bookkeeping of an any_of/quorum group with
-- on_satisfied cancel_remaining: when the group fires, the downstream's
-- edge group carries cancel_siblings_pending_flag "true" and the
-- '|'-separated ids of the siblings still running
-- (cancel_siblings_pending_members), and '<flow_id>|<downstream eid>' is
-- added to the partition's pending_cancel_groups set. The dispatcher
-- cancels the siblings, then drains; the reconciler finishes drains a
-- crash interrupted.

-- cancel_group_args(args) -> the pending set member, or nil plus the
-- invalid_args tuple.
local function cancel_group_member(args)
  local flow_id, downstream = args[1] or '', args[2] or ''
  if not H.is_set(flow_id) or not H.is_set(downstream) then
    return nil, H.err('invalid_args', 'flow_id and downstream_eid required')
  end
  return flow_id .. '|' .. downstream
end

local PENDING_FIELDS = {'cancel_siblings_pending_flag', 'cancel_siblings_pending_members'}

-- ff_drain_sibling_cancel_group
-- KEYS: pending_cancel_groups, edge group. ARGV: flow_id, downstream eid.
-- Reply: OK, drained | already_drained | drained_sans_group, "". The
-- reason and satisfied_at stay on the group.
redis.register_function('ff_drain_sibling_cancel_group', function(keys, args)
  local member, e = cancel_group_member(args)
  if e then return e end
  local removed = redis.call('SREM', keys[1], member)
  local group = redis.call('EXISTS', keys[2]) == 1
  if group then redis.call('HDEL', keys[2], unpack(PENDING_FIELDS)) end
  if removed == 0 then return H.ok('already_drained', '') end
  if not group then return H.ok('drained_sans_group', '') end
  return H.ok('drained', '')
end)

-- ff_reconcile_sibling_cancel_group
-- KEYS: pending_cancel_groups, edge group. ARGV: flow_id, downstream eid.
-- Reply: OK, no_op, not_in_set | siblings_running; OK, sremmed_stale,
-- missing_edgegroup | flag_cleared; OK, completed_drain, "". A group whose
-- siblings still run is the dispatcher's: left alone. Reads the siblings'
-- cores (same hash tag as the group; a missing core counts as ended).
redis.register_function('ff_reconcile_sibling_cancel_group', function(keys, args)
  local member, e = cancel_group_member(args)
  if e then return e end
  if redis.call('SISMEMBER', keys[1], member) == 0 then return H.ok('no_op', 'not_in_set') end
  if redis.call('EXISTS', keys[2]) == 0 then
    redis.call('SREM', keys[1], member)
    return H.ok('sremmed_stale', 'missing_edgegroup')
  end
  if redis.call('HGET', keys[2], 'cancel_siblings_pending_flag') ~= 'true' then
    redis.call('SREM', keys[1], member)
    return H.ok('sremmed_stale', 'flag_cleared')
  end
  local members = redis.call('HGET', keys[2], 'cancel_siblings_pending_members') or ''
  local tag = string.match(keys[2], '(%b{})') or ''
  if H.is_set(members) and H.is_set(tag) then
    for sibling in string.gmatch(members, '([^|]+)') do
      local phase = redis.call('HGET', 'ff:exec:' .. tag .. ':' .. sibling .. ':core', 'lifecycle_phase')
      if H.is_set(phase) and phase ~= 'terminal' then return H.ok('no_op', 'siblings_running') end
    end
  end
  redis.call('HDEL', keys[2], unpack(PENDING_FIELDS))
  redis.call('SREM', keys[1], member)
  return H.ok('completed_drain', '')
end)
