-- Take or re-enter a permit of a semaphore (DESIGN §11). Prepended with
-- counter.lua, holds_of.lua, reentered.lua and permits.lua; wrapped by
-- acquire_latch.lua (one more key and argument, after these).
--
-- KEYS[1]  the permits: a ZSET of holder id -> lease end (ms, server clock)
-- KEYS[2]  the fencing token counter, redisson_lock_token:{name}
-- KEYS[3]  the record of re-entered holds, redisson_lock_holds:{name}
--          (holds.lua: a holder's re-entries are named there)
-- ARGV[1]  lease in milliseconds (a positive integer)
-- ARGV[2]  holder id, <client uuid>:<n>
-- ARGV[3]  the acquisition's bound N: it is admitted while fewer than N
--          permits of the name are live, whoever holds them
-- ARGV[4]  '1' when the caller re-enters a permit of its scope (the holder
--          must still hold it), '0' for a new holder
--
-- Returns {1, token} when the permit was taken or re-entered, {0, ms} when
-- N permits are live (ms: until the first of their leases ends), or {3, 0}
-- when a re-entry finds its permit gone: nothing is taken then. A name
-- held as another kind is a WRONGTYPE error. Every check comes before the
-- first write (the token's INCR is the counter's own check); expired
-- permits are removed then, by this acquisition. A permit's lease never
-- shrinks.
local lease, permits = tonumber(ARGV[1]), tonumber(ARGV[3])
if not permits_of(KEYS[1]) then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if not permits or permits < 1 then
  return redis.error_reply('ERR a semaphore needs at least 1 permit')
end
local now = now_ms()
if ARGV[4] == '1' then
  local held = live_until(KEYS[1], ARGV[2], now)
  if not held then
    return {3, 0}
  end
  local holds = holds_of(KEYS[3], ARGV[2])
  local token, refused = take_token(KEYS[2], lease)
  if not token then
    return redis.error_reply(refused)
  end
  if held < now + lease then
    redis.call('zadd', KEYS[1], 'xx', now + lease, ARGV[2])
  end
  outlive(KEYS[1], lease)
  entered(KEYS[1], KEYS[3], ARGV[2], holds, token, lease)
  return {1, token}
end
local live = redis.call('zcount', KEYS[1], '(' .. now, '+inf')
if live >= permits then
  local first = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'withscores', 'limit', 0, 1)
  return {0, math.max(tonumber(first[2]) - now, 1)}
end
local token, refused = take_token(KEYS[2], lease)
if not token then
  return redis.error_reply(refused)
end
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
redis.call('zadd', KEYS[1], now + lease, ARGV[2])
outlive(KEYS[1], lease)
return {1, token}
