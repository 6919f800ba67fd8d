-- Read by both sides of the record of re-entered holds (holds.lua says
-- what it is): prepended before holds.lua in the unlock scripts and before
-- reentered.lua in the acquire scripts. Calls only Redis commands; takes no
-- KEYS or ARGV of its own.

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
