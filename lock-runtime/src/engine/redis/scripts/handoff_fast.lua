-- The common case of handoff.lua, first in its script after
-- fast_token.lua and fast_release.lua (before counter.lua and the full
-- script's helpers: a function a script defines costs a closure on every
-- call). Same KEYS and ARGV as handoff.lua:
--
-- KEYS[1]  the lock HASH
-- KEYS[3]  the unlock latch of this request
-- KEYS[4]  the fencing token counter
-- KEYS[5]  the acquire latch of the waiter's handoff
-- KEYS[6]  the record of re-entered holds (holds.lua)
-- ARGV[1]  the releasing holder id
-- ARGV[2]  unlock latch lifetime in milliseconds
-- ARGV[4]  which hold ('0': the holder's first)
-- ARGV[5]  the waiter's holder id
-- ARGV[6]  the waiter's lease in milliseconds
-- ARGV[7]  how long to keep the handed hold's token in the acquire latch
-- ARGV[8]  '1': the request's first send on a connection that never resends
--
-- Returns {2, token}, as handoff.lua would, when a first send gives back
-- the holder's only hold (only_hold), the waiter's handoff was not
-- abandoned and the counter needs no care (quick_token): the lock is
-- handed over. Anything else falls through to handoff.lua with nothing
-- written. (issue 26)
if ARGV[8] == '1' and only_hold(KEYS[1], KEYS[6], ARGV[1], ARGV[4])
    and redis.call('get', KEYS[5]) ~= 'abandoned' then
  local token, lease = quick_token(KEYS[4], ARGV[6])
  if token then
    redis.call('set', KEYS[3], 2, 'px', ARGV[2], 'nx')
    redis.call('del', KEYS[1])
    redis.call('hset', KEYS[1], ARGV[5], 1)
    redis.call('pexpire', KEYS[1], lease)
    if tonumber(ARGV[7]) > 0 then
      redis.call('set', KEYS[5], token, 'px', ARGV[7])
    end
    return {2, token}
  end
end
