-- Key guard: a test-only prelude (see lua/keyguard.go). The guarded build
-- routes every redis.call / redis.pcall / redis.register_function of the
-- library through FFKG, which fails the call when a function touches a key
-- that is neither among its KEYS nor one of the listed exceptions. On a
-- cluster an undeclared key is a cross-slot bug waiting to happen; on a
-- single node it is a silent divergence from what the caller asked for.
-- Errors start with FFKEYGUARD so a test can tell them from library errors.
local FFKG = {}
do
  -- redis.call and redis.pcall exist only while a function runs, so they
  -- are looked up per call; register_function only while loading.
  local real_register = redis.register_function
  local current = nil -- {name = function name, set = KEYS as a set, keys = KEYS}

  local function first() return {1} end
  local function none() return {} end
  local function all(a)
    local t = {}
    for i = 1, #a do t[i] = i end
    return t
  end
  local function first_two() return {1, 2} end

  -- Which arguments (after the command name) are keys. A command missing
  -- here fails the call: an unknown key position must never pass.
  local KEY_ARGS = {
    APPEND = first, COPY = first_two, DECR = first, DECRBY = first, DEL = all,
    EXISTS = all, EXPIRE = first, EXPIREAT = first, GET = first, GETDEL = first,
    HDEL = first, HEXISTS = first, HGET = first, HGETALL = first, HINCRBY = first,
    HINCRBYFLOAT = first, HKEYS = first, HLEN = first, HMGET = first, HMSET = first,
    HSET = first, HSETNX = first, HVALS = first, INCR = first, INCRBY = first,
    LINDEX = first, LLEN = first, LPOP = first, LPUSH = first, LRANGE = first,
    LREM = first, LTRIM = first, MGET = all, PERSIST = first, PEXPIRE = first,
    PEXPIREAT = first, PTTL = first, PUBLISH = none, RPOP = first, RPUSH = first,
    SADD = first, SCARD = first, SET = first, SETNX = first, SISMEMBER = first,
    SMEMBERS = first, SMISMEMBER = first, SPOP = first, SRANDMEMBER = first,
    SREM = first, STRLEN = first, TIME = none, TTL = first, TYPE = first,
    UNLINK = all, XADD = first, XDEL = first, XLEN = first, XRANGE = first,
    XREVRANGE = first, XTRIM = first, ZADD = first, ZCARD = first, ZCOUNT = first,
    ZINCRBY = first, ZMSCORE = first, ZPOPMIN = first, ZRANGE = first,
    ZRANGEBYSCORE = first, ZRANK = first, ZREM = first, ZREMRANGEBYRANK = first,
    ZREMRANGEBYSCORE = first, ZREVRANGE = first, ZREVRANGEBYSCORE = first,
    ZSCORE = first,
  }

  local function esc(s)
    return (string.gsub(s, '[%^%$%(%)%%%.%[%]%*%+%-%?{}]', '%%%0'))
  end
  local function tag_of(k) return string.match(k or '', '(%b{})') end
  -- The execution id in an exec core key ff:exec:<tag>:<eid>:core.
  local function core_eid(k) return string.match(k or '', '^ff:exec:%b{}:(.+):core$') end
  local function is(key, pat) return string.find(key, '^' .. pat .. '$') ~= nil end

  -- Keys derived from a declared key, as FlowFabric's own functions derive
  -- them (docs/compat.md lists each with its reason). Each entry gets the
  -- key, KEYS and ARGV and answers whether the key is such a sibling.
  local function stream_meta_of_core(key, keys)
    local tag, eid = tag_of(keys[1]), core_eid(keys[1])
    return tag ~= nil and eid ~= nil
      and is(key, 'ff:stream:' .. esc(tag) .. ':' .. esc(eid) .. ':%-?%d+:meta')
  end
  local function worker_leases_of_tag(key, keys)
    local tag = tag_of(keys[1])
    return tag ~= nil and is(key, 'ff:idx:' .. esc(tag) .. ':worker:.*:leases')
  end
  local function lane_set_of_tag(suffixes)
    return function(key, keys)
      local tag = tag_of(keys[1])
      if tag == nil then return false end
      for _, s in ipairs(suffixes) do
        if is(key, 'ff:idx:' .. esc(tag) .. ':lane:.*:' .. esc(s)) then return true end
      end
      return false
    end
  end
  local function siblings_of(index, suffixes)
    return function(key, keys)
      local base = keys[index]
      if base == nil then return false end
      for _, s in ipairs(suffixes) do
        if key == base .. s then return true end
      end
      return false
    end
  end
  -- An attempt of the core's tag, named by the core's id or by the id the
  -- caller passed in ARGV[1] (FlowFabric names a new attempt after the
  -- latter).
  local function attempt_of_core(key, keys, args)
    local tag = tag_of(keys[1])
    if tag == nil then return false end
    for _, eid in ipairs({core_eid(keys[1]) or '', args[1] or ''}) do
      if eid ~= '' then
        local p = 'ff:attempt:' .. esc(tag) .. ':' .. esc(eid) .. ':%d+'
        if is(key, p) or is(key, p .. ':usage') or is(key, p .. ':policy') then return true end
      end
    end
    return false
  end
  local function waitpoint_of_tag(key, keys)
    local tag = tag_of(keys[1])
    return tag ~= nil and (is(key, 'ff:wp:' .. esc(tag) .. ':[^:]+') or is(key, 'ff:wp:' .. esc(tag) .. ':[^:]+:condition'))
  end
  local function flow_graph_of(index)
    return function(key, keys)
      local prefix = string.match(keys[index] or '', '^(ff:flow:%b{}:[^:]+)')
      return prefix ~= nil and (is(key, esc(prefix) .. ':out:.+') or is(key, esc(prefix) .. ':edge:.+'))
    end
  end
  local function exec_core_of_tag(key, keys)
    local tag = tag_of(keys[1])
    return tag ~= nil and is(key, 'ff:exec:' .. esc(tag) .. ':.+:core')
  end
  -- The usage dedup key FlowFabric's signature passes as the last ARGV
  -- (whatever its caller named it; its own callers hash-tag it like KEYS).
  local function dedup_key_arg(key, keys, args)
    local dim = tonumber(args[1])
    return dim ~= nil and key == args[2 * dim + 3]
  end
  local RUNNABLE = {'eligible', 'delayed', 'blocked:dependencies', 'blocked:budget',
    'blocked:quota', 'blocked:route', 'blocked:operator'}
  local COMPOSITE = {':satisfied_set', ':satisfied_set:signals', ':member_map'}

  -- Functions that validate a lease close the expiring attempt's stream.
  local LEASE_CHECKED = {stream_meta_of_core}
  local EXCEPTIONS = {
    ff_complete_execution = LEASE_CHECKED,
    ff_fail_execution = LEASE_CHECKED,
    ff_renew_lease = LEASE_CHECKED,
    ff_mark_lease_expired_if_due = LEASE_CHECKED,
    ff_delay_execution = LEASE_CHECKED,
    ff_move_to_waiting_children = LEASE_CHECKED,
    ff_suspend_execution = {stream_meta_of_core, siblings_of(7, {':member_map'})},
    ff_resume_execution = {siblings_of(2, COMPOSITE), waitpoint_of_tag},
    ff_expire_suspension = {siblings_of(2, COMPOSITE), waitpoint_of_tag},
    ff_deliver_signal = {siblings_of(9, COMPOSITE), waitpoint_of_tag},
    ff_claim_execution = {attempt_of_core},
    ff_issue_grant_and_claim = {attempt_of_core},
    ff_replay_execution = {function(key, keys) return key == (string.gsub(keys[1], ':core$', ':policy')) end},
    ff_reclaim_execution = {attempt_of_core, worker_leases_of_tag, lane_set_of_tag({'terminal'}),
      function(key, keys) return key == (string.gsub(keys[1], ':core$', ':policy')) end},
    ff_expire_execution = {worker_leases_of_tag, lane_set_of_tag(RUNNABLE)},
    ff_cancel_execution = {lane_set_of_tag({'active', 'suspended'}), siblings_of(8, COMPOSITE), waitpoint_of_tag},
    ff_stage_dependency_edge = {flow_graph_of(1)},
    ff_report_usage_and_check = {dedup_key_arg},
    ff_record_spend = {dedup_key_arg},
    ff_resolve_dependency = {flow_graph_of(13), exec_core_of_tag},
    ff_reconcile_sibling_cancel_group = {exec_core_of_tag},
  }

  local function allowed(name, key, keys, args)
    for _, ok in ipairs(EXCEPTIONS[name] or {}) do
      if ok(key, keys, args) then return true end
    end
    return false
  end

  local function check(cmd, ...)
    if current == nil then return end
    local a = {...}
    local positions = KEY_ARGS[string.upper(tostring(cmd))]
    if positions == nil then
      error({err = 'FFKEYGUARD ' .. current.name .. ' runs ' .. tostring(cmd) ..
        ', a command whose key arguments the key guard does not know'})
    end
    for _, i in ipairs(positions(a)) do
      local key = a[i]
      if not current.set[key] and not allowed(current.name, key, current.keys, current.args) then
        error({err = 'FFKEYGUARD ' .. current.name .. ' touched ' .. tostring(key) ..
          ' (' .. tostring(cmd) .. '), which is not among its KEYS'})
      end
    end
  end

  FFKG.call = function(cmd, ...)
    check(cmd, ...)
    return redis.call(cmd, ...)
  end
  FFKG.pcall = function(cmd, ...)
    check(cmd, ...)
    return redis.pcall(cmd, ...)
  end

  local function guarded(name, cb)
    return function(keys, args)
      local set = {}
      for _, k in ipairs(keys) do set[k] = true end
      current = {name = name, set = set, keys = keys, args = args}
      return cb(keys, args)
    end
  end
  -- Runs while loading, where only a few globals exist (no type, no
  -- pairs): the table form is the one called without a second argument.
  FFKG.register = function(a, b)
    if b == nil then
      return real_register({
        function_name = a.function_name,
        callback = guarded(a.function_name, a.callback),
        flags = a.flags,
        description = a.description,
      })
    end
    return real_register(a, guarded(a, b))
  end
end
