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
    redis.call('ZADD', keys[4], next_reset, bid)
  end
  return {1, 'OK', bid}
end)

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

  if dedup_key ~= '' and redis.call('EXISTS', dedup_key) == 1 then
    return {1, 'ALREADY_APPLIED'}
  end

  -- Refused here, before any write (FlowFabric would fail mid-report);
  -- now_ms is stored as given.
  local _, bad_now = H.require_number(now_raw, 'now_ms')
  if bad_now then return bad_now end
  local deltas = {}
  for i = 1, n do
    local d, bad = H.require_number(args[1 + n + i], 'delta')
    if bad then return bad end
    deltas[i] = d
  end
  local now = now_raw

  -- Hard limits first, for every dimension, so a breaching report leaves
  -- all dimensions untouched (all-or-nothing).
  for i = 1, n do
    local dim = args[1 + i]
    local hard_raw = redis.call('HGET', keys[2], 'hard:' .. dim)
    local hard = tonumber(hard_raw) or 0
    if hard > 0 then
      local cur_raw = redis.call('HGET', keys[1], dim)
      local cur = tonumber(cur_raw) or 0
      if cur + deltas[i] > hard then
        redis.call('HINCRBY', keys[3], 'breach_count', 1)
        redis.call('HSET', keys[3],
          'last_breach_at', now,
          'last_breach_dim', dim,
          'last_updated_at', now)
        -- FlowFabric echoes the usage as a number and the limit as stored.
        return {1, 'HARD_BREACH', dim, tostring(cur), hard_raw}
      end
    end
  end

  local totals = {}
  for i = 1, n do
    totals[i] = redis.call('HINCRBY', keys[1], args[1 + i], deltas[i])
  end

  -- The increment stands; only the first dimension over its soft limit is
  -- reported.
  local reply = {1, 'OK'}
  for i = 1, n do
    local dim = args[1 + i]
    local soft_raw = redis.call('HGET', keys[2], 'soft:' .. dim)
    local soft = tonumber(soft_raw) or 0
    if soft > 0 and totals[i] > soft then
      redis.call('HINCRBY', keys[3], 'soft_breach_count', 1)
      -- Both echoed as numbers (a stored 007 answers 7), as FlowFabric does.
      reply = {1, 'SOFT_BREACH', dim, tostring(totals[i]), tostring(soft)}
      break
    end
  end

  redis.call('HSET', keys[3], 'last_updated_at', now)
  -- Marked only once the report is applied: a hard-breached report was not
  -- applied, so replaying it re-evaluates it.
  if dedup_key ~= '' then
    redis.call('SET', dedup_key, '1', 'PX', 86400000)
  end
  return reply
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
    redis.call('ZADD', keys[3], next_reset, bid)
  else
    redis.call('ZREM', keys[3], bid)
  end
  return {1, 'OK', next_reset}
end)
