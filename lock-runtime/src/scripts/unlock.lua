-- (Headed by keep_taken.lua.) Release one hold of a reentrant lock, idempotently.
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the channel to announce the release on
-- KEYS[3]  the unlock latch of this request, redisson_unlock_latch:{name}:<request id>
-- ARGV[1]  holder id
-- ARGV[2]  latch lifetime in milliseconds
-- ARGV[3]  the publish command: 'publish', or 'spublish' for sharded pub/sub
-- ARGV[4]  the message: '0' wakes one waiter, '1' wakes all
-- ARGV[5]  optional, ms the lock must stay taken after this release
--          (hold_at_least): when the last hold goes, the holder's count is
--          set to 0 and the key expires then instead of being deleted (when
--          that is sooner than before, '1' wakes every waiter to learn it);
--          '0' or absent: delete and announce
-- ARGV[6]  optional, '1': the lease is fixed and bounds the minimum: a key
--          that expires sooner than ARGV[5] is left to expire as it is
--
-- Returns 1 when the holder's last hold went (the lock freed and announced,
-- or left to expire as ARGV[5] says), 0 when the holder still has holds
-- left, -1 when the holder does not hold the lock (a count of 0 is a hold
-- already released).
-- A retried request (same latch) returns the first answer instead of
-- running again; a latch of handoff.lua's that handed the lock over (2)
-- reads as freed.
local done = redis.call('get', KEYS[3])
if done then
  return math.min(tonumber(done), 1)
end
local keep = tonumber(ARGV[5] or '0') or 0
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0
if count <= 0 then
  return -1
end
local result = 0
if count > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
elseif keep > 0 then
  if keep_taken(KEYS[1], ARGV[1], keep, ARGV[6]) then
    -- Expiring sooner than waiters were told: wake them all to retry.
    redis.call(ARGV[3], KEYS[2], '1')
  end
  result = 1
else
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], ARGV[4])
  result = 1
end
redis.call('set', KEYS[3], result, 'px', ARGV[2])
return result
