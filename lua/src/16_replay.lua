-- ff_replay_execution: run a terminal execution again, as a new attempt of
-- type replay. A flow member that was skipped (an upstream failed) goes
-- back to waiting on its dependencies, its impossible edges reset;
-- anything else becomes eligible at once. At most max_replay_count
-- replays (from the stored policy, default 10).
-- KEYS: core, lane terminal, lane eligible, lease_history, then for a
--       skipped member: lane blocked:dependencies, deps meta, deps
--       unresolved, and the member's dependency edges
-- ARGV: eid, now_ms (unused: the server's clock is used), then the edge
--       ids matching the edge KEYS
-- Reply: OK, <unsatisfied edges after the replay> ("0" when eligible).
redis.register_function('ff_replay_execution', function(keys, args)
  local core_key = keys[1]
  local eid = args[1]
  local now = H.now_ms()
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase ~= 'terminal' then return H.err('execution_not_terminal') end

  -- The cap lives in the execution's stored policy (a sibling of the core).
  local replays = tonumber(core.replay_count or '0') or 0
  local cap = 10
  local stored = redis.call('GET', (string.gsub(core_key, ':core$', ':policy')))
  if stored then
    local ok, policy = pcall(cjson.decode, stored)
    if ok and type(policy) == 'table' then cap = tonumber(policy.max_replay_count) or 10 end
  end
  if replays >= cap then return H.err('max_replays_exhausted') end

  local ts = tostring(now)
  local count_s = tostring(replays + 1)
  if core.terminal_outcome == 'skipped' and H.is_set(core.flow_id) then
    -- A skipped member goes back to its dependencies, whose keys the call
    -- must carry (FlowFabric fails on a missing one before writing).
    if #keys < 7 + math.max(#args - 2, 0) then
      return H.err('invalid_input', 'replaying a skipped flow member needs its dependency KEYS')
    end
    local unsatisfied = 0
    for i = 1, #args - 2 do
      local edge_key = keys[7 + i]
      local state = redis.call('HGET', edge_key, 'state')
      if state == 'impossible' then
        redis.call('HSET', edge_key, 'state', 'unsatisfied', 'last_resolved_at', '')
        redis.call('SADD', keys[7], args[2 + i])
        unsatisfied = unsatisfied + 1
      elseif state == 'unsatisfied' then
        unsatisfied = unsatisfied + 1
      end
    end
    redis.call('HSET', keys[6],
      'unsatisfied_required_count', tostring(unsatisfied),
      'impossible_required_count', '0',
      'last_dependency_update_at', ts)
    redis.call('HSET', core_key,
      'lifecycle_phase', 'runnable', 'ownership_state', 'unowned',
      'eligibility_state', 'blocked_by_dependencies', 'blocking_reason', 'waiting_for_children',
      'blocking_detail', tostring(unsatisfied) .. ' dep(s) unsatisfied after replay',
      'terminal_outcome', 'none', 'attempt_state', 'pending_replay_attempt',
      'public_state', 'waiting_children', 'pending_replay_attempt', '1',
      'replay_count', count_s, 'completed_at', '',
      'last_transition_at', ts, 'last_mutation_at', ts)
    redis.call('ZREM', keys[2], eid)
    redis.call('ZADD', keys[5], tonumber(core.created_at or '0'), eid)
    H.xadd_history(keys[4], 'event', 'replay_initiated', 'replay_count', count_s,
      'replay_type', 'skipped_flow_member', 'ts', ts)
    return H.ok(tostring(unsatisfied))
  end

  redis.call('HSET', core_key,
    'lifecycle_phase', 'runnable', 'ownership_state', 'unowned',
    'eligibility_state', 'eligible_now', 'blocking_reason', 'waiting_for_worker',
    'blocking_detail', '', 'terminal_outcome', 'none',
    'attempt_state', 'pending_replay_attempt', 'public_state', 'waiting',
    'pending_replay_attempt', '1', 'replay_count', count_s, 'completed_at', '',
    'last_transition_at', ts, 'last_mutation_at', ts)
  redis.call('ZREM', keys[2], eid)
  redis.call('ZADD', keys[3], H.eligible_score(core.priority, core.created_at), eid)
  H.xadd_history(keys[4], 'event', 'replay_initiated', 'replay_count', count_s,
    'replay_type', 'normal', 'ts', ts)
  return H.ok('0')
end)
