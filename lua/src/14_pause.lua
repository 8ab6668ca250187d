-- A worker pausing its own active execution without ending the attempt:
-- a self-delay, or waiting for child executions. Both release the lease,
-- park the same attempt (suspended) and leave the execution runnable, to
-- be continued with ff_claim_resumed_execution once it is eligible again.

-- pause(keys, args, source, state, attempt_suspension, reason) -> the
-- checks and writes the two functions share, or the error tuple. keys:
-- core, attempt, lease_current, lease_history, lease_expiry,
-- worker_leases, active, <parking set>, attempt_timeout. state holds the
-- core fields of the paused state. With source operator_override an
-- empty fence acts on the current lease.
local function pause(keys, args, source, check, state, suspension_id, reason)
  local core = H.load_core(keys[1])
  if not core then return nil, H.err('execution_not_found') end
  local now = H.now_ms()
  local e = H.check_lease_fence(keys[1], core, keys[4], args[2], args[3], args[4], source, now)
  if e then return nil, e end
  if check then
    e = check(core)
    if e then return nil, e end
  end
  local ts = H.int(now)
  state.lifecycle_phase = 'runnable'
  state.ownership_state = 'unowned'
  state.terminal_outcome = 'none'
  state.attempt_state = 'attempt_interrupted'
  state.last_transition_at = ts
  state.last_mutation_at = ts
  H.hset(keys[1], state)
  redis.call('HSET', keys[2], 'attempt_state', 'suspended', 'suspended_at', ts,
    'suspension_id', suspension_id)
  H.release_lease({core = keys[1], lease_current = keys[3], lease_history = keys[4],
    lease_expiry = keys[5], worker_leases = keys[6], active = keys[7],
    attempt_timeout = keys[9]}, core, reason, now, core.current_attempt_id or '', args[1])
  return core, nil
end

-- ff_delay_execution
-- KEYS: core, attempt, lease_current, lease_history, lease_expiry,
-- worker_leases, active, lane delayed, attempt_timeout.
-- ARGV: eid, lease_id, lease_epoch, attempt_id, delay_until, source.
-- Reply: OK, <delay_until>. The execution waits in the lane's delayed set
-- until delay_until (ff_promote_delayed makes it eligible again).
redis.register_function('ff_delay_execution', function(keys, args)
  local until_s = args[5] or ''
  local delay_check = function()
    -- FlowFabric uses delay_until first after the fence (and fails there
    -- on a non-number); ours refuses it at the same point.
    local _, e = H.require_number(until_s, 'delay_until')
    return e
  end
  local core, e = pause(keys, args, args[6], delay_check, {
    eligibility_state = 'not_eligible_until_time',
    blocking_reason = 'waiting_for_delay',
    blocking_detail = 'delayed until ' .. until_s,
    public_state = 'delayed',
    delay_until = until_s,
  }, 'worker_delay', 'worker_delay')
  if e then return e end
  redis.call('ZADD', keys[8], tonumber(until_s), args[1])
  return H.ok(until_s)
end)

-- ff_move_to_waiting_children
-- KEYS: core, attempt, lease_current, lease_history, lease_expiry,
-- worker_leases, active, lane blocked:dependencies, attempt_timeout.
-- ARGV: eid, lease_id, lease_epoch, attempt_id, source. Reply: OK.
-- The execution waits in the lane's blocked:dependencies set (scored by
-- its creation time) until its dependencies are resolved.
redis.register_function('ff_move_to_waiting_children', function(keys, args)
  local core, e = pause(keys, args, args[5], nil, {
    eligibility_state = 'blocked_by_dependencies',
    blocking_reason = 'waiting_for_children',
    blocking_detail = 'waiting for child executions to complete',
    public_state = 'waiting_children',
  }, 'waiting_children', 'waiting_children')
  if e then return e end
  redis.call('ZADD', keys[8], tonumber(core.created_at or '0') or 0, args[1])
  return H.ok()
end)
