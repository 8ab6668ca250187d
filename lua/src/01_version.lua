-- ff_version: the FlowFabric contract level these functions follow. FlowFabric
-- callers compare it with the level they were built for, so it stays the bare
-- string of that level and never carries our own build number (that is
-- ffscan_version, appended when the library is assembled).
redis.register_function('ff_version', function(keys, args)
  return '34'
end)
