-- Suspension: a worker parks its attempt on a waitpoint until signals
-- satisfy a resume condition (19_signal.lua), an operator resumes it, or the
-- suspension times out (the suspension-timeout scanner).

-- suspend_outcome(status, sid, wpid, wpkey, token, extras) -> the reply row
-- and the TAB-separated record an idempotent replay answers with.
local function suspend_outcome(status, sid, wpid, wpkey, token, extras)
  local row = {1, status, sid, wpid, wpkey, token, tostring(#extras)}
  local rec = {status, sid, wpid, wpkey, token, tostring(#extras)}
  for _, x in ipairs(extras) do
    for _, v in ipairs({x.id, x.key, x.token}) do
      row[#row + 1] = v
      rec[#rec + 1] = v
    end
  end
  return row, table.concat(rec, '\t')
end

-- replayed_outcome(rec) -> the reply row of a stored record, or nil when
-- the record is unreadable (then the call runs as if it were new). Read
-- as FlowFabric reads it: the status (ALREADY_SATISFIED, anything else
-- answers OK), four fields, the extras' count, then that many (id, key,
-- token) triples, missing pieces empty.
local function replayed_outcome(rec)
  local parts = {}
  for piece in string.gmatch(rec .. '\t', '([^\t]*)\t') do parts[#parts + 1] = piece end
  if #parts < 5 then return nil end
  local status = parts[1] == 'ALREADY_SATISFIED' and 'ALREADY_SATISFIED' or 'OK'
  local n = tonumber(parts[6] or '0') or 0
  local row = {1, status, parts[2], parts[3], parts[4], parts[5]}
  local count = 0
  local tail = {}
  for i = 1, n do
    local o = 6 + (i - 1) * 3
    tail[#tail + 1] = parts[o + 1] or ''
    tail[#tail + 1] = parts[o + 2] or ''
    tail[#tail + 1] = parts[o + 3] or ''
    count = count + 1
  end
  row[#row + 1] = tostring(count)
  for _, v in ipairs(tail) do row[#row + 1] = v end
  return row
end

local function save_outcome(key, rec, ttl)
  redis.call('HSET', key, 'outcome', rec)
  if ttl and ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end

-- pending_error(wp, eid, att_idx, now) -> nil when the pending waitpoint
-- can be activated by this suspension, else the error code.
local function pending_error(wp, eid, att_idx, now)
  if next(wp) == nil then return 'waitpoint_not_found' end
  if wp.state ~= 'pending' then return 'waitpoint_not_pending' end
  if wp.execution_id ~= eid or tostring(wp.attempt_index) ~= att_idx then
    return 'invalid_waitpoint_for_execution'
  end
  if H.is_set(wp.expires_at) and (tonumber(wp.expires_at) or 0) <= now then
    return 'pending_waitpoint_expired'
  end
  if not H.is_set(wp.waitpoint_token) then return 'waitpoint_not_token_bound' end
  return nil
end

-- buffered_satisfy(cond, stream_key) -> true when the signals buffered on
-- a pending waitpoint already satisfy the (plain) condition; cond is
-- filled as they are offered.
local function buffered_satisfy(cond, stream_key)
  local buffered = redis.call('XRANGE', stream_key, '-', '+')
  if #buffered == 0 or cond.composite then return false end
  for _, entry in ipairs(buffered) do
    local f = entry[2]
    local name, id
    for i = 1, #f, 2 do
      if f[i] == 'signal_name' then name = f[i + 1] end
      if f[i] == 'signal_id' then id = f[i + 1] end
    end
    H.condition_offer(cond, name, id)
  end
  return H.condition_met(cond.match_mode, cond.satisfied_count, #cond.matchers,
    cond.minimum_signal_count)
end

-- ff_suspend_execution
-- KEYS: core, attempt, lease_current, lease_history, lease_expiry,
--   worker_leases, suspension_current, waitpoint, wp_signals,
--   suspension_timeout, pending_wp_expiry, active, lane suspended,
--   waitpoints (set), wp_condition, attempt_timeout, hmac keystore,
--   dedup-or-noop; then (waitpoint, wp_signals, wp_condition) per extra.
-- ARGV: eid, attempt_index, attempt_id, lease_id, epoch, suspension_id,
--   wp_id, wp_key, reason_code, requested_by, timeout_at,
--   resume_condition_json, resume_policy_json, continuation_pointer,
--   use_pending ("1"), timeout_behavior, lease_history_maxlen,
--   idempotency_key, dedup_ttl_ms, N_extra; then (wp_id, wp_key) per extra.
-- Reply: OK | ALREADY_SATISFIED, suspension_id, wp_id, wp_key, token,
--   N_extra, then (id, key, token) per extra. ALREADY_SATISFIED: signals
--   buffered on the pending waitpoint already satisfy the condition; the
--   waitpoint closes and the execution keeps running.
--
-- FlowFabric's order of checks is kept, including its refusals that come
-- after writes (a closed previous episode is archived before the
-- waitpoint is looked at; a pending waitpoint is activated before extras
-- are refused with use_pending_with_extras_unsupported). Input on which
-- FlowFabric raises a Lua error part-way (a condition it cannot read, a
-- non-numeric timeout_at, an extra waitpoint without its KEYS) is
-- refused instead, and then nothing at all is written: every check is
-- made before the first write.
redis.register_function('ff_suspend_execution', function(keys, args)
  local core_key = keys[1]
  local eid, att_idx, att_id, lease_id, epoch = args[1], args[2] or '', args[3] or '',
    args[4] or '', args[5] or ''
  local sid, wpid, wpkey = args[6] or '', args[7] or '', args[8] or ''
  local reason_code, requested_by = args[9] or '', args[10] or ''
  local timeout_at = args[11] or ''
  local cond_json, policy_json = args[12] or '', args[13] or ''
  local use_pending = args[15] == '1'
  local behavior = args[16] or 'fail'
  local maxlen = tonumber(args[17] or '1000')
  local idem = args[18] or ''
  local dedup_ttl = tonumber(args[19] or '0')
  local dedup_key = keys[18]
  local dedup = idem ~= '' and H.is_set(dedup_key)

  -- The extras' bindings: N pairs of ARGV (and N triples of KEYS, which
  -- FlowFabric only reaches when it writes them).
  local n_extra = tonumber(args[20] or '0')
  if n_extra == nil then return H.err('additional_waitpoint_binding_malformed') end
  local extras = {}
  for i = 1, n_extra do
    local x = {id = args[19 + 2 * i], key = args[20 + 2 * i], wp = keys[16 + 3 * i],
      cond = keys[18 + 3 * i]}
    if not H.is_set(x.id) or not H.is_set(x.key) then
      return H.err('additional_waitpoint_binding_malformed')
    end
    extras[i] = x
  end

  if dedup then
    local stored = redis.call('HGET', dedup_key, 'outcome')
    if stored then
      local row = replayed_outcome(stored)
      if row then return row end
    end
  end

  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  local now = H.now_ms()
  -- Suspend has no operator override: the full fence is always required.
  local e = H.check_lease_fence(core_key, core, keys[4], lease_id, epoch, att_id, '', now)
  if e then return e end
  if tostring(core.current_attempt_index) ~= att_idx then
    return H.err('invalid_lease_for_suspend')
  end

  local susp_key = keys[7]
  local old = H.hgetall(susp_key)
  if next(old) ~= nil and not H.is_set(old.closed_at) then return H.err('already_suspended') end
  -- A closed previous episode is archived (its waitpoint added to the
  -- history set, the hash deleted) before FlowFabric looks at the
  -- waitpoint, so this happens even when the waitpoint is then refused.
  local function archive()
    if next(old) == nil then return end
    if H.is_set(old.waitpoint_id) then redis.call('SADD', keys[14], old.waitpoint_id) end
    redis.call('DEL', susp_key)
  end

  local ts = H.int(now)
  local wp_key, token = keys[8], ''
  local wp
  if use_pending then
    wp = H.hgetall(wp_key)
    local code = pending_error(wp, eid, att_idx, now)
    if code then
      archive()
      return H.err(code)
    end
    wpid, wpkey, token = wp.waitpoint_id, wp.waitpoint_key, wp.waitpoint_token
  else
    local code
    token, code = H.mint_token(keys[17], wpid, wpkey, now)
    if not token then
      archive()
      return H.err(code)
    end
  end

  -- Refusals (FlowFabric raises a Lua error from here on), nothing written.
  local cond, cerr = H.parse_condition(cond_json)
  if not cond then return cerr end
  local satisfied = false
  if use_pending then
    satisfied = buffered_satisfy(cond, keys[9])
  else
    for i, x in ipairs(extras) do
      if x.cond == nil then
        return H.err('additional_waitpoint_binding_malformed',
          'extra waitpoint ' .. i .. ' has no KEYS')
      end
    end
  end
  -- What the last writes use, checked only when FlowFabric gets that far
  -- (an activation that is already satisfied, or refused for its extras,
  -- answers before).
  local reaches_end = not satisfied and not (use_pending and #extras > 0)
  local timeout_n = tonumber(timeout_at)
  if reaches_end and H.is_set(timeout_at) and timeout_n == nil then
    return H.err('invalid_input', 'timeout_at must be a number, got: ' .. timeout_at)
  end
  if reaches_end and not (H.is_whole(maxlen) and maxlen >= 0) then
    return H.err('invalid_input', 'lease_history_maxlen must be a whole number, got: ' .. tostring(args[17]))
  end
  if dedup and (reaches_end or satisfied) and not H.is_whole(dedup_ttl) then
    return H.err('invalid_input', 'dedup_ttl_ms must be a whole number, got: ' .. tostring(args[19]))
  end

  archive()
  if use_pending then
    -- The token minted at creation stays: signals buffered before the
    -- suspension were authenticated against it.
    redis.call('HSET', wp_key, 'suspension_id', sid, 'state', 'active',
      'activated_at', ts, 'expires_at', timeout_at)
    redis.call('ZREM', keys[11], wpid)
    if satisfied then
      -- Nothing to wait for: the waitpoint closes, the execution runs on.
      redis.call('HSET', wp_key, 'state', 'closed', 'satisfied_at', ts,
        'closed_at', ts, 'close_reason', 'resumed')
      H.write_condition(keys[15], cond, now)
      local row, rec = suspend_outcome('ALREADY_SATISFIED', sid, wpid, wpkey, token, {})
      if dedup then save_outcome(dedup_key, rec, dedup_ttl) end
      return row
    end
    H.write_condition(keys[15], cond, now)
    if #extras > 0 then return H.err('use_pending_with_extras_unsupported') end
  else
    local function create(key, id, wkey, tok)
      redis.call('HSET', key, 'waitpoint_id', id, 'execution_id', eid,
        'attempt_index', att_idx, 'suspension_id', sid, 'waitpoint_key', wkey,
        'waitpoint_token', tok, 'state', 'active', 'created_at', ts, 'activated_at', ts,
        'expires_at', timeout_at, 'signal_count', '0', 'matched_signal_count', '0',
        'last_signal_at', '')
    end
    create(wp_key, wpid, wpkey, token)
    H.write_condition(keys[15], cond, now)
    for _, x in ipairs(extras) do
      -- The same keystore and kid as the primary's: minting cannot fail now.
      x.token = H.mint_token(keys[17], x.id, x.key, now)
      create(x.wp, x.id, x.key, x.token)
      H.write_condition(x.cond, cond, now)
      redis.call('SADD', keys[14], x.id)
    end
  end
  redis.call('SADD', keys[14], wpid)

  H.hset(core_key, H.clear_lease_fields({
    lifecycle_phase = 'suspended', ownership_state = 'unowned',
    eligibility_state = 'not_applicable',
    blocking_reason = H.SUSPEND_BLOCKING[reason_code] or 'waiting_for_signal',
    blocking_detail = 'suspended: waitpoint ' .. wpid .. ' awaiting ' .. reason_code,
    terminal_outcome = 'none', attempt_state = 'attempt_interrupted',
    public_state = 'suspended', current_suspension_id = sid,
    current_waitpoint_id = wpid, last_transition_at = ts, last_mutation_at = ts,
  }))
  redis.call('HSET', keys[2], 'attempt_state', 'suspended', 'suspended_at', ts,
    'suspension_id', sid)
  redis.call('DEL', keys[3])
  redis.call('ZREM', keys[5], eid)
  redis.call('SREM', keys[6], eid)
  redis.call('ZREM', keys[12], eid)
  redis.call('ZREM', keys[16], eid)
  redis.call('XADD', keys[4], 'MAXLEN', '~', maxlen, '*', 'event', 'released',
    'lease_id', lease_id, 'lease_epoch', epoch, 'attempt_index', att_idx,
    'attempt_id', core.current_attempt_id or '', 'reason', 'suspend', 'ts', ts)

  local extra_list = {}
  for i, x in ipairs(extras) do extra_list[i] = {waitpoint_id = x.id, waitpoint_key = x.key} end
  redis.call('HSET', susp_key, 'suspension_id', sid, 'execution_id', eid,
    'attempt_index', att_idx, 'waitpoint_id', wpid, 'waitpoint_key', wpkey,
    'additional_waitpoints_json', #extra_list > 0 and cjson.encode(extra_list) or '[]',
    'reason_code', reason_code, 'requested_by', requested_by, 'created_at', ts,
    'timeout_at', timeout_at, 'timeout_behavior', behavior,
    'resume_condition_json', cond_json, 'resume_policy_json', policy_json,
    'continuation_metadata_pointer', args[14] or '',
    'buffered_signal_summary_json', H.EMPTY_SIGNAL_SUMMARY,
    'last_signal_at', '', 'satisfied_at', '', 'closed_at', '', 'close_reason', '')
  -- A composite condition's operator map, seeded from the tree as given
  -- (also when its version made the condition keep none).
  local spec_ok, spec = H.json_decode(cond_json)
  if spec_ok and type(spec) == 'table' and spec.composite then
    local wpkeys = {wpkey}
    for _, x in ipairs(extras) do wpkeys[#wpkeys + 1] = x.key end
    H.seed_member_map(susp_key .. ':member_map', spec.tree, wpkeys)
  end

  if H.is_set(timeout_at) then
    redis.call('ZADD', keys[13], timeout_n, eid)
    redis.call('ZADD', keys[10], timeout_n, eid)
  else
    redis.call('ZADD', keys[13], H.NO_TIMEOUT_SCORE, eid)
  end

  local row, rec = suspend_outcome('OK', sid, wpid, wpkey, token, extras)
  if dedup then save_outcome(dedup_key, rec, dedup_ttl) end
  return row
end)

-- ff_resume_execution (operator or policy resume)
-- KEYS: core, suspension_current, waitpoint, wp_signals, suspension_timeout,
--   eligible, delayed, lane suspended.
-- ARGV: eid, trigger_type, resume_delay_ms.
-- Reply: OK, waiting | delayed.
redis.register_function('ff_resume_execution', function(keys, args)
  local core_key, eid = keys[1], args[1]
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase ~= 'suspended' then return H.err('execution_not_suspended') end
  local susp = H.hgetall(keys[2])
  if not H.is_set(susp.suspension_id) or H.is_set(susp.closed_at) then
    return H.err('execution_not_suspended')
  end
  local delay, e = H.require_number(args[3] or '0', 'resume_delay_ms')
  if e then return e end
  local now = H.now_ms()
  local ts = H.int(now)
  local public = H.resume_runnable(core_key, core,
    {eligible = keys[6], delayed = keys[7], suspended = keys[8]},
    delay, 'resume delay ' .. tostring(delay) .. 'ms', now, eid)
  redis.call('HSET', keys[3], 'state', 'closed', 'satisfied_at', ts, 'closed_at', ts,
    'close_reason', 'resumed')
  redis.call('HSET', keys[2], 'satisfied_at', ts, 'closed_at', ts, 'close_reason', 'resumed')
  redis.call('ZREM', keys[5], eid)
  H.drop_composite(keys[2])
  H.close_extra_waitpoints(keys[2], susp,
    {'state', 'closed', 'satisfied_at', ts, 'closed_at', ts, 'close_reason', 'resumed'},
    {'closed', '1', 'closed_at', ts, 'closed_reason', 'resumed'})
  return H.ok(public)
end)

-- ff_expire_suspension (suspension-timeout scanner)
-- KEYS: core, suspension_current, waitpoint, wp_condition, attempt,
--   stream_meta, suspension_timeout, lane suspended, lane terminal,
--   eligible, delayed, lease_history.
-- ARGV: eid.
-- Reply: OK with <behavior>, <public state> when applied (auto_resume
-- waiting, escalate suspended, fail failed, cancel cancelled, expire
-- expired; any other behaviour is applied as fail and named as stored),
-- or a scanner status: not_found_cleaned, not_suspended_cleaned,
-- no_active_suspension_cleaned (each removing the index entry),
-- not_yet_due. A suspension without a timeout is never due: not_yet_due,
-- nothing written (FlowFabric raises a Lua error there; docs/compat.md,
-- "FlowFabric crashes we do not reproduce").
redis.register_function('ff_expire_suspension', function(keys, args)
  local core_key, eid = keys[1], args[1]
  local core = H.load_core(core_key)
  if not core then
    redis.call('ZREM', keys[7], eid)
    return H.ok('not_found_cleaned')
  end
  if core.lifecycle_phase ~= 'suspended' then
    redis.call('ZREM', keys[7], eid)
    return H.ok('not_suspended_cleaned')
  end
  local susp = H.hgetall(keys[2])
  if not H.is_set(susp.suspension_id) or H.is_set(susp.closed_at) then
    redis.call('ZREM', keys[7], eid)
    return H.ok('no_active_suspension_cleaned')
  end
  local now = H.now_ms()
  local ts = H.int(now)
  local timeout_at = tonumber(susp.timeout_at or '0')
  if timeout_at == nil or timeout_at == 0 or timeout_at > now then return H.ok('not_yet_due') end
  -- Only a missing behaviour defaults: an empty one is applied as fail
  -- under its own (empty) name, as FlowFabric does.
  local behavior = susp.timeout_behavior or 'fail'

  if behavior == 'auto_resume' or behavior == 'auto_resume_with_timeout_signal' then
    H.resume_runnable(core_key, core,
      {eligible = keys[10], delayed = keys[11], suspended = keys[8]}, 0, '', now, eid)
    local reason = 'timed_out_auto_resume'
    redis.call('HSET', keys[3], 'state', 'closed', 'closed_at', ts, 'close_reason', reason)
    redis.call('HSET', keys[4], 'closed', '1', 'closed_at', ts, 'closed_reason', reason)
    redis.call('HSET', keys[2], 'closed_at', ts, 'close_reason', reason)
    redis.call('ZREM', keys[7], eid)
    H.drop_composite(keys[2])
    H.close_extra_waitpoints(keys[2], susp,
      {'state', 'closed', 'closed_at', ts, 'close_reason', reason},
      {'closed', '1', 'closed_at', ts, 'closed_reason', reason})
    return H.ok('auto_resume', 'waiting')
  end

  if behavior == 'escalate' then
    redis.call('HSET', core_key, 'lifecycle_phase', 'suspended', 'ownership_state', 'unowned',
      'eligibility_state', 'not_applicable', 'blocking_reason', 'paused_by_operator',
      'blocking_detail', 'suspension escalated: timeout at ' .. tostring(timeout_at),
      'terminal_outcome', 'none', 'attempt_state', core.attempt_state or 'attempt_interrupted',
      'public_state', 'suspended', 'last_mutation_at', ts)
    redis.call('HSET', keys[2], 'reason_code', 'waiting_for_operator_review',
      'timeout_at', '', 'timeout_behavior', '')
    redis.call('ZREM', keys[7], eid)
    return H.ok('escalate', 'suspended')
  end

  -- fail (also any behaviour this library does not know), cancel, expire
  local outcome, reason = 'failed', 'timed_out_fail'
  if behavior == 'cancel' then
    outcome, reason = 'cancelled', 'timed_out_cancel'
  elseif behavior == 'expire' then
    outcome, reason = 'expired', 'timed_out_expire'
  end
  local f = H.terminal_fields(outcome, outcome, now)
  f.attempt_state = 'attempt_terminal'
  f.failure_reason = 'suspension_timeout:' .. behavior
  f.current_suspension_id = ''
  f.current_waitpoint_id = ''
  H.hset(core_key, f)
  if H.is_set(core.current_attempt_index) then
    redis.call('HSET', keys[5],
      'attempt_state', behavior == 'cancel' and 'ended_cancelled' or 'ended_failure',
      'ended_at', ts, 'failure_reason', 'suspension_timeout:' .. behavior,
      'suspended_at', '', 'suspension_id', '')
  end
  H.close_stream_meta(keys[6], 'suspension_timeout', now)
  redis.call('HSET', keys[3], 'state', 'closed', 'closed_at', ts, 'close_reason', reason)
  redis.call('HSET', keys[4], 'closed', '1', 'closed_at', ts, 'closed_reason', reason)
  redis.call('HSET', keys[2], 'closed_at', ts, 'close_reason', reason)
  H.drop_composite(keys[2])
  H.close_extra_waitpoints(keys[2], susp,
    {'state', 'closed', 'closed_at', ts, 'close_reason', reason},
    {'closed', '1', 'closed_at', ts, 'closed_reason', reason})
  redis.call('ZREM', keys[7], eid)
  redis.call('ZREM', keys[8], eid)
  redis.call('ZADD', keys[9], now, eid)
  H.publish_completion(eid, core.flow_id, outcome)
  return H.ok(behavior, outcome)
end)
