-- groups.lua: a job's group (record flag 'g'): joining it, and the slot it frees on leaving
-- running (its group's first parked job goes back to pending).
--- @include "base"
--- @include "record"
--- @include "priority"
--- @include "wake"

-- schedule.lua: the job `id` (its record names the task) joins `group` ('': none).
local function group_join(id, record, group)
  if group == '' then
    redis.call('HDEL', groups, id)
    return
  end
  redis.call('HSET', groups, id, string.match(record, '^[^\n]*\n([^\n]*)') .. '\n' .. group)
end

-- Move up to `n` parked jobs of group key `gkey` back to pending (their due times and
-- priorities kept; they are due, so a worker is woken). The count moved.
local function unpark_group(gkey, n)
  local found = redis.call('ZRANGEBYLEX', parked, '[' .. gkey .. '\n', '[' .. gkey .. '\n\255', 'LIMIT', 0, n)
  for _, m in ipairs(found) do
    local _, rank = parked_parts(m)
    local id = string.match(m, '\n([^\n]*)$')
    redis.call('ZREM', parked, m)
    redis.call('HSET', groups, id, gkey)
    if math.floor(rank / BAND) == 100 then redis.call('ZADD', pending, int(rank % BAND), id)
    else redis.call('ZADD', ranked, int(rank), id) end
  end
  if #found > 0 then wake_worker() end
  return #found
end

-- A job of a group (record flag 'g' in `flags`) left running (acknowledged, failed, handed
-- back, recovered): the first parked job of its group, if any, goes back to pending to
-- take the slot (unless `released`: the caller did), and it leaves the group's holders in
-- `holds`; `finished`: the job is gone (acknowledged), its `groups` entry goes too. Nothing for a job
-- without flag 'g'.
local function group_left(id, flags, acked, released)
  if not flags or not has(flags, 'g') then return end
  local v = redis.call('HGET', groups, id)
  if acked then redis.call('HDEL', groups, id) end
  if not v then return end
  local gkey = string.match(v, '^([^\n]*\n[^\n]*)')
  local left, gone = {}, false
  for holder in string.gmatch(redis.call('HGET', holds, gkey) or '', '%S+') do
    if string.match(holder, '^[^|]*') ~= id then table.insert(left, holder) else gone = true end
  end
  if gone and #left > 0 then redis.call('HSET', holds, gkey, table.concat(left, ' '))
  elseif gone then redis.call('HDEL', holds, gkey) end
  if not released then unpark_group(gkey, 1) end
end
