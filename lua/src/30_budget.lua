-- Budgets (hash tag {b:M}): definition, usage reports checked against hard
-- and soft limits, and periodic resets. Every stored time is the caller's
-- ARGV now_ms, never server time: budget scanners and reporters run on their
-- own clocks and the stored values must line up with what they passed.

-- ff_create_budget
-- KEYS: def, limits, usage, resets, policies
-- ARGV: bid, scope_type, scope_id, enforcement_mode, on_hard, on_soft,
--       reset_interval_ms, now_ms, n, dim x n, hard x n, soft x n
redis.register_function('ff_create_budget', function(keys, args)
  local bid = args[1]
  -- The partition index lists every budget homed here, and is kept even when
  -- the definition already exists (a lost SADD heals on the next create).
  if redis.call('EXISTS', keys[1]) == 1 then
    redis.call('SADD', keys[5], bid)
    return {1, 'ALREADY_SATISFIED', bid}
  end
  local n, bad_n = H.require_number(args[9], 'dim_count')
  if bad_n then
    -- FlowFabric has indexed the id by the time it answers this.
    redis.call('SADD', keys[5], bid)
    return bad_n
  end
  -- Refused before any write (FlowFabric would fail half-way through its
  -- writes): a dimension count the arguments do not carry, and a reset
  -- interval or now_ms that is not a number (an empty interval included).
  if n < 0 or n ~= math.floor(n) or #args < 9 + 3 * n then
    return H.err('invalid_input', 'dimension count does not match the arguments')
  end
  local interval, bad = H.require_number(args[7], 'reset_interval_ms')
  if bad then return bad end
  local now, bad_now = H.require_number(args[8], 'now_ms')
  if bad_now then return bad_now end

  redis.call('SADD', keys[5], bid)
  -- Stored as given, as FlowFabric stores them.
  redis.call('HSET', keys[1],
    'budget_id', bid,
    'scope_type', args[2],
    'scope_id', args[3],
    'enforcement_mode', args[4],
    'on_hard_limit', args[5],
    'on_soft_limit', args[6],
    'reset_interval_ms', args[7],
    'breach_count', 0,
    'soft_breach_count', 0,
    'created_at', args[8],
    'last_updated_at', args[8])

  for i = 1, n do
    local dim = args[9 + i]
    redis.call('HSET', keys[2],
      'hard:' .. dim, args[9 + n + i],
      'soft:' .. dim, args[9 + 2 * n + i])
  end

  if interval > 0 then
    local next_reset = tostring(now + interval)
    redis.call('HSET', keys[1], 'next_reset_at', next_reset)
    redis.call('ZADD', keys[4], tonumber(next_reset), bid)
  end
  return {1, 'OK', bid}
end)

-- apply_spend(usage, limits, def, dims, raw_deltas, now, dedup_key,
-- ledger, index, eid) -> the reply row of a usage report or spend, in
-- FlowFabric's order. Hard limits are checked dimension by dimension
-- first, so a breaching report leaves every dimension untouched
-- (all-or-nothing, the breach still counted); then every delta is applied
-- (and mirrored into the execution's ledger when one is given) and the
-- first dimension over its soft limit reported. A delta that is not a
-- number is refused where FlowFabric would first add it, one that is not
-- whole before the first increment: nothing is written either way.
local function apply_spend(usage, limits, def, dims, raw_deltas, now, dedup_key, ledger, index, eid)
  local deltas = {}
  for i = 1, #dims do
    local dim = dims[i]
    local delta, bad = H.require_number(raw_deltas[i], 'delta')
    if bad then return bad end
    deltas[i] = delta
    local cur = tonumber(redis.call('HGET', usage, dim) or '0') or 0
    local hard_raw = redis.call('HGET', limits, 'hard:' .. dim)
    local hard = tonumber(hard_raw or '') or 0
    if hard > 0 and cur + delta > hard then
      redis.call('HINCRBY', def, 'breach_count', 1)
      redis.call('HSET', def, 'last_breach_at', now, 'last_breach_dim', dim, 'last_updated_at', now)
      -- FlowFabric echoes the usage as a number and the limit as stored.
      return {1, 'HARD_BREACH', dim, tostring(cur), hard_raw}
    end
  end
  for i = 1, #dims do
    if not H.is_whole(deltas[i]) then
      return H.err('invalid_input', 'delta must be a whole number, got: ' .. tostring(raw_deltas[i]))
    end
  end

  local breached
  for i = 1, #dims do
    local total = redis.call('HINCRBY', usage, dims[i], deltas[i])
    if ledger and eid ~= '' then redis.call('HINCRBY', ledger, dims[i], deltas[i]) end
    local soft = tonumber(redis.call('HGET', limits, 'soft:' .. dims[i]) or '') or 0
    if breached == nil and soft > 0 and total > soft then breached = dims[i] end
  end
  if index and eid ~= '' then redis.call('SADD', index, eid) end

  redis.call('HSET', def, 'last_updated_at', now)
  -- Marked only once the report is applied: a hard-breached report was not
  -- applied, so replaying it re-evaluates it.
  if dedup_key ~= '' then
    redis.call('SET', dedup_key, '1', 'PX', 86400000)
  end
  if breached == nil then return {1, 'OK'} end
  -- The increment stands; the first dimension over its soft limit is
  -- reported with the limit and the usage as they read now, both as
  -- numbers (a stored 007 answers 7), as FlowFabric does.
  redis.call('HINCRBY', def, 'soft_breach_count', 1)
  local soft = tonumber(redis.call('HGET', limits, 'soft:' .. breached) or '0')
  local cur = tonumber(redis.call('HGET', usage, breached) or '0')
  return {1, 'SOFT_BREACH', breached, tostring(cur), tostring(soft)}
end

-- ff_report_usage_and_check
-- KEYS: usage, limits, def
-- ARGV: n, dim x n, delta x n, now_ms, dedup_key ("" = no dedup)
-- Replies OK, ALREADY_APPLIED, SOFT_BREACH dim current limit, or
-- HARD_BREACH dim current limit. A hard breach is a success row that applies
-- nothing but still counts the breach.
redis.register_function('ff_report_usage_and_check', function(keys, args)
  local n, bad_n = H.require_number(args[1], 'dim_count')
  if bad_n then return bad_n end
  if n < 0 or n ~= math.floor(n) or #args < 2 + 2 * n then
    return H.err('invalid_input', 'dimension count does not match the arguments')
  end
  local now_raw = args[2 + 2 * n]
  local dedup_key = args[3 + 2 * n] or ''

  if dedup_key ~= '' and redis.call('GET', dedup_key) then
    return {1, 'ALREADY_APPLIED'}
  end

  -- Refused here, before any write; now_ms is stored as given.
  local _, bad_now = H.require_number(now_raw, 'now_ms')
  if bad_now then return bad_now end
  local dims, deltas = {}, {}
  for i = 1, n do
    dims[i] = args[1 + i]
    deltas[i] = args[1 + n + i]
  end
  return apply_spend(keys[1], keys[2], keys[3], dims, deltas, now_raw, dedup_key)
end)

-- ff_reset_budget
-- KEYS: def, usage, resets
-- ARGV: bid, now_ms
-- Zeroes every usage field and reschedules from now_ms (or unschedules a
-- budget whose interval is 0). Replies the next reset time ("0" = none).
redis.register_function('ff_reset_budget', function(keys, args)
  local bid = args[1]
  local now, bad_now = H.require_number(args[2], 'now_ms')
  if bad_now then return bad_now end
  local now_raw = args[2]

  local fields = redis.call('HKEYS', keys[2])
  if #fields > 0 then
    local cmd = {'HSET', keys[2]}
    for _, f in ipairs(fields) do
      cmd[#cmd + 1] = f
      cmd[#cmd + 1] = '0'
    end
    redis.call(unpack(cmd))
  end

  redis.call('HINCRBY', keys[1], 'reset_count', 1)
  redis.call('HSET', keys[1],
    'last_reset_at', now_raw,
    'last_updated_at', now_raw,
    'last_breach_at', '',
    'last_breach_dim', '')

  local interval = tonumber(redis.call('HGET', keys[1], 'reset_interval_ms')) or 0
  local next_reset = '0'
  if interval > 0 then
    next_reset = tostring(now + interval)
    redis.call('HSET', keys[1], 'next_reset_at', next_reset)
    redis.call('ZADD', keys[3], tonumber(next_reset), bid)
  else
    redis.call('ZREM', keys[3], bid)
  end
  return {1, 'OK', next_reset}
end)

-- ff_record_spend: a usage report attributed to an execution, so that
-- ff_release_budget can take it back.
-- KEYS: usage, limits, def, the execution's ledger, the ledger index
-- ARGV: n, then n pairs of dim and delta, now_ms, dedup_key ("" = none),
--       eid ("" = not attributed)
-- Replies as ff_report_usage_and_check.
redis.register_function('ff_record_spend', function(keys, args)
  local n, e = H.require_number(args[1], 'pair_count')
  if e then return e end
  if n < 0 or n ~= math.floor(n) or #args < 2 + 2 * n then
    return H.err('invalid_input', 'pair count does not match the arguments')
  end
  local now_raw = args[2 + 2 * n]
  local dedup_key = args[3 + 2 * n] or ''
  local eid = args[4 + 2 * n] or ''
  if dedup_key ~= '' and redis.call('GET', dedup_key) then
    return {1, 'ALREADY_APPLIED'}
  end
  -- Refused before any write, as for a usage report.
  local _, bad_now = H.require_number(now_raw, 'now_ms')
  if bad_now then return bad_now end
  local dims, deltas = {}, {}
  for i = 1, n do
    dims[i] = args[2 * i]
    deltas[i] = args[2 * i + 1]
  end
  return apply_spend(keys[1], keys[2], keys[3], dims, deltas, now_raw, dedup_key, keys[4], keys[5], eid)
end)

-- ff_release_budget: take back what an execution spent (its ledger),
-- never taking a dimension below 0 (a reset may have lowered it since).
-- KEYS: usage, the execution's ledger, the ledger index. ARGV: bid, eid.
-- Reply: OK, released | OK, noop (nothing recorded for the execution).
redis.register_function('ff_release_budget', function(keys, args)
  local flat = redis.call('HGETALL', keys[2])
  if #flat == 0 then return H.ok('noop') end
  for i = 1, #flat, 2 do
    local spent = tonumber(flat[i + 1]) or 0
    if spent > 0 then
      local left = (tonumber(redis.call('HGET', keys[1], flat[i])) or 0) - spent
      if left < 0 then left = 0 end
      redis.call('HSET', keys[1], flat[i], tostring(left))
    end
  end
  redis.call('DEL', keys[2])
  redis.call('SREM', keys[3], args[2] or '')
  return H.ok('released')
end)
