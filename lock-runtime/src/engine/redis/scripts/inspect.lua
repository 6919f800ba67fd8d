-- Read what a lock's keys hold, for inspection. Writes nothing.
--
-- KEYS[1]  the lock key (a HASH for every kind: reentrant, fair, read-write)
-- KEYS[2]  the fair lock's queue, redisson_lock_queue:{name}
-- KEYS[3]  the fair lock's waiter deadlines, redisson_lock_timeout:{name}
--
-- Returns {type, pttl, fields, queue, fair}:
--   type    the lock key's type: 'none', 'hash', or another type (not a lock)
--   pttl    the lock key's remaining lease in ms (-1: no expiry, -2: no key)
--   fields  the HASH as a flat list: field, value, field, value, ...
--   queue   the fair queue's holder ids, head first (empty when none)
--   fair    1 when a fair queue or deadline set exists, else 0
local kind = redis.call('type', KEYS[1])['ok']
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
