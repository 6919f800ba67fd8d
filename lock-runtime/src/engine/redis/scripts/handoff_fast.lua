-- The common case of handoff.lua, first in its script (before counter.lua
-- and the helpers: a function a script defines costs a closure on every
-- call, and this case calls none). Same KEYS and ARGV as handoff.lua:
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
-- the holder's first and only hold (a count of 1, no record of re-entered
-- holds), the waiter's handoff was not abandoned and the counter needs no
-- care (a lease or more to live, a token from 1 to 2^53 - 1): the lock is
-- handed over. Anything else falls through to handoff.lua with nothing
-- written (a token out of range is put back by DECR first). (issue 26)
if ARGV[8] == '1' and ARGV[4] == '0'
    and redis.call('hget', KEYS[1], ARGV[1]) == '1'
    -- No record (pcall: a record of another type is the full script's to name).
    and redis.pcall('hget', KEYS[6], ARGV[1]) == false
    and redis.call('get', KEYS[5]) ~= 'abandoned' then
  local lease = tonumber(ARGV[6])
  if lease and lease >= 1 and redis.call('pttl', KEYS[4]) >= lease then
    local token = redis.pcall('incr', KEYS[4])
    if type(token) == 'number' then
      if token >= 1 and token < 9007199254740992 then
        redis.call('set', KEYS[3], 2, 'px', ARGV[2], 'nx')
        redis.call('del', KEYS[1])
        redis.call('hset', KEYS[1], ARGV[5], 1)
        redis.call('pexpire', KEYS[1], lease)
        if tonumber(ARGV[7]) > 0 then
          redis.call('set', KEYS[5], token, 'px', ARGV[7])
        end
        return {2, token}
      end
      redis.call('decr', KEYS[4])
    end
  end
end
