-- Acquire or re-enter a reentrant lock (Redisson RLock layout). Prepended
-- with counter.lua, holds_of.lua and reentered.lua (a re-entry is recorded
-- by its token).
--
-- KEYS[1]  the lock: a HASH of holder id -> hold count, with a PEXPIRE lease
-- KEYS[2]  the fencing token counter, redisson_lock_token:{name}
-- KEYS[3]  the record of re-entered holds, redisson_lock_holds:{name} (holds.lua)
-- ARGV[1]  lease in milliseconds (a positive integer)
-- ARGV[2]  holder id, <client uuid>:<n>
-- ARGV[3]  '1' when the caller re-enters a hold of its scope (the holder
--          must still hold the lock), '0' for a new holder
--
-- Returns {1, token} when the lock was taken or re-entered (the token is the
-- counter after INCR), {0, pttl} when another holder has it (its remaining
-- lease in ms, -1 when it has none), or {3, 0} when a re-entry finds its
-- hold gone: nothing is taken then. Every check comes before the first
-- write. The key's remaining lease never shrinks.
--
-- Lean (issue 11): a free lock costs one EXISTS before the writes (a new
-- holder's id is fresh, so only a lock that exists can hold it), a busy
-- answer writes nothing and never touches the counter, and the counter's
-- INCR is its own check (take_token).
local lease = tonumber(ARGV[1])
-- The holder's hold count when the lock exists (or the caller re-enters);
-- nil for a free lock. A count of 0 is a hold released but kept taken
-- (hold_at_least): not held.
local count
if ARGV[3] == '1' or redis.call('exists', KEYS[1]) == 1 then
  count = tonumber(redis.call('hget', KEYS[1], ARGV[2])) or 0
  if count <= 0 then
    if ARGV[3] == '1' then
      return {3, 0}
    end
    return {0, redis.call('pttl', KEYS[1])}
  end
end
-- A re-entry's record, read before the first write.
local holds = count and holds_of(KEYS[3], ARGV[2])
-- The token first: its INCR is the counter's check and the first write.
local token, refused = take_token(KEYS[2], lease)
if not token then
  return redis.error_reply(refused)
end
if count then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  keep_longest(KEYS[1], lease)
  entered(KEYS[1], KEYS[3], ARGV[2], holds, token, lease)
else
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], lease)
end
return {1, token}
