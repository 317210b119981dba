-- group_limits.lua: limits per group, on claim.lua's general path (`control` fields
-- "gconc:<task>" = N and "grate:<task>" = "<count>/<period ms>", from @task(group_concurrency=,
-- group_rate=)). A job scheduled with group= (record flag 'g', its group key
-- "<task>\n<group>" in `groups`) is checked against its group's limits as the task's are
-- checked against the task's. Holders per group key live in `holds` (checked against `state`
-- at every claim, and dropped as they leave running: group_left in groups.lua). A due job of
-- a group at its concurrency limit is parked: moved out of `pending`/`ranked` into `parked`
-- (see base.lua), so it is never read again until a slot frees (the next claims read the
-- jobs behind it: no head-of-line blocking, and no claim reads a parked job twice). A due
-- job over its group's rate stays pending, due when the group's rate allows it, the jobs of
-- one group held back by one call spread one rate interval apart. A call also sweeps one
-- group of `parked` (round robin, cursor in `control` field "gsweep"; at most one sweep per
-- SWEEP_GAP ms, "gsweep_at"): its parked jobs go back to pending for the group's free slots,
-- which heals a slot no hook freed (a 0.5.0 worker's ack, a limit raised or removed).
--- @include "base"
--- @include "record"
--- @include "leases"
--- @include "priority"
--- @include "groups"
--- @include "rate"
--- @include "concurrency"

local SWEEP_GAP = 50

-- The limits per group of one claim call at `now`, made only on the general path (a Lua
-- function costs each call that makes it): a table of functions over the call's own state,
-- each group's limits, holders and rate read once and written back by write().
local function group_limits(now)
  -- A task's limits ({conc = N or nil, rate = microseconds or nil}), the live holders of a
  -- group key, its rate state (as stored, as advanced by the jobs this call holds back).
  local limit_of, live_of, tat_of, virtual_of, dirty = {}, {}, {}, {}, {}
  local g = {released = {}}  -- released: ids whose group slot release_acked gave away
  function g.limits(task)
    local l = limit_of[task]
    if l == nil then
      local conc, rate = unpack(redis.call('HMGET', control, 'gconc:' .. task, 'grate:' .. task))
      l = {conc = tonumber(conc or ''), rate = rate_interval(rate)}
      limit_of[task] = l
    end
    return l
  end
  function g.holders(gkey)
    local live = live_of[gkey]
    if not live then
      live = live_holders(redis.call('HGET', holds, gkey), acking_now())
      live_of[gkey] = live
    end
    return live
  end
  -- nil when the group's rate allows a claim now (taking it), else when it will.
  function g.pace(gkey, rate, now_us)
    local tat = tat_of[gkey]
    if tat == nil then
      tat = tonumber(redis.call('HGET', holds, '\n' .. gkey) or '') or 0
      tat_of[gkey] = tat
    end
    if tat > now_us + (rate < 1000 and 999 or 0) then
      local at = math.max(virtual_of[gkey] or tat, tat)
      virtual_of[gkey] = at + rate
      return math.ceil(at / 1000)
    end
    tat_of[gkey], dirty[gkey] = math.max(tat, now_us) + rate, true
    return nil
  end
  function g.write()
    for gkey, live in pairs(live_of) do
      if #live > 0 then redis.call('HSET', holds, gkey, table.concat(live, ' '))
      else redis.call('HDEL', holds, gkey) end
    end
    for gkey, _ in pairs(dirty) do redis.call('HSET', holds, '\n' .. gkey, int(tat_of[gkey])) end
    if next(dirty) then
      -- The rate state of groups that went quiet: a next free time already past counts as
      -- none, so it is dropped, 20 fields looked at per call that paces a group (cursor in
      -- `control` field "gscan"), and `holds` does not grow with every group ever seen.
      local scan = redis.call('HSCAN', holds, redis.call('HGET', control, 'gscan') or '0', 'COUNT', 20)
      for i = 1, #scan[2], 2 do
        local field = scan[2][i]
        if string.sub(field, 1, 1) == '\n' and (tonumber(scan[2][i + 1]) or 0) <= now * 1000 then
          redis.call('HDEL', holds, field)
        end
      end
      redis.call('HSET', control, 'gscan', scan[1])
    end
  end
  function g.of(id)
    local v = redis.call('HGET', groups, id)
    return v and string.match(v, '^([^\n]*\n[^\n]*)')
  end
  -- A due job of a full group leaves pending for `parked`.
  function g.park(id, gkey)
    local due, priority = pending_due(id)
    unpend(id)
    local member = gkey .. '\n' .. string.format('%020d', ranked_score(priority, due)) .. '\n' .. id
    redis.call('ZADD', parked, 0, member)
    redis.call('HSET', groups, id, member)
  end
  -- The slots this call's acknowledgements free (ARGV[8..], flag 'g' in their info, still
  -- holding their lease): each group's first parked job goes back to pending before the
  -- jobs are read, so this very call can claim it (ack_from then only drops the holder).
  -- On a fair queue (`fair`) the parked job stays in its turn: the call reads the turns.
  function g.release_acked(fair)
    for i = 8, #ARGV, 4 do
      local id = ARGV[i]
      if fair then
        g.released[id] = true
      elseif has(string.match(ARGV[i + 2], '^[^=]*'), 'g') and owned(id, ARGV[i + 1]) then
        local gkey = g.of(id)
        if gkey then unpark_group(gkey, 1) g.released[id] = true end
      end
    end
  end
  -- One group of `parked` (the one after the cursor): its jobs go back to pending for the
  -- group's free slots (the holders this call acknowledges still count: release_acked
  -- gave their slots).
  function g.sweep()
    local cursor, at = unpack(redis.call('HMGET', control, 'gsweep', 'gsweep_at'))
    if now < (tonumber(at or '') or 0) then return end
    zsets(pending, ranked, parked) hashes(groups, holds) lists(wake)
    local first = {}
    if cursor then first = redis.call('ZRANGEBYLEX', parked, '(' .. cursor .. '\n\255', '+', 'LIMIT', 0, 1) end
    if not first[1] then first = redis.call('ZRANGEBYLEX', parked, '-', '+', 'LIMIT', 0, 1) end
    local gkey = parked_parts(first[1])
    if not gkey then return end
    redis.call('HSET', control, 'gsweep', gkey, 'gsweep_at', int(now + SWEEP_GAP))
    local conc = g.limits(string.match(gkey, '^[^\n]*')).conc
    local free = 100
    if conc then free = conc - #live_holders(redis.call('HGET', holds, gkey)) end
    if free > 0 then unpark_group(gkey, free) end
  end
  return g
end
