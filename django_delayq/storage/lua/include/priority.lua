-- priority.lua: pending jobs in `pending` (priority 0), `ranked` (other priorities, in
-- claim order) or parked in `parked`: find, put and take out a pending job wherever it is.
--- @include "base"

local BAND = 17592186044416

-- A pending job's score in `ranked` (see the key table).
local function ranked_score(priority, due) return (100 - priority) * BAND + due end

-- A parked job's value in `groups` -> its group key, rank (number); nil for a job not parked.
local function parked_parts(v)
  if not v then return nil end
  local gkey, rank = string.match(v, '^([^\n]*\n[^\n]*)\n(%d+)\n')
  if gkey then return gkey, tonumber(rank) end
  return nil
end

-- The due time of a pending job (number), nil when it is not pending; its priority second.
-- A parked job (see `parked`) is pending too.
local function pending_due(id)
  local s = redis.call('ZSCORE', pending, id)
  if s then return tonumber(s), 0 end
  s = redis.call('ZSCORE', ranked, id)
  if not s then
    local v = redis.call('HGET', groups, id)
    local _, rank = parked_parts(v)
    if rank and redis.call('ZSCORE', parked, v) then s = rank end
  end
  if s then
    s = tonumber(s)
    return s % BAND, 100 - math.floor(s / BAND)
  end
  return nil
end

-- Put a job in pending, due at `due`, in `pending` (priority 0) or `ranked`.
local function pend(id, due, priority)
  if priority == 0 then
    redis.call('ZADD', pending, int(due), id)
  else
    redis.call('ZADD', ranked, int(ranked_score(priority, due)), id)
  end
end

-- Take a job out of pending (`pending`, `ranked` or parked in `parked`): true when it was pending.
local function unpend(id)
  if redis.call('ZREM', pending, id) == 1 then return true end
  if redis.call('ZREM', ranked, id) == 1 then return true end
  local v = redis.call('HGET', groups, id)
  local gkey = parked_parts(v)
  if gkey and redis.call('ZREM', parked, v) == 1 then
    redis.call('HSET', groups, id, gkey)
    return true
  end
  return false
end
