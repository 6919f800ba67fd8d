-- Shared by unlock.lua and fair_unlock.lua: prepended to each.
--
-- keep_taken(lock, holder, ms, within_lease): `hold_at_least` for the
-- release of a holder's last hold. The holder's count in HASH `lock` becomes
-- 0 (no hold left: every script reads a count of 0 as not held) and the
-- lock is left to expire in `ms` instead of being deleted. With
-- `within_lease` '1' (a fixed lease bounds the minimum) a key that expires
-- sooner is left as it is, never given a longer life.
--
-- Returns true when the lock now expires sooner than it did: waiters sleep
-- until the lease they were last told, so the caller wakes them to learn
-- the shorter one.
local function keep_taken(lock, holder, ms, within_lease)
  redis.call('hset', lock, holder, 0)
  local ttl = redis.call('pttl', lock)
  if ttl >= 0 and ttl <= ms then
    if within_lease ~= '1' then
      redis.call('pexpire', lock, ms)
    end
    return false
  end
  redis.call('pexpire', lock, ms)
  return true
end
