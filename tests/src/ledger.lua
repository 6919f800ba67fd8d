-- The fault suite's ledger of critical sections (on a server of its own,
-- never faulted): storage that refuses stale fencing tokens, and notes every
-- overlap of two sections on one name.
--
-- KEYS[1]  fence:{name}   the highest token that has begun a section
-- KEYS[2]  open:{name}    HASH of the sections open now: id -> token
-- KEYS[3]  overlaps       LIST of "<id> <id>": sections that were open at
--                         once (for a bound N above 1: "<id> ... <id>",
--                         the N + 1 or more open at once)
-- ARGV[1]  'begin' or 'end'
-- ARGV[2]  the section id, <worker>:<n>
-- ARGV[3]  begin: the guard's fencing token; end: '1' when the holder was
--          told of a loss (lost() or a release error), else '0'
-- ARGV[4]  begin: how many sections may be open at once on the name (1 for
--          a lock; a semaphore's N, whose concurrent permits are fenced by
--          nothing here: the storage cannot refuse one of N live holders)
-- KEYS[4]  reported       SET of the section ids whose holder was told
--
-- Returns, for 'begin': 1 when the section may write, 0 when its token is
-- below one already seen (the storage refuses it: nothing is written); for
-- 'end': 1. A section ends before its guard is released; a loss that the
-- release reports comes as a second 'end' with '1'. A section begun while
-- the bound's number were open overlaps each of them (more than N at once).
if ARGV[1] == 'begin' then
  local token = tonumber(ARGV[3])
  local bound = tonumber(ARGV[4] or '1')
  if bound == 1 then
    local fence = tonumber(redis.call('get', KEYS[1]) or '0')
    if token < fence then
      return 0
    end
    redis.call('set', KEYS[1], ARGV[3])
  end
  local open = redis.call('hkeys', KEYS[2])
  if bound == 1 then
    for _, other in ipairs(open) do
      redis.call('rpush', KEYS[3], other .. ' ' .. ARGV[2])
    end
  elseif #open >= bound then
    -- More than the bound at once: one entry naming them all, this one
    -- last (told to any of them, it was reported).
    redis.call('rpush', KEYS[3], table.concat(open, ' ') .. ' ' .. ARGV[2])
  end
  redis.call('hset', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
redis.call('hdel', KEYS[2], ARGV[2])
if ARGV[3] == '1' then
  redis.call('sadd', KEYS[4], ARGV[2])
end
return 1
