-- Shared by the fast paths of a release (unlock_fast.lua, handoff_fast.lua):
-- prepended to each. Calls only Redis commands; takes no KEYS or ARGV of
-- its own.

-- only_hold(lock, record, holder, which): whether the release of hold
-- `which` of `holder` gives back its first and only hold: `which` names
-- the first ('0'), the holder's count in HASH `lock` is 1, and the record
-- of re-entered holds `record` has nothing for it (holds.lua). Reads only.
-- A record of another type is left to the full script to name (pcall).
local function only_hold(lock, record, holder, which)
  return which == '0' and redis.call('hget', lock, holder) == '1'
    and redis.pcall('hget', record, holder) == false
end
