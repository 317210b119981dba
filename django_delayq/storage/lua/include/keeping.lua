-- keeping.lua: finished jobs kept a while (`finished`, `kept`).
--- @include "base"

-- A kept job's record longer than this (bytes) is kept as its header and task line only.
local KEPT_RECORD_MAX = 65536

-- Keep finished jobs (`finished`, `kept`) when `keep` = {age = ms, count = n} (nil: keep none): `ends` is a
-- list of {id, outcome, record, attempt summary, errors[, due ms]}. Then at most #ends + 100 entries
-- older than the age, and as many beyond the count, are dropped (so each call removes at
-- least what it adds), and both keys expire `age` after this call (turned off, what is left
-- goes by itself).
local function keep_finished(keep, now, ends)
  if not keep or #ends == 0 then return end
  local scores, entries, at = {}, {}, int(now)
  for _, e in ipairs(ends) do
    local record, summary, cut = e[3] or '', e[4] or '', ''
    if #record > KEPT_RECORD_MAX then  -- its header and task only: " <size>" says so
      local first = string.find(record, '\n', 1, true) or #record
      cut = ' ' .. #record
      record = string.sub(record, 1, string.find(record, '\n', first + 1, true) or #record)
    end
    table.insert(scores, at) table.insert(scores, e[1])
    table.insert(entries, e[1])
    if e[6] then cut = cut .. ' d' .. int(e[6]) end  -- a cancelled job's due time
    table.insert(entries, e[2] .. ' ' .. at .. cut .. '\n' .. #record .. '\n' .. record
      .. #summary .. '\n' .. summary .. (e[5] or ''))
  end
  batched('ZADD', finished, scores)
  batched('HSET', kept, entries)
  local room = #ends + 100
  local old = redis.call('ZRANGEBYSCORE', finished, '-inf', '(' .. int(now - keep.age), 'LIMIT', 0, room)
  local excess = redis.call('ZCARD', finished) - #old - keep.count
  if excess > 0 then
    local first = #old
    for _, id in ipairs(redis.call('ZRANGE', finished, first, first + math.min(excess, room) - 1)) do
      table.insert(old, id)
    end
  end
  if #old > 0 then batched('ZREM', finished, old) batched('HDEL', kept, old) end
  redis.call('PEXPIRE', finished, keep.age) redis.call('PEXPIRE', kept, keep.age)
end

-- The keep setting of ARGV[i] (max age, ms) and ARGV[i + 1] (max count): nil when either is
-- 0 or absent (keep none).
local function keep_of(i)
  local age, count = tonumber(ARGV[i] or ''), tonumber(ARGV[i + 1] or '')
  if not age or not count or age <= 0 or count <= 0 then return nil end
  return {age = age, count = count}
end
