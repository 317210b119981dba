-- stats.lua: the queue's counts per minute (the last hour) and totals in `stats`.
--- @include "base"

local function bump(kind, count, now)
  if count <= 0 then return end
  local minute = math.floor(now / 60000)
  local slot = kind .. ':' .. int(minute % 60)
  local cur = redis.call('HGET', stats, slot)
  local total = count
  if cur then
    local m, c = string.match(cur, '^(%d+):(%d+)$')
    if tonumber(m) == minute then total = tonumber(c) + count end
  end
  redis.call('HSET', stats, slot, int(minute) .. ':' .. int(total))
end

-- A total of the queue's stats (done, failed, retried, dead, recovered): never reset.
local function tally(field, count)
  if count > 0 then redis.call('HINCRBY', stats, field, count) end
end
