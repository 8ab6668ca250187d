-- Execution lifecycle: create, the terminal transitions (complete, fail,
-- cancel, expire) and execution tags.

-- Policy checks of create: returns the required-capability CSV, sorted
-- with duplicates kept as FlowFabric keeps them ("" when none), or nil plus
-- the error tuple. A policy that is valid JSON but not an object carries
-- no requirements; a null where an object or array belongs is refused.
local function ff_create_policy_caps(policy_json)
  if not H.is_set(policy_json) or policy_json == '{}' then return '' end
  local ok, policy = H.json_decode(policy_json)
  if not ok then return nil, H.err('invalid_policy_json', 'malformed') end
  if type(policy) ~= 'table' or policy.routing_requirements == nil then return '' end
  local rr = policy.routing_requirements
  if type(rr) ~= 'table' then
    return nil, H.err('invalid_policy_json', 'routing_requirements:not_object')
  end
  local req = rr.required_capabilities
  if req == nil then return '' end
  if type(req) ~= 'table' then
    return nil, H.err('invalid_capabilities', 'required:not_array')
  end
  local e = H.validate_cap_tokens(req, 'required')
  if e then return nil, e end
  local list = {}
  for i = 1, #req do list[i] = req[i] end
  table.sort(list)
  return table.concat(list, ',')
end

-- Tags of a create: nil for none, else a field map, or nil plus the
-- invalid_input error for anything but an object of string, number or
-- boolean values.
local function ff_create_tags(tags_json)
  if not H.is_set(tags_json) then return nil end
  local ok, t = H.json_decode(tags_json)
  if not ok or type(t) ~= 'table' or #t > 0 then
    return nil, H.err('invalid_input', 'tags_json must be a JSON object')
  end
  local m = {}
  for k, v in pairs(t) do
    local kind = type(v)
    if kind ~= 'string' and kind ~= 'number' and kind ~= 'boolean' then
      return nil, H.err('invalid_input', 'tags_json value of ' .. tostring(k) .. ' must be a string')
    end
    m[tostring(k)] = tostring(v)
  end
  return m
end

-- ff_create_execution
-- KEYS: core, payload, policy, tags, eligible-or-delayed, idem-or-noop,
--       execution_deadline, all_executions
-- ARGV: eid, namespace, lane, kind, priority, creator, policy_json, payload,
--       delay_until, dedup_ttl_ms, tags_json, deadline_at, partition_id
redis.register_function('ff_create_execution', function(keys, args)
  local core_key, payload_key, policy_key, tags_key = keys[1], keys[2], keys[3], keys[4]
  local sched_key, idem_key, deadline_key, all_key = keys[5], keys[6], keys[7], keys[8]
  local eid, ns, lane, kind = args[1], args[2], args[3], args[4]
  local creator, policy_json, payload = args[6], args[7], args[8]
  local tags_json, partition_id = args[11], args[13]

  local priority, e = H.require_number(args[5], 'priority')
  if e then return e end

  -- Idempotency first, then the exec itself: both answer DUPLICATE.
  local use_idem = not H.is_noop_key(idem_key)
  if use_idem then
    local existing = redis.call('GET', idem_key)
    if existing then return H.duplicate(existing) end
  end
  if redis.call('EXISTS', core_key) == 1 then return H.duplicate(eid) end

  local caps
  caps, e = ff_create_policy_caps(policy_json)
  if e then return e end
  -- Refused before any write, after the checks FlowFabric runs first:
  -- a delay or deadline that is not a number (FlowFabric fails half-way)
  -- and tags that are not an object of scalars (FlowFabric stores nonsense
  -- for a null or nested value).
  local delay_until, deadline_at
  delay_until, e = H.opt_number(args[9], 'delay_until')
  if e then return e end
  deadline_at, e = H.opt_number(args[12], 'execution_deadline_at')
  if e then return e end
  local tags
  tags, e = ff_create_tags(tags_json)
  if e then return e end
  -- NaN cannot be scored (FlowFabric fails indexing it after its writes).
  if priority ~= priority then
    return H.err('invalid_input', 'priority must be a number, got: ' .. args[5])
  end
  -- FlowFabric's callers send a whole priority (an i32). A fractional one
  -- is kept while the execution waits for its delay, as FlowFabric keeps
  -- it (stored, not yet scored); one that would rank the execution now is
  -- refused, as in ff_change_priority: its score would no longer be a
  -- priority band plus a creation time.
  local now = H.now_ms()
  local delayed = delay_until ~= nil and delay_until > now
  -- Clamped, not rounded (passed as a number, written as the server
  -- writes numbers), as FlowFabric does.
  local prio = H.clamp_priority(priority)
  if not delayed and prio ~= math.floor(prio) then
    return H.err('invalid_input', 'priority must be a whole number, got: ' .. args[5])
  end
  -- A dedup TTL that is not a number means no dedup, as in FlowFabric; a
  -- positive fractional one is refused (FlowFabric fails on it after its
  -- writes: PX takes whole milliseconds).
  local dedup_ttl = tonumber(args[10]) or 0
  if dedup_ttl > 0 and not H.is_whole(dedup_ttl) and not H.is_noop_key(idem_key) then
    return H.err('invalid_input', 'dedup_ttl_ms must be a whole number, got: ' .. tostring(args[10]))
  end

  local ts = H.int(now)
  local core = {
    execution_id = eid, namespace = ns, lane_id = lane, execution_kind = kind,
    partition_id = partition_id, priority = prio, creator_identity = creator,
    lifecycle_phase = 'runnable', ownership_state = 'unowned',
    eligibility_state = 'eligible_now', blocking_reason = 'waiting_for_worker',
    blocking_detail = '', terminal_outcome = 'none',
    attempt_state = 'pending_first_attempt', public_state = 'waiting',
    total_attempt_count = '0', current_attempt_index = '', current_attempt_id = '',
    current_lease_id = '', current_lease_epoch = '0', current_worker_id = '',
    current_worker_instance_id = '', current_lane = lane,
    retry_count = '0', replay_count = '0', lease_reclaim_count = '0',
    created_at = ts, started_at = '', completed_at = '',
    last_transition_at = ts, last_mutation_at = ts,
    lease_acquired_at = '', lease_expires_at = '', lease_last_renewed_at = '',
    lease_renewal_deadline = '', lease_expired_at = '', lease_revoked_at = '',
    lease_revoke_reason = '', delay_until = '',
    current_suspension_id = '', current_waitpoint_id = '',
    pending_retry_reason = '', pending_replay_reason = '',
    pending_replay_requested_by = '', pending_previous_attempt_index = '',
    progress_pct = '', progress_message = '', progress_updated_at = '',
    flow_id = '',
  }
  if delayed then
    core.eligibility_state = 'not_eligible_until_time'
    core.blocking_reason = 'waiting_for_delay'
    core.blocking_detail = 'delayed until ' .. args[9]
    core.public_state = 'delayed'
    core.delay_until = args[9]
  end
  if caps ~= '' then core.required_capabilities = caps end
  H.hset(core_key, core)

  if H.is_set(payload) then redis.call('SET', payload_key, payload) end
  if H.is_set(policy_json) then redis.call('SET', policy_key, policy_json) end
  if tags then H.hset(tags_key, tags) end

  if delayed then
    redis.call('ZADD', sched_key, delay_until, eid)
  else
    redis.call('ZADD', sched_key, H.eligible_score(prio, now), eid)
  end
  redis.call('SADD', all_key, eid)
  -- Any given deadline is indexed, zero and negative ones included (due now).
  if deadline_at ~= nil then
    redis.call('ZADD', deadline_key, deadline_at, eid)
  end
  -- The idempotency key exists only with a positive TTL: never a key
  -- without expiry.
  if use_idem and dedup_ttl > 0 then
    redis.call('SET', idem_key, eid, 'PX', dedup_ttl)
  end
  return H.ok(eid, core.public_state)
end)

-- ff_complete_execution
-- KEYS: core, attempt, lease_expiry, worker_leases, terminal, lease_current,
--       lease_history, active, stream_meta, result, attempt_timeout,
--       execution_deadline
-- ARGV: eid, lease_id, epoch, attempt_id, result, source
redis.register_function('ff_complete_execution', function(keys, args)
  local core_key = keys[1]
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  local now = H.now_ms()
  local e = H.check_lease_fence(core_key, core, keys[7], args[2], args[3], args[4], args[6], now)
  if e then return e end

  -- The id the caller passed is the one indexed and published.
  local eid = args[1]
  -- The attempt and stream are the caller's KEYS, never rebuilt from
  -- current_attempt_index (FlowFabric writes the declared keys as given).
  redis.call('HSET', keys[2], 'attempt_state', 'ended_success', 'ended_at', H.int(now))
  H.close_stream_meta(keys[9], 'attempt_success', now)
  if H.is_set(args[5]) then redis.call('SET', keys[10], args[5]) end

  H.release_lease({core = core_key, lease_current = keys[6], lease_history = keys[7],
    lease_expiry = keys[3], worker_leases = keys[4], active = keys[8],
    attempt_timeout = keys[11]}, core, 'completed', now, nil, eid)
  redis.call('ZREM', keys[12], eid)

  local f = H.terminal_fields('success', 'completed', now)
  f.attempt_state = 'attempt_terminal'
  -- A completed execution carries no trace of an earlier lapse or revoke
  -- (the other terminal paths keep them, as FlowFabric does).
  f.lease_expired_at = ''
  f.lease_revoked_at = ''
  f.lease_revoke_reason = ''
  H.hset(core_key, f)
  redis.call('ZADD', keys[5], now, eid)
  H.publish_completion(eid, core.flow_id, 'success')
  return H.ok('completed')
end)

-- Retry delay after retry_count failed attempts (0-based), in ms, as a
-- number (fractional when the policy makes it so). FlowFabric's rules: a
-- fixed delay (default 1000), or exponential initial * multiplier^count
-- (defaults 1000 and 2) capped at max_delay_ms (default 60000); anything
-- else 1000.
local function ff_retry_backoff_ms(backoff, retry_count)
  if type(backoff) ~= 'table' then return 1000 end
  if backoff.type == 'exponential' then
    local initial = tonumber(backoff.initial_delay_ms) or 1000
    local cap = tonumber(backoff.max_delay_ms) or 60000
    local mult = tonumber(backoff.multiplier) or 2
    return math.min(initial * (mult ^ retry_count), cap)
  end
  if backoff.type == 'fixed' then
    return tonumber(backoff.delay_ms) or 1000
  end
  return 1000
end

-- ff_fail_execution
-- KEYS: core, attempt, lease_expiry, worker_leases, terminal, delayed,
--       lease_current, lease_history, active, stream_meta, attempt_timeout,
--       execution_deadline
-- ARGV: eid, lease_id, epoch, attempt_id, reason, category,
--       retry_policy_json, source
redis.register_function('ff_fail_execution', function(keys, args)
  local core_key = keys[1]
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  local now = H.now_ms()
  local e = H.check_lease_fence(core_key, core, keys[8], args[2], args[3], args[4], args[8], now)
  if e then return e end

  local reason, category = args[5] or '', args[6] or ''
  local eid = args[1]
  -- A malformed or non-object retry policy means no retries. One whose
  -- max_retries is not a number is refused before any write (FlowFabric
  -- fails on it after ending the attempt; its callers send a number).
  local policy = H.json_object(args[7])
  local max_retries = 0
  if policy then
    max_retries = tonumber(policy.max_retries or '0')
    if max_retries == nil then
      return H.err('invalid_input', 'max_retries must be a number, got: ' .. tostring(policy.max_retries))
    end
  end
  local retry_count = tonumber(core.retry_count or '0') or 0

  -- The attempt and stream are the caller's KEYS (see complete).
  redis.call('HSET', keys[2],
    'attempt_state', 'ended_failure', 'ended_at', H.int(now),
    'failure_reason', reason, 'failure_category', category)
  H.close_stream_meta(keys[10], 'attempt_failure', now)

  local lease_keys = {core = core_key, lease_current = keys[7], lease_history = keys[8],
    lease_expiry = keys[3], worker_leases = keys[4], active = keys[9],
    attempt_timeout = keys[11]}

  if retry_count < max_retries then
    -- Kept as computed (a fractional backoff gives a fractional time),
    -- written as Lua prints it and indexed as a number, as FlowFabric does.
    local delay_until = now + ff_retry_backoff_ms(policy.backoff, retry_count)
    local du = tostring(delay_until)
    local idx = core.current_attempt_index or '0'
    H.release_lease(lease_keys, core, 'failed_retry_scheduled', now, nil, eid)
    local ts = H.int(now)
    H.hset(core_key, {
      lifecycle_phase = 'runnable', ownership_state = 'unowned',
      eligibility_state = 'not_eligible_until_time',
      blocking_reason = 'waiting_for_retry_backoff',
      blocking_detail = 'retry backoff until ' .. du .. ' (attempt ' .. idx
        .. ' failed: ' .. reason .. ')',
      terminal_outcome = 'none',
      attempt_state = 'pending_retry_attempt', public_state = 'delayed',
      retry_count = tostring(retry_count + 1), pending_retry_reason = reason,
      pending_previous_attempt_index = idx, current_attempt_id = '',
      delay_until = du, failure_reason = reason,
      last_transition_at = ts, last_mutation_at = ts,
    })
    redis.call('ZADD', keys[6], delay_until, eid)
    return H.ok('retry_scheduled', du)
  end

  H.release_lease(lease_keys, core, 'failed_terminal', now, nil, eid)
  redis.call('ZREM', keys[12], eid)
  local f = H.terminal_fields('failed', 'failed', now)
  f.attempt_state = 'attempt_terminal'
  f.failure_reason = reason
  H.hset(core_key, f)
  redis.call('ZADD', keys[5], now, eid)
  H.publish_completion(eid, core.flow_id, 'failed')
  return H.ok('terminal_failed')
end)

-- ff_cancel_execution
-- KEYS: core, attempt, stream_meta, lease_current, lease_history,
--       lease_expiry, worker_leases, suspension_current, waitpoint,
--       wp_condition, suspension_timeout, terminal, attempt_timeout,
--       execution_deadline, eligible, delayed, blocked:dependencies,
--       blocked:budget, blocked:quota, blocked:route, blocked:operator
-- ARGV: eid, reason, source, lease_id, epoch
redis.register_function('ff_cancel_execution', function(keys, args)
  local core_key = keys[1]
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  local eid = args[1]
  local reason, source, lease_id, epoch = args[2] or '', args[3] or '', args[4], args[5]
  local phase = core.lifecycle_phase
  if phase == 'terminal' then return H.not_active(core) end

  -- Only the active path is fenced, and weakly: an override skips it, and
  -- the lease id/epoch are compared only when the caller sends a lease id.
  if phase == 'active' and source ~= 'operator_override' then
    if core.ownership_state == 'lease_revoked' then return H.err('lease_revoked') end
    if H.is_set(lease_id) then
      if lease_id ~= core.current_lease_id or (epoch or '') ~= core.current_lease_epoch then
        return H.err('stale_lease')
      end
    end
  end

  local now = H.now_ms()
  local ts = H.int(now)
  local idx = core.current_attempt_index

  -- Everything below writes the caller's KEYS: the attempt and stream in
  -- KEYS[2..3], the suspension, waitpoint and condition in KEYS[8..10]
  -- (each only if it exists), whatever the core says is current.
  if (phase == 'active' or phase == 'suspended') and H.is_set(idx) then
    redis.call('HSET', keys[2],
      'attempt_state', 'ended_cancelled', 'ended_at', ts,
      'failure_reason', 'cancelled: ' .. reason)
  end
  if phase == 'active' then
    H.close_stream_meta(keys[3], 'attempt_cancelled', now)
    H.release_lease({core = core_key, lease_current = keys[4], lease_history = keys[5]},
      core, 'cancelled', now)
  elseif phase == 'suspended' then
    H.close_stream_meta(keys[3], 'attempt_cancelled', now)
    local susp_key = keys[8]
    if redis.call('EXISTS', susp_key) == 1 then
      redis.call('HSET', susp_key, 'closed_at', ts, 'close_reason', 'cancelled')
    end
    if redis.call('EXISTS', keys[9]) == 1 then
      redis.call('HSET', keys[9], 'state', 'closed', 'closed_at', ts, 'close_reason', 'cancelled')
    end
    if redis.call('EXISTS', keys[10]) == 1 then
      redis.call('HSET', keys[10], 'closed', '1', 'closed_at', ts, 'closed_reason', 'cancelled')
    end
    H.drop_composite(susp_key)
    local susp = H.hgetall(susp_key)
    if next(susp) ~= nil then
      H.close_extra_waitpoints(susp_key, susp,
        {'state', 'closed', 'closed_at', ts, 'close_reason', 'cancelled'},
        {'closed', '1', 'closed_at', ts, 'closed_reason', 'cancelled'})
    end
  end

  local f = H.clear_lease_fields(H.terminal_fields('cancelled', 'cancelled', now))
  f.attempt_state = H.terminal_attempt_state(core)
  f.cancellation_reason = reason
  f.cancelled_by = source ~= '' and source or eid
  f.current_suspension_id = ''
  f.current_waitpoint_id = ''
  H.hset(core_key, f)

  -- Out of every scheduling and timeout index. The lane's active and
  -- suspended sets are not among the KEYS: derived from the core's lane
  -- as FlowFabric does (documented exception).
  local tag = H.tag_of(core_key)
  local lane = core.lane_id or 'default'
  for i = 15, 21 do redis.call('ZREM', keys[i], eid) end
  redis.call('ZREM', H.lane_key(tag, lane, 'active'), eid)
  redis.call('ZREM', H.lane_key(tag, lane, 'suspended'), eid)
  redis.call('ZREM', keys[6], eid)
  redis.call('ZREM', keys[11], eid)
  redis.call('ZREM', keys[13], eid)
  redis.call('ZREM', keys[14], eid)
  redis.call('SREM', keys[7], eid)
  redis.call('ZADD', keys[12], now, eid)
  if source ~= 'flow_cascade' then
    H.publish_completion(eid, core.flow_id, 'cancelled')
  end
  return H.ok('cancelled', phase)
end)

-- ff_expire_execution (attempt-timeout and execution-deadline scanners)
-- KEYS: core, attempt, stream_meta, lease_current, lease_history,
--       lease_expiry, worker_leases, active, terminal, attempt_timeout,
--       execution_deadline, suspended, suspension_timeout, suspension_current
-- ARGV: eid, reason (attempt_timeout when absent)
redis.register_function('ff_expire_execution', function(keys, args)
  local core_key = keys[1]
  local eid, reason = args[1], args[2] or 'attempt_timeout'
  local core = H.load_core(core_key)
  -- Scanner entries for a vanished or finished exec are just dropped.
  if not core then
    redis.call('ZREM', keys[10], eid)
    redis.call('ZREM', keys[11], eid)
    return H.ok('not_found_cleaned')
  end
  local phase = core.lifecycle_phase
  if phase == 'terminal' then
    redis.call('ZREM', keys[10], eid)
    redis.call('ZREM', keys[11], eid)
    return H.ok('already_terminal')
  end

  local now = H.now_ms()
  local ts = H.int(now)
  local tag = H.tag_of(core_key)
  local idx = core.current_attempt_index

  -- The attempt, stream and suspension are the caller's KEYS.
  if phase == 'active' then
    if H.is_set(idx) then
      redis.call('HSET', keys[2],
        'attempt_state', 'ended_failure', 'ended_at', ts, 'failure_reason', reason)
    end
    H.close_stream_meta(keys[3], 'expired', now)
    redis.call('DEL', keys[4])
    redis.call('ZREM', keys[6], eid)
    redis.call('SREM', keys[7], eid)
    -- The owner's lease set is not among the KEYS (the scanner cannot
    -- know the owner): derived from the core, as FlowFabric does.
    if H.is_set(core.current_worker_instance_id) then
      redis.call('SREM', H.worker_leases_key(tag, core.current_worker_instance_id), eid)
    end
    redis.call('ZREM', keys[8], eid)
    H.xadd_history(keys[5], 'event', 'released',
      'lease_id', core.current_lease_id or '', 'lease_epoch', core.current_lease_epoch or '',
      'attempt_index', idx or '', 'reason', 'expired:' .. reason, 'ts', ts)
  elseif phase == 'suspended' then
    if H.is_set(idx) then
      redis.call('HSET', keys[2],
        'attempt_state', 'ended_failure', 'ended_at', ts, 'failure_reason', reason)
    end
    -- The suspension is closed, its waitpoints are left as they are (the
    -- suspension-timeout and cancel paths close those), as in FlowFabric.
    if redis.call('EXISTS', keys[14]) == 1 then
      redis.call('HSET', keys[14], 'closed_at', ts, 'close_reason', 'expired:' .. reason)
    end
    H.close_stream_meta(keys[3], 'expired', now)
    redis.call('ZREM', keys[12], eid)
    redis.call('ZREM', keys[13], eid)
  elseif phase == 'runnable' then
    -- The lane's runnable sets are not among the KEYS: derived from the
    -- core's tag and lane as FlowFabric does (documented exception). A
    -- state with no set of its own (a lane-state block) is removed from
    -- every runnable set of the lane.
    local set_key = H.runnable_set_key(tag, core)
    if set_key then
      redis.call('ZREM', set_key, eid)
    else
      local lane = H.core_lane(core)
      for _, suffix in ipairs(H.RUNNABLE_SET_SUFFIXES) do
        redis.call('ZREM', H.lane_key(tag, lane, suffix), eid)
      end
    end
  end

  -- Every path ends the same: no lease owner, no suspension or waitpoint
  -- current (the renewal bookkeeping fields are kept).
  local f = H.terminal_fields('expired', 'expired', now)
  f.attempt_state = H.terminal_attempt_state(core)
  f.failure_reason = reason
  f.current_lease_id = ''
  f.current_worker_id = ''
  f.current_worker_instance_id = ''
  f.lease_expires_at = ''
  f.current_suspension_id = ''
  f.current_waitpoint_id = ''
  H.hset(core_key, f)
  redis.call('ZREM', keys[10], eid)
  redis.call('ZREM', keys[11], eid)
  redis.call('ZADD', keys[9], now, eid)
  H.publish_completion(eid, core.flow_id, 'expired')
  return H.ok('expired', phase)
end)

-- ff_set_execution_tags
-- KEYS: core, tags. ARGV: key1, value1, key2, value2, ...
-- Keys must be namespaced "<caller>.<field>" so tags from different callers
-- cannot collide.
redis.register_function('ff_set_execution_tags', function(keys, args)
  -- FlowFabric's order: argument shape, existence, then each key.
  local e = H.tag_pairs_error(args)
  if e then return e end
  if redis.call('EXISTS', keys[1]) == 0 then return H.err('execution_not_found') end
  e = H.tag_key_error(args)
  if e then return e end
  redis.call('HSET', keys[2], unpack(args))
  redis.call('HSET', keys[1], 'last_mutation_at', H.int(H.now_ms()))
  return H.ok(H.int(#args / 2))
end)
