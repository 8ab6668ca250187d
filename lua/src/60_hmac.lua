-- The waitpoint HMAC keystore of a partition (ff:sec:<tag>:waitpoint_hmac):
-- current_kid with secret:<kid>, and for rotated-out kids expires_at:<kid>
-- (the end of their grace) plus previous_kid / previous_expires_at. The
-- current kid never has an expiry. Times are the server's; numbers are
-- written as Lua prints them, as FlowFabric does.

-- ff_rotate_waitpoint_hmac_secret
-- KEYS: keystore. ARGV: new_kid, new_secret_hex, grace_ms.
-- Reply: OK, rotated, <previous kid or "">, <new kid>, <kids swept> |
-- OK, noop, <kid> (the same kid and secret again). Errors, nothing
-- written: invalid_kid (empty or with ':'), invalid_secret_hex (empty,
-- odd length, not hex), invalid_grace_ms (not a whole number in
-- 0..2^53-1), rotation_conflict <kid> (the current kid with another
-- secret). Kids whose grace has ended are swept on rotation.
redis.register_function('ff_rotate_waitpoint_hmac_secret', function(keys, args)
  local key, kid, secret = keys[1], args[1], args[2]
  if type(kid) ~= 'string' or kid == '' or kid:find(':', 1, true) then
    return H.err('invalid_kid')
  end
  if type(secret) ~= 'string' or secret == '' or #secret % 2 ~= 0 or secret:find('[^0-9a-fA-F]') then
    return H.err('invalid_secret_hex')
  end
  local grace = tonumber(args[3])
  if not grace or grace ~= grace or grace < 0 or grace > 9007199254740991 or grace ~= math.floor(grace) then
    return H.err('invalid_grace_ms')
  end
  local now = H.now_ms()

  local current = redis.call('HGET', key, 'current_kid')
  if current == false then current = nil end
  if current == kid then
    local stored = redis.call('HGET', key, 'secret:' .. kid)
    if stored == secret then return H.ok('noop', kid) end
    if stored then return H.err('rotation_conflict', kid) end
    -- The kid is current but its secret is missing (a torn write):
    -- install it.
    redis.call('HSET', key, 'secret:' .. kid, secret)
    return H.ok('noop', kid)
  end

  local flat = redis.call('HGETALL', key)
  local gone, swept = {}, 0
  for i = 1, #flat, 2 do
    if flat[i]:sub(1, 11) == 'expires_at:' then
      local old = flat[i]:sub(12)
      local exp = tonumber(flat[i + 1])
      -- The same boundary as token validation: still valid at exp == now.
      if not exp or exp <= 0 or exp < now then
        gone[#gone + 1] = 'expires_at:' .. old
        gone[#gone + 1] = 'secret:' .. old
        swept = swept + 1
      end
    end
  end
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end

  if current then
    local until_s = tostring(now + grace)
    redis.call('HSET', key,
      'previous_kid', current,
      'previous_expires_at', until_s,
      'expires_at:' .. current, until_s,
      'current_kid', kid,
      'secret:' .. kid, secret)
  else
    redis.call('HSET', key, 'current_kid', kid, 'secret:' .. kid, secret)
  end
  return H.ok('rotated', current or '', kid, tostring(swept))
end)

-- ff_list_waitpoint_hmac_kids
-- KEYS: keystore. Reply: OK, <current kid or "">, <n>, then n pairs of
-- kid and expiry for the rotated-out kids still in their grace (those
-- that still validate tokens), in the keystore's field order.
redis.register_function('ff_list_waitpoint_hmac_kids', function(keys, args)
  local flat = redis.call('HGETALL', keys[1])
  local now = H.now_ms()
  local current, out, n = '', {}, 0
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    if field == 'current_kid' then
      current = value
    elseif field:sub(1, 11) == 'expires_at:' then
      local exp = tonumber(value)
      if exp and exp > 0 and exp >= now then
        out[#out + 1] = field:sub(12)
        out[#out + 1] = value
        n = n + 1
      end
    end
  end
  return H.ok(current, tostring(n), unpack(out))
end)
