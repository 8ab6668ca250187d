-- The output stream of an attempt (ff:stream:<tag>:<eid>:<idx>), its meta
-- hash and, for summary-mode frames, the rolling summary document they
-- patch. Three modes: durable (the default), summary (a JSON merge patch,
-- RFC 7396, applied to the summary document; the stream keeps a short
-- tail) and best_effort (a live tail that may expire, sized from the
-- append rate).

local STREAM_NULL = '__ff_null__'    -- a leaf the summary should hold as JSON null
local STREAM_READ_CAP = 10000         -- most entries one read returns

-- is_object(t): a decoded JSON object (an empty table counts), not an array.
local function is_object(t)
  if type(t) ~= 'table' then return false end
  return next(t) == nil or t[1] == nil
end

-- merge_patch(target, patch, depth) -> nil or an error word. RFC 7396 on
-- decoded tables: null deletes, a non-empty object recurses, anything
-- else (scalars, arrays, empty objects) replaces. At most 16 levels.
-- The table operations follow FlowFabric's order exactly, so the encoded
-- document comes out byte for byte the same.
local function merge_patch(target, patch, depth)
  if depth > 16 then return 'patch_depth_exceeded' end
  for k, v in pairs(patch) do
    if v == cjson.null then
      target[k] = nil
    elseif type(v) == 'table' and not v[1] and next(v) ~= nil then
      if type(target[k]) ~= 'table' or target[k][1] ~= nil then target[k] = {} end
      local e = merge_patch(target[k], v, depth + 1)
      if e then return e end
    else
      target[k] = v
    end
  end
  return nil
end

-- nulls_in(doc, depth): the null sentinel string becomes JSON null.
local function nulls_in(doc, depth)
  if depth > 32 or type(doc) ~= 'table' then return end
  for k, v in pairs(doc) do
    if v == STREAM_NULL then
      doc[k] = cjson.null
    elseif type(v) == 'table' then
      nulls_in(v, depth + 1)
    end
  end
end

-- apply_summary(key, payload, patch_kind, now) -> new version string, or
-- nil plus the error tuple.
local function apply_summary(key, payload, patch_kind, now)
  if key == '' then return nil, H.err('invalid_input', 'summary mode requires stream_summary key') end
  if patch_kind ~= 'json-merge-patch' and patch_kind ~= '' then
    return nil, H.err('invalid_input', 'unsupported patch_kind')
  end
  local ok, patch = pcall(cjson.decode, payload)
  if not ok then return nil, H.err('invalid_input', 'patch payload is not valid JSON') end
  if not is_object(patch) then return nil, H.err('invalid_input', 'patch must be a JSON object') end
  local doc = {}
  local stored = redis.call('HGET', key, 'document')
  if stored and stored ~= '' then
    local ok2, parsed = pcall(cjson.decode, stored)
    if not ok2 then return nil, H.err('corruption', 'stored summary document not decodeable') end
    doc = parsed
  end
  local e = merge_patch(doc, patch, 0)
  if e then return nil, H.err('invalid_input', e) end
  nulls_in(doc, 0)
  local version = redis.call('HINCRBY', key, 'version', 1)
  local ts = tostring(now)
  redis.call('HSET', key, 'document', cjson.encode(doc), 'patch_kind', 'json-merge-patch',
    'last_updated_ms', ts)
  if version == 1 then redis.call('HSET', key, 'first_applied_ms', ts) end
  return tostring(version), nil
end

-- best_effort_trim(stream, meta, a, now): size the live tail from an
-- exponential moving average of the append rate (twice the frames the
-- TTL spans, within floor and ceiling), and let the stream expire at
-- twice the TTL unless it ever held a durable frame.
local function best_effort_trim(stream, meta, a, now)
  local m = redis.call('HMGET', meta, 'ema_rate_hz', 'last_append_ts_ms')
  local prev_rate, prev_ts = tonumber(m[1] or ''), tonumber(m[2] or '')
  local ttl_s = math.max(a.ttl_ms, 1) / 1000.0
  local rate
  if prev_rate == nil or prev_ts == nil then
    rate = a.floor / (ttl_s * 2.0)  -- the first frame starts at the floor
  else
    local dt = now - prev_ts
    if dt <= 0 then dt = 1 end
    rate = a.alpha * (1000.0 / dt) + (1.0 - a.alpha) * prev_rate
  end
  local n = math.ceil(rate * ttl_s * 2.0)
  if n < a.floor then n = a.floor end
  if n > a.ceiling then n = a.ceiling end
  redis.call('XTRIM', stream, 'MAXLEN', '~', n)
  redis.call('HSET', meta, 'ema_rate_hz', tostring(rate), 'last_append_ts_ms', tostring(now),
    'maxlen_applied_last', tostring(n))
  if redis.call('HGET', meta, 'has_durable_frame') ~= '1' and a.ttl_ms > 0 then
    redis.call('PEXPIRE', stream, a.ttl_ms * 2)
  end
end

-- ff_append_frame
-- KEYS: core, stream, stream meta, stream summary.
-- ARGV: eid, attempt_index, lease_id, lease_epoch, frame_type, ts,
--       payload, encoding, correlation_id, source, retention_maxlen,
--       attempt_id, max_payload_bytes, stream_mode, patch_kind, ttl_ms,
--       maxlen_floor, maxlen_ceiling, ema_alpha
-- Reply: OK, <entry id>, <frames appended ever>, <summary version or "">.
-- A light lease check on the core (the holder of the current lease of the
-- current attempt only); the meta is created by the first frame.
redis.register_function('ff_append_frame', function(keys, args)
  local core_key, stream, meta, summary = keys[1], keys[2], keys[3], keys[4] or ''
  local eid, idx = args[1], args[2]
  local payload = args[7] or ''
  local a = {
    retention = tonumber(args[11] or '0'),
    max_payload = tonumber(args[13] or '65536'),
    mode = args[14] or '',
    ttl_ms = tonumber(args[16] or '0'),
    floor = tonumber(args[17] or '0'),
    ceiling = tonumber(args[18] or '0'),
    alpha = tonumber(args[19] or '0'),
  }
  if a.floor == nil or a.floor <= 0 then a.floor = 64 end
  if a.ceiling == nil or a.ceiling <= 0 then a.ceiling = 16384 end
  if a.alpha == nil or a.alpha <= 0 or a.alpha > 1.0 then a.alpha = 0.2 end
  if a.ceiling < a.floor then a.ceiling = a.floor end
  if a.mode == '' then a.mode = 'durable' end

  -- Numbers FlowFabric fails on (a Lua error) are refused where it would
  -- fail, before any write: the payload cap at once, and below, a missing
  -- retention (durable frames trim by it) or live TTL (best-effort frames).
  if a.max_payload == nil then
    return H.err('invalid_input', 'max_payload_bytes must be a number, got: ' .. tostring(args[13]))
  end
  if #payload > a.max_payload then return H.err('retention_limit_exceeded') end
  local c = redis.call('HMGET', core_key, 'current_attempt_index', 'current_lease_id',
    'current_lease_epoch', 'lease_expires_at', 'lifecycle_phase', 'ownership_state')
  if c[5] ~= 'active' then return H.err('stream_closed') end
  if c[6] == 'lease_expired_reclaimable' or c[6] == 'lease_revoked' then
    return H.err('stale_owner_cannot_append')
  end
  local now = H.now_ms()
  if (tonumber(c[4] or '0') or 0) <= now or tostring(c[1]) ~= idx
      or c[2] ~= args[3] or tostring(c[3]) ~= args[4] then
    return H.err('stale_owner_cannot_append')
  end

  local bad
  local r, ttl = a.retention, a.ttl_ms
  if a.mode ~= 'summary' and a.mode ~= 'best_effort' and not (H.is_whole(r) and r >= 0) then
    bad = H.err('invalid_input', 'retention_maxlen must be a whole number >= 0, got: ' .. tostring(args[11]))
  elseif a.mode == 'best_effort' and (ttl == nil or (ttl > 0 and not H.is_whole(ttl * 2))) then
    bad = H.err('invalid_input', 'ttl_ms must be a whole number, got: ' .. tostring(args[16]))
  end
  if bad then
    -- A closed stream still answers first, as it would in FlowFabric.
    if H.is_set(redis.call('HGET', meta, 'closed_at')) then return H.err('stream_closed') end
    return bad
  end

  if redis.call('EXISTS', meta) == 0 then
    redis.call('HSET', meta,
      'stream_id', eid .. ':' .. idx, 'execution_id', eid,
      'attempt_id', args[12] or '', 'attempt_index', idx,
      'created_at', tostring(now), 'closed_at', '', 'closed_reason', '',
      'durability_mode', 'durable_full', 'retention_maxlen', tostring(a.retention),
      'last_sequence', '', 'frame_count', '0', 'total_bytes', '0',
      'last_frame_at', '', 'has_durable_frame', '0')
  end
  if H.is_set(redis.call('HGET', meta, 'closed_at')) then return H.err('stream_closed') end

  local version = ''
  if a.mode == 'summary' then
    local e
    version, e = apply_summary(summary, payload, args[15] or '', now)
    if e then return e end
  end

  local ts = args[6] or ''
  if ts == '' then ts = tostring(now) end
  local entry = {stream, '*', 'frame_type', args[5], 'ts', ts, 'payload', payload,
    'encoding', args[8] or 'utf8', 'source', args[10] or 'worker', 'mode', a.mode}
  local function field(k, v) entry[#entry + 1] = k; entry[#entry + 1] = v end
  if (args[9] or '') ~= '' then field('correlation_id', args[9]) end
  if version ~= '' then field('summary_version', version) end
  if a.mode == 'best_effort' and a.ttl_ms > 0 then field('ttl_ms', tostring(a.ttl_ms)) end
  local id = redis.call('XADD', unpack(entry))

  local count = redis.call('HINCRBY', meta, 'frame_count', 1)
  redis.call('HINCRBY', meta, 'total_bytes', #payload)
  redis.call('HSET', meta, 'last_sequence', id, 'last_frame_at', tostring(now))
  if (a.mode == 'durable' or a.mode == 'summary')
      and redis.call('HGET', meta, 'has_durable_frame') ~= '1' then
    -- Durable content never expires: drop a TTL an earlier live frame set.
    redis.call('HSET', meta, 'has_durable_frame', '1')
    redis.call('PERSIST', stream)
  end

  if a.mode == 'summary' then
    redis.call('XTRIM', stream, 'MAXLEN', '~', 64)
  elseif a.mode == 'best_effort' then
    best_effort_trim(stream, meta, a, now)
  elseif a.retention == 0 then
    redis.call('XTRIM', stream, 'MAXLEN', '~', 10000)
  else
    redis.call('XTRIM', stream, 'MAXLEN', '=', a.retention)
  end
  return H.ok(id, tostring(count), version)
end)

-- ff_read_attempt_stream
-- KEYS: stream, stream meta. ARGV: from_id, to_id, count_limit (1..10000),
-- visibility ("" / all, or exclude_best_effort).
-- Reply: OK, <entries>, closed_at, closed_reason.
redis.register_function('ff_read_attempt_stream', function(keys, args)
  local limit = tonumber(args[3] or '0')
  if limit == nil or limit < 1 then return H.err('invalid_input', 'count_limit must be >= 1') end
  if limit > STREAM_READ_CAP then return H.err('invalid_input', 'count_limit_exceeds_hard_cap') end
  -- A range or count the server cannot read (a malformed entry id, a
  -- fractional count) is refused with its message; FlowFabric raises it
  -- as a Lua error.
  local entries = redis.pcall('XRANGE', keys[1], args[1] or '-', args[2] or '+', 'COUNT', limit)
  if type(entries) == 'table' and entries.err then
    return H.err('invalid_input', 'stream range: ' .. tostring(entries.err))
  end
  if (args[4] or '') == 'exclude_best_effort' then
    local kept = {}
    for _, entry in ipairs(entries) do
      -- Entries without a mode field predate the modes: durable.
      local mode, fields = 'durable', entry[2]
      for j = 1, #fields - 1, 2 do
        if fields[j] == 'mode' then mode = fields[j + 1]; break end
      end
      if mode ~= 'best_effort' then kept[#kept + 1] = entry end
    end
    entries = kept
  end
  local m = redis.call('HMGET', keys[2], 'closed_at', 'closed_reason')
  return H.ok(entries, m[1] or '', m[2] or '')
end)

-- ff_read_summary
-- KEYS: stream summary. Reply: OK, document, version, patch_kind,
-- last_updated_ms, first_applied_ms ("", "0", "", "0", "0" when no
-- summary frame was ever appended).
redis.register_function('ff_read_summary', function(keys, args)
  if redis.call('EXISTS', keys[1]) == 0 then return H.ok('', '0', '', '0', '0') end
  local h = redis.call('HMGET', keys[1], 'document', 'version', 'patch_kind',
    'last_updated_ms', 'first_applied_ms')
  return H.ok(h[1] or '', h[2] or '0', h[3] or '', h[4] or '0', h[5] or '0')
end)
