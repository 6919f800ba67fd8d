-- Take or re-enter the read side of a read-write lock (Redisson
-- RReadWriteLock layout). Prepended with counter.lua and reentered.lua (for
-- follow: a writer's read hold may lengthen the hash, and the record of
-- its re-entered write holds must live as long).
--
-- KEYS[1]  the lock: a HASH with 'mode' -> 'read' | 'write', each reader's
--          holder id -> its read hold count, and '<holder id>:write' -> the
--          writer's hold count; PEXPIRE the longest hold's lease
-- KEYS[2]  the fencing token counter, redisson_lock_token:{name}
-- KEYS[3]  this holder's read-hold key prefix,
--          {name}:<holder id>:rwlock_timeout; hold k is KEYS[3] .. ':' .. k,
--          with its own PEXPIRE and, as its value, the hold's token (so a
--          release finds its own hold)
-- KEYS[4]  the lock's record of re-entered holds, redisson_lock_holds:{name}
-- ARGV[1]  lease in milliseconds (a positive integer)
-- ARGV[2]  holder id
-- ARGV[3]  '1' when the caller re-enters a hold of its scope (the holder
--          must still hold the write lock or a live read hold), '0' for a
--          new holder
--
-- Readers share the lock; the writer may take read holds too (downgrade).
-- Returns {1, token} when taken, {0, pttl} while another holder writes, or
-- {3, 0} when a re-entry finds its holds gone (nothing taken). Every check
-- comes before the first write; the hash's remaining lease never shrinks.
local lease = tonumber(ARGV[1])
local writes = redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 1
if ARGV[3] == '1' and not writes then
  local alive = false
  for k = 1, (tonumber(redis.call('hget', KEYS[1], ARGV[2])) or 0) do
    if redis.call('exists', KEYS[3] .. ':' .. k) == 1 then
      alive = true
      break
    end
  end
  if not alive then
    return {3, 0}
  end
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'write' and not writes then
  return {0, redis.call('pttl', KEYS[1])}
end
-- The token first: its INCR is the counter's check and the first write.
local token, refused = take_token(KEYS[2], lease)
if not token then
  return redis.error_reply(refused)
end
local k = redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('set', KEYS[3] .. ':' .. k, token, 'px', lease)
if mode then
  -- The hash lives as long as its longest hold, and the record with it.
  keep_longest(KEYS[1], lease)
  follow(KEYS[1], KEYS[4], lease)
else
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('pexpire', KEYS[1], lease)
end
return {1, token}
