-- Shared by the acquire and renew scripts: prepended to each (scripts/mod.rs).
-- Calls only Redis commands; takes no KEYS or ARGV of its own.
--
-- bad_counter(key): why INCR on the fencing token counter `key` would fail,
-- or give a token Lua cannot carry exactly (numbers are doubles: exact below
-- 2^53), or nil when it will succeed. A key of another type raises WRONGTYPE at the GET. Acquire
-- scripts call it before their first write, so a corrupt counter costs an
-- error reply and never a half-taken lock.
local function bad_counter(key)
  local value = redis.call('get', key)
  if value and (not string.match(value, '^%d+$') or #value > 16
      or tonumber(value) >= 9007199254740991) then
    return 'ERR the fencing token counter ' .. key .. ' holds "' .. value
      .. '", not an integer below 2^53 - 1: fix or delete it'
  end
  return nil
end

-- refusal(counter, lease): why an acquisition with this fencing token
-- counter and lease (ms, from ARGV) must not start, or nil.
local function refusal(counter, lease)
  if not lease or lease < 1 then
    return 'ERR lease must be a positive number of milliseconds'
  end
  return bad_counter(counter)
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

-- next_token(counter, lease): INCRs the fencing token counter `counter` and
-- returns the new token, keeping the counter bounded and monotonic (the
-- argument is in the crate docs, "Fencing tokens"):
-- - a missing counter is created at the server's clock in microseconds, so
--   it starts above every token an expired counter of the name handed out;
-- - a counter without expiry (made by Redisson's RFencedLock, starting at 1,
--   or by an older version of this library) is raised to that clock if it is
--   below it, never lowered, and from then on expires like ours;
-- - the counter lives at least `lease` ms past this acquisition (never
--   less than it has), so it outlives the hold's first lease and then goes.
--   When it has less left it is given two leases, so that acquisitions less
--   than a lease apart pay no PEXPIRE of it (a lean script: issue 11); it
--   goes at most two leases after the name's last acquisition.
-- Call it after refusal(): bad_counter has vetted the value.
local function next_token(counter, lease)
  local ttl = redis.call('pttl', counter)
  if ttl < 0 then
    local clock = clock_token()
    if ttl == -2 or tonumber(redis.call('get', counter)) < tonumber(clock) then
      redis.call('set', counter, clock, 'px', 2 * lease)
    else
      redis.call('pexpire', counter, 2 * lease)
    end
  elseif ttl < lease then
    redis.call('pexpire', counter, 2 * lease)
  end
  return redis.call('incr', counter)
end
