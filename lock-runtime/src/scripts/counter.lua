-- Shared by the acquire and renew scripts: prepended to each (scripts/mod.rs).
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

