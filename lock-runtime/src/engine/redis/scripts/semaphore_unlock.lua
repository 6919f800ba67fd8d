-- Give back one hold of a semaphore's permit, idempotently (as unlock.lua
-- does a lock's). Prepended with holds_of.lua, holds.lua and permits.lua.
--
-- KEYS[1]  the permits ZSET
-- KEYS[2]  the semaphore's channel, redisson_sc:{name}
-- KEYS[3]  the unlock latch of this request, redisson_unlock_latch:{name}:<request id>
-- KEYS[4]  the record of re-entered holds, redisson_lock_holds:{name}
-- ARGV[1]  holder id
-- ARGV[2]  latch lifetime in milliseconds
-- ARGV[3]  the publish command: 'publish', or 'spublish' for sharded pub/sub
-- ARGV[4]  which hold: '0' the holder's first, else a re-entry's token
--          (holds.lua)
-- ARGV[5]  ms the permit must stay taken after this release
--          (hold_at_least), '0' for none: the last hold's release then
--          leaves the member scored to end then instead of removing it
-- ARGV[6]  '1': the lease is fixed and bounds that minimum (a permit that
--          ends sooner is left to end as it is)
--
-- Returns 1 when the holder's last hold went (the permit freed and
-- announced, or left to end as ARGV[5] says), 0 when the holder still
-- has holds (or this hold was given back before: nothing changes), -1
-- when the holder holds no permit (its lease ended, or it was taken
-- away). A retried request (same latch) returns the first answer.
local done = redis.call('get', KEYS[3])
if done then
  return math.min(tonumber(done), 1)
end
if not permits_of(KEYS[1]) then
  return -1
end
local now = now_ms()
local held = live_until(KEYS[1], ARGV[1], now)
if not held then
  return -1
end
local keep = tonumber(ARGV[5]) or 0
local result = 0
local live, holds = live_hold(KEYS[4], ARGV[1], ARGV[4])
local count = holds_count(holds)
if not live then
  result = 0
elseif count > 1 then
  given_back(KEYS[4], ARGV[1], holds, ARGV[4], count - 1)
elseif keep > 0 then
  given_back(KEYS[4], ARGV[1], holds, ARGV[4], 0)
  local ends = now + keep
  if ARGV[6] == '1' and held < ends then
    ends = held
  end
  redis.call('zadd', KEYS[1], 'xx', ends, ARGV[1])
  outlive(KEYS[1], ends - now)
  if ends < held then
    -- Ending sooner than waiters were told: wake them to learn it.
    redis.call(ARGV[3], KEYS[2], '1')
  end
  result = 1
else
  given_back(KEYS[4], ARGV[1], holds, ARGV[4], 0)
  redis.call('zrem', KEYS[1], ARGV[1])
  redis.call(ARGV[3], KEYS[2], '0')
  result = 1
end
redis.call('set', KEYS[3], result, 'px', ARGV[2], 'nx')
return result
