-- Shared by the fast paths that take a fencing token (reentrant_fast.lua,
-- handoff_fast.lua): prepended to each. Calls only Redis commands; takes no
-- KEYS or ARGV of its own. One function, so one closure per call (the
-- full scripts' helpers, counter.lua's, are a dozen).

-- quick_token(counter, lease): the INCR of the fencing token counter
-- `counter` for an acquisition with `lease` (ms, from ARGV), and the lease
-- as a number, when the counter needs no care: it has at least a lease to
-- live (counter.lua's settle() would leave it as it is) and its INCR gives
-- a token from 1 to 2^53 - 1. Otherwise nil, with nothing written (an INCR
-- that cannot count writes nothing; a token out of range is put back by
-- DECR): the full script then answers, as it would have.
local function quick_token(counter, lease)
  lease = tonumber(lease)
  -- PTTL is read before the INCR, which does not change it.
  if not (lease and lease >= 1 and redis.call('pttl', counter) >= lease) then
    return nil
  end
  local token = redis.pcall('incr', counter)
  if type(token) ~= 'number' then
    return nil
  end
  if token >= 1 and token < 9007199254740992 then
    return token, lease
  end
  redis.call('decr', counter)
  return nil
end
