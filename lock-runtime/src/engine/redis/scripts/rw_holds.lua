-- Shared by the read-write lock scripts: prepended to each one that needs it.
--
-- live_reads(lock, tag): the read holds that still count. Read hold k of
-- reader r has the key tag .. ':' .. r .. ':rwlock_timeout:' .. k, expiring
-- with that hold's lease. A reader field of HASH `lock` none of whose hold
-- keys is left stops counting and is removed. Returns the number of readers
-- left and the longest remaining read lease in ms (0 when none has one).
local function live_reads(lock, tag)
  local readers, longest = 0, 0
  local fields = redis.call('hgetall', lock)
  for i = 1, #fields, 2 do
    local field = fields[i]
    if field ~= 'mode' and string.sub(field, -6) ~= ':write' then
      local alive = false
      local prefix = tag .. ':' .. field .. ':rwlock_timeout:'
      for k = 1, (tonumber(fields[i + 1]) or 0) do
        local ttl = redis.call('pttl', prefix .. k)
        if ttl ~= -2 then
          alive = true
          longest = math.max(longest, ttl)
        end
      end
      if alive then
        readers = readers + 1
      else
        redis.call('hdel', lock, field)
      end
    end
  end
  return readers, longest
end

