-- Renew many semaphore permits in one call: the watchdog's tick. Prepended
-- with counter.lua, reentered.lua (for follow) and permits.lua.
--
-- KEYS[2i-1]  a semaphore's permits ZSET
-- KEYS[2i]    its record of re-entered holds, redisson_lock_holds:{name},
--             which lives at least as long as the permits (holds.lua)
-- ARGV[1]     the lease in milliseconds
-- ARGV[i+1]   the holder id whose permit on KEYS[2i-1] is renewed
--
-- Returns a list with, for each permit i, 1 when renewed (it now ends no
-- sooner than a lease from now; a later end is kept) or 0 when that holder
-- holds no permit there any more (its lease ended, it was taken away, or
-- the key is not a semaphore's).
local lease = tonumber(ARGV[1])
local now = now_ms()
local out = {}
for i = 1, #KEYS / 2 do
  local key = KEYS[2 * i - 1]
  local held = permits_of(key) and live_until(key, ARGV[i + 1], now)
  if held then
    if held < now + lease then
      redis.call('zadd', key, 'xx', now + lease, ARGV[i + 1])
    end
    outlive(key, lease)
    follow(key, KEYS[2 * i], lease)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
