-- Shared helpers for every flowfabric function. The whole library is one Lua
-- chunk with a hard cap of 200 top-level locals, so everything lives in the
-- single table H; other files call H.<name>. Names here are a contract with
-- the flow/budget files: add new helpers, do not rename existing ones.
local H = {}

-- Channel FlowFabric's DAG dispatcher listens on for terminal executions.
H.COMPLETIONS_CHANNEL = 'ff:dag:completions'
-- Priority unit of the eligible-set score and the clamp bounds of priority.
H.PRIORITY_UNIT = 1000000000000
H.PRIORITY_MAX = 9000
-- Sentinel suspended-set score for suspensions without a timeout.
H.NO_TIMEOUT_SCORE = 9999999999999
-- Approximate cap of every lease:history XADD.
H.HISTORY_MAXLEN = '1000'

-- H.now_ms() -> integer ms from the server clock (TIME), never a float.
function H.now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- H.is_set(v) -> true unless v is nil, false or "" (FF never deletes fields).
function H.is_set(v)
  return v ~= nil and v ~= false and v ~= ''
end

-- H.int(n) -> decimal string of an integral number; '%d' avoids the
-- exponent form tostring() gives large or fractional values.
function H.int(n)
  return string.format('%d', n)
end

-- H.ok(...) -> {1, "OK", ...}; every extra field must already be a string.
function H.ok(...)
  return {1, 'OK', ...}
end

-- H.already(...) -> {1, "ALREADY_SATISFIED", ...} for idempotent no-ops.
function H.already(...)
  return {1, 'ALREADY_SATISFIED', ...}
end

-- H.duplicate(id) -> {1, "DUPLICATE", id} for idempotency hits.
function H.duplicate(id)
  return {1, 'DUPLICATE', id}
end

-- H.err(code, ...) -> {0, code, detail...}; a tuple, not a Redis error.
function H.err(code, ...)
  return {0, code, ...}
end

-- H.require_number(v, name) -> number, or nil plus the invalid_input tuple
-- FlowFabric returns for a non-numeric argument.
function H.require_number(v, name)
  local n = tonumber(v)
  if n == nil then
    return nil, H.err('invalid_input', name .. ' must be a number, got: ' .. tostring(v))
  end
  return n
end

-- H.MAX_WHOLE is the largest whole number a double holds exactly (2^53-1):
-- beyond it Lua passes a number to the server in exponent form, which no
-- integer argument accepts.
H.MAX_WHOLE = 9007199254740991

-- H.is_whole(n) -> true for a number the server takes as an integer
-- argument (whole, within +-H.MAX_WHOLE).
function H.is_whole(n)
  return type(n) == 'number' and n == math.floor(n) and n >= -H.MAX_WHOLE and n <= H.MAX_WHOLE
end

-- H.opt_number(v, name) -> nil for an unset value, else as require_number.
function H.opt_number(v, name)
  if not H.is_set(v) then return nil end
  return H.require_number(v, name)
end

-- H.json_decode(s) -> ok, value; never raises on malformed input.
function H.json_decode(s)
  local ok, v = pcall(cjson.decode, s)
  if not ok then return false, nil end
  return true, v
end

-- H.json_object(s) -> table or nil: s decoded when it is a JSON object or
-- array (anything else, malformed JSON included, gives nil).
function H.json_object(s)
  if not H.is_set(s) then return nil end
  local ok, v = H.json_decode(s)
  if ok and type(v) == 'table' then return v end
  return nil
end

-- H.is_noop_key(key) -> true for the ff:noop:{..} placeholder KEYS slot.
function H.is_noop_key(key)
  return key == nil or key == '' or string.find(key, 'ff:noop:', 1, true) ~= nil
end

-- H.tag_of(key) -> the first balanced {...} group of a key, braces included.
function H.tag_of(key)
  return string.match(key, '(%b{})')
end

-- H.eid_from_core_key(key) -> the eid between the first "}:" and ":core".
function H.eid_from_core_key(key)
  local s = string.find(key, '}:', 1, true)
  if not s then return nil end
  local rest = string.sub(key, s + 2)
  return (string.gsub(rest, ':core$', ''))
end

-- H.exec_key(tag, eid, suffix) -> ff:exec:<tag>:<eid>:<suffix>.
function H.exec_key(tag, eid, suffix)
  return 'ff:exec:' .. tag .. ':' .. eid .. ':' .. suffix
end

-- H.sibling_key(core_key, suffix) -> the core key with ":core" replaced.
function H.sibling_key(core_key, suffix)
  return (string.gsub(core_key, ':core$', ':' .. suffix))
end

-- H.idx_key(tag, name) -> ff:idx:<tag>:<name> (partition-wide index).
function H.idx_key(tag, name)
  return 'ff:idx:' .. tag .. ':' .. name
end

-- H.lane_key(tag, lane, suffix) -> ff:idx:<tag>:lane:<lane>:<suffix>.
function H.lane_key(tag, lane, suffix)
  return 'ff:idx:' .. tag .. ':lane:' .. lane .. ':' .. suffix
end

-- H.core_lane(core) -> lane for Lua-built index keys: lane_id, then
-- current_lane, then "default". Only a missing field falls through: an
-- empty lane is a lane, as FlowFabric builds the key.
function H.core_lane(core)
  return core.lane_id or core.current_lane or 'default'
end

-- H.worker_leases_key(tag, wiid) -> ff:idx:<tag>:worker:<wiid>:leases.
function H.worker_leases_key(tag, wiid)
  return 'ff:idx:' .. tag .. ':worker:' .. (wiid or '') .. ':leases'
end

-- H.attempt_key(tag, eid, idx) -> ff:attempt:<tag>:<eid>:<idx>.
function H.attempt_key(tag, eid, idx)
  return 'ff:attempt:' .. tag .. ':' .. eid .. ':' .. idx
end

-- H.stream_meta_key(tag, eid, idx) -> ff:stream:<tag>:<eid>:<idx>:meta.
function H.stream_meta_key(tag, eid, idx)
  return 'ff:stream:' .. tag .. ':' .. eid .. ':' .. idx .. ':meta'
end

-- H.wp_key(tag, wpid) -> ff:wp:<tag>:<wpid> (waitpoints carry one tag).
function H.wp_key(tag, wpid)
  return 'ff:wp:' .. tag .. ':' .. wpid
end

-- H.hgetall(key) -> field map of a hash ({} when the key is missing).
function H.hgetall(key)
  local flat = redis.call('HGETALL', key)
  local m = {}
  for i = 1, #flat, 2 do m[flat[i]] = flat[i + 1] end
  return m
end

-- H.hset(key, map) -> HSET every pair of map (no-op for an empty map).
function H.hset(key, map)
  local argv = {}
  for k, v in pairs(map) do
    argv[#argv + 1] = k
    argv[#argv + 1] = v
  end
  if #argv > 0 then redis.call('HSET', key, unpack(argv)) end
end

-- H.load_core(core_key) -> core map, or nil when exec_core does not exist.
function H.load_core(core_key)
  local core = H.hgetall(core_key)
  if next(core) == nil then return nil end
  return core
end

-- H.not_active(core) -> the execution_not_active tuple with its four
-- reconciliation details (outcome, epoch, phase, attempt id).
function H.not_active(core)
  return H.err('execution_not_active', core.terminal_outcome or '',
    core.current_lease_epoch or '', core.lifecycle_phase or '',
    core.current_attempt_id or '')
end

-- H.clamp_priority(p) -> the priority number clamped to [0, 9000]. Not
-- rounded: FlowFabric stores and scores a fractional priority as given.
function H.clamp_priority(p)
  p = tonumber(p) or 0
  if p < 0 then p = 0 end
  if p > H.PRIORITY_MAX then p = H.PRIORITY_MAX end
  return p
end

-- H.eligible_score(priority, created_at) -> -(priority*1e12)+created_at as
-- a number, the stored priority taken as it is (higher priority sorts
-- first, then FIFO). Passed to ZADD as a number, so the score is written
-- exactly as FlowFabric's.
function H.eligible_score(priority, created_at)
  return 0 - ((tonumber(priority) or 0) * H.PRIORITY_UNIT) + (tonumber(created_at) or 0)
end

-- H.xadd_history(key, ...) -> XADD one lease:history event (field pairs).
function H.xadd_history(key, ...)
  return redis.call('XADD', key, 'MAXLEN', '~', H.HISTORY_MAXLEN, '*', ...)
end

-- H.close_stream_meta(key, reason, now, only_if_open) -> stamps closed_at /
-- closed_reason on an existing attempt stream meta; never creates it.
function H.close_stream_meta(key, reason, now, only_if_open)
  if redis.call('EXISTS', key) == 0 then return false end
  if only_if_open and H.is_set(redis.call('HGET', key, 'closed_at')) then
    return false
  end
  redis.call('HSET', key, 'closed_at', H.int(now), 'closed_reason', reason)
  return true
end

-- H.publish_completion(eid, flow_id, outcome) -> PUBLISH the DAG completion
-- JSON when the execution belongs to a flow; the one place that publishes.
function H.publish_completion(eid, flow_id, outcome)
  if not H.is_set(flow_id) then return 0 end
  local msg = cjson.encode({execution_id = eid, flow_id = flow_id, outcome = outcome})
  return redis.call('PUBLISH', H.COMPLETIONS_CHANNEL, msg)
end

-- H.clear_lease_fields(map) -> adds the core lease fields a release blanks.
function H.clear_lease_fields(map)
  map.current_lease_id = ''
  map.current_worker_id = ''
  map.current_worker_instance_id = ''
  map.lease_expires_at = ''
  map.lease_last_renewed_at = ''
  map.lease_renewal_deadline = ''
  return map
end

-- H.release_lease(k, core, reason, now, attempt_id, eid) -> the "rel
-- lease" sequence. k holds the keys: core, lease_current, lease_history,
-- lease_expiry, worker_leases, active, attempt_timeout (nil skips a key).
-- Blanks the core lease fields and logs "released" (attempt_id optional).
-- eid is the member the indexes hold (the caller's id, as FlowFabric
-- uses it; the core's own id when nil).
function H.release_lease(k, core, reason, now, attempt_id, eid)
  eid = eid or core.execution_id
  if k.lease_current then redis.call('DEL', k.lease_current) end
  if k.lease_expiry then redis.call('ZREM', k.lease_expiry, eid) end
  if k.worker_leases then redis.call('SREM', k.worker_leases, eid) end
  if k.active then redis.call('ZREM', k.active, eid) end
  if k.attempt_timeout then redis.call('ZREM', k.attempt_timeout, eid) end
  H.hset(k.core, H.clear_lease_fields({}))
  if k.lease_history then
    local f = {'event', 'released', 'lease_id', core.current_lease_id or '',
      'lease_epoch', core.current_lease_epoch or '',
      'attempt_index', core.current_attempt_index or ''}
    if attempt_id ~= nil then
      f[#f + 1] = 'attempt_id'
      f[#f + 1] = attempt_id
    end
    f[#f + 1] = 'reason'
    f[#f + 1] = reason
    f[#f + 1] = 'ts'
    f[#f + 1] = H.int(now)
    H.xadd_history(k.lease_history, unpack(f))
  end
end

-- H.mark_lease_expired(core_key, core, history_key, now) -> the lease-expiry
-- marking (ownership lease_expired_reclaimable, attempt_interrupted,
-- "expired" event, stream meta closed if open). Index entries are kept.
function H.mark_lease_expired(core_key, core, history_key, now)
  -- Idempotent: an execution already marked keeps its first marking.
  if core.ownership_state == 'lease_expired_reclaimable' then return end
  local ts = H.int(now)
  -- The other state dimensions are rewritten with what they hold, as
  -- FlowFabric writes all of them.
  redis.call('HSET', core_key,
    'lifecycle_phase', core.lifecycle_phase or 'active',
    'ownership_state', 'lease_expired_reclaimable',
    'eligibility_state', core.eligibility_state or 'not_applicable',
    'blocking_reason', 'waiting_for_worker',
    'blocking_detail', 'lease expired, awaiting reclaim',
    'terminal_outcome', core.terminal_outcome or 'none',
    'attempt_state', 'attempt_interrupted',
    'public_state', 'active',
    'lease_expired_at', ts,
    'last_mutation_at', ts)
  H.xadd_history(history_key, 'event', 'expired',
    'lease_id', core.current_lease_id or '',
    'lease_epoch', core.current_lease_epoch or '',
    'attempt_index', core.current_attempt_index or '',
    'attempt_id', core.current_attempt_id or '',
    'worker_id', core.current_worker_id or '',
    'worker_instance_id', core.current_worker_instance_id or '',
    'ts', ts)
  -- The stream of the current attempt, named from the core key's tag and
  -- id (what the key says, not the id field inside the hash).
  local idx = core.current_attempt_index
  local tag = H.tag_of(core_key)
  local s = string.find(core_key, '}:', 1, true)
  if H.is_set(idx) and tag and s then
    local rest = string.sub(core_key, s + 2)
    local e = string.find(rest, ':core', 1, true)
    if e then
      H.close_stream_meta(H.stream_meta_key(tag, string.sub(rest, 1, e - 1), idx),
        'lease_expired', now, true)
    end
  end
end

-- H.check_lease_fence(core_key, core, history_key, lease_id, epoch,
-- attempt_id, source, now) -> nil when a worker may act on the active
-- lease, else the error tuple. FlowFabric's order: a partial triple, a
-- missing one (passes only for source operator_override, which then acts
-- on the current lease), then lifecycle, revocation, expiry (a lapsed
-- lease is marked expired first, a committed write) and identity. A lease
-- without a readable expiry counts as lapsed.
function H.check_lease_fence(core_key, core, history_key, lease_id, epoch, attempt_id, source, now)
  local given = (H.is_set(lease_id) and 1 or 0) + (H.is_set(epoch) and 1 or 0)
    + (H.is_set(attempt_id) and 1 or 0)
  if given ~= 0 and given ~= 3 then return H.err('partial_fence_triple') end
  if given == 0 and source ~= 'operator_override' then return H.err('fence_required') end
  if core.lifecycle_phase ~= 'active' then return H.not_active(core) end
  if core.ownership_state == 'lease_revoked' then return H.err('lease_revoked') end
  if (tonumber(core.lease_expires_at or '0') or 0) <= now then
    H.mark_lease_expired(core_key, core, history_key, now)
    return H.err('lease_expired')
  end
  if given == 3 then
    if lease_id ~= core.current_lease_id or epoch ~= core.current_lease_epoch
        or attempt_id ~= core.current_attempt_id then
      return H.err('stale_lease')
    end
  end
  return nil
end

-- H.caps_from_csv(csv, side) -> the set of non-empty tokens of a CSV, or
-- nil plus the invalid_capabilities tuple ("<side>:<problem>").
function H.caps_from_csv(csv, side)
  csv = csv or ''
  if #csv > 4096 then return nil, H.err('invalid_capabilities', side .. ':too_many_bytes') end
  local set, n = {}, 0
  for tok in string.gmatch(csv, '[^,]+') do
    n = n + 1
    if n > 256 then return nil, H.err('invalid_capabilities', side .. ':too_many_tokens') end
    set[tok] = true
  end
  return set
end

-- H.validate_cap_tokens(list, side) -> nil if every token is acceptable,
-- else the invalid_capabilities tuple. Rules: non-empty, no comma, no byte
-- <= 0x20 or 0x7F, at most 256 tokens and 4096 bytes in all.
function H.validate_cap_tokens(list, side)
  -- FlowFabric's order and codes: each token first, then the count, then
  -- the size of the comma-joined list.
  local total = 0
  for i = 1, #list do
    local tok = list[i]
    if type(tok) ~= 'string' then return H.err('invalid_capabilities', side .. ':non_string_token') end
    if tok == '' then return H.err('invalid_capabilities', side .. ':empty_token') end
    if string.find(tok, ',', 1, true) then
      return H.err('invalid_capabilities', side .. ':comma_in_token')
    end
    if string.find(tok, '[%z\1-\32\127]') then
      return H.err('invalid_capabilities', side .. ':control_or_whitespace')
    end
    total = total + #tok
  end
  if #list > 256 then return H.err('invalid_capabilities', side .. ':too_many_tokens') end
  if #list > 0 and total + #list - 1 > 4096 then
    return H.err('invalid_capabilities', side .. ':too_many_bytes')
  end
  return nil
end

-- H.check_capabilities(core_key, core, worker_csv, now) -> nil when the
-- worker's CSV covers core.required_capabilities, else an error tuple; a
-- mismatch stamps last_capability_mismatch_at (a committed error write).
-- Both lists are read first (the required one before the worker's), as
-- FlowFabric reads them.
function H.check_capabilities(core_key, core, worker_csv, now)
  local required, e = H.caps_from_csv(core.required_capabilities, 'required')
  if not required then return e end
  local worker
  worker, e = H.caps_from_csv(worker_csv, 'worker')
  if not worker then return e end
  local missing = {}
  for tok in pairs(required) do
    if not worker[tok] then missing[#missing + 1] = tok end
  end
  if #missing == 0 then return nil end
  table.sort(missing)
  redis.call('HSET', core_key, 'last_capability_mismatch_at', H.int(now))
  return H.err('capability_mismatch', table.concat(missing, ','))
end

-- H.write_claim_grant(grant_key, a, now) -> writes the grant hash from the
-- grant ARGV table a = {worker_id, wiid, lane, cap_hash, ttl, route,
-- admission} and sets PEXPIREAT; returns grant_expires_at (number). The
-- expiry is written as Lua prints it and the TTL set from the number, as
-- FlowFabric does.
function H.write_claim_grant(grant_key, a, now)
  local expires = now + a.ttl
  redis.call('HSET', grant_key,
    'worker_id', a.worker_id,
    'worker_instance_id', a.wiid,
    'lane_id', a.lane,
    'capability_hash', a.cap_hash,
    'route_snapshot_json', a.route,
    'admission_summary', a.admission,
    'created_at', H.int(now),
    'grant_expires_at', tostring(expires))
  redis.call('PEXPIREAT', grant_key, expires)
  return expires
end

-- H.check_claim_grant(grant_key, worker_id, now, check_expiry) -> nil when
-- the grant exists for worker_id (and, if asked, has not expired), else the
-- error tuple (invalid_claim_grant / claim_grant_expired).
function H.check_claim_grant(grant_key, worker_id, now, check_expiry)
  local g = H.hgetall(grant_key)
  if next(g) == nil or g.worker_id ~= worker_id then return H.err('invalid_claim_grant') end
  if check_expiry then
    local ge = tonumber(g.grant_expires_at)
    if ge ~= nil and ge < now then return H.err('claim_grant_expired') end
  end
  return nil
end

-- H.terminal_attempt_state(core) -> attempt_terminal if the execution ever
-- had an attempt, else its current attempt_state (kept on terminal).
function H.terminal_attempt_state(core)
  if H.is_set(core.current_attempt_index) then return 'attempt_terminal' end
  return core.attempt_state or 'none'
end

-- H.terminal_fields(outcome, public_state, now) -> core field map shared by
-- every terminal transition (caller adds attempt_state and extras).
function H.terminal_fields(outcome, public_state, now)
  local ts = H.int(now)
  return {
    lifecycle_phase = 'terminal',
    ownership_state = 'unowned',
    eligibility_state = 'not_applicable',
    blocking_reason = 'none',
    blocking_detail = '',
    terminal_outcome = outcome,
    public_state = public_state,
    completed_at = ts,
    last_transition_at = ts,
    last_mutation_at = ts,
  }
end

-- The lane index suffixes a runnable execution may sit in.
H.RUNNABLE_SET_SUFFIXES = {
  'eligible', 'delayed', 'blocked:dependencies', 'blocked:budget',
  'blocked:quota', 'blocked:route', 'blocked:operator',
}

-- H.runnable_set_key(tag, core) -> the lane index a runnable execution sits
-- in for its eligibility_state, or nil when there is none.
function H.runnable_set_key(tag, core)
  local suffix = ({
    eligible_now = 'eligible',
    not_eligible_until_time = 'delayed',
    blocked_by_dependencies = 'blocked:dependencies',
    blocked_by_budget = 'blocked:budget',
    blocked_by_quota = 'blocked:quota',
    blocked_by_route = 'blocked:route',
    blocked_by_operator = 'blocked:operator',
  })[core.eligibility_state or '']
  if not suffix then return nil end
  return H.lane_key(tag, H.core_lane(core), suffix)
end

-- H.flatten_policy(json) -> field map of a JSON object one level deep:
-- nested values re-encoded, every other value as Lua prints it (a JSON
-- null included, as FlowFabric stores it); raises on bad JSON.
function H.flatten_policy(json)
  local m = {}
  if not H.is_set(json) then return m end
  local v = cjson.decode(json)
  if type(v) ~= 'table' then return m end
  for k, val in pairs(v) do
    if type(val) == 'table' then
      m[tostring(k)] = cjson.encode(val)
    else
      m[tostring(k)] = tostring(val)
    end
  end
  return m
end

-- H.attempt_policy_fields(json) -> field map, or nil plus an
-- invalid_policy_json error tuple. FlowFabric's callers only ever send a
-- JSON object (or nothing); anything else is refused before any write
-- rather than stored as nonsense.
function H.attempt_policy_fields(json)
  if not H.is_set(json) then return {} end
  local ok, v = H.json_decode(json)
  if not ok then return nil, H.err('invalid_policy_json', 'malformed') end
  if type(v) ~= 'table' or #v > 0 then
    return nil, H.err('invalid_policy_json', 'not_object')
  end
  return H.flatten_policy(json)
end

-- H.TAG_KEY matches a caller-namespaced tag name, "<caller>.<field>":
-- a lowercase caller, a dot, then at least one character that is not a
-- dot. Tags from different callers cannot collide.
H.TAG_KEY = '^[a-z][a-z0-9_]*%.[^.]'

-- H.tag_pairs_error(args) -> the invalid_input tuple for an empty or odd
-- list of tag pairs, else nil.
function H.tag_pairs_error(args)
  local n = #args
  if n == 0 or n % 2 ~= 0 then
    return H.err('invalid_input', 'tags must be non-empty even-length key/value pairs')
  end
  return nil
end

-- H.tag_key_error(args) -> invalid_tag_key with the first tag name of the
-- pairs that is not caller-namespaced, else nil.
function H.tag_key_error(args)
  for i = 1, #args, 2 do
    if not string.find(args[i], H.TAG_KEY) then
      return H.err('invalid_tag_key', args[i])
    end
  end
  return nil
end
