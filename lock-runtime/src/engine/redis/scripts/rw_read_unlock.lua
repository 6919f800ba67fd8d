-- Release one read hold of a read-write lock, idempotently. Prepended with
-- reentered.lua (for follow) and rw_holds.lua.
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- KEYS[3]  this holder's read-hold key prefix, {name}:<holder id>:rwlock_timeout
-- KEYS[4]  the lock's hash tag {name} (prefix of every holder's read-hold keys)
-- KEYS[5]  the unlock latch of this request, redisson_unlock_latch:{name}:<request id>
-- KEYS[6]  the lock's record of re-entered holds, redisson_lock_holds:{name},
--          which lives at least as long as the lock (holds.lua: the writer's)
-- ARGV[1]  holder id
-- ARGV[2]  latch lifetime in milliseconds
-- ARGV[3]  the publish command: 'publish', or 'spublish' for sharded pub/sub
-- ARGV[4]  the token of the hold to release (its hold key's value), or '0'
--          for any one live hold of the holder (giving back an acquisition
--          whose answer was lost)
--
-- Returns 1 when the holder has no read hold left, 0 when it still has some,
-- -1 when this hold was not held any more (its lease ran out, or it never
-- was). Holds stay numbered 1..count: the released hold's key is deleted and
-- the newest key is renamed into its slot. A hold that ran out frees a dead
-- slot the same way. The hash then expires with the longest remaining hold;
-- when no hold remains it is deleted and '0' is published. A retried request
-- (same latch) returns the first answer instead of running again.
local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
local result = -1
if count then
  local mine, dead
  for k = 1, count do
    local value = redis.call('get', KEYS[3] .. ':' .. k)
    if value and (value == ARGV[4] or ARGV[4] == '0') then
      mine = k
      break
    end
    if not value and not dead then
      dead = k
    end
  end
  local slot = mine or dead
  if slot then
    local last = KEYS[3] .. ':' .. count
    if slot < count and redis.call('exists', last) == 1 then
      redis.call('rename', last, KEYS[3] .. ':' .. slot)
    else
      redis.call('del', KEYS[3] .. ':' .. slot)
    end
    if count > 1 then
      redis.call('hincrby', KEYS[1], ARGV[1], -1)
    else
      redis.call('hdel', KEYS[1], ARGV[1])
    end
  end
  if mine then
    result = (count > 1) and 0 or 1
  end
  local readers, longest = live_reads(KEYS[1], KEYS[4])
  if redis.call('hget', KEYS[1], 'mode') == 'write' then
    -- The writer's own read holds: never cut the write lease short.
    if longest > redis.call('pttl', KEYS[1]) then
      redis.call('pexpire', KEYS[1], longest)
      follow(KEYS[1], KEYS[6], longest)
    end
  elseif readers == 0 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], KEYS[2], '0')
  elseif longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
  end
end
redis.call('set', KEYS[5], result, 'px', ARGV[2])
return result
