-- The tail of an acquire script made idempotent under retry. Prepended
-- (by scripts/mod.rs) with `local function acquire()`, one acquire script's
-- whole text, and `end`: this runs it at most once per latch.
--
-- KEYS[#KEYS]  the acquire latch of this attempt,
--              redisson_lock_acquire_latch:{name}:<attempt id>
--              (after the wrapped script's own keys)
-- ARGV[#ARGV]  the latch's lifetime in milliseconds (after its own args)
--
-- Returns the wrapped script's answer. When it took the lock ({1, token}),
-- the token is kept in the latch, and a retried call with the same latch
-- (a cluster client resends after losing the answer) returns {1, token}
-- again instead of taking the lock a second time.
local latch, lifetime = KEYS[#KEYS], ARGV[#ARGV]
local done = redis.call('get', latch)
if done then
  return {1, tonumber(done)}
end
local answer = acquire()
if answer[1] == 1 then
  redis.call('set', latch, answer[2], 'px', lifetime)
end
return answer
