-- Scheduling: delayed promotion, admission blocks and priority. These take
-- the caller's now_ms (ARGV) for both the checks and the stored times, so a
-- scheduler can drive them on its own clock.

-- Admission blocking_reason -> eligibility_state; other reasons are refused.
local FF_ADMISSION_BLOCKS = {
  waiting_for_budget = 'blocked_by_budget',
  waiting_for_quota = 'blocked_by_quota',
  waiting_for_capable_worker = 'blocked_by_route',
  paused_by_operator = 'blocked_by_operator',
  paused_by_policy = 'blocked_by_lane_state',
}

-- Blocks ff_unblock_execution may lift (lane-state pauses are not among them).
local FF_UNBLOCKABLE = {
  blocked_by_budget = true,
  blocked_by_quota = true,
  blocked_by_route = true,
  blocked_by_operator = true,
}

-- ff_promote_delayed
-- KEYS: core, delayed, eligible. ARGV: eid, now_ms
-- The due time is the core's delay_until. An execution delayed without
-- one (a resume with a delay leaves it empty) is due by its score in the
-- delayed set, and when it has none either, now: FlowFabric raises a Lua
-- error there and the execution stays delayed for good (docs/compat.md,
-- "FlowFabric crashes we do not reproduce").
redis.register_function('ff_promote_delayed', function(keys, args)
  local now, e = H.require_number(args[2], 'now_ms')
  if e then return e end
  local eid = args[1]
  -- A stale scanner entry is dropped; the status says why (FlowFabric's
  -- strings, which the delayed-promoter scanner counts).
  local core = H.load_core(keys[1])
  if not core then
    redis.call('ZREM', keys[2], eid)
    return H.ok('not_found_cleaned')
  end
  if core.lifecycle_phase ~= 'runnable' then
    redis.call('ZREM', keys[2], eid)
    return H.ok('not_runnable_cleaned')
  end
  if core.eligibility_state ~= 'not_eligible_until_time' then
    redis.call('ZREM', keys[2], eid)
    return H.ok('not_delayed_cleaned')
  end
  local due = tonumber(core.delay_until or '0')
  if due == nil then due = tonumber(redis.call('ZSCORE', keys[2], eid)) end
  if due ~= nil and due > now then return H.ok('not_yet_due') end
  -- The caller's clock is the transition time, written as Lua prints it.
  local ts = tostring(now)
  redis.call('HSET', keys[1],
    'lifecycle_phase', 'runnable', 'ownership_state', 'unowned',
    'eligibility_state', 'eligible_now', 'blocking_reason', 'waiting_for_worker',
    'blocking_detail', '', 'terminal_outcome', 'none', 'public_state', 'waiting',
    'delay_until', '', 'last_transition_at', ts, 'last_mutation_at', ts)
  redis.call('ZREM', keys[2], eid)
  redis.call('ZADD', keys[3], H.eligible_score(core.priority, core.created_at), eid)
  return H.ok('promoted')
end)

-- ff_block_execution_for_admission
-- KEYS: core, eligible, target blocked set. ARGV: eid, reason, detail, now_ms
redis.register_function('ff_block_execution_for_admission', function(keys, args)
  local eid, reason, detail = args[1], args[2], args[3] or ''
  -- FlowFabric's order: existence, lifecycle (a terminal execution answers
  -- execution_not_active with its details), then the reason; now_ms is
  -- validated where it is first used, and stored as given.
  local core = H.load_core(keys[1])
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase == 'terminal' then return H.not_active(core) end
  if core.lifecycle_phase ~= 'runnable' then return H.err('execution_not_eligible') end
  local state = FF_ADMISSION_BLOCKS[reason or '']
  if not state then return H.err('invalid_blocking_reason') end
  local now, e = H.require_number(args[4], 'now_ms')
  if e then return e end
  -- Stored as rate_limited for every reason (FlowFabric's value, which
  -- differs from its own derivation for route/operator/lane-state blocks).
  redis.call('HSET', keys[1],
    'lifecycle_phase', 'runnable', 'ownership_state', 'unowned',
    'eligibility_state', state, 'blocking_reason', reason, 'blocking_detail', detail,
    'terminal_outcome', 'none', 'attempt_state', core.attempt_state or 'pending_first_attempt',
    'public_state', 'rate_limited', 'last_transition_at', args[4], 'last_mutation_at', args[4])
  redis.call('ZREM', keys[2], eid)
  redis.call('ZADD', keys[3], now, eid)
  return H.ok('blocked')
end)

-- ff_unblock_execution
-- KEYS: core, blocked set, eligible. ARGV: eid, now_ms, expected_reason
redis.register_function('ff_unblock_execution', function(keys, args)
  local eid = args[1]
  local core = H.load_core(keys[1])
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' or not FF_UNBLOCKABLE[core.eligibility_state or ''] then
    return H.err('execution_not_eligible')
  end
  -- A stale expectation means someone re-blocked for another reason.
  if H.is_set(args[3]) and args[3] ~= core.blocking_reason then
    return H.err('execution_not_eligible')
  end
  -- FlowFabric stores now_ms as given without reading it as a number; a
  -- value that is not one is refused here, after its checks.
  local _, e = H.require_number(args[2], 'now_ms')
  if e then return e end
  redis.call('HSET', keys[1],
    'lifecycle_phase', 'runnable', 'ownership_state', 'unowned',
    'eligibility_state', 'eligible_now', 'blocking_reason', 'waiting_for_worker',
    'blocking_detail', '', 'terminal_outcome', 'none',
    'attempt_state', core.attempt_state or 'pending_first_attempt', 'public_state', 'waiting',
    'last_transition_at', args[2], 'last_mutation_at', args[2])
  redis.call('ZREM', keys[2], eid)
  redis.call('ZADD', keys[3], H.eligible_score(core.priority, core.created_at), eid)
  return H.ok('unblocked')
end)

-- ff_change_priority
-- KEYS: core, eligible. ARGV: eid, new_priority. Reply: OK, old, new.
-- Priorities are whole numbers clamped to [0, 9000], written and echoed
-- as Lua prints them, as FlowFabric does.
redis.register_function('ff_change_priority', function(keys, args)
  -- FlowFabric names the argument new_priority in its invalid_input detail.
  local p, e = H.require_number(args[2], 'new_priority')
  if e then return e end
  local core = H.load_core(keys[1])
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' or core.eligibility_state ~= 'eligible_now' then
    return H.err('execution_not_eligible')
  end
  -- FlowFabric's callers send a whole priority (an i32). A fractional one,
  -- which FlowFabric stores and scores as given, is refused: the score it
  -- makes is no longer a priority band plus a creation time.
  local prio = H.clamp_priority(p)
  if prio ~= math.floor(prio) then
    return H.err('invalid_input', 'new_priority must be a whole number, got: ' .. args[2])
  end
  local old = tostring(tonumber(core.priority or '0'))
  redis.call('HSET', keys[1], 'priority', tostring(prio), 'last_mutation_at', H.int(H.now_ms()))
  redis.call('ZADD', keys[2], H.eligible_score(prio, core.created_at), args[1])
  return H.ok(old, tostring(prio))
end)
