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
-- schedule.lua puts a job of a group that is due at once straight into its bucket
-- (takes_turn, take_turn), so such a job never waits for an intake.
-- Each claim: (1) the intake: up to INTAKE due jobs of `pending`/`ranked` (read_due's
-- order) move into their buckets, each job moved once, so a backlog of N due jobs not yet
-- bucketed holds another group's job back by about N / INTAKE claims, no more; (2) the
-- turns: starting after the group the last claim served first ("fturn" in `control`),
-- each group with due work gives its first job, in group key order, wrapping round, then
-- the room left is shared among those groups again (work conserving: the room is filled
-- while any bucket holds a job); (3) the jobs taken go back to `pending`/`ranked` (their
-- due time and priority kept, their `groups` field restored), read as read_due returns
-- them, so hold_back and take_out treat them as any other read; where no limit can hold
-- one back (`direct`), they go to the lease straight from their buckets instead.
--- @include "base"
--- @include "priority"

local INTAKE = 1000

-- A parked member: "<group key>\n<rank, 20 digits>\n<id>" (see `parked` in base.lua).
local function bucket_member(gkey, rank, id) return gkey .. '\n' .. string.format('%020d', rank) .. '\n' .. id end

-- schedule.lua: whether a new (or replacing) job of `group` ('': none) due at `due` goes
-- straight into its group's bucket: a grouped job due now on a fair queue (one HGET of
-- `control`, made only for a grouped job; the keys it writes are checked here).
local function takes_turn(group, due, now)
  if group == '' or due > now or not redis.call('HGET', control, 'fair') then return false end
  zsets(parked) hashes(groups)
  return true
end

-- schedule.lua: the job `id` (its record names the task) of `group` waits in its group's
-- bucket, in claim order (priority, then due), as the intake would have put it there.
local function take_turn(id, record, group, due, priority)
  local gkey = string.match(record, '^[^\n]*\n([^\n]*)') .. '\n' .. group
  local member = bucket_member(gkey, ranked_score(priority, due), id)
  redis.call('ZADD', parked, 0, member)
  redis.call('HSET', groups, id, member)
end

-- Move up to INTAKE due jobs of `pending`/`ranked` into their buckets of `parked`. The due
-- time of the first job left behind (nil: none), as read_due gives it.
local function fair_intake(now)
  local ids, from_pending, from_ranked, next_due = read_due(INTAKE, now)
  if #ids == 0 then return next_due end
  zsets(parked) hashes(groups)
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
    local member = bucket_member(gkey, rank_of[id], id)
    table.insert(entries, 0) table.insert(entries, member)
    table.insert(fields, id) table.insert(fields, member)
  end
  batched('ZADD', parked, entries)
  batched('HSET', groups, fields)
  return next_due
end

-- The first member of the group after `after` (nil: the first group), wrapping round to the
-- first group unless `wrapped` (a wrap once made finds the group served first); whether it
-- wrapped second.
local function next_group(after, wrapped)
  local got = {}
  if after then got = redis.call('ZRANGEBYLEX', parked, '(' .. after .. '\n\255', '+', 'LIMIT', 0, 1) end
  if got[1] or wrapped then return got[1], false end
  return redis.call('ZRANGEBYLEX', parked, '-', '+', 'LIMIT', 0, 1)[1], true
end

-- The members of up to `want` jobs in turns: starting after group `cursor` (nil: the first),
-- each group's first job, then the room shared among the groups served. The members, the
-- group served first (nil: none).
local function take_turns(want, cursor)
  local taken, order, seen = {}, {}, {}
  local first, wrapped = next_group(cursor, false)
  while first and #taken < want do
    local gkey = parked_parts(first)
    if seen[gkey] then break end
    seen[gkey] = 1
    table.insert(order, gkey) table.insert(taken, first)
    -- Round once: past the wrap, a group from `cursor` on was served already.
    if #taken == want or (wrapped and cursor and gkey >= cursor) then break end
    local more
    first, more = next_group(gkey, wrapped)
    wrapped = wrapped or more
  end
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
  return taken, order[#order]
end

-- claim.lua's read of up to `want` (> 0) due jobs on a fair queue, after the group `cursor`
-- (`control` field "fturn" as read; nil: none): as read_due, the ids, those of them now in
-- `pending`, those in `ranked`, and the due time of the first job left (now while a bucket
-- still holds a job). `direct` (no limit can hold a job back: claim.lua leases every one):
-- the jobs leave their buckets for the claim itself, not for `pending`/`ranked`; their due
-- times fifth (id -> epoch ms), as take_out gives them.
local function fair_read(want, now, cursor, direct)
  local next_due = fair_intake(now)
  local taken, last = take_turns(want, cursor)
  if #taken > 0 then hashes(groups) end
  if last and last ~= cursor then redis.call('HSET', control, 'fturn', last) end
  local ids, from_pending, from_ranked, due_of = {}, {}, {}, {}
  local owners, loose, back, back_ranked = {}, {}, {}, {}
  for _, m in ipairs(taken) do
    local gkey, rank = parked_parts(m)
    local id = string.match(m, '\n([^\n]*)$')
    table.insert(ids, id)
    if gkey == '\n' then table.insert(loose, id) else table.insert(owners, id) table.insert(owners, gkey) end
    if direct then
      due_of[id] = int(rank % BAND)
    elseif math.floor(rank / BAND) == 100 then
      table.insert(back, int(rank % BAND)) table.insert(back, id) table.insert(from_pending, id)
    else
      table.insert(back_ranked, int(rank)) table.insert(back_ranked, id) table.insert(from_ranked, id)
    end
  end
  if #taken > 0 then batched('ZREM', parked, taken) end
  if #loose > 0 then batched('HDEL', groups, loose) end
  if #owners > 0 then batched('HSET', groups, owners) end
  if #back > 0 then batched('ZADD', pending, back) end
  if #back_ranked > 0 then batched('ZADD', ranked, back_ranked) end
  if redis.call('EXISTS', parked) == 1 then next_due = now end
  return ids, from_pending, from_ranked, next_due, direct and due_of or nil
end

-- The acknowledgements of a claim on a fair queue (ARGV[8..]), as hold_back's `released`:
-- their groups' parked jobs stay in their turns (the claim reads the turns).
local function fair_released()
  local released = {}
  for i = 8, #ARGV, 4 do released[ARGV[i]] = true end
  return released
end
