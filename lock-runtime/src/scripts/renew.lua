-- Renew many hash-layout locks (reentrant, fair) in one call: the watchdog's tick.
--
-- KEYS[i]    a lock HASH
-- ARGV[1]    the new lease in milliseconds
-- ARGV[i+1]  the holder id whose hold on KEYS[i] is renewed
--
-- Returns a list with, for each KEYS[i], 1 when renewed or 0 when that holder
-- no longer holds it (expired, deleted, taken over, or not a hash any more).
local out = {}
for i, key in ipairs(KEYS) do
  local ok, held = pcall(redis.call, 'hexists', key, ARGV[i + 1])
  if ok and held == 1 then
    redis.call('pexpire', key, ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
