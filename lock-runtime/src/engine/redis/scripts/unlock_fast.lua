-- The common case of unlock.lua, first in its script after fast_release.lua
-- (before the full script's helpers: a function a script defines costs a
-- closure on every call). Same KEYS and ARGV as unlock.lua:
--
-- KEYS[1]  the lock HASH
-- KEYS[2]  the channel to announce the release on
-- KEYS[3]  the unlock latch of this request
-- KEYS[4]  the record of re-entered holds (holds.lua)
-- ARGV[1]  holder id
-- ARGV[2]  latch lifetime in milliseconds
-- ARGV[3]  the publish command
-- ARGV[4]  which hold ('0': the holder's first)
-- ARGV[5]  the message
-- ARGV[6]  '1': the request's first send on a connection that never resends
--          a command (see unlock.lua)
-- ARGV[7]  hold_at_least's ms, optional ('0' or absent: none)
--
-- Returns 1, as unlock.lua would, when a first send releases the holder's
-- only hold (only_hold) with no hold_at_least: the lock is deleted and
-- announced, and the latch remembers 1 for a retry. Anything else falls through to unlock.lua with
-- nothing written. (issue 26)
if ARGV[6] == '1' and (ARGV[7] or '0') == '0'
    and only_hold(KEYS[1], KEYS[4], ARGV[1], ARGV[4]) then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], ARGV[5])
  redis.call('set', KEYS[3], 1, 'px', ARGV[2], 'nx')
  return 1
end
