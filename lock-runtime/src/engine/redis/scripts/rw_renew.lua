-- Renew many read-write lock holds in one call: the watchdog's tick. Only the
-- given holders' own holds are renewed, never another holder's. Prepended
-- with counter.lua (for keep_longest): no key's remaining lease shrinks; and
-- reentered.lua (for follow).
--
-- KEYS[3i-2]  a read-write lock HASH
-- KEYS[3i-1]  the holder's read-hold key prefix, {name}:<holder id>:rwlock_timeout
-- KEYS[3i]    the lock's record of re-entered holds, redisson_lock_holds:{name},
--             which lives at least as long as the lock (holds.lua)
-- ARGV[1]     the new lease in milliseconds
-- ARGV[i+1]   the holder id of hold i
--
-- Returns a list with, for each hold i, 1 when the holder still has the write
-- lock or a live read hold (its read-hold keys and the hash now last at least
-- the lease), or 0 when it holds nothing there any more.
local lease = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS / 3 do
  local lock, prefix, holder = KEYS[3 * i - 2], KEYS[3 * i - 1], ARGV[i + 1]
  local ok, renewed = pcall(function()
    local alive = redis.call('hexists', lock, holder .. ':write') == 1
    local count = tonumber(redis.call('hget', lock, holder)) or 0
    for k = 1, count do
      local hold = prefix .. ':' .. k
      if redis.call('exists', hold) == 1 then
        keep_longest(hold, lease)
        alive = true
      end
    end
    if not alive then
      return 0
    end
    keep_longest(lock, lease)
    follow(lock, KEYS[3 * i], lease)
    return 1
  end)
  out[i] = (ok and renewed) or 0
end
return out
