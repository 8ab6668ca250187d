-- Quotas (on {q:K}): a policy with a sliding request window and a
-- concurrency cap, and admissions recorded against it. The admission
-- replies are bare words, not {1|0, status} rows.

-- ff_create_quota_policy
-- KEYS: policy, window (the policy's own window key), concurrency counter,
-- admitted set, policies index. ARGV: policy_id, window_seconds,
-- max_requests_per_window, max_concurrent, now_ms.
-- Reply: OK, <id> | ALREADY_SATISFIED, <id> (nothing written then).
redis.register_function('ff_create_quota_policy', function(keys, args)
  local id = args[1] or ''
  if redis.call('EXISTS', keys[1]) == 1 then return H.already(id) end
  redis.call('HSET', keys[1],
    'quota_policy_id', id,
    'requests_per_window_seconds', args[2] or '',
    'max_requests_per_window', args[3] or '',
    'active_concurrency_cap', args[4] or '',
    'created_at', args[5] or '')
  redis.call('SET', keys[3], '0')
  redis.call('SADD', keys[5], id)
  return H.ok(id)
end)

-- ff_check_admission_and_record
-- KEYS: window, concurrency counter, policy, admitted guard (per
-- execution), admitted set. ARGV: now_ms, window_seconds, rate_limit,
-- concurrency_cap, eid, jitter_ms. Reply: ADMITTED | ALREADY_ADMITTED |
-- RATE_EXCEEDED, <retry after ms> | CONCURRENCY_EXCEEDED.
-- The window holds one entry per admitted execution scored by its
-- admission time; entries older than the window are dropped first. A
-- limit or cap of 0 is no limit.
redis.register_function('ff_check_admission_and_record', function(keys, args)
  local now, e = H.require_number(args[1], 'now_ms')
  if e then return e end
  local window_s
  window_s, e = H.require_number(args[2], 'window_seconds')
  if e then return e end
  local rate
  rate, e = H.require_number(args[3], 'rate_limit')
  if e then return e end
  local cap
  cap, e = H.require_number(args[4], 'concurrency_cap')
  if e then return e end
  local eid = args[5] or ''
  local window_ms = window_s * 1000

  if redis.call('EXISTS', keys[4]) == 1 then return {'ALREADY_ADMITTED'} end
  redis.call('ZREMRANGEBYSCORE', keys[1], '-inf', now - window_ms)
  if rate > 0 and redis.call('ZCARD', keys[1]) >= rate then
    -- Retry once the oldest admission leaves the window, plus jitter.
    local oldest = redis.call('ZRANGE', keys[1], 0, 0, 'WITHSCORES')
    local retry = 0
    if #oldest >= 2 then
      retry = math.max(tonumber(oldest[2]) + window_ms - now, 0)
    end
    local jitter = tonumber(args[6] or '0')
    if jitter == nil then
      return H.err('invalid_input', 'jitter_ms must be a number, got: ' .. tostring(args[6]))
    end
    if jitter > 0 then retry = retry + math.random(0, jitter) end
    return {'RATE_EXCEEDED', tostring(retry)}
  end
  if cap > 0 and (tonumber(redis.call('GET', keys[2]) or '0') or 0) >= cap then
    return {'CONCURRENCY_EXCEEDED'}
  end
  redis.call('ZADD', keys[1], now, eid)
  if window_ms > 0 then
    redis.call('SET', keys[4], '1', 'PX', window_ms, 'NX')
  end
  if cap > 0 then redis.call('INCR', keys[2]) end
  redis.call('SADD', keys[5], eid)
  return {'ADMITTED'}
end)

-- ff_release_admission
-- KEYS: admitted guard, admitted set, concurrency counter. ARGV: eid.
-- Reply: OK, released. Idempotent; the counter never goes below 0.
redis.register_function('ff_release_admission', function(keys, args)
  redis.call('DEL', keys[1])
  redis.call('SREM', keys[2], args[1] or '')
  if (tonumber(redis.call('GET', keys[3]) or '0') or 0) > 0 then
    redis.call('DECR', keys[3])
  end
  return H.ok('released')
end)
