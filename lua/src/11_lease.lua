-- Leasing: claim grants, claims (fresh and resumed), renewal, revocation,
-- expiry marking and reclaim.
--
-- Times derived from a caller's TTL or timeout are kept as computed (a
-- fractional TTL gives a fractional expiry): written as Lua prints them
-- and indexed as numbers, as FlowFabric does. The execution id indexed,
-- recorded and returned is the caller's ARGV id, as FlowFabric uses it.

-- Grant ARGV shared by the claim and reclaim grant functions:
-- eid, worker_id, wiid, lane, cap_hash, grant_ttl_ms, route_snapshot_json,
-- admission_summary, worker_caps_csv. Returns the table or nil + error.
local function ff_grant_args(args)
  local ttl, e = H.require_number(args[6], 'grant_ttl_ms')
  if e then return nil, e end
  return {
    worker_id = args[2] or '', wiid = args[3] or '', lane = args[4] or '',
    cap_hash = args[5] or '', ttl = ttl, route = args[7] or '',
    admission = args[8] or '', caps_csv = args[9] or '',
  }
end

-- whole_ttl_error(ttl, name, raw) -> nil, or the invalid_input tuple for a
-- TTL that a key expiry cannot take (PEXPIRE and PEXPIREAT want whole
-- milliseconds; FlowFabric fails there after its first writes).
local function whole_ttl_error(ttl, name, raw)
  if not H.is_whole(ttl) then
    return H.err('invalid_input', name .. ' must be a whole number, got: ' .. tostring(raw))
  end
  return nil
end

-- issue_grant(keys, args, check) -> the shared body of the two grant
-- functions: the state check, an existing grant, capabilities, then the
-- grant hash with its expiry. Returns the grant's expiry or the error.
local function issue_grant(keys, args, check)
  local a, e = ff_grant_args(args)
  if e then return nil, e end
  local core_key, grant_key = keys[1], keys[2]
  local core = H.load_core(core_key)
  if not core then return nil, H.err('execution_not_found') end
  e = check(core)
  if e then return nil, e end
  local now = H.now_ms()
  e = H.check_capabilities(core_key, core, a.caps_csv, now)
  if e then return nil, e end
  e = whole_ttl_error(a.ttl, 'grant_ttl_ms', args[6])
  if e then return nil, e end
  return H.write_claim_grant(grant_key, a, now)
end

-- ff_issue_claim_grant
-- KEYS: core, claim_grant, eligible
-- ARGV: see ff_grant_args
redis.register_function('ff_issue_claim_grant', function(keys, args)
  local _, e = issue_grant(keys, args, function(core)
    if core.lifecycle_phase ~= 'runnable' or core.eligibility_state ~= 'eligible_now' then
      return H.err('execution_not_eligible')
    end
    if redis.call('EXISTS', keys[2]) == 1 then return H.err('grant_already_exists') end
    if not redis.call('ZSCORE', keys[3], args[1]) then
      return H.err('execution_not_in_eligible_set')
    end
    return nil
  end)
  if e then return e end
  return H.ok(args[1])
end)

-- Attempt type a fresh claim creates, keyed by the exec's attempt_state.
local FF_CLAIM_ATTEMPT_TYPE = {
  pending_first_attempt = 'initial',
  pending_retry_attempt = 'retry',
  pending_replay_attempt = 'replay',
}

-- optional_timeouts(timeout_raw, deadline_raw) -> the attempt timeout and
-- deadline as numbers (nil when not indexed: empty or the literal "0"),
-- or the invalid_input tuple for one that is not a number. Checked before
-- any write (FlowFabric fails on it after writing the attempt).
local function optional_timeouts(timeout_raw, deadline_raw, deadline_name)
  local timeout, deadline, e
  if H.is_set(timeout_raw) and timeout_raw ~= '0' then
    timeout, e = H.require_number(timeout_raw, 'attempt_timeout_ms')
    if e then return nil, nil, e end
  end
  if H.is_set(deadline_raw) and deadline_raw ~= '0' then
    deadline, e = H.require_number(deadline_raw, deadline_name)
    if e then return nil, nil, e end
  end
  return timeout, deadline, nil
end

-- start_fresh_attempt(core_key, core, k, p) -> idx, epoch, expires,
-- attempt_type (strings): the writes of a fresh claim, shared by
-- ff_claim_execution and ff_issue_grant_and_claim. Creates attempt
-- total_attempt_count (with its usage and policy) under the caller's id,
-- the lease, the core's active state, and the index entries. k:
-- lease_expiry, worker_leases, attempts, lease_current, active,
-- attempt_timeout, execution_deadline, eligible. p: eid, worker_id, wiid,
-- lane, lease_id, attempt_id, ttl, renew_before, policy_fields,
-- timeout_ms, deadline_at, now.
local function start_fresh_attempt(core_key, core, k, p)
  local eid = p.eid
  local tag = H.tag_of(core_key)
  local ts = H.int(p.now)
  local n = tonumber(core.total_attempt_count or '0') or 0
  local idx = tostring(n)
  local epoch = tostring((tonumber(core.current_lease_epoch or '0') or 0) + 1)
  local expires = p.now + p.ttl
  local renewal = p.now + p.renew_before
  local attempt_type = FF_CLAIM_ATTEMPT_TYPE[core.attempt_state] or 'initial'

  local attempt_key = H.attempt_key(tag, eid, idx)
  local attempt = {
    attempt_id = p.attempt_id, execution_id = eid, attempt_index = idx,
    attempt_type = attempt_type, attempt_state = 'started',
    created_at = ts, started_at = ts, lease_id = p.lease_id, lease_epoch = epoch,
    worker_id = p.worker_id, worker_instance_id = p.wiid,
  }
  if attempt_type == 'retry' then
    attempt.retry_reason = core.pending_retry_reason or ''
    attempt.previous_attempt_index = core.pending_previous_attempt_index or ''
  elseif attempt_type == 'replay' then
    attempt.replay_reason = core.pending_replay_reason or ''
    attempt.replay_requested_by = core.pending_replay_requested_by or ''
    attempt.replayed_from_attempt_index = core.pending_previous_attempt_index or ''
  end
  H.hset(attempt_key, attempt)
  redis.call('ZADD', k.attempts, p.now, idx)
  redis.call('HSET', attempt_key .. ':usage', 'last_usage_report_seq', '0')
  H.hset(attempt_key .. ':policy', p.policy_fields)

  redis.call('DEL', k.lease_current)
  redis.call('HSET', k.lease_current,
    'lease_id', p.lease_id, 'lease_epoch', epoch, 'execution_id', eid,
    'attempt_id', p.attempt_id, 'worker_id', p.worker_id, 'worker_instance_id', p.wiid,
    'acquired_at', ts, 'expires_at', tostring(expires), 'last_renewed_at', ts,
    'renewal_deadline', tostring(renewal))

  -- A fresh claim does not touch lease_expired_at / lease_revoke_reason:
  -- FlowFabric clears those on reclaim, on a resumed claim and on
  -- completion, not here.
  local f = {
    lifecycle_phase = 'active', ownership_state = 'leased',
    eligibility_state = 'not_applicable', blocking_reason = 'none',
    blocking_detail = '', terminal_outcome = 'none',
    attempt_state = 'running_attempt', public_state = 'active',
    total_attempt_count = tostring(n + 1), current_attempt_index = idx,
    current_attempt_id = p.attempt_id, current_lease_id = p.lease_id,
    current_lease_epoch = epoch, current_worker_id = p.worker_id,
    current_worker_instance_id = p.wiid, current_lane = p.lane,
    lease_acquired_at = ts, lease_expires_at = tostring(expires), lease_last_renewed_at = ts,
    lease_renewal_deadline = tostring(renewal),
    started_at = H.is_set(core.started_at) and core.started_at or ts,
    pending_retry_reason = '', pending_replay_reason = '',
    pending_replay_requested_by = '', pending_previous_attempt_index = '',
    last_transition_at = ts, last_mutation_at = ts,
  }
  H.hset(core_key, f)

  redis.call('ZREM', k.eligible, eid)
  redis.call('ZADD', k.lease_expiry, expires, eid)
  redis.call('SADD', k.worker_leases, eid)
  redis.call('ZADD', k.active, expires, eid)
  -- Indexed whenever given and not the literal "0", as FlowFabric does
  -- (a negative value is indexed, already due).
  if p.timeout_ms ~= nil then
    redis.call('ZADD', k.attempt_timeout, p.now + p.timeout_ms, eid)
  end
  if p.deadline_at ~= nil then
    redis.call('ZADD', k.execution_deadline, p.deadline_at, eid)
  end
  return idx, epoch, tostring(expires), attempt_type
end

-- ff_claim_execution
-- KEYS: core, claim_grant, eligible, lease_expiry, worker_leases,
--       attempt(i), usage(i), policy(i), attempts, lease_current,
--       lease_history, active, attempt_timeout, execution_deadline
-- ARGV: eid, worker_id, wiid, lane, cap_hash, lease_id, lease_ttl_ms,
--       renew_before_ms, attempt_id, attempt_policy_json,
--       attempt_timeout_ms, deadline_at
-- The attempt's keys are derived from the core's tag, the caller's id
-- and total_attempt_count (KEYS[6..8] are placeholders, as in FlowFabric).
redis.register_function('ff_claim_execution', function(keys, args)
  local core_key = keys[1]
  local eid = args[1]
  local worker_id, wiid, lane = args[2] or '', args[3] or '', args[4] or ''
  local lease_id, attempt_id = args[6] or '', args[9] or ''
  local ttl, e = H.require_number(args[7], 'lease_ttl_ms')
  if e then return e end
  -- FlowFabric requires renew_before_ms to be a number even though the
  -- claim only records it.
  local renew_before
  renew_before, e = H.require_number(args[8], 'renew_before_ms')
  if e then return e end

  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  -- FlowFabric's order and codes: an owned execution is a lease conflict,
  -- any other non-claimable state (delayed, blocked, terminal) is not
  -- leaseable.
  if core.lifecycle_phase ~= 'runnable' then return H.err('execution_not_leaseable') end
  if core.ownership_state ~= 'unowned' then return H.err('lease_conflict') end
  if core.eligibility_state ~= 'eligible_now' then return H.err('execution_not_leaseable') end
  if core.terminal_outcome ~= 'none' then return H.err('execution_not_leaseable') end
  if core.attempt_state == 'running_attempt' then return H.err('active_attempt_exists') end
  if core.attempt_state == 'attempt_interrupted' then
    return H.err('use_claim_resumed_execution')
  end
  local now = H.now_ms()
  e = H.check_claim_grant(keys[2], worker_id, now, true)
  if e then return e end
  -- Checked before any write, after the checks FlowFabric runs first: a
  -- malformed or non-object policy (its callers never send one), and a
  -- timeout or deadline that is not a number.
  local policy_fields
  policy_fields, e = H.attempt_policy_fields(args[10])
  if e then return e end
  local timeout_ms, deadline_at
  timeout_ms, deadline_at, e = optional_timeouts(args[11], args[12], 'deadline_at')
  if e then return e end

  redis.call('DEL', keys[2])
  local idx, epoch, expires, attempt_type = start_fresh_attempt(core_key, core, {
    lease_expiry = keys[4], worker_leases = keys[5], attempts = keys[9],
    lease_current = keys[10], active = keys[12], attempt_timeout = keys[13],
    execution_deadline = keys[14], eligible = keys[3],
  }, {
    eid = eid, worker_id = worker_id, wiid = wiid, lane = lane, lease_id = lease_id,
    attempt_id = attempt_id, ttl = ttl, renew_before = renew_before,
    policy_fields = policy_fields, timeout_ms = timeout_ms, deadline_at = deadline_at,
    now = now,
  })
  H.xadd_history(keys[11], 'event', 'acquired', 'lease_id', lease_id, 'lease_epoch', epoch,
    'attempt_id', attempt_id, 'attempt_index', idx, 'worker_id', worker_id, 'ts', H.int(now))
  return H.ok(lease_id, epoch, expires, attempt_id, idx, attempt_type)
end)

-- resume_attempt(core_key, core, attempt_key, k, p) -> idx, epoch,
-- expires, attempt_id (strings): the writes that continue an interrupted
-- attempt under a new lease, shared by ff_claim_resumed_execution and
-- ff_issue_grant_and_claim. A new lease starts clean: the marks of an
-- earlier lapse or revoke are cleared. k: lease_current, eligible,
-- lease_expiry, worker_leases, active. p: eid, worker_id, wiid, lane,
-- lease_id, ttl, now.
local function resume_attempt(core_key, core, attempt_key, k, p)
  local eid = p.eid
  local ts = H.int(p.now)
  local idx = core.current_attempt_index or ''
  local attempt_id = core.current_attempt_id or ''
  local epoch = tostring((tonumber(core.current_lease_epoch or '0') or 0) + 1)
  local expires = tostring(p.now + p.ttl)
  local renewal = tostring(p.now + math.floor(p.ttl * 2 / 3))
  redis.call('HSET', attempt_key,
    'attempt_state', 'started', 'resumed_at', ts,
    'lease_id', p.lease_id, 'lease_epoch', epoch,
    'worker_id', p.worker_id, 'worker_instance_id', p.wiid,
    'suspended_at', '', 'suspension_id', '')
  redis.call('DEL', k.lease_current)
  redis.call('HSET', k.lease_current,
    'lease_id', p.lease_id, 'lease_epoch', epoch, 'execution_id', eid,
    'attempt_id', attempt_id, 'worker_id', p.worker_id, 'worker_instance_id', p.wiid,
    'acquired_at', ts, 'expires_at', expires, 'last_renewed_at', ts,
    'renewal_deadline', renewal)
  H.hset(core_key, {
    lifecycle_phase = 'active', ownership_state = 'leased',
    eligibility_state = 'not_applicable', blocking_reason = 'none',
    blocking_detail = '', terminal_outcome = 'none',
    attempt_state = 'running_attempt', public_state = 'active',
    current_lease_id = p.lease_id, current_lease_epoch = epoch,
    current_worker_id = p.worker_id, current_worker_instance_id = p.wiid,
    current_lane = p.lane,
    lease_acquired_at = ts, lease_expires_at = expires, lease_last_renewed_at = ts,
    lease_renewal_deadline = renewal,
    lease_expired_at = '', lease_revoked_at = '', lease_revoke_reason = '',
    last_transition_at = ts, last_mutation_at = ts,
  })
  redis.call('ZREM', k.eligible, eid)
  redis.call('ZADD', k.lease_expiry, p.now + p.ttl, eid)
  redis.call('SADD', k.worker_leases, eid)
  redis.call('ZADD', k.active, p.now + p.ttl, eid)
  return idx, epoch, expires, attempt_id
end

-- ff_claim_resumed_execution: continue the interrupted attempt under a new
-- lease (after a resume or a worker delay).
-- KEYS: core, claim_grant, eligible, lease_expiry, worker_leases,
--       attempt(current), lease_current, lease_history, active,
--       attempt_timeout, execution_deadline
-- ARGV: eid, worker_id, wiid, lane, cap_hash, lease_id, lease_ttl_ms,
--       remaining_attempt_timeout_ms
redis.register_function('ff_claim_resumed_execution', function(keys, args)
  local core_key = keys[1]
  local eid = args[1]
  local worker_id, wiid, lane, lease_id = args[2] or '', args[3] or '', args[4] or '', args[6] or ''
  local ttl, e = H.require_number(args[7], 'lease_ttl_ms')
  if e then return e end

  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' then return H.err('execution_not_leaseable') end
  if core.attempt_state ~= 'attempt_interrupted' then return H.err('not_a_resumed_execution') end
  local now = H.now_ms()
  e = H.check_claim_grant(keys[2], worker_id, now, true)
  if e then
    -- FlowFabric drops an expired grant here (the plain claim keeps it).
    if e[2] == 'claim_grant_expired' then redis.call('DEL', keys[2]) end
    return e
  end
  -- Validated where FlowFabric first uses it, but before any write.
  local remaining
  remaining, e = H.opt_number(args[8], 'remaining_attempt_timeout_ms')
  if e then return e end

  redis.call('DEL', keys[2])
  -- The resumed attempt is the caller's KEYS[6].
  local idx, epoch, expires, attempt_id = resume_attempt(core_key, core, keys[6], {
    lease_current = keys[7], eligible = keys[3], lease_expiry = keys[4],
    worker_leases = keys[5], active = keys[9],
  }, {eid = eid, worker_id = worker_id, wiid = wiid, lane = lane, lease_id = lease_id,
    ttl = ttl, now = now})
  if remaining ~= nil and remaining > 0 then
    redis.call('ZADD', keys[10], now + remaining, eid)
  end
  -- FlowFabric's field order: the attempt index before its id.
  H.xadd_history(keys[8], 'event', 'acquired', 'lease_id', lease_id, 'lease_epoch', epoch,
    'attempt_index', idx, 'attempt_id', attempt_id, 'worker_id', worker_id,
    'reason', 'claim_resumed', 'ts', H.int(now))
  return H.ok(lease_id, epoch, expires, attempt_id, idx, 'resumed')
end)

-- ff_renew_lease
-- KEYS: core, lease_current, lease_history, lease_expiry
-- ARGV: eid, attempt_index, attempt_id, lease_id, epoch, lease_ttl_ms,
--       lease_history_grace_ms (both required numbers)
redis.register_function('ff_renew_lease', function(keys, args)
  local core_key = keys[1]
  -- Both are required numbers, named as FlowFabric names them.
  local ttl, e = H.require_number(args[6], 'lease_ttl_ms')
  if e then return e end
  local grace
  grace, e = H.require_number(args[7], 'lease_history_grace_ms')
  if e then return e end
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  local now = H.now_ms()
  -- FlowFabric's renewal order: fence shape (no override), lifecycle,
  -- revocation (by state or by a recorded revocation time), expiry, then
  -- attempt index, attempt id, lease id and epoch.
  local given = (H.is_set(args[3]) and 1 or 0) + (H.is_set(args[4]) and 1 or 0)
    + (H.is_set(args[5]) and 1 or 0)
  if given ~= 0 and given ~= 3 then return H.err('partial_fence_triple') end
  if given == 0 then return H.err('fence_required') end
  if core.lifecycle_phase ~= 'active' then return H.not_active(core) end
  if core.ownership_state == 'lease_revoked' or H.is_set(core.lease_revoked_at) then
    return H.err('lease_revoked')
  end
  if (tonumber(core.lease_expires_at or '0') or 0) <= now then
    H.mark_lease_expired(core_key, core, keys[3], now)
    return H.err('lease_expired')
  end
  if tostring(core.current_attempt_index) ~= args[2] or args[3] ~= core.current_attempt_id
      or args[4] ~= core.current_lease_id or tostring(core.current_lease_epoch) ~= args[5] then
    return H.err('stale_lease')
  end
  -- The lease key's expiry takes whole milliseconds (FlowFabric fails on
  -- it after its first writes): refused before writing.
  e = whole_ttl_error(ttl + grace, 'lease_ttl_ms + lease_history_grace_ms', args[6] .. '+' .. args[7])
  if e then return e end

  local ts = H.int(now)
  local expires = now + ttl
  local exp_s = tostring(expires)
  local renewal = tostring(now + math.floor(ttl * 2 / 3))
  redis.call('HSET', core_key, 'lease_expires_at', exp_s, 'lease_last_renewed_at', ts,
    'lease_renewal_deadline', renewal, 'last_mutation_at', ts)
  redis.call('HSET', keys[2], 'expires_at', exp_s, 'last_renewed_at', ts,
    'renewal_deadline', renewal)
  redis.call('PEXPIREAT', keys[2], expires + grace)
  -- The lane active index deliberately keeps its claim-time score.
  redis.call('ZADD', keys[4], expires, args[1])
  return H.ok(exp_s)
end)

-- ff_mark_lease_expired_if_due (lease-expiry scanner)
-- KEYS: core, lease_current, lease_expiry, lease_history. ARGV: eid
redis.register_function('ff_mark_lease_expired_if_due', function(keys, args)
  local core_key, eid = keys[1], args[1]
  local core = H.load_core(core_key)
  if not core then
    -- The execution is gone: its index entry is stale.
    redis.call('ZREM', keys[3], eid)
    return H.already('execution_not_found')
  end
  if core.lifecycle_phase ~= 'active' then
    -- A stale scanner entry: nothing holds a lease any more.
    redis.call('ZREM', keys[3], eid)
    return H.already('not_active')
  end
  if core.ownership_state == 'lease_expired_reclaimable' then return H.already('already_expired') end
  if core.ownership_state == 'lease_revoked' then return H.already('already_revoked') end
  if core.ownership_state == 'unowned' then
    -- Active but unowned holds no lease: the index entry is stale.
    redis.call('ZREM', keys[3], eid)
    return H.already('unowned')
  end
  local now = H.now_ms()
  -- A lease without a readable expiry counts as lapsed (as in the fence).
  if (tonumber(core.lease_expires_at or '0') or 0) > now then return H.already('not_yet_expired') end
  H.mark_lease_expired(core_key, core, keys[4], now)
  return H.ok('marked_expired')
end)

-- ff_revoke_lease (operator)
-- KEYS: core, lease_current, lease_history, lease_expiry, worker_leases
-- ARGV: eid, expected_lease_id, reason
redis.register_function('ff_revoke_lease', function(keys, args)
  local core_key, eid = keys[1], args[1]
  local expected, reason = args[2], args[3]
  -- Only a missing reason defaults (FlowFabric stores an empty one as given).
  if reason == nil then reason = 'operator' end
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase ~= 'active' then return H.not_active(core) end
  if core.ownership_state == 'lease_revoked' then return H.already('already_revoked') end
  if core.ownership_state == 'lease_expired_reclaimable' then return H.already('already_expired') end
  if core.ownership_state ~= 'leased' then return H.err('no_active_lease') end
  local current = core.current_lease_id or ''
  if H.is_set(expected) and expected ~= current then
    return H.err('stale_lease', 'expected ' .. expected .. ' but current is ' .. current)
  end

  local now = H.now_ms()
  local ts = H.int(now)
  redis.call('DEL', keys[2])
  redis.call('ZREM', keys[4], eid)
  redis.call('SREM', keys[5], eid)
  -- current_lease_id stays so reclaim can report what it replaced; the
  -- other state dimensions are rewritten with what they hold.
  redis.call('HSET', core_key,
    'lifecycle_phase', 'active', 'ownership_state', 'lease_revoked',
    'eligibility_state', core.eligibility_state or 'not_applicable',
    'blocking_reason', 'waiting_for_worker', 'blocking_detail', 'lease revoked: ' .. reason,
    'terminal_outcome', 'none', 'attempt_state', 'attempt_interrupted', 'public_state', 'active',
    'lease_revoked_at', ts, 'lease_revoke_reason', reason, 'last_mutation_at', ts)
  H.xadd_history(keys[3], 'event', 'revoked',
    'lease_id', current, 'lease_epoch', core.current_lease_epoch or '',
    'attempt_index', core.current_attempt_index or '',
    'attempt_id', core.current_attempt_id or '',
    'worker_id', core.current_worker_id or '',
    'worker_instance_id', core.current_worker_instance_id or '',
    'reason', reason, 'ts', ts)
  return H.ok('revoked', current, core.current_lease_epoch or '')
end)

-- True when an active exec has lost its lease and may be reclaimed.
local function ff_reclaimable(core)
  return core.lifecycle_phase == 'active'
    and (core.ownership_state == 'lease_expired_reclaimable'
      or core.ownership_state == 'lease_revoked')
end

-- ff_issue_reclaim_grant
-- KEYS: core, claim_grant, lease_expiry
-- ARGV: see ff_grant_args
redis.register_function('ff_issue_reclaim_grant', function(keys, args)
  local expires, e = issue_grant(keys, args, function(core)
    if not ff_reclaimable(core) then return H.err('execution_not_reclaimable') end
    if redis.call('EXISTS', keys[2]) == 1 then return H.err('grant_already_exists') end
    return nil
  end)
  if e then return e end
  return H.ok(args[1], tostring(expires))
end)

-- reclaim_cap(core_key, default_raw) -> the reclaim cap, or nil plus the
-- invalid_input tuple. FlowFabric's rule: the stored policy's
-- max_reclaim_count when the policy has one, else ARGV[9], else 100. A
-- default or stored cap that is not a number is refused (FlowFabric fails
-- on it); the policy key is the core's sibling (a documented exception).
local function reclaim_cap(core_key, default_raw)
  local cap = tonumber(default_raw or '100')
  if cap == nil then
    return nil, H.err('invalid_input', 'default_max_reclaim_count must be a number, got: '
      .. tostring(default_raw))
  end
  local stored = redis.call('GET', H.sibling_key(core_key, 'policy'))
  if stored then
    local ok, policy = H.json_decode(stored)
    if ok and type(policy) == 'table' and policy.max_reclaim_count ~= nil then
      cap = tonumber(policy.max_reclaim_count)
      if cap == nil then
        return nil, H.err('invalid_input', 'max_reclaim_count must be a number, got: '
          .. tostring(policy.max_reclaim_count))
      end
    end
  end
  return cap
end

-- ff_reclaim_execution
-- KEYS: core, claim_grant, old attempt, old stream_meta, new attempt,
--       new usage, attempts, lease_current, lease_history, lease_expiry,
--       worker_leases(new), active, attempt_timeout, execution_deadline
-- ARGV: eid, worker_id, wiid, lane, lease_id, lease_ttl_ms, attempt_id,
--       policy_json, [default_max_reclaim_count]
-- The cap is checked before the grant: an execution past its cap fails
-- whoever asks. The new attempt (and its usage) is written under the key
-- derived from the core's tag, the caller's id and total_attempt_count,
-- as FlowFabric does (KEYS[5..6] are not used); the old attempt and
-- stream are the caller's KEYS[3..4].
redis.register_function('ff_reclaim_execution', function(keys, args)
  local core_key = keys[1]
  local eid = args[1]
  local worker_id, wiid, lane = args[2] or '', args[3] or '', args[4] or ''
  local lease_id, attempt_id = args[5] or '', args[7] or ''
  local ttl, e = H.require_number(args[6], 'lease_ttl_ms')
  if e then return e end
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  if not ff_reclaimable(core) then return H.err('execution_not_reclaimable') end
  local cap
  cap, e = reclaim_cap(core_key, args[9])
  if e then return e end

  local now = H.now_ms()
  local tag = H.tag_of(core_key)
  local ts = H.int(now)
  local old_wiid = core.current_worker_instance_id or ''
  local reclaims = tonumber(core.lease_reclaim_count or '0') or 0

  if reclaims >= cap then
    -- Terminal failure, committed even though the reply is an error; the
    -- DAG is deliberately not notified on this path.
    -- Only the owner fields are cleared: FlowFabric keeps the lease time
    -- fields (acquired, expires, renewed, revoked) on this path.
    local f = H.terminal_fields('failed', 'failed', now)
    f.current_lease_id = ''
    f.current_worker_id = ''
    f.current_worker_instance_id = ''
    f.attempt_state = 'attempt_terminal'
    f.failure_reason = 'max_reclaims_exceeded'
    H.hset(core_key, f)
    redis.call('DEL', keys[8])
    redis.call('ZREM', keys[10], eid)
    redis.call('SREM', keys[11], eid)
    if old_wiid ~= '' then
      redis.call('SREM', H.worker_leases_key(tag, old_wiid), eid)
    end
    redis.call('ZREM', keys[12], eid)
    redis.call('ZREM', keys[13], eid)
    redis.call('ZREM', keys[14], eid)
    redis.call('ZADD', H.lane_key(tag, H.core_lane(core), 'terminal'), now, eid)
    return H.err('max_retries_exhausted', tostring(cap))
  end

  -- Reclaim grants are not expiry-checked (the PEXPIREAT still applies).
  e = H.check_claim_grant(keys[2], worker_id, now, false)
  if e then return e end
  redis.call('DEL', keys[2])

  local old_idx = core.current_attempt_index or '0'
  local reclaim_reason = 'lease_' .. (core.ownership_state or 'expired')
  redis.call('HSET', keys[3],
    'attempt_state', 'interrupted_reclaimed', 'ended_at', ts,
    'failure_reason', reclaim_reason)
  H.close_stream_meta(keys[4], 'reclaimed', now)

  local n = tonumber(core.total_attempt_count or '0') or 0
  local idx = tostring(n)
  local epoch = tostring((tonumber(core.current_lease_epoch or '0') or 0) + 1)
  local expires = now + ttl
  local exp_s = tostring(expires)
  local renewal = tostring(now + math.floor(ttl * 2 / 3))
  local attempt_key = H.attempt_key(tag, eid, idx)
  H.hset(attempt_key, {
    attempt_id = attempt_id, execution_id = eid, attempt_index = idx,
    attempt_type = 'reclaim', attempt_state = 'started',
    created_at = ts, started_at = ts, lease_id = lease_id, lease_epoch = epoch,
    worker_id = worker_id, worker_instance_id = wiid,
    reclaim_reason = reclaim_reason, previous_attempt_index = old_idx,
  })
  redis.call('ZADD', keys[7], now, idx)
  redis.call('HSET', attempt_key .. ':usage', 'last_usage_report_seq', '0')

  redis.call('DEL', keys[8])
  redis.call('HSET', keys[8],
    'lease_id', lease_id, 'lease_epoch', epoch, 'execution_id', eid,
    'attempt_id', attempt_id, 'worker_id', worker_id, 'worker_instance_id', wiid,
    'acquired_at', ts, 'expires_at', exp_s, 'last_renewed_at', ts,
    'renewal_deadline', renewal)
  -- A new lease starts clean: the marks of the lapse or revoke go.
  H.hset(core_key, {
    lifecycle_phase = 'active', ownership_state = 'leased',
    eligibility_state = 'not_applicable', blocking_reason = 'none',
    blocking_detail = '', terminal_outcome = 'none',
    attempt_state = 'running_attempt', public_state = 'active',
    total_attempt_count = tostring(n + 1), current_attempt_index = idx,
    current_attempt_id = attempt_id, current_lease_id = lease_id,
    current_lease_epoch = epoch, current_worker_id = worker_id,
    current_worker_instance_id = wiid, current_lane = lane,
    lease_reclaim_count = tostring(reclaims + 1),
    lease_acquired_at = ts, lease_expires_at = exp_s, lease_last_renewed_at = ts,
    lease_renewal_deadline = renewal,
    lease_expired_at = '', lease_revoked_at = '', lease_revoke_reason = '',
    last_transition_at = ts, last_mutation_at = ts,
  })

  redis.call('ZADD', keys[10], expires, eid)
  -- The old owner's lease set is not among the KEYS (documented exception).
  if old_wiid ~= '' and old_wiid ~= wiid then
    redis.call('SREM', H.worker_leases_key(tag, old_wiid), eid)
  end
  redis.call('SADD', keys[11], eid)
  redis.call('ZADD', keys[12], expires, eid)
  H.xadd_history(keys[9], 'event', 'reclaimed',
    'old_lease_epoch', core.current_lease_epoch or '',
    'new_lease_id', lease_id, 'new_lease_epoch', epoch,
    'new_attempt_id', attempt_id, 'new_attempt_index', idx,
    'worker_id', worker_id, 'ts', ts)
  return H.ok(lease_id, epoch, exp_s, attempt_id, idx, 'reclaim')
end)

-- ff_issue_grant_and_claim: an operator takes a specific execution in one
-- call, grant and claim together (no capability matching: the caller
-- asserts the authority). An interrupted attempt is continued, anything
-- else gets a fresh attempt. The grant FlowFabric writes here is consumed
-- (or deleted on refusal) within the same call, so it is never visible;
-- ours is not written at all.
-- KEYS: core, claim_grant, eligible, lease_expiry, worker_leases,
--       attempts, lease_current, lease_history, active, attempt_timeout,
--       execution_deadline
-- ARGV: eid, worker_id, wiid, lane, cap_hash, lease_id, lease_ttl_ms,
--       attempt_id, attempt_policy_json, attempt_timeout_ms, deadline_at
-- Reply: OK, lease_id, epoch, attempt_index. The attempt's keys are
-- derived from the core's tag and the caller's id (same hash tag).
redis.register_function('ff_issue_grant_and_claim', function(keys, args)
  local core_key = keys[1]
  local eid = args[1]
  local worker_id, wiid, lane = args[2] or '', args[3] or '', args[4] or ''
  local lease_id = args[6] or ''
  local ttl, e = H.require_number(args[7], 'lease_ttl_ms')
  if e then return e end
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' then return H.err('execution_not_eligible') end
  if core.ownership_state ~= 'unowned' then return H.err('lease_conflict') end
  if core.terminal_outcome ~= 'none' then return H.err('execution_not_eligible') end
  if core.attempt_state == 'running_attempt' then return H.err('active_attempt_exists') end
  if redis.call('EXISTS', keys[2]) == 1 then return H.err('grant_already_exists') end
  -- FlowFabric sets its transient grant's TTL from lease_ttl_ms, which
  -- fails on a fractional TTL: refused before any write.
  e = whole_ttl_error(ttl, 'lease_ttl_ms', args[7])
  if e then return e end
  local now = H.now_ms()

  if core.attempt_state == 'attempt_interrupted' then
    local idx, epoch, _, attempt_id = resume_attempt(core_key, core,
      H.attempt_key(H.tag_of(core_key), eid, core.current_attempt_index or ''), {
        lease_current = keys[7], eligible = keys[3], lease_expiry = keys[4],
        worker_leases = keys[5], active = keys[9],
      }, {eid = eid, worker_id = worker_id, wiid = wiid, lane = lane, lease_id = lease_id,
        ttl = ttl, now = now})
    H.xadd_history(keys[8], 'event', 'acquired', 'lease_id', lease_id, 'lease_epoch', epoch,
      'attempt_index', idx, 'attempt_id', attempt_id, 'worker_id', worker_id,
      'reason', 'issue_grant_and_claim_resumed', 'ts', H.int(now))
    return H.ok(lease_id, epoch, idx)
  end

  if not redis.call('ZSCORE', keys[3], eid) then return H.err('execution_not_in_eligible_set') end
  if core.eligibility_state ~= 'eligible_now' then return H.err('execution_not_eligible') end
  -- Checked before any write (FlowFabric would fail half-way on them).
  local policy_fields
  policy_fields, e = H.attempt_policy_fields(args[9])
  if e then return e end
  local timeout_ms, deadline_at
  timeout_ms, deadline_at, e = optional_timeouts(args[10], args[11], 'execution_deadline_at')
  if e then return e end

  local attempt_id = args[8] or ''
  local idx, epoch = start_fresh_attempt(core_key, core, {
    lease_expiry = keys[4], worker_leases = keys[5], attempts = keys[6],
    lease_current = keys[7], active = keys[9], attempt_timeout = keys[10],
    execution_deadline = keys[11], eligible = keys[3],
  }, {
    eid = eid, worker_id = worker_id, wiid = wiid, lane = lane, lease_id = lease_id,
    attempt_id = attempt_id, ttl = ttl, renew_before = math.floor(ttl * 2 / 3),
    policy_fields = policy_fields, timeout_ms = timeout_ms, deadline_at = deadline_at,
    now = now,
  })
  H.xadd_history(keys[8], 'event', 'acquired', 'lease_id', lease_id, 'lease_epoch', epoch,
    'attempt_id', attempt_id, 'attempt_index', idx, 'worker_id', worker_id,
    'reason', 'issue_grant_and_claim', 'ts', H.int(now))
  return H.ok(lease_id, epoch, idx)
end)
