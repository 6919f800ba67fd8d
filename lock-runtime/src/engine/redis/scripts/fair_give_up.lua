-- A fair-lock waiter leaves the queue without the lock (its wait ended, or
-- its acquire was cancelled).
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the queue LIST, redisson_lock_queue:{name}
-- KEYS[3]  the waiters' deadline ZSET, redisson_lock_timeout:{name}
-- KEYS[4]  the unlock channel, redisson_lock__channel:{name}; waiter w listens
--          on KEYS[4] .. ':' .. w
-- ARGV[1]  holder id of the leaving waiter
-- ARGV[2]  the wait time in milliseconds (the deadline step between waiters)
-- ARGV[3]  the publish command: 'publish', or 'spublish' for sharded pub/sub
--
-- Returns 1 when the waiter was in the queue (and is removed), else 0.
-- Those behind it move up one place: their deadlines come one wait time
-- earlier, never below the lock's lease end plus the wait time. When it was
-- the head and the lock is free, the new head is woken.
local waiting = redis.call('lrange', KEYS[2], 0, -1)
local at
for i, w in ipairs(waiting) do
  if w == ARGV[1] then
    at = i
    break
  end
end
redis.call('zrem', KEYS[3], ARGV[1])
if not at then
  return 0
end
redis.call('lrem', KEYS[2], 0, ARGV[1])
local wait = tonumber(ARGV[2])
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local pttl = redis.call('pttl', KEYS[1])
local floor = now + math.max(pttl, 0) + wait
for i = at + 1, #waiting do
  local deadline = tonumber(redis.call('zscore', KEYS[3], waiting[i]))
  if deadline then
    redis.call('zadd', KEYS[3], math.max(deadline - wait, math.min(deadline, floor)), waiting[i])
  end
end
if at == 1 and pttl == -2 and waiting[2] then
  redis.call(ARGV[3], KEYS[4] .. ':' .. waiting[2], '0')
end
return 1
