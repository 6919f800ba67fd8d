-- The acquiring side of holds.lua (which says what the record of re-entered
-- holds is): prepended to the acquire scripts that count a holder's holds
-- in one hash field (after holds_of.lua), and to every script that
-- lengthens a lock's life (the record must live as long). Calls only Redis
-- commands; takes no KEYS or ARGV of its own.

-- follow(lock, record, floor): the record HASH, if any, lives at least as
-- long as the lock HASH (call it after every write that lengthens the
-- lock's life), and at least `floor` ms when the lock has no expiry (never
-- one of ours: a record is never left without one).
local function follow(lock, record, floor)
  local have = redis.call('pttl', record)
  if have == -2 then
    return
  end
  local ttl = redis.call('pttl', lock)
  if ttl < 0 then
    ttl = floor
  end
  if ttl > 0 and (have < 0 or have < ttl) then
    redis.call('pexpire', record, ttl)
  end
end

-- entered(lock, record, field, holds, token, lease): records the re-entry
-- with fencing `token` and `lease` (ms) of the holder counted in `field` of
-- `lock`, whose record read `holds` before the first write (holds_of).
-- Call it after the lock's count rose and its lease was kept.
local function entered(lock, record, field, holds, token, lease)
  -- As an integer's digits (tokens are below 2^53), not Lua's %.14g.
  redis.call('hset', record, field, (holds or ' 0 ') .. string.format('%d', token) .. ' ')
  follow(lock, record, lease)
end
