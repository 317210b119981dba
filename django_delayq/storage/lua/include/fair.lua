-- fair.lua: claim.lua's read on a fair queue (`control` field "fair", from
-- DELAYQ["QUEUES"][q]["fair"]): due jobs are claimed in turns, group by group, not by
-- priority then due time across the queue. Turns are kept in `parked`, whose members
-- ("<group key>\n<rank>\n<id>", one range per group in claim order, see base.lua) are the
-- buckets of the groups with due work; a job without a group takes the group key "\n"
-- (one turn for all of them). A parked job is pending (pending_due, unpend, pend see it), so
-- cancel, reschedule, run_now and a replace find a bucketed job as they find one parked by
-- its group's limit; fail, release, recover and requeue put a job back in `pending` or
-- `ranked`, and the intake buckets it again once it is due: the buckets hold due jobs
-- only, nothing in them runs early, and nothing is kept anywhere else (no second index to
-- keep consistent). `groups` holds a bucketed job's member while it is bucketed, as for a
-- parked job; its "<task>\n<group>" (or nothing, for a job without a group) once it left.
-- Each claim: (1) the intake: up to INTAKE due jobs of `pending`/`ranked` (read_due's
-- order) move into their buckets, each job moved once, so a backlog of N due jobs not yet
-- bucketed holds another group's job back by about N / INTAKE claims, no more; (2) the
-- turns: starting after the group the last claim served first ("fturn" in `control`),
-- each group with due work gives its first job, in group key order, wrapping round, then
-- the room left is shared among those groups again (work conserving: the room is filled
-- while any bucket holds a job); (3) the jobs taken go back to `pending`/`ranked` (their
-- due time and priority kept, their `groups` field restored), read as read_due returns
-- them, so hold_back and take_out treat them as any other read.
--- @include "base"
--- @include "priority"

local INTAKE = 1000

-- Move up to INTAKE due jobs of `pending`/`ranked` into their buckets of `parked`. The due
-- time of the first job left behind (nil: none), as read_due gives it.
local function fair_intake(now)
  local ids, from_pending, from_ranked, next_due = read_due(INTAKE, now)
  if #ids == 0 then return next_due end
  local rank_of = {}
  if #from_pending > 0 then
    local scores = batched('ZMSCORE', pending, from_pending)
    for i, id in ipairs(from_pending) do rank_of[id] = ranked_score(0, tonumber(scores[i])) end
    batched('ZREM', pending, from_pending)
  end
  if #from_ranked > 0 then
    local scores = batched('ZMSCORE', ranked, from_ranked)
    for i, id in ipairs(from_ranked) do rank_of[id] = tonumber(scores[i]) end
    batched('ZREM', ranked, from_ranked)
  end
  local owners = batched('HMGET', groups, ids)
  local entries, fields = {}, {}
  for i, id in ipairs(ids) do
    local gkey = owners[i] and string.match(owners[i], '^([^\n]*\n[^\n]*)$') or '\n'
    local member = gkey .. '\n' .. string.format('%020d', rank_of[id]) .. '\n' .. id
    table.insert(entries, 0) table.insert(entries, member)
    table.insert(fields, id) table.insert(fields, member)
  end
  batched('ZADD', parked, entries)
  batched('HSET', groups, fields)
  return next_due
end

-- The first member of the group after `after` (nil: the first group), wrapping round once
-- when `wrap`.
local function next_group(after, wrap)
  local got = {}
  if after then got = redis.call('ZRANGEBYLEX', parked, '(' .. after .. '\n\255', '+', 'LIMIT', 0, 1) end
  if not got[1] and (wrap or not after) then got = redis.call('ZRANGEBYLEX', parked, '-', '+', 'LIMIT', 0, 1) end
  return got[1]
end

-- claim.lua's read of up to `want` (> 0) due jobs on a fair queue: as read_due, the ids, those of
-- them now in `pending`, those in `ranked`, and the due time of the first job left (now
-- while a bucket still holds a job).
local function fair_read(want, now)
  zsets(pending, ranked, parked) hashes(groups, control)
  local next_due = fair_intake(now)
  local taken, order, seen = {}, {}, {}
  local cursor = redis.call('HGET', control, 'fturn') or nil
  local first = next_group(cursor, true)
  while first and #taken < want do
    local gkey = parked_parts(first)
    if seen[gkey] then break end
    seen[gkey] = 1
    table.insert(order, gkey) table.insert(taken, first)
    cursor = gkey
    first = next_group(gkey, true)
  end
  if #order > 0 then redis.call('HSET', control, 'fturn', cursor) end
  -- The room left, shared among the groups served, again and again while they have jobs.
  local active = order
  while #taken < want and #active > 0 do
    local share, still = math.ceil((want - #taken) / #active), {}
    for _, gkey in ipairs(active) do
      local n = math.min(share, want - #taken)
      if n > 0 then
        local got = redis.call('ZRANGEBYLEX', parked, '[' .. gkey .. '\n', '[' .. gkey .. '\n\255', 'LIMIT', seen[gkey], n)
        for _, m in ipairs(got) do table.insert(taken, m) end
        seen[gkey] = seen[gkey] + #got
        if #got == n then table.insert(still, gkey) end
      end
    end
    active = still
  end
  local ids, from_pending, from_ranked = {}, {}, {}
  for _, m in ipairs(taken) do
    local gkey, rank = parked_parts(m)
    local id = string.match(m, '\n([^\n]*)$')
    redis.call('ZREM', parked, m)
    if gkey == '\n' then redis.call('HDEL', groups, id) else redis.call('HSET', groups, id, gkey) end
    table.insert(ids, id)
    if math.floor(rank / BAND) == 100 then
      redis.call('ZADD', pending, int(rank % BAND), id) table.insert(from_pending, id)
    else
      redis.call('ZADD', ranked, int(rank), id) table.insert(from_ranked, id)
    end
  end
  if redis.call('EXISTS', parked) == 1 then next_due = now end
  return ids, from_pending, from_ranked, next_due
end
