-- Worker registry (FlowFabric's RFC-025): per worker instance a liveness
-- key (ff:worker:<ns>:<wiid>:alive) and a capability hash (...:caps) that
-- age out together, and the namespace's index of instances
-- (ff:idx:<ns>:workers), which keeps an instance until someone removes it.
-- These keys carry no hash tag.

-- Numbers are stored as Lua prints them (tostring), as FlowFabric does.
local function numstr(n) return tostring(n) end

-- A liveness TTL must be a whole number of milliseconds above zero: PX
-- refuses anything else, which in FlowFabric's library fails the call
-- after its checks (nothing written yet). Ours says so as invalid_input.
local function ttl_arg(v)
  local n, e = H.require_number(v, 'ttl_ms')
  if e then return nil, e end
  if n < 1 or not H.is_whole(n) then
    return nil, H.err('invalid_input', 'ttl_ms must be a positive whole number, got: ' .. tostring(v))
  end
  return n
end

-- ff_register_worker
-- KEYS: alive, caps, workers index. ARGV: instance_id, worker_id,
-- lanes_csv, caps_csv (both sorted by the caller), ttl_ms, now_ms.
-- Reply: OK, registered (no live registration before) | refreshed.
-- Registering again overwrites: new capabilities and lanes take effect,
-- and registered_at_ms moves to now.
redis.register_function('ff_register_worker', function(keys, args)
  local ttl, e = ttl_arg(args[5])
  if e then return e end
  local now, e2 = H.require_number(args[6], 'now_ms')
  if e2 then return e2 end
  local fresh = redis.call('EXISTS', keys[1]) == 0
  local ttl_s, now_s = numstr(ttl), numstr(now)
  redis.call('SET', keys[1], '1', 'PX', ttl_s)
  redis.call('HSET', keys[2],
    'worker_id', args[2] or '',
    'lanes_csv', args[3] or '',
    'caps_csv', args[4] or '',
    'ttl_ms', ttl_s,
    'registered_at_ms', now_s,
    'last_heartbeat_ms', now_s)
  redis.call('PEXPIRE', keys[2], ttl_s)
  redis.call('SADD', keys[3], args[1] or '')
  if fresh then return H.ok('registered') end
  return H.ok('refreshed')
end)

-- ff_heartbeat_worker
-- KEYS: alive, caps. ARGV: now_ms.
-- Reply: OK, refreshed, <ttl_ms> | OK, not_registered (the registration
-- is gone: expired or removed; the caller registers again). The TTL is
-- the one stored at registration.
redis.register_function('ff_heartbeat_worker', function(keys, args)
  local now, e = H.require_number(args[1], 'now_ms')
  if e then return e end
  local ttl = tonumber(redis.call('HGET', keys[2], 'ttl_ms') or nil)
  if not ttl then return H.ok('not_registered') end
  local ttl_s = numstr(ttl)
  if redis.call('PEXPIRE', keys[1], ttl_s) == 0 then
    return H.ok('not_registered')
  end
  redis.call('PEXPIRE', keys[2], ttl_s)
  redis.call('HSET', keys[2], 'last_heartbeat_ms', numstr(now))
  return H.ok('refreshed', ttl_s)
end)
