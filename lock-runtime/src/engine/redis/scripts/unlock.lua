-- (Headed by unlock_fast.lua, holds_of.lua, holds.lua and keep_taken.lua.)
-- Release one hold of a reentrant lock, idempotently: a retried request
-- counts once (the latch), and so does a copy that arrives after the latch
-- expired (the hold is named).
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the channel to announce the release on
-- KEYS[3]  the unlock latch of this request, redisson_unlock_latch:{name}:<request id>
-- KEYS[4]  the record of re-entered holds, redisson_lock_holds:{name} (holds.lua)
-- ARGV[1]  holder id
-- ARGV[2]  latch lifetime in milliseconds
-- ARGV[3]  the publish command: 'publish', or 'spublish' for sharded pub/sub
-- ARGV[4]  which hold: '0' the holder's first, else a re-entry's token (see
--          holds.lua)
-- ARGV[5]  the message: '0' wakes one waiter, '1' wakes all
-- ARGV[6]  '1' for the request's first send on a connection that never
--          resends a command (not a cluster's): no copy of it can have run
--          before, so the latch is not read (a copy that runs later, after a
--          retry, is the late copy above: it changes nothing, and writes no
--          latch over the retry's); '0' or absent: read the latch first
-- ARGV[7]  optional, ms the lock must stay taken after this release
--          (hold_at_least): when the last hold goes, the holder's count is
--          set to 0 and the key expires then instead of being deleted (when
--          that is sooner than before, '1' wakes every waiter to learn it);
--          '0' or absent: delete and announce
-- ARGV[8]  optional, '1': the lease is fixed and bounds the minimum: a key
--          that expires sooner than ARGV[7] is left to expire as it is
--
-- unlock_fast.lua answers the common case before this runs.
--
-- Returns 1 when the holder's last hold went (the lock freed and announced,
-- or left to expire as ARGV[7] says), 0 when the holder still has holds
-- left (or this hold was given back before: nothing changes), -1 when the
-- holder does not hold the lock (a count of 0 is a hold already released).
-- A retried request (same latch) returns the first answer instead of
-- running again; a latch of handoff.lua's that handed the lock over (2)
-- reads as freed.
local done = ARGV[6] ~= '1' and redis.call('get', KEYS[3])
if done then
  return math.min(tonumber(done), 1)
end
local keep = tonumber(ARGV[7] or '0') or 0
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0
if count <= 0 then
  return -1
end
local result = 0
local live, holds = live_hold(KEYS[4], ARGV[1], ARGV[4])
if not live then
  -- Given back before: a late copy of this release. Nothing changes.
  result = 0
elseif count > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  given_back(KEYS[4], ARGV[1], holds, ARGV[4], count - 1)
elseif keep > 0 then
  given_back(KEYS[4], ARGV[1], holds, ARGV[4], 0)
  if keep_taken(KEYS[1], ARGV[1], keep, ARGV[8]) then
    -- Expiring sooner than waiters were told: wake them all to retry.
    redis.call(ARGV[3], KEYS[2], '1')
  end
  result = 1
else
  given_back(KEYS[4], ARGV[1], holds, ARGV[4], 0)
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], ARGV[5])
  result = 1
end
-- NX: a late first send (ARGV[6]) leaves the retry's answer in place.
redis.call('set', KEYS[3], result, 'px', ARGV[2], 'nx')
return result
