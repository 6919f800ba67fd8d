-- The tail of every acquire script, making one attempt happen at most once.
-- Prepended (by scripts/mod.rs) with `local function acquire()`, one acquire
-- script's whole text, and `end`.
--
-- KEYS[#KEYS]  the acquire latch of this attempt,
--              redisson_lock_acquire_latch:{name}:<attempt id>
--              (after the wrapped script's own keys)
-- ARGV[#ARGV]  how long to keep a record of a taken hold, in ms, or 0 to
--              keep none (after the wrapped script's own args)
--
-- Returns the wrapped script's answer, or {4, 0} when this attempt was
-- abandoned before it ran (the latch holds 'abandoned'): a caller whose
-- answer was lost sets that, so an attempt still in flight takes nothing.
-- When the attempt took the lock ({1, token}) and a record is asked for, the
-- token is kept in the latch: a resent attempt (a cluster client resends
-- after losing an answer) returns {1, token} again instead of taking the
-- lock twice, and a caller reconciling a lost answer learns it was taken.
local latch, record = KEYS[#KEYS], tonumber(ARGV[#ARGV])
local done = redis.call('get', latch)
if done == 'abandoned' then
  return {4, 0}
end
if done then
  return {1, tonumber(done)}
end
local answer = acquire()
if answer[1] == 1 and record > 0 then
  redis.call('set', latch, answer[2], 'px', record)
end
return answer
