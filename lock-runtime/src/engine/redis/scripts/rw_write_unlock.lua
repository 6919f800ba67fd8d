-- Release one write hold of a read-write lock, idempotently (a retried
-- request or a late copy counts once, as in unlock.lua). Prepended with
-- holds_of.lua, holds.lua and rw_holds.lua.
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- KEYS[3]  the lock's hash tag {name} (prefix of every holder's read-hold keys)
-- KEYS[4]  the unlock latch of this request, redisson_unlock_latch:{name}:<request id>
-- KEYS[5]  the record of re-entered holds, redisson_lock_holds:{name} (holds.lua)
-- ARGV[1]  holder id
-- ARGV[2]  latch lifetime in milliseconds
-- ARGV[3]  the publish command: 'publish', or 'spublish' for sharded pub/sub
-- ARGV[4]  which hold: '0' the holder's first write hold, else a re-entry's
--          token (see holds.lua)
--
-- Returns 1 when the write lock was given up, 0 when the holder still has
-- write holds left (or this hold was given back before: nothing changes),
-- -1 when it did not hold it. Giving it up leaves the
-- writer's own read holds (downgrade: 'mode' turns 'read' and the hash expires
-- with the longest of them) or deletes the hash, and publishes '1', which
-- wakes every waiter: all waiting readers may come in at once. A retried
-- request (same latch) returns the first answer instead of running again.
local done = redis.call('get', KEYS[4])
if done then
  return tonumber(done)
end
local writer = ARGV[1] .. ':write'
local live, holds = live_hold(KEYS[5], writer, ARGV[4])
local result
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], writer) == 0 then
  result = -1
elseif not live then
  -- Given back before: a late copy of this release. Nothing changes.
  result = 0
else
  local left = redis.call('hincrby', KEYS[1], writer, -1)
  given_back(KEYS[5], writer, holds, ARGV[4], left)
  result = left > 0 and 0 or 1
end
if result == 1 then
  -- The writer's last write hold went.
  redis.call('hdel', KEYS[1], writer)
  local readers, longest = live_reads(KEYS[1], KEYS[3])
  if readers == 0 then
    redis.call('del', KEYS[1])
  else
    redis.call('hset', KEYS[1], 'mode', 'read')
    if longest > 0 then
      redis.call('pexpire', KEYS[1], longest)
    end
  end
  redis.call(ARGV[3], KEYS[2], '1')
end
redis.call('set', KEYS[4], result, 'px', ARGV[2])
return result
