-- Take or re-enter the write side of a read-write lock (Redisson
-- RReadWriteLock layout). Prepended with counter.lua, holds_of.lua,
-- reentered.lua (a re-entry is recorded by its token) and rw_holds.lua.
--
-- KEYS[1]  the lock HASH ('mode', reader fields, '<holder id>:write')
-- KEYS[2]  the fencing token counter, redisson_lock_token:{name}
-- KEYS[3]  the lock's hash tag {name}: the prefix of every read-hold key,
--          {name}:<holder id>:rwlock_timeout:<k>
-- KEYS[4]  the record of re-entered holds, redisson_lock_holds:{name} (holds.lua)
-- ARGV[1]  lease in milliseconds (a positive integer)
-- ARGV[2]  holder id
-- ARGV[3]  '1' when the caller re-enters a hold of its scope, '0' for a new
--          holder
--
-- Returns {1, token} when taken or re-entered, {0, pttl} while others hold
-- it, {2, 0} when the caller holds only a read lock (a reader never upgrades:
-- two readers doing so would wait for each other for ever), or {3, 0} when a
-- re-entry finds its hold gone. Every check comes before the first write; a
-- re-entry never shortens the hash's remaining lease.
local lease = tonumber(ARGV[1])
local refused = refusal(KEYS[2], lease)
if refused then
  return redis.error_reply(refused)
end
local writer = ARGV[2] .. ':write'
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'write' and redis.call('hexists', KEYS[1], writer) == 1 then
  local holds = holds_of(KEYS[4], writer)
  redis.call('hincrby', KEYS[1], writer, 1)
  keep_longest(KEYS[1], lease)
  local token = next_token(KEYS[2], lease)
  entered(KEYS[1], KEYS[4], writer, holds, token, lease)
  return {1, token}
end
if ARGV[3] == '1' then
  if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return {2, 0}
  end
  return {3, 0}
end
if mode == 'read' and live_reads(KEYS[1], KEYS[3]) == 0 then
  -- Read holds whose lease ran out stop counting here.
  redis.call('del', KEYS[1])
  mode = false
end
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'write', writer, 1)
  redis.call('pexpire', KEYS[1], lease)
  return {1, next_token(KEYS[2], lease)}
end
return {0, redis.call('pttl', KEYS[1])}
