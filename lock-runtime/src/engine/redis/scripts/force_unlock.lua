-- Free a lock whatever its kind and whoever holds it (an operator's last
-- resort, Redisson's forceUnlock), and wake every waiter. Prepended with
-- permits.lua (a semaphore's permits).
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the unlock channel, redisson_lock__channel:{name}; fair waiter w
--          listens on KEYS[2] .. ':' .. w
-- KEYS[3]  the fair queue LIST, redisson_lock_queue:{name}
-- KEYS[4]  the fair waiters' deadline ZSET, redisson_lock_timeout:{name}
-- KEYS[5]  the read-write channel, redisson_rwlock:{name}
-- KEYS[6]  the lock's hash tag {name}: prefix of the read holds' keys,
--          KEYS[6] .. ':' .. <holder id> .. ':rwlock_timeout:' .. k
-- KEYS[7]  the record of re-entered holds, redisson_lock_holds:{name}
-- KEYS[8]  a semaphore's channel, redisson_sc:{name}
-- ARGV[1]  the publish command: 'publish', or 'spublish' for sharded pub/sub
--
-- A semaphore's permits (a ZSET at KEYS[1]) are deleted with the record of
-- re-entered holds, and its waiters told '1' on KEYS[8]; 1 when a permit
-- was live.
--
-- Returns 1 when a lock was deleted, 0 when there was none. Deletes the lock,
-- its record of re-entered holds, a read-write lock's read-hold keys and a
-- fair lock's queue (its waiters ask
-- again when woken, in the order they retry). Every waiter is told '1' (wake
-- all): reentrant waiters on KEYS[2], fair waiters each on its own channel,
-- read-write waiters on KEYS[5]. The fencing token counter is kept: tokens
-- keep rising. Fails, writing nothing, when KEYS[1] is not a lock.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'zset' then
  local live = redis.call('zcount', KEYS[1], '(' .. now_ms(), '+inf')
  redis.call('del', KEYS[1], KEYS[7])
  redis.call(ARGV[1], KEYS[8], '1')
  if live > 0 then
    return 1
  end
  return 0
end
if kind ~= 'hash' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE the key is not a lock')
end
local queue = {}
if redis.call('type', KEYS[3])['ok'] == 'list' then
  queue = redis.call('lrange', KEYS[3], 0, -1)
end
local mode = false
if kind == 'hash' then
  mode = redis.call('hget', KEYS[1], 'mode')
  if mode then
    local fields = redis.call('hgetall', KEYS[1])
    for i = 1, #fields, 2 do
      local field, count = fields[i], tonumber(fields[i + 1]) or 0
      if field ~= 'mode' and string.sub(field, -6) ~= ':write' then
        for k = 1, count do
          redis.call('del', KEYS[6] .. ':' .. field .. ':rwlock_timeout:' .. k)
        end
      end
    end
  end
end
redis.call('del', KEYS[1], KEYS[3], KEYS[4], KEYS[7])
if mode then
  redis.call(ARGV[1], KEYS[5], '1')
else
  redis.call(ARGV[1], KEYS[2], '1')
end
for _, waiter in ipairs(queue) do
  redis.call(ARGV[1], KEYS[2] .. ':' .. waiter, '1')
end
if kind == 'hash' then
  return 1
end
return 0
