-- Waitpoints, their HMAC tokens and resume conditions: the pieces the
-- suspension functions (18_suspend.lua) and the signal functions
-- (19_signal.lua) share.
--
-- A waitpoint token is "<kid>:<40 lowercase hex>", the hex being
-- HMAC-SHA1 keyed by the hex-decoded secret of kid over
-- "<waitpoint id>|<waitpoint key>|<waitpoint created_at>". The keystore is
-- the partition's ff:sec:<tag>:waitpoint_hmac hash (60_hmac.lua).

-- bytes_of_hex(hex) -> the bytes hex spells, or nil for anything that is
-- not an even-length run of hex digits (a torn or hand-written secret must
-- never turn into a MAC that looks valid).
local function bytes_of_hex(hex)
  if type(hex) ~= 'string' or #hex % 2 ~= 0 or string.find(hex, '[^0-9a-fA-F]') then
    return nil
  end
  return (string.gsub(hex, '..', function(pair) return string.char(tonumber(pair, 16)) end))
end

-- H.hmac_sha1_hex(key_hex, msg) -> lowercase hex HMAC-SHA1 (RFC 2104), or
-- nil when key_hex is not hex. Only sha1hex exists inside the server, so
-- the inner digest is turned back into bytes for the outer round.
function H.hmac_sha1_hex(key_hex, msg)
  local key = bytes_of_hex(key_hex)
  if key == nil then return nil end
  if #key > 64 then key = bytes_of_hex(redis.sha1hex(key)) end
  key = key .. string.rep('\0', 64 - #key)
  local inner, outer = {}, {}
  for i = 1, 64 do
    local b = string.byte(key, i)
    inner[i] = string.char(bit.bxor(b, 0x36))
    outer[i] = string.char(bit.bxor(b, 0x5c))
  end
  local inner_hex = redis.sha1hex(table.concat(inner) .. msg)
  return redis.sha1hex(table.concat(outer) .. bytes_of_hex(inner_hex))
end

local function token_input(wpid, wpkey, created_at)
  return wpid .. '|' .. wpkey .. '|' .. tostring(created_at)
end

-- H.mint_token(store_key, wpid, wpkey, created_at) -> token, or nil plus
-- the error code (hmac_secret_not_initialized without a current kid and
-- its secret, invalid_secret for a secret that is not hex).
function H.mint_token(store_key, wpid, wpkey, created_at)
  if not H.is_set(store_key) then return nil, 'invalid_keys_missing_hmac' end
  local store = H.hgetall(store_key)
  local kid = store.current_kid
  if not kid or not store['secret:' .. kid] then return nil, 'hmac_secret_not_initialized' end
  local digest = H.hmac_sha1_hex(store['secret:' .. kid], token_input(wpid, wpkey, created_at))
  if not digest then return nil, 'invalid_secret' end
  return kid .. ':' .. digest
end

-- H.token_error(store_key, token, wpid, wpkey, created_at, now) -> nil
-- when token authenticates the waitpoint, else the error code. The current
-- kid always verifies; another kid only while its expires_at is at or
-- after now (a kid past its grace is token_expired, an unknown one
-- invalid_token). Digests are compared without an early exit.
function H.token_error(store_key, token, wpid, wpkey, created_at, now)
  if not H.is_set(store_key) then return 'invalid_keys_missing_hmac' end
  if not H.is_set(token) then return 'missing_token' end
  local sep = string.find(token, ':', 1, true)
  if not sep or sep < 2 or sep >= #token then return 'invalid_token' end
  local kid, given = string.sub(token, 1, sep - 1), string.sub(token, sep + 1)
  if #given ~= 40 then return 'invalid_token' end
  local store = H.hgetall(store_key)
  if not store.current_kid then return 'hmac_secret_not_initialized' end
  local secret
  if kid == store.current_kid then
    secret = store['secret:' .. kid]
  else
    secret = store['secret:' .. kid]
    if secret == nil or kid == '' then return 'invalid_token' end
    local exp = tonumber(store['expires_at:' .. kid])
    if not exp or exp <= 0 or exp < now then return 'token_expired' end
  end
  if secret == nil then return 'invalid_token' end
  local want = H.hmac_sha1_hex(secret, token_input(wpid, wpkey, created_at))
  if not want then return 'invalid_secret' end
  local diff = 0
  for i = 1, 40 do
    diff = bit.bor(diff, bit.bxor(string.byte(want, i), string.byte(given, i)))
  end
  if diff ~= 0 then return 'invalid_token' end
  return nil
end

-- Suspension reason_code -> the exec_core blocking_reason while suspended.
H.SUSPEND_BLOCKING = {
  waiting_for_signal = 'waiting_for_signal',
  waiting_for_approval = 'waiting_for_approval',
  waiting_for_callback = 'waiting_for_callback',
  waiting_for_tool_result = 'waiting_for_tool_result',
  waiting_for_operator_review = 'paused_by_operator',
  paused_by_policy = 'paused_by_policy',
  paused_by_budget = 'waiting_for_budget',
  step_boundary = 'waiting_for_signal',
  manual_pause = 'paused_by_operator',
}

-- The signal summary a suspension starts with (and, in FlowFabric, keeps).
H.EMPTY_SIGNAL_SUMMARY = '{"total_count":0,"matched_count":0,"signal_names":[]}'

-- storable(v) -> true for a value a hash field can take as it is (a
-- string, or a number, which the server writes as it writes numbers).
local function storable(v)
  return type(v) == 'string' or type(v) == 'number'
end

-- H.parse_condition(json) -> condition table, or nil plus the error tuple.
-- A plain condition is a list of matchers (name "" accepts any signal; no
-- names means one such wildcard) with a match mode and a minimum count,
-- each taken as given (a minimum that is not a number is kept as nil and
-- written as "nil", as FlowFabric writes it). A composite one
-- ({"composite": true, "v": 1, "tree": ...}) is evaluated over satisfier
-- tokens instead (H.composite_offer); one of another version keeps no
-- tree (invalid = true), as in FlowFabric. Input on which FlowFabric
-- raises a Lua error after writing the waitpoint (not JSON; a number,
-- boolean or null; names, mode or type of a kind a hash cannot hold) is
-- refused before any write (docs/compat.md, "Deliberate refusals").
function H.parse_condition(json)
  local ok, spec = H.json_decode(json or '')
  if not ok then
    return nil, H.err('invalid_input', 'resume_condition_json is not JSON')
  end
  -- FlowFabric reads fields straight off the decoded value: an array or a
  -- string has none (a wildcard condition).
  if type(spec) == 'string' then spec = {} end
  if type(spec) ~= 'table' then
    return nil, H.err('invalid_input', 'resume_condition_json must be a JSON object')
  end
  if spec.composite then
    if spec.v and tonumber(spec.v) ~= 1 then
      return {composite = true, invalid = true, closed = false}
    end
    return {composite = true, tree = spec.tree, closed = false}
  end
  local names = spec.required_signal_names or {}
  if names == '' then names = {} end
  if type(names) ~= 'table' then
    return nil, H.err('invalid_input', 'required_signal_names must be an array')
  end
  local matchers = {}
  for i, name in ipairs(names) do
    if not storable(name) then
      return nil, H.err('invalid_input', 'required_signal_names must hold strings')
    end
    matchers[i] = {name = name, satisfied = false, signal_id = ''}
  end
  if #names == 0 then matchers = {{name = '', satisfied = false, signal_id = ''}} end
  local ctype = spec.condition_type or 'signal_set'
  local mode = spec.signal_match_mode or 'any'
  if not storable(ctype) or not storable(mode) then
    return nil, H.err('invalid_input', 'condition_type and signal_match_mode must be strings')
  end
  return {
    condition_type = ctype,
    match_mode = mode,
    minimum_signal_count = tonumber(spec.minimum_signal_count or '1'),
    matchers = matchers,
    satisfied_count = 0,
    closed = false,
  }
end

-- H.condition_offer(cond, name, signal_id) -> true when the signal fills
-- the first unsatisfied matcher that accepts its name.
function H.condition_offer(cond, name, signal_id)
  for _, m in ipairs(cond.matchers) do
    if not m.satisfied and (m.name == '' or m.name == name) then
      m.satisfied = true
      m.signal_id = signal_id or ''
      cond.satisfied_count = cond.satisfied_count + 1
      return true
    end
  end
  return false
end

-- H.condition_met(mode, satisfied, total, min) -> whether a plain condition
-- is satisfied: "all" needs every matcher, any other mode the minimum (a
-- minimum that is not a number counts as 1).
function H.condition_met(mode, satisfied, total, min)
  if mode == 'all' then return satisfied >= total end
  return satisfied >= (min or 1)
end

-- H.write_condition(key, cond, now) -> the waitpoint condition hash.
function H.write_condition(key, cond, now)
  local ts = H.int(now)
  if cond.composite then
    redis.call('HSET', key, 'condition_type', 'composite', 'composite', '1',
      'match_mode', 'composite', 'minimum_signal_count', '1', 'total_matchers', '0',
      'satisfied_count', '0', 'closed', cond.closed and '1' or '0', 'updated_at', ts,
      'tree_json', cond.tree and cjson.encode(cond.tree) or '')
    return
  end
  local f = {'condition_type', cond.condition_type, 'match_mode', cond.match_mode,
    'minimum_signal_count', tostring(cond.minimum_signal_count),
    'total_matchers', tostring(#cond.matchers),
    'satisfied_count', tostring(cond.satisfied_count),
    'closed', cond.closed and '1' or '0', 'updated_at', ts}
  for i, m in ipairs(cond.matchers) do
    local p = 'matcher:' .. (i - 1) .. ':'
    f[#f + 1] = p .. 'name'
    f[#f + 1] = m.name
    f[#f + 1] = p .. 'satisfied'
    f[#f + 1] = m.satisfied and '1' or '0'
    f[#f + 1] = p .. 'signal_id'
    f[#f + 1] = m.signal_id
  end
  redis.call('HSET', key, unpack(f))
end

-- Composite conditions. The suspension keeps two sets beside its hash:
-- <susp>:satisfied_set holds satisfier tokens ("leaf:<path>" for a Single
-- node, "node:<path>" for a satisfied non-leaf child of an AllOf, and for
-- a Count node "wp:<wpid>", "sig:<sigid>" or "src:<type>:<identity>" by
-- its count_kind), <susp>:satisfied_set:signals the ids of the signals
-- that added one. <susp>:member_map maps "wp:<key>:<path>" to the path of
-- every node a waitpoint key feeds (written once, for operators).

-- composite_nodes_for(tree, wpkey) -> the Single and Count nodes the
-- waitpoint key feeds, walking AllOf members depth first.
local function composite_nodes_for(tree, wpkey)
  local found = {}
  local function walk(node)
    if type(node) ~= 'table' then return end
    if node.kind == 'Single' then
      if node.waitpoint_key == wpkey then found[#found + 1] = node end
    elseif node.kind == 'Count' then
      for _, k in ipairs(node.waitpoints or {}) do
        if k == wpkey then
          found[#found + 1] = node
          break
        end
      end
    elseif node.kind == 'AllOf' then
      for _, child in ipairs(node.members or {}) do walk(child) end
    end
  end
  walk(tree)
  return found
end

-- H.seed_member_map(key, tree, wpkeys) -> the operator map of which node
-- each waitpoint key feeds.
function H.seed_member_map(key, tree, wpkeys)
  local f = {}
  for _, wk in ipairs(wpkeys) do
    for _, node in ipairs(composite_nodes_for(tree, wk)) do
      f[#f + 1] = 'wp:' .. wk .. ':' .. (node.path or '')
      f[#f + 1] = node.path or ''
    end
  end
  if #f > 0 then redis.call('HSET', key, unpack(f)) end
end

local function accepts(matcher, name)
  if type(matcher) ~= 'table' or matcher.kind == nil or matcher.kind == 'Wildcard' then
    return true
  end
  return matcher.kind == 'ByName' and matcher.name == name
end

local COUNT_PREFIX = {DistinctSignals = 'sig:', DistinctSources = 'src:'}

local function count_token(node, sig, wpid)
  if node.count_kind == 'DistinctSignals' then return 'sig:' .. (sig.signal_id or '') end
  if node.count_kind == 'DistinctSources' then
    return 'src:' .. (sig.source_type or '') .. ':' .. (sig.source_identity or '')
  end
  return 'wp:' .. (wpid or '')
end

local function node_met(node, have)
  if type(node) ~= 'table' then return false end
  if node.kind == 'Single' then return have['leaf:' .. (node.path or '')] == true end
  if node.kind == 'AllOf' then
    for _, child in ipairs(node.members or {}) do
      local token = (child.kind == 'Single' and 'leaf:' or 'node:') .. (child.path or '')
      if not have[token] then return false end
    end
    return true
  end
  if node.kind == 'Count' then
    if have['timeout:*'] then return true end
    local prefix = COUNT_PREFIX[node.count_kind] or 'wp:'
    local n = 0
    for token in pairs(have) do
      if string.sub(token, 1, #prefix) == prefix then n = n + 1 end
    end
    return n >= (tonumber(node.n) or 1)
  end
  return false -- NeverBySignal and kinds this library does not know
end

local function satisfier_tokens(key)
  local have = {}
  for _, m in ipairs(redis.call('SMEMBERS', key)) do have[m] = true end
  return have
end

-- H.composite_offer(tree, susp_key, wpid, wpkey, sig) -> {effect, resume,
-- closer, satisfiers_json} for a signal delivered to waitpoint wpid/wpkey
-- of a composite condition. sig holds signal_id, signal_name, source_type
-- and source_identity.
function H.composite_offer(tree, susp_key, wpid, wpkey, sig)
  local set_key = susp_key .. ':satisfied_set'
  local nodes = composite_nodes_for(tree, wpkey)
  if #nodes == 0 then return {effect = 'signal_ignored_not_in_condition'} end
  local any_accepts, added = false, false
  for _, node in ipairs(nodes) do
    if accepts(node.matcher, sig.signal_name) then
      any_accepts = true
      local token
      if node.kind == 'Single' then
        token = 'leaf:' .. (node.path or '')
      else
        token = count_token(node, sig, wpid)
      end
      if redis.call('SADD', set_key, token) == 1 then
        added = true
        redis.call('SADD', set_key .. ':signals', sig.signal_id)
      end
    end
  end
  if not any_accepts then return {effect = 'signal_ignored_matcher_failed'} end
  if not added then return {effect = 'appended_to_waitpoint_duplicate'} end
  local have = satisfier_tokens(set_key)
  -- A satisfied non-leaf member of an AllOf is recorded as node:<path> so
  -- its parent can count it; deeper members first reach their parents.
  local function lift(node)
    if type(node) ~= 'table' or node.kind ~= 'AllOf' then return end
    for _, child in ipairs(node.members or {}) do
      if child.kind ~= 'Single' and node_met(child, have) then
        local token = 'node:' .. (child.path or '')
        if redis.call('SADD', set_key, token) == 1 then have[token] = true end
        lift(child)
      end
    end
  end
  lift(tree)
  if not node_met(tree, have) then return {effect = 'appended_to_waitpoint'} end
  return {
    effect = 'resume_condition_satisfied',
    resume = true,
    closer = sig.signal_id,
    satisfiers_json = cjson.encode(redis.call('SMEMBERS', set_key .. ':signals')),
  }
end

-- H.drop_composite(susp_key) -> DEL the composite satisfier sets and map.
function H.drop_composite(susp_key)
  redis.call('DEL', susp_key .. ':satisfied_set', susp_key .. ':satisfied_set:signals',
    susp_key .. ':member_map')
end

-- H.extra_waitpoints(susp) -> the {waitpoint_id, waitpoint_key} list of a
-- suspension's extra waitpoints ("Pattern 3"): the entries whose
-- waitpoint_id is a non-empty string; [] when none or unreadable.
function H.extra_waitpoints(susp)
  local out = {}
  local json = susp.additional_waitpoints_json
  if not json or json == '' or json == '[]' then return out end
  local ok, list = H.json_decode(json)
  if not ok or type(list) ~= 'table' then return out end
  for _, x in ipairs(list) do
    if type(x) == 'table' and type(x.waitpoint_id) == 'string' and x.waitpoint_id ~= '' then
      out[#out + 1] = x
    end
  end
  return out
end

-- H.close_extra_waitpoints(susp_key, susp, wp_fields, cond_fields) ->
-- closes the extra waitpoints of a suspension and their condition hashes,
-- each only if it exists (keys built from the suspension key's tag; the
-- primary one is the caller's).
function H.close_extra_waitpoints(susp_key, susp, wp_fields, cond_fields)
  local tag = H.tag_of(susp_key)
  if not tag then return end
  for _, x in ipairs(H.extra_waitpoints(susp)) do
    local wk = H.wp_key(tag, x.waitpoint_id)
    if redis.call('EXISTS', wk) == 1 then redis.call('HSET', wk, unpack(wp_fields)) end
    local ck = wk .. ':condition'
    if redis.call('EXISTS', ck) == 1 then redis.call('HSET', ck, unpack(cond_fields)) end
  end
end

-- H.resume_runnable(core_key, core, k, delay_ms, detail, now, eid) -> moves a
-- suspended execution back to runnable on the same attempt: eligible now
-- (composite eligible score), or with delay_ms > 0 delayed until
-- now+delay_ms with blocking detail `detail`. k holds eligible, delayed
-- and suspended; eid is the member the indexes get (the caller's id, as
-- FlowFabric uses it). Returns the public state.
function H.resume_runnable(core_key, core, k, delay_ms, detail, now, eid)
  local ts = H.int(now)
  local f = {
    lifecycle_phase = 'runnable', ownership_state = 'unowned',
    eligibility_state = 'eligible_now', blocking_reason = 'waiting_for_worker',
    blocking_detail = '', terminal_outcome = 'none',
    attempt_state = 'attempt_interrupted', public_state = 'waiting',
    current_suspension_id = '', current_waitpoint_id = '',
    last_transition_at = ts, last_mutation_at = ts,
  }
  if delay_ms > 0 then
    f.eligibility_state = 'not_eligible_until_time'
    f.blocking_reason = 'waiting_for_resume_delay'
    f.blocking_detail = detail
    f.public_state = 'delayed'
  end
  H.hset(core_key, f)
  redis.call('ZREM', k.suspended, eid)
  if delay_ms > 0 then
    redis.call('ZADD', k.delayed, now + delay_ms, eid)
  else
    redis.call('ZADD', k.eligible, H.eligible_score(core.priority, core.created_at), eid)
  end
  return f.public_state
end
