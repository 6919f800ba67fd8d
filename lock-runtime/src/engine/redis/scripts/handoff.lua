-- Release one hold of a reentrant lock and, when that frees it, hand the
-- lock straight to a waiter of the same client: one round trip instead of a
-- release, a message and the waiter's acquisition. Nothing is published on a
-- handoff (the lock never became free). Prepended with handoff_fast.lua
-- (which answers the common case alone), counter.lua, holds_of.lua and
-- holds.lua. A retried request counts once (the unlock latch), and so does
-- a copy that arrives after the latch expired (the hold is named, as in
-- unlock.lua).
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the channel to announce a release on
-- KEYS[3]  the unlock latch of this request, redisson_unlock_latch:{name}:<request id>
-- KEYS[4]  the fencing token counter, redisson_lock_token:{name}
-- KEYS[5]  the acquire latch of the waiter's handoff,
--          redisson_lock_acquire_latch:{name}:<attempt id>
-- KEYS[6]  the record of re-entered holds, redisson_lock_holds:{name} (holds.lua)
-- ARGV[1]  the releasing holder id
-- ARGV[2]  unlock latch lifetime in milliseconds
-- ARGV[3]  the publish command: 'publish', or 'spublish' for sharded pub/sub
-- ARGV[4]  which hold: '0' the holder's first, else a re-entry's token (see
--          holds.lua)
-- ARGV[5]  the waiter's holder id (new: unique to this handoff)
-- ARGV[6]  the waiter's lease in milliseconds
-- ARGV[7]  how long to keep the handed hold's token in the acquire latch, in
--          ms, or 0 to keep none
-- ARGV[8]  '1' for the request's first send on a connection that never
--          resends a command, as in unlock.lua: the unlock latch is not read
--          (a late copy of it finds its hold gone, and writes no latch over
--          a retry's); '0' or absent: read it first
--
-- Returns {2, token} when the lock was handed over (the waiter holds it,
-- with this fencing token), {1, 0} when it was freed and announced instead
-- (the waiter's handoff was abandoned, or its lease or the token counter
-- is unusable), {0, 0} when the releasing holder still has holds left (or
-- this hold was given back before: nothing changes), and
-- {-1, 0} when it does not hold the lock. A retried request (same unlock
-- latch; also one made by unlock.lua, which reads 2 as "released") returns
-- the first answer without running again: {2, token} with the token the
-- acquire latch recorded, {2, 0} when none was recorded. Every check comes
-- before the first write (on a handoff, the token's INCR is the first).
local done = ARGV[8] ~= '1' and redis.call('get', KEYS[3])
if done == '2' then
  return {2, tonumber(redis.call('get', KEYS[5]) or '0') or 0}
end
if done then
  return {tonumber(done), 0}
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
-- 0: released and kept taken by hold_at_least, no hold left to hand over.
if not count or count <= 0 then
  return {-1, 0}
end
local lease, record = tonumber(ARGV[6]), tonumber(ARGV[7])
local live, holds = live_hold(KEYS[6], ARGV[1], ARGV[4])
if not live then
  -- Given back before: a late copy of this release. Nothing changes.
  redis.call('set', KEYS[3], 0, 'px', ARGV[2], 'nx')
  return {0, 0}
end
if count > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  given_back(KEYS[6], ARGV[1], holds, ARGV[4], count - 1)
  redis.call('set', KEYS[3], 0, 'px', ARGV[2], 'nx')
  return {0, 0}
end
-- The handoff's token first: its INCR is the counter's check and the first
-- write. None (the handoff was abandoned, or the lease or the counter is
-- unusable): the lock is freed and announced instead.
local token = redis.call('get', KEYS[5]) ~= 'abandoned' and take_token(KEYS[4], lease)
-- The holder's last hold goes either way.
given_back(KEYS[6], ARGV[1], holds, ARGV[4], 0)
if not token then
  redis.call('set', KEYS[3], 1, 'px', ARGV[2], 'nx')
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], '0')
  return {1, 0}
end
redis.call('set', KEYS[3], 2, 'px', ARGV[2], 'nx')
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], ARGV[5], 1)
redis.call('pexpire', KEYS[1], lease)
if record > 0 then
  redis.call('set', KEYS[5], token, 'px', record)
end
return {2, token}
