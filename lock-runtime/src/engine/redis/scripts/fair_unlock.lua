-- (Headed by holds_of.lua, holds.lua and keep_taken.lua.) Release one hold of a fair
-- lock, idempotently (a retried request or a late copy counts once, as in
-- unlock.lua), and wake the head of the queue.
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the queue LIST, redisson_lock_queue:{name}
-- KEYS[3]  the waiters' deadline ZSET, redisson_lock_timeout:{name}
-- KEYS[4]  the unlock channel, redisson_lock__channel:{name}; waiter w listens
--          on KEYS[4] .. ':' .. w
-- KEYS[5]  the unlock latch of this request, redisson_unlock_latch:{name}:<request id>
-- KEYS[6]  the record of re-entered holds, redisson_lock_holds:{name} (holds.lua)
-- ARGV[1]  holder id
-- ARGV[2]  latch lifetime in milliseconds
-- ARGV[3]  the publish command: 'publish', or 'spublish' for sharded pub/sub
-- ARGV[4]  which hold: '0' the holder's first, else a re-entry's token (see
--          holds.lua)
-- ARGV[5]  optional, ms the lock must stay taken after this release
--          (hold_at_least): when the last hold goes, the holder's count is
--          set to 0 and the key expires then instead of being deleted (when
--          that is sooner than before, the head is woken to learn it); '0'
--          or absent: delete and wake the head
-- ARGV[6]  optional, '1': the lease is fixed and bounds the minimum: a key
--          that expires sooner than ARGV[5] is left to expire as it is
--
-- Returns 1 when the lock was freed (the first live waiter, if any, is told
-- on its own channel with '0'), 0 when the holder still has holds left (or
-- this hold was given back before: nothing changes), -1
-- when the holder does not hold the lock (a count of 0 is a hold already
-- released). A retried request (same latch) returns the first answer
-- instead of running again.
local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local keep = tonumber(ARGV[5] or '0') or 0
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0
local result, wake = 0, false
local live, holds = live_hold(KEYS[6], ARGV[1], ARGV[4])
if count <= 0 then
  result = -1
elseif not live then
  -- Given back before: a late copy of this release. Nothing changes.
  result = 0
elseif count > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  given_back(KEYS[6], ARGV[1], holds, ARGV[4], count - 1)
elseif keep > 0 then
  result = 1
  given_back(KEYS[6], ARGV[1], holds, ARGV[4], 0)
  -- Expiring sooner than the head was told: wake it to retry.
  wake = keep_taken(KEYS[1], ARGV[1], keep, ARGV[6])
else
  given_back(KEYS[6], ARGV[1], holds, ARGV[4], 0)
  redis.call('del', KEYS[1])
  result, wake = 1, true
end
if wake then
  -- Wake only the head; heads whose deadline passed are gone and skipped.
  local time = redis.call('time')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local head = redis.call('lindex', KEYS[2], 0)
  while head do
    local deadline = tonumber(redis.call('zscore', KEYS[3], head))
    if deadline and deadline > now then
      break
    end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
    head = redis.call('lindex', KEYS[2], 0)
  end
  if head then
    redis.call(ARGV[3], KEYS[4] .. ':' .. head, '0')
  end
end
redis.call('set', KEYS[5], result, 'px', ARGV[2])
return result
