-- Take or re-enter the write side of a read-write lock (Redisson
-- RReadWriteLock layout). Prepended with rw_holds.lua.
--
-- KEYS[1]  the lock HASH ('mode', reader fields, '<holder id>:write')
-- KEYS[2]  the fencing token counter, redisson_lock_token:{name}
-- KEYS[3]  the lock's hash tag {name}: the prefix of every read-hold key,
--          {name}:<holder id>:rwlock_timeout:<k>
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id
--
-- Returns {1, token} when taken or re-entered, {0, pttl} while others hold
-- it, or {2, 0} when the caller itself holds a read lock: a reader never
-- upgrades (two readers doing so would wait for each other for ever).
local writer = ARGV[2] .. ':write'
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read' then
  -- Read holds whose lease ran out stop counting here.
  if live_reads(KEYS[1], KEYS[3]) == 0 then
    redis.call('del', KEYS[1])
    mode = false
  elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return {2, 0}
  end
end
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'write', writer, 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, redis.call('incr', KEYS[2])}
end
if mode == 'write' and redis.call('hexists', KEYS[1], writer) == 1 then
  redis.call('hincrby', KEYS[1], writer, 1)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return {1, redis.call('incr', KEYS[2])}
end
return {0, redis.call('pttl', KEYS[1])}
