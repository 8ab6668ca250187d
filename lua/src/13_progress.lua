-- Progress reports from the worker holding an execution's lease.

-- ff_update_progress
-- KEYS: core. ARGV: eid, lease_id, lease_epoch, progress_pct,
-- progress_message. Reply: OK.
-- A light fence: lease id and epoch, no attempt id. An expired lease is
-- refused (lease_expired) without being marked; the lease scanner does
-- that. Only the fields given are written (pct "0" is given; an empty
-- message is not), with progress_updated_at and last_mutation_at.
redis.register_function('ff_update_progress', function(keys, args)
  local now = H.now_ms()
  local core = H.load_core(keys[1])
  if not core then return H.err('execution_not_found') end
  if core.lifecycle_phase ~= 'active' then return H.not_active(core) end
  if core.ownership_state == 'lease_revoked' then return H.err('lease_revoked') end
  if (tonumber(core.lease_expires_at or '0') or 0) <= now then
    return H.err('lease_expired')
  end
  if core.current_lease_id ~= args[2] or core.current_lease_epoch ~= args[3] then
    return H.err('stale_lease')
  end
  local ts = H.int(now)
  local fields = {'last_mutation_at', ts, 'progress_updated_at', ts}
  if H.is_set(args[4]) then
    fields[#fields + 1] = 'progress_pct'
    fields[#fields + 1] = args[4]
  end
  if H.is_set(args[5]) then
    fields[#fields + 1] = 'progress_message'
    fields[#fields + 1] = args[5]
  end
  redis.call('HSET', keys[1], unpack(fields))
  return H.ok()
end)
