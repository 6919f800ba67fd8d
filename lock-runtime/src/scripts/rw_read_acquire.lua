-- Take or re-enter the read side of a read-write lock (Redisson
-- RReadWriteLock layout).
--
-- KEYS[1]  the lock: a HASH with 'mode' -> 'read' | 'write', each reader's
--          holder id -> its read hold count, and '<holder id>:write' -> the
--          writer's hold count; PEXPIRE the longest hold's lease
-- KEYS[2]  the fencing token counter, redisson_lock_token:{name}
-- KEYS[3]  this holder's read-hold key prefix,
--          {name}:<holder id>:rwlock_timeout; hold k is KEYS[3] .. ':' .. k,
--          with its own PEXPIRE
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id
--
-- Readers share the lock; the writer may take read holds too (downgrade).
-- Returns {1, token} when taken, or {0, pttl} while another holder writes.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 0 then
  return {0, redis.call('pttl', KEYS[1])}
end
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'read')
end
local k = redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('set', KEYS[3] .. ':' .. k, 1, 'px', ARGV[1])
-- The hash lives as long as its longest hold.
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return {1, redis.call('incr', KEYS[2])}
