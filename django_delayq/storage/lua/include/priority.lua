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

-- claim.lua's read of up to `want` due jobs on its general path: highest priority first,
-- then earliest due: the bands of `ranked` with a priority above 0, then `pending`
-- (priority 0), then the bands below 0, each band read from its first job (at most one read
-- per band present, and one range read per band that gives jobs). Returns the ids read,
-- those of them from `pending`, those from `ranked`, and the due time of the first job
-- left behind (nil: none).
local function read_due(want, now)
  local ids, from_pending, from_ranked, next_due = {}, {}, {}, nil
  local function later(due) if not next_due or due < next_due then next_due = due end end
  local pending_read = false
  local function from_p()
    pending_read = true
    local got = {}
    if want > #ids then
      got = redis.call('ZRANGEBYSCORE', pending, '-inf', int(now), 'LIMIT', 0, want - #ids)
      for _, id in ipairs(got) do table.insert(ids, id) table.insert(from_pending, id) end
    end
    local after = redis.call('ZRANGE', pending, #got, #got, 'WITHSCORES')
    if after[2] then later(tonumber(after[2])) end
  end
  local cursor = 0
  while true do
    local first = redis.call('ZRANGEBYSCORE', ranked, int(cursor), '+inf', 'LIMIT', 0, 1, 'WITHSCORES')
    if not first[1] then break end
    local band = math.floor(tonumber(first[2]) / BAND)
    if band >= 100 and not pending_read then from_p() end  -- priority 0 sorts between
    local base = band * BAND
    local took = 0
    if want > #ids and tonumber(first[2]) - base <= now then
      local got = redis.call('ZRANGEBYSCORE', ranked, int(base), int(base + now), 'LIMIT', 0, want - #ids)
      for _, id in ipairs(got) do table.insert(ids, id) table.insert(from_ranked, id) end
      took = #got
    end
    if took == 0 then
      later(tonumber(first[2]) - base)
    else
      local after = redis.call('ZRANGEBYSCORE', ranked, int(base), '(' .. int(base + BAND), 'LIMIT', took, 1, 'WITHSCORES')
      if after[2] then later(tonumber(after[2]) - base) end
    end
    cursor = base + BAND
  end
  if not pending_read then from_p() end
  return ids, from_pending, from_ranked, next_due
end
