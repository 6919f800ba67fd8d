-- Acquire or re-enter a reentrant lock (Redisson RLock layout).
--
-- KEYS[1]  the lock: a HASH of holder id -> hold count, with a PEXPIRE lease
-- KEYS[2]  the fencing token counter, redisson_lock_token:{name}
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<task number>
--
-- Returns {1, token} when the lock was taken or re-entered (the token is the
-- counter after INCR), or {0, pttl} when another holder has it (pttl is the
-- lock's remaining lease in ms, -1 when it has none).
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, redis.call('incr', KEYS[2])}
end
return {0, redis.call('pttl', KEYS[1])}
