-- Shared by the unlock scripts of the locks that count a holder's holds in
-- one hash field (reentrant, fair, and the write side of read-write locks):
-- prepended to each, after holds_of.lua. reentered.lua holds the acquiring
-- side. Calls only
-- Redis commands; takes no KEYS or ARGV of its own. (Two files, not one:
-- each function a script defines costs it a closure on every call.)
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
-- The record HASH lives at least as long as the lock HASH (reentered.lua's
-- follow(), after every write that lengthens the lock's life), and its
-- fields go with their holder's holds, so a lock whose re-entries were all
-- given back has nothing but Redisson's layout.

-- live_hold(record, field, hold): whether hold `hold` ('0': the first, else
-- a re-entry's token) of the holder counted in `field` is still held, and
-- the holds named for it, for given_back. Reads only (holds_of): call it
-- before the release's first write.
local function live_hold(record, field, hold)
  local holds = holds_of(record, field)
  return string.find(holds or ' 0 ', ' ' .. hold .. ' ', 1, true) ~= nil, holds
end

-- given_back(record, field, holds, hold, left): forgets hold `hold` (live:
-- see live_hold, which read `holds`) of the holder counted in `field`,
-- which has `left` holds after this release. The holder's record goes when
-- no hold is left, or only its first (and the record HASH with its last
-- field). A holder with no record (the common case) costs nothing here.
local function given_back(record, field, holds, hold, left)
  if not holds then
    return
  end
  local at = string.find(holds, ' ' .. hold .. ' ', 1, true)
  holds = string.sub(holds, 1, at) .. string.sub(holds, at + #hold + 2)
  if left <= 0 or holds == ' 0 ' then
    redis.call('hdel', record, field)
  else
    redis.call('hset', record, field, holds)
  end
end
