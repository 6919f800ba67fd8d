-- Renew many hash-layout locks (reentrant, fair) in one call: the watchdog's
-- tick. Prepended with counter.lua (for keep_longest) and reentered.lua
-- (for follow).
--
-- KEYS[2i-1]  a lock HASH
-- KEYS[2i]    its record of re-entered holds, redisson_lock_holds:{name},
--             which lives at least as long as the lock (holds.lua)
-- ARGV[1]     the lease in milliseconds
-- ARGV[i+1]   the holder id whose hold on KEYS[2i-1] is renewed
--
-- Returns a list with, for each lock i, 1 when renewed (the key now lives at
-- least the lease; a longer remaining lease, promised to another hold of
-- the holder, is kept) or 0 when that holder no longer holds it (expired,
-- deleted, taken over, released and kept by hold_at_least, or not a hash
-- any more).
local lease = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS / 2 do
  local key = KEYS[2 * i - 1]
  -- A count of 0 is a hold released but kept taken (hold_at_least): its
  -- lock expires at the minimum, never renewed.
  local ok, count = pcall(redis.call, 'hget', key, ARGV[i + 1])
  if ok and (tonumber(count) or 0) > 0 then
    keep_longest(key, lease)
    follow(key, KEYS[2 * i], lease)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
