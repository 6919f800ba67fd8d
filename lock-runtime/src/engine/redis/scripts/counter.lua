-- Shared by the acquire and renew scripts: prepended to each (scripts/mod.rs).
-- Calls only Redis commands; takes no KEYS or ARGV of its own.
--
-- counter_error(key, why): the error reply text for a fencing token counter
-- `key` that gives no usable token.
local function counter_error(key, why)
  return 'ERR the fencing token counter ' .. key .. ' ' .. why .. ': fix or delete it'
end

-- holds(value): `why` for a counter holding `value`.
local function holds(value)
  return 'holds "' .. value .. '", not a whole number from 0 to 2^53 - 2'
end

-- bad_counter(key): why INCR on the fencing token counter `key` would fail,
-- or give a token Lua cannot carry exactly (numbers are doubles: exact below
-- 2^53), or nil when it will succeed. A key of another type is named as
-- the counter (a WRONGTYPE passed on would read as the lock's own key
-- holding another type). For scripts that write before they take their
-- token (they call it before their first write), so a corrupt counter costs
-- an error reply and never a half-taken lock.
local function bad_counter(key)
  local value = redis.pcall('get', key)
  if type(value) == 'table' and value.err then
    return counter_error(key, 'is a key of another type, not a string')
  end
  -- Digits as INCR reads them: no sign, no leading zero.
  if value and (not (value == '0' or string.match(value, '^[1-9]%d*$')) or #value > 16
      or tonumber(value) >= 9007199254740991) then
    return counter_error(key, holds(value))
  end
  return nil
end

-- bad_lease(lease): why an acquisition with this lease (ms, from ARGV) must
-- not start, or nil.
local function bad_lease(lease)
  if not lease or lease < 1 then
    return 'ERR lease must be a positive number of milliseconds'
  end
  return nil
end

-- refusal(counter, lease): why an acquisition with this fencing token
-- counter and lease must not start, or nil. For next_token's scripts.
local function refusal(counter, lease)
  return bad_lease(lease) or bad_counter(counter)
end

-- keep_longest(key, lease): gives `key` at least `lease` ms to live, never
-- less than it has (a key without expiry keeps none). One lease per hold: a
-- re-entry or a renewal never cuts short what another hold was promised.
local function keep_longest(key, lease)
  local ttl = redis.call('pttl', key)
  if ttl >= 0 and ttl < lease then
    redis.call('pexpire', key, lease)
  end
end


-- clock_token(): the server's clock in microseconds (TIME), as the decimal
-- text of an integer: 16 digits until the year 2286, below 2^53.
local function clock_token()
  local now = redis.call('time')
  return now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
end

-- settle(counter, token, lease): after the INCR of the fencing token
-- counter `counter` that gave `token`, keeps the counter bounded and
-- monotonic (the argument is in the crate docs, "Fencing tokens"), and
-- returns the acquisition's token:
-- - a counter INCR found missing (it made it at 1, without expiry) is set to
--   the server's clock in microseconds and INCRed again, so it starts above
--   every token an expired counter of the name handed out;
-- - a counter without expiry (made by Redisson's RFencedLock, starting at 1,
--   or by an older version of this library) is raised to that clock the
--   same way if it is below it, never lowered, and from then on expires
--   like ours;
-- - the counter lives at least `lease` ms past this acquisition (never
--   less than it has), so it outlives the hold's first lease and then goes.
--   When it has less left it is given two leases, so that acquisitions less
--   than a lease apart pay no PEXPIRE of it (a lean script: issue 11); it
--   goes at most two leases after the name's last acquisition.
-- The clock goes to SET as the text clock_token() made, never as a Lua
-- number (which redis.call would not write as all 16 digits).
local function settle(counter, token, lease)
  local ttl = redis.call('pttl', counter)
  if ttl == -1 then
    local clock = clock_token()
    if token <= tonumber(clock) then
      redis.call('set', counter, clock, 'px', 2 * lease)
      return redis.call('incr', counter)
    end
  end
  if ttl < lease then
    redis.call('pexpire', counter, 2 * lease)
  end
  return token
end

-- next_token(counter, lease): INCRs the fencing token counter and returns
-- the new token (see settle). For scripts that write before they take their
-- token: call refusal() before the first write, which vets the counter.
local function next_token(counter, lease)
  return settle(counter, redis.call('incr', counter), lease)
end

-- take_token(counter, lease): the fencing token of an acquisition with this
-- lease, or nil and why it must not start. INCR is both the counter's check
-- and the script's first write (one call instead of a GET before and an
-- INCR after: issue 11): call it after every other check and before any
-- other write. A counter INCR cannot increment (another type, not an
-- integer, the 64-bit limit) fails it with nothing written; one that held a
-- negative number, or reaches 2^53 (past the integers Lua's numbers carry
-- exactly), is put back by DECR: a refused acquisition leaves nothing
-- changed. Other errors of the INCR (READONLY, OOM) are raised unchanged.
local function take_token(counter, lease)
  local refused = bad_lease(lease)
  if refused then
    return nil, refused
  end
  local token = redis.pcall('incr', counter)
  if type(token) ~= 'number' then
    -- INCR's error, as a reply table. One about the counter's value is
    -- named here (a WRONGTYPE passed on would read as the lock's own key
    -- holding another type); any other (READONLY, OOM, ...) is raised as it
    -- came, with its code, for the client to act on.
    local err = tostring(token.err)
    if string.find(err, 'WRONGTYPE', 1, true) then
      return nil, counter_error(counter, 'is a key of another type, not a string')
    end
    if string.find(err, 'not an integer', 1, true) or string.find(err, 'overflow', 1, true) then
      return nil, counter_error(counter, 'holds a value INCR cannot count (not an integer, or at 2^63 - 1)')
    end
    error(token)
  end
  -- Below 1 (the counter held a negative number) or past the integers Lua
  -- carries exactly: put back, and refused.
  if token < 1 or token >= 9007199254740992 then
    redis.call('decr', counter)
    return nil, counter_error(counter, holds(redis.call('get', counter)))
  end
  return settle(counter, token, lease)
end
