-- Shared by the semaphore scripts (DESIGN §11), and by inspect.lua and
-- force_unlock.lua (which read a semaphore's permits): prepended to each.
-- Calls only Redis commands; takes no KEYS or ARGV of its own.
--
-- A semaphore's permits are one ZSET at the name: a member per permit
-- holder, scored by the end of its lease in ms of the server's clock. A
-- member whose score has passed holds nothing (its lease ended): the next
-- acquisition removes it, and every script reads it as gone.

-- now_ms(): the server's clock in ms.
local function now_ms()
  local now = redis.call('time')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- permits_of(key): whether `key` can be a semaphore's permits (none yet,
-- or a ZSET); read before a script's first write, so that a name held as
-- another kind (a lock's HASH) is refused with nothing written.
local function permits_of(key)
  local kind = redis.call('type', key)['ok']
  return kind == 'none' or kind == 'zset', kind
end

-- live_until(key, holder, now): the lease end of `holder`'s permit, or nil
-- when it holds none (never had one, or its lease ended by `now`).
local function live_until(key, holder, now)
  local score = tonumber(redis.call('zscore', key, holder))
  if score and score > now then
    return score
  end
  return nil
end

-- holds_count(holds): how many holds a permit's holder has, by the holds
-- its record of re-entered holds names (holds.lua: ' 0 t1 t2 '); 1 when it
-- has no record (its first hold only).
local function holds_count(holds)
  if not holds then
    return 1
  end
  return select(2, string.gsub(holds, '%d+', ''))
end

-- outlive(key, ms): the ZSET lives at least `ms` more (never less than it
-- has): as long as its longest lease.
local function outlive(key, ms)
  local ttl = redis.call('pttl', key)
  if ttl < ms then
    redis.call('pexpire', key, ms)
  end
end
