-- Signals and pending waitpoints. A signal names a waitpoint and carries
-- its HMAC token; delivered to an active waitpoint it is matched against
-- the resume condition and may resume the suspended execution; sent to a
-- pending waitpoint (created before the suspension commits) it is buffered
-- and replayed when ff_suspend_execution activates the waitpoint.

-- Approximate cap of the partition's signal_delivery stream.
local DELIVERY_MAXLEN = '1000'

-- signal_args(args) -> the ARGV layout deliver and buffer share.
local function signal_args(args)
  return {
    signal_id = args[1] or '', eid = args[2] or '', wpid = args[3] or '',
    name = args[4] or '', category = args[5] or '', source_type = args[6] or '',
    source_identity = args[7] or '', payload = args[8] or '',
    encoding = args[9] or 'json', idem = args[10] or '', correlation = args[11] or '',
    scope = args[12] or 'waitpoint', created_at = args[13] or '',
    dedup_ttl = tonumber(args[14] or '86400000'), delay = tonumber(args[15] or '0'),
    maxlen = tonumber(args[16] or '1000'), max_signals = tonumber(args[17] or '10000'),
    token = args[18] or '',
  }
end

-- authenticate(core_key, wp, a, hmac_key, now) -> nil or the error tuple;
-- a failed token is stamped on the execution for operators.
local function authenticate(core_key, wp, a, hmac_key, now)
  local code = H.token_error(hmac_key, a.token, a.wpid, wp.waitpoint_key or '',
    tonumber(wp.created_at) or 0, now)
  if not code then return nil end
  redis.call('HSET', core_key, 'last_hmac_validation_failed_at', H.int(now))
  return H.err(code)
end

-- admit(exec_signals, idem_key, a, delay_used) -> nil to go on, or the
-- reply that ends the call: the per-execution signal cap, then
-- idempotency (the first signal id of the key wins for dedup_ttl ms).
-- Numbers FlowFabric fails on part-way (a Lua error after it has
-- recorded the signal) are refused here, after its checks and before
-- anything is written: the signal cap, the stream cap, and (for a
-- delivery, which may resume) the resume delay.
local function admit(exec_signals, idem_key, a, delay_used)
  if a.max_signals == nil then
    return H.err('invalid_input', 'max_signals_per_execution must be a number')
  end
  if a.max_signals > 0 and redis.call('ZCARD', exec_signals) >= a.max_signals then
    return H.err('signal_limit_exceeded')
  end
  local dedup = a.idem ~= '' and (a.dedup_ttl or 0) > 0
  if dedup then
    local first = redis.call('GET', idem_key)
    if first then return H.duplicate(first) end
  end
  -- (The stream cap is passed as Lua prints it: a whole number below
  -- 10^14, at least 0, is one the server reads.)
  if not (H.is_whole(a.maxlen) and a.maxlen >= 0 and a.maxlen < 1e14) then
    return H.err('invalid_input', 'signal_maxlen must be a whole number >= 0')
  end
  if dedup and not H.is_whole(a.dedup_ttl) then
    return H.err('invalid_input', 'dedup_ttl_ms must be a whole number')
  end
  if delay_used and a.delay == nil then return H.err('invalid_input', 'resume_delay_ms must be a number') end
  if dedup then
    redis.call('SET', idem_key, a.signal_id, 'PX', a.dedup_ttl, 'NX')
  end
  return nil
end

-- record(k, a, effect, now) -> the signal hash (with observed_effect when
-- known now), its payload, the waitpoint's signal stream and the
-- execution's signal index.
local function record(k, a, effect, now)
  local ts = H.int(now)
  local f = {'signal_id', a.signal_id, 'target_execution_id', a.eid,
    'target_waitpoint_id', a.wpid, 'target_scope', a.scope, 'signal_name', a.name,
    'signal_category', a.category, 'source_type', a.source_type,
    'source_identity', a.source_identity, 'correlation_id', a.correlation,
    'idempotency_key', a.idem, 'created_at', a.created_at ~= '' and a.created_at or ts,
    'accepted_at', ts, 'matched_waitpoint_id', a.wpid, 'payload_encoding', a.encoding}
  if effect then
    f[#f + 1] = 'observed_effect'
    f[#f + 1] = effect
  end
  redis.call('HSET', k.signal, unpack(f))
  if a.payload ~= '' then redis.call('SET', k.payload, a.payload) end
  redis.call('XADD', k.wp_signals, 'MAXLEN', '~', tostring(a.maxlen), '*',
    'signal_id', a.signal_id, 'signal_name', a.name, 'signal_category', a.category,
    'source_type', a.source_type, 'source_identity', a.source_identity,
    'matched', '0', 'accepted_at', ts)
  redis.call('ZADD', k.exec_signals, ts, a.signal_id)
end

-- ff_deliver_signal
-- KEYS: core, wp_condition, wp_signals, exec_signals, signal,
--   signal_payload, sigdedup-or-noop, waitpoint, suspension_current,
--   eligible, lane suspended, delayed, suspension_timeout, hmac keystore,
--   partition signal_delivery.
-- ARGV: signal_id, eid, wp_id, name, category, source_type,
--   source_identity, payload, payload_encoding, idempotency_key,
--   correlation_id, target_scope, created_at, dedup_ttl_ms,
--   resume_delay_ms, signal_maxlen, max_signals_per_execution, token.
-- Reply: OK, signal_id, effect | DUPLICATE, first signal id. The token is
-- checked before anything else about the target, and a waitpoint that does
-- not exist is invalid_token too, so an unauthenticated caller learns
-- nothing about which executions and waitpoints exist.
redis.register_function('ff_deliver_signal', function(keys, args)
  local core_key = keys[1]
  local a = signal_args(args)
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  local now = H.now_ms()
  local wp = H.hgetall(keys[8])
  if next(wp) == nil or not wp.created_at then return H.err('invalid_token') end
  local e = authenticate(core_key, wp, a, keys[14], now)
  if e then return e end

  local phase = core.lifecycle_phase
  if phase == 'terminal' then return H.err('target_not_signalable') end
  if phase == 'active' or phase == 'runnable' or phase == 'submitted' then
    if wp.state == 'pending' then return H.err('waitpoint_pending_use_buffer_script') end
    -- An active waitpoint of a running execution is a race FlowFabric
    -- tolerates: the signal is recorded without resuming anything.
    if wp.state ~= 'active' then return H.err('target_not_signalable') end
  end
  local cond = H.hgetall(keys[2])
  if next(cond) == nil then return H.err('waitpoint_not_found') end
  if cond.closed == '1' then return H.err('waitpoint_closed') end
  e = admit(keys[4], keys[7], a, true)
  if e then return e end

  local k = {signal = keys[5], payload = keys[6], wp_signals = keys[3], exec_signals = keys[4]}
  record(k, a, nil, now)
  local ts = H.int(now)
  local eid = a.eid
  local delay = a.delay
  local runnable_keys = {eligible = keys[10], suspended = keys[11], delayed = keys[12]}
  local detail = 'resume delay ' .. tostring(delay) .. 'ms after signal ' .. a.name
  local effect, matched, resumed = 'appended_to_waitpoint', false, false

  if cond.composite == '1' then
    local susp = H.hgetall(keys[9])
    local ok, tree = H.json_decode(cond.tree_json or '')
    if not ok then tree = nil end
    local out = H.composite_offer(tree, keys[9], a.wpid,
      wp.waitpoint_key or susp.waitpoint_key or '',
      {signal_id = a.signal_id, signal_name = a.name, source_type = a.source_type,
        source_identity = a.source_identity})
    effect = out.effect
    matched = effect ~= 'signal_ignored_not_in_condition'
      and effect ~= 'signal_ignored_matcher_failed'
    if out.resume then
      resumed = true
      if phase == 'suspended' then H.resume_runnable(core_key, core, runnable_keys, delay, detail, now, eid) end
      redis.call('HSET', keys[2], 'closed', '1', 'closed_at', ts, 'closed_reason', 'satisfied')
      redis.call('HSET', keys[8], 'state', 'closed', 'satisfied_at', ts, 'closed_at', ts,
        'close_reason', 'resumed')
      if redis.call('EXISTS', keys[9]) == 1 then
        redis.call('HSET', keys[9], 'satisfied_at', ts, 'closed_at', ts, 'close_reason', 'resumed',
          'closer_signal_id', out.closer or a.signal_id,
          'all_satisfier_signals', out.satisfiers_json or '[]')
      end
      redis.call('ZREM', keys[13], eid)
      H.drop_composite(keys[9])
      susp = H.hgetall(keys[9])
      if next(susp) ~= nil then
        H.close_extra_waitpoints(keys[9], susp,
          {'state', 'closed', 'satisfied_at', ts, 'closed_at', ts, 'close_reason', 'resumed'},
          {'closed', '1', 'closed_at', ts, 'closed_reason', 'satisfied'})
      end
    end
  else
    local total = tonumber(cond.total_matchers or '0') or 0
    for i = 0, total - 1 do
      local p = 'matcher:' .. i .. ':'
      local mname = cond[p .. 'name'] or ''
      if cond[p .. 'satisfied'] == '0' and (mname == '' or mname == a.name) then
        matched = true
        local sat = (tonumber(cond.satisfied_count or '0') or 0) + 1
        redis.call('HSET', keys[2], p .. 'satisfied', '1', p .. 'signal_id', a.signal_id)
        redis.call('HSET', keys[2], 'satisfied_count', tostring(sat))
        if H.condition_met(cond.match_mode or 'any', sat, total,
            tonumber(cond.minimum_signal_count or '1') or 1) then
          effect = 'resume_condition_satisfied'
          if phase == 'suspended' then
            H.resume_runnable(core_key, core, runnable_keys, delay, detail, now, eid)
          end
          redis.call('HSET', keys[2], 'closed', '1', 'closed_at', ts, 'closed_reason', 'satisfied')
          redis.call('HSET', keys[8], 'state', 'closed', 'satisfied_at', ts, 'closed_at', ts,
            'close_reason', 'resumed')
          if redis.call('EXISTS', keys[9]) == 1 then
            redis.call('HSET', keys[9], 'satisfied_at', ts, 'closed_at', ts, 'close_reason', 'resumed')
          end
          redis.call('ZREM', keys[13], eid)
        end
        break
      end
    end
    if not matched then effect = 'no_op' end
  end

  redis.call('HSET', keys[5], 'observed_effect', effect)
  redis.call('HINCRBY', keys[8], 'signal_count', 1)
  if matched then redis.call('HINCRBY', keys[8], 'matched_signal_count', 1) end
  redis.call('HSET', keys[8], 'last_signal_at', ts)
  -- A composite resume leaves last_signal_at of the closed suspension alone.
  if not (resumed and cond.composite == '1') and redis.call('EXISTS', keys[9]) == 1 then
    redis.call('HSET', keys[9], 'last_signal_at', ts)
  end
  redis.call('XADD', keys[15], 'MAXLEN', '~', DELIVERY_MAXLEN, '*',
    'signal_id', a.signal_id, 'execution_id', eid, 'waitpoint_id', a.wpid,
    'source_identity', a.source_identity, 'effect', effect, 'delivered_at_ms', ts)
  return H.ok(a.signal_id, effect)
end)

-- ff_buffer_signal_for_pending_waitpoint
-- KEYS: core, wp_condition, wp_signals, exec_signals, signal,
--   signal_payload, sigdedup-or-noop, waitpoint, hmac keystore.
-- ARGV: as ff_deliver_signal (resume_delay_ms is not used).
-- Reply: OK, signal_id, buffered_for_pending_waitpoint | DUPLICATE, first
-- signal id. Nothing is evaluated until the suspension activates the
-- waitpoint.
redis.register_function('ff_buffer_signal_for_pending_waitpoint', function(keys, args)
  local core_key = keys[1]
  local a = signal_args(args)
  if not H.load_core(core_key) then return H.err('execution_not_found') end
  local now = H.now_ms()
  local wp = H.hgetall(keys[8])
  if not wp.created_at then return H.err('waitpoint_not_found') end
  local e = authenticate(core_key, wp, a, keys[9], now)
  if e then return e end
  -- A closed pending waitpoint takes no more signals: they would be
  -- replayed if a suspension later activated it.
  if wp.state == 'closed' or wp.state == 'expired' then return H.err('waitpoint_closed') end
  e = admit(keys[4], keys[7], a)
  if e then return e end
  record({signal = keys[5], payload = keys[6], wp_signals = keys[3], exec_signals = keys[4]},
    a, 'buffered_for_pending_waitpoint', now)
  return H.ok(a.signal_id, 'buffered_for_pending_waitpoint')
end)

-- ff_create_pending_waitpoint
-- KEYS: core, waitpoint, pending_wp_expiry, hmac keystore.
-- ARGV: eid, attempt_index, wp_id, wp_key, expires_at.
-- Reply: OK, wp_id, wp_key, token. The worker holding the lease creates
-- the waitpoint before it suspends, so signals sent in between are kept.
redis.register_function('ff_create_pending_waitpoint', function(keys, args)
  local core_key = keys[1]
  local eid, att_idx, wpid, wpkey = args[1] or '', args[2] or '', args[3] or '', args[4] or ''
  local expires_at = args[5] or ''
  local core = H.load_core(core_key)
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase ~= 'active' then return H.not_active(core) end
  if core.ownership_state ~= 'leased' then return H.err('no_active_lease') end
  if tostring(core.current_attempt_index) ~= att_idx then return H.err('stale_lease') end
  local state = redis.call('HGET', keys[2], 'state')
  if state == 'pending' or state == 'active' then return H.err('waitpoint_already_exists') end
  local now = H.now_ms()
  local token, code = H.mint_token(keys[4], wpid, wpkey, now)
  if not token then return H.err(code) end
  -- FlowFabric indexes expires_at after writing the waitpoint (and fails
  -- there on a non-number); ours refuses it before the write.
  local expires_n, e = H.require_number(expires_at, 'expires_at')
  if e then return e end
  local ts = H.int(now)
  redis.call('HSET', keys[2], 'waitpoint_id', wpid, 'execution_id', eid,
    'attempt_index', att_idx, 'suspension_id', '', 'waitpoint_key', wpkey,
    'waitpoint_token', token, 'state', 'pending', 'created_at', ts, 'activated_at', '',
    'satisfied_at', '', 'closed_at', '', 'expires_at', expires_at, 'close_reason', '',
    'signal_count', '0', 'matched_signal_count', '0', 'last_signal_at', '')
  redis.call('ZADD', keys[3], expires_n, wpid)
  return H.ok(wpid, wpkey, token)
end)

-- ff_close_waitpoint (a worker that will not suspend after all, or the
-- pending-waitpoint-expiry scanner with reason never_committed)
-- KEYS: core, waitpoint, pending_wp_expiry.
-- ARGV: wp_id, reason (proactive_close when absent).
-- Reply: OK | OK, already_closed.
redis.register_function('ff_close_waitpoint', function(keys, args)
  local wpid, reason = args[1] or '', args[2] or 'proactive_close'
  local state = redis.call('HGET', keys[2], 'state')
  if redis.call('EXISTS', keys[2]) == 0 then return H.err('waitpoint_not_found') end
  if state ~= 'pending' and state ~= 'active' then
    if state == 'closed' or state == 'expired' then return H.ok('already_closed') end
    return H.err('waitpoint_not_open')
  end
  redis.call('HSET', keys[2], 'state', 'closed', 'closed_at', H.int(H.now_ms()),
    'close_reason', reason)
  redis.call('ZREM', keys[3], wpid)
  return H.ok()
end)
