-- Shared by the scripts of the locks that count a holder's holds in one
-- hash field (reentrant, fair, and the write side of read-write locks):
-- prepended to each that needs it. Calls only Redis commands; takes no KEYS
-- or ARGV of its own.
--
-- Which hold a release gives back. Redisson's layout counts a holder's holds
-- in its field of the lock HASH. While a holder has more than its first
-- hold, its live holds are also named in the lock's record HASH
-- (redisson_lock_holds:{name}; ours, Redisson never reads it), under the
-- holder's field: ' 0 t1 t2 ', where 0 is the holder's first hold and each
-- re-entry is named by its fencing token (unique per lock name). A release
-- names the hold it gives back and counts only while that hold is live, so
-- a copy of a release that reaches Redis late (held in a partition past its
-- unlock latch) finds its hold gone and changes nothing. No record means
-- the holder has its first hold only: a release of it counts (a late copy
-- of that one finds no count: a holder id is never used again once its
-- count is gone); one naming a re-entry was given back before.
--
-- The record HASH lives at least as long as the lock HASH (follow(), after
-- every write that lengthens the lock's life while records exist), and its
-- fields go with their holder's holds, so a lock whose re-entries were all
-- given back has nothing but Redisson's layout.

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

-- holds_of(record, field): the holds named for the holder counted in
-- `field` (false: none, only its first hold). Reads only, so call it before
-- the script's first write: a record of another type is refused then, as
-- an error reply naming it (raised), with nothing written.
local function holds_of(record, field)
  local holds = redis.pcall('hget', record, field)
  if type(holds) == 'table' and holds.err then
    error(redis.error_reply('ERR the record of re-entered holds ' .. record ..
      ' is a key of another type, not a hash: fix or delete it'))
  end
  return holds
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

-- live_hold(record, field, hold): whether hold `hold` ('0': the first, else
-- a re-entry's token) of the holder counted in `field` is still held. Reads
-- only: call it before the release's first write.
local function live_hold(record, field, hold)
  local holds = holds_of(record, field) or ' 0 '
  return string.find(holds, ' ' .. hold .. ' ', 1, true) ~= nil
end

-- given_back(record, field, hold, left): forgets hold `hold` (live: see
-- live_hold) of the holder counted in `field`, which has `left` holds after
-- this release. The holder's record goes when no hold is left, or only its
-- first (and the record HASH with its last field).
local function given_back(record, field, hold, left)
  local holds = left > 0 and redis.call('hget', record, field)
  if not holds then
    redis.call('hdel', record, field)
    return
  end
  local at = string.find(holds, ' ' .. hold .. ' ', 1, true)
  holds = string.sub(holds, 1, at) .. string.sub(holds, at + #hold + 2)
  if holds == ' 0 ' then
    redis.call('hdel', record, field)
  else
    redis.call('hset', record, field, holds)
  end
end
