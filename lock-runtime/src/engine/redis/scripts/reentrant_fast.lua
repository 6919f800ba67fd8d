-- The common cases of a reentrant acquisition, first in its script (after
-- fast_token.lua): before acquire_latch.lua's read of the latch, and before
-- counter.lua and the helpers (a function a script defines costs a closure
-- on every call, and these cases need only quick_token). Same KEYS and ARGV
-- as reentrant_acquire.lua
-- wrapped by acquire_latch.lua:
--
-- KEYS[1]      the lock HASH
-- KEYS[2]      the fencing token counter, redisson_lock_token:{name}
-- KEYS[#KEYS]  the acquire latch of this attempt
-- ARGV[1]      lease in milliseconds
-- ARGV[2]      holder id (a new holder's is fresh)
-- ARGV[3]      '0' for a new holder ('1', a re-entry, is left to the rest)
-- ARGV[#ARGV]  how long to keep a record of a taken hold in the latch, ms
--
-- Returns what the whole script would: {0, pttl} when another holder has
-- the lock (and the latch is not there), or {1, token} when a new holder
-- took a free lock (one EXISTS finds neither the lock nor the latch)
-- whose counter needs no care (quick_token). Anything else falls through
-- to the rest with nothing written. (issue 26: the same answers for about
-- a sixth less of Redis's work.)
if ARGV[3] == '0' then
  local latch = KEYS[#KEYS]
  if redis.call('exists', KEYS[1], latch) == 0 then
    local token, lease = quick_token(KEYS[2], ARGV[1])
    if token then
      redis.call('hset', KEYS[1], ARGV[2], 1)
      redis.call('pexpire', KEYS[1], lease)
      local record = tonumber(ARGV[#ARGV])
      if record > 0 then
        redis.call('set', latch, token, 'px', record)
      end
      return {1, token}
    end
  -- The lock or the latch is there: without a latch, the lock is.
  elseif not redis.call('get', latch) then
    -- A new holder holds nothing yet (a count of 0 is the rest's).
    if not redis.call('hget', KEYS[1], ARGV[2]) then
      return {0, redis.call('pttl', KEYS[1])}
    end
  end
end
