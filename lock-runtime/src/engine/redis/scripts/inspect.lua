-- Read what a lock's keys hold, for inspection. Writes nothing. Prepended
-- with permits.lua (a semaphore's permits).
--
-- KEYS[1]  the lock key (a HASH for every kind of lock: reentrant, fair,
--          read-write; a ZSET for a semaphore's permits)
-- KEYS[2]  the fair lock's queue, redisson_lock_queue:{name}
-- KEYS[3]  the fair lock's waiter deadlines, redisson_lock_timeout:{name}
-- KEYS[4]  the record of re-entered holds, redisson_lock_holds:{name}
--
-- Returns {type, pttl, fields, queue, fair}:
--   type    the lock key's type: 'none', 'hash', 'zset', or another type
--           (not a lock); a ZSET without a live permit reads as 'none'
--   pttl    the lock key's remaining lease in ms (-1: no expiry, -2: no
--           key); for a ZSET, the longest permit's
--   fields  the HASH as a flat list: field, value, field, value, ...; for a
--           ZSET its live permits: holder, ms left, holds, holder, ...
--           (holds: the holder's first and its re-entries, holds.lua)
--   queue   the fair queue's holder ids, head first (empty when none)
--   fair    1 when a fair queue or deadline set exists, else 0
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'zset' then
  local now = now_ms()
  local permits = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'withscores')
  if #permits == 0 then
    return {'none', -2, {}, {}, 0}
  end
  -- The record of re-entered holds, read only when it is one.
  local record = redis.call('type', KEYS[4])['ok'] == 'hash'
  local fields, longest = {}, 0
  for i = 1, #permits, 2 do
    local left = tonumber(permits[i + 1]) - now
    longest = math.max(longest, left)
    local holds = record and redis.call('hget', KEYS[4], permits[i])
    fields[#fields + 1] = permits[i]
    fields[#fields + 1] = string.format('%d', left)
    fields[#fields + 1] = holds_count(holds)
  end
  return {kind, longest, fields, {}, 0}
end
if kind ~= 'hash' then
  return {kind, -2, {}, {}, 0}
end
local queue = {}
local fair = 0
if redis.call('type', KEYS[2])['ok'] == 'list' then
  queue = redis.call('lrange', KEYS[2], 0, -1)
  fair = 1
end
if redis.call('exists', KEYS[3]) == 1 then
  fair = 1
end
return {kind, redis.call('pttl', KEYS[1]), redis.call('hgetall', KEYS[1]), queue, fair}
