-- Release one hold of a reentrant or fair lock, idempotently.
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the channel to announce the release on
-- KEYS[3]  the unlock latch of this request, redisson_unlock_latch:{name}:<request id>
-- ARGV[1]  holder id
-- ARGV[2]  latch lifetime in milliseconds
-- ARGV[3]  the publish command: 'publish', or 'spublish' for sharded pub/sub
-- ARGV[4]  the message: '0' wakes one waiter, '1' wakes all
--
-- Returns 1 when the lock was freed (and announced), 0 when the holder still
-- has holds left, -1 when the holder does not hold the lock. A retried request
-- (same latch) returns the first answer instead of running again; a latch of
-- handoff.lua's that handed the lock over (2) reads as freed.
local done = redis.call('get', KEYS[3])
if done then
  return math.min(tonumber(done), 1)
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local result = 0
if redis.call('hincrby', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], ARGV[4])
  result = 1
end
redis.call('set', KEYS[3], result, 'px', ARGV[2])
return result
