-- Acquire or re-enter a fair lock (Redisson RFairLock layout), or take or keep
-- a place in its queue. Prepended with counter.lua, holds_of.lua and
-- reentered.lua (a re-entry is recorded by its token).
--
-- KEYS[1]  the lock: a HASH of holder id -> hold count, with a PEXPIRE lease
-- KEYS[2]  the queue, redisson_lock_queue:{name}: a LIST of waiting holder ids
-- KEYS[3]  the waiters' deadlines, redisson_lock_timeout:{name}: a ZSET of
--          holder id -> absolute epoch ms after which that waiter, once at the
--          head of the queue, counts as gone and is evicted
-- KEYS[4]  the fencing token counter, redisson_lock_token:{name}
-- KEYS[5]  the unlock channel, redisson_lock__channel:{name}; waiter w listens
--          on KEYS[5] .. ':' .. w
-- KEYS[6]  the record of re-entered holds, redisson_lock_holds:{name} (holds.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<n>
-- ARGV[3]  the wait time in milliseconds: how long past the lock's lease a
--          waiter may go without retrying before it counts as gone
-- ARGV[4]  the publish command: 'publish', or 'spublish' for sharded pub/sub
-- ARGV[5]  '1' when the caller re-enters a hold of its scope (the holder
--          must still hold the lock), '0' for a new holder
--
-- Returns {1, token} when the lock was taken or re-entered (the token counter
-- after INCR), {3, 0} when a re-entry finds its hold gone (nothing taken),
-- else {0, ms}: how long the caller may sleep before retrying unless woken
-- on its channel (-1: no lease to go by; -3: the lock is free and waiters
-- ahead take it first, so retry soon to learn their lease). Every check
-- comes before the first write; a re-entry never shortens the lock's
-- remaining lease.
--
-- A waiter must never sleep past the moment its turn can come: a holder
-- whose lease runs out without an unlock (a crash, a fixed lease) publishes
-- nothing, so waiters behind the head retry at the lease end (its PTTL), as
-- Redisson answers them. Between two holders (the lock free, the head not
-- yet in) no lease tells when the next one ends: -3.
--
-- Time is the server's (TIME), so clients with skewed clocks agree on every
-- deadline. A caller that is not taking the lock joins the back of the queue
-- (first call) or refreshes its deadline (later calls: it is alive). The
-- queue and deadline keys expire at the latest deadline in them, so a
-- queue whose waiters all died leaves nothing behind.

local lock, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local holder = ARGV[2]
local lease = tonumber(ARGV[1])
local wait = tonumber(ARGV[3])
local refused = refusal(KEYS[4], lease)
if refused or not wait then
  return redis.error_reply(refused or 'ERR wait must be a number of milliseconds')
end
-- A count of 0 is a hold released but kept taken (hold_at_least): not held.
if (tonumber(redis.call('hget', lock, holder)) or 0) > 0 then
  local holds = holds_of(KEYS[6], holder)
  redis.call('hincrby', lock, holder, 1)
  keep_longest(lock, lease)
  local token = next_token(KEYS[4], lease)
  entered(lock, KEYS[6], holder, holds, token, lease)
  return {1, token}
end
if ARGV[5] == '1' then
  return {3, 0}
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Heads that did not come back in time are gone (the caller is here, so not it).
local evicted = false
local head = redis.call('lindex', queue, 0)
while head and head ~= holder do
  local deadline = tonumber(redis.call('zscore', deadlines, head))
  if deadline and deadline > now then
    break
  end
  redis.call('lpop', queue)
  redis.call('zrem', deadlines, head)
  evicted = true
  head = redis.call('lindex', queue, 0)
end

local free = redis.call('exists', lock) == 0
if free and (not head or head == holder) then
  redis.call('hset', lock, holder, 1)
  redis.call('pexpire', lock, lease)
  if head then
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, holder)
    -- Everyone moves up one place: a deadline slot is free. No deadline
    -- drops below the new lease's end plus the wait time, so a live waiter
    -- always has time to retry.
    local floor = now + lease + wait
    local waiting = redis.call('zrange', deadlines, 0, -1, 'withscores')
    for i = 1, #waiting, 2 do
      local deadline = tonumber(waiting[i + 1])
      redis.call('zadd', deadlines, math.max(deadline - wait, math.min(deadline, floor)), waiting[i])
    end
  end
  return {1, next_token(KEYS[4], lease)}
end

local pttl = redis.call('pttl', lock)
local lease_end = now + math.max(pttl, 0)
local deadline = tonumber(redis.call('zscore', deadlines, holder))
local due
if deadline then
  if deadline < lease_end + wait then
    due = lease_end + wait
  end
else
  -- Join the back: due one wait time after the one before (or the lease).
  local last = redis.call('lindex', queue, -1)
  local after = lease_end
  if last then
    after = math.max(after, tonumber(redis.call('zscore', deadlines, last)) or now)
  end
  due = after + wait
  redis.call('rpush', queue, holder)
  head = head or holder
end
if due then
  redis.call('zadd', deadlines, due, holder)
  -- The queue and its deadlines go when the last waiter's deadline passes
  -- (every waiter is gone by then unless it retried, which comes back here).
  -- Only here does a deadline rise; elsewhere they only drop or go.
  local last = redis.call('zrange', deadlines, -1, -1, 'withscores')
  redis.call('pexpireat', deadlines, last[2])
  redis.call('pexpireat', queue, last[2])
end

if head == holder then
  return {0, pttl}
end
-- A head that came up through eviction has not been told the lock is free.
if evicted and free then
  redis.call(ARGV[4], KEYS[5] .. ':' .. head, '0')
end
-- Not first: retry when the lease ends, or the head would be evicted; while
-- the lock is free (or expires this very millisecond: PTTL 0), soon: the
-- head is about to take it, with a lease of its own that ends without a
-- message as well.
if free or pttl == 0 then
  return {0, -3}
end
local head_deadline = tonumber(redis.call('zscore', deadlines, head)) or now
local until_evicted = math.max(head_deadline - now, 1)
if pttl > 0 and pttl < until_evicted then
  return {0, pttl}
end
return {0, until_evicted}
