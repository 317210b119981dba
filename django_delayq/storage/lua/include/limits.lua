-- limits.lua: claim.lua's general path applies the limits of rate (rate.lua), concurrency
-- (concurrency.lua) and groups (group_limits.lua) to the due jobs it read.
--- @include "base"
--- @include "record"
--- @include "priority"
--- @include "stats"
--- @include "rate"
--- @include "concurrency"
--- @include "group_limits"

-- The jobs read (`c.ids`, their `c.records` and `c.states`, `c.from_pending`,
-- `c.from_ranked`) less those the limits hold back, in place: a job of a group at its
-- concurrency limit is parked; one read past `c.room` (nil: none) stays pending untouched;
-- one over its task's concurrency or rate, or its group's rate, stays pending, due when
-- the limit allows it. `c.next_due` moves to the earliest of those times; `c.grouping` is
-- group_limits(now), `c.queue_full` whether the queue's own limit capped the claim.
-- `c.limited` is set when a limit of a job's task or group applied to it (held back or
-- not): claim_plain.lua would not have claimed it.
local function hold_back(c, now, token)
  zsets(running, parked) hashes(stats, groups, holds)
  local grouping, records = c.grouping, c.records
  local rates, deferred, held = {}, {}, 0
  local slots, holders = {}, {}  -- per task: the limit (false: none), live holders
  local now_us = now * 1000
  local kept_ids, kept_records, kept_states = {}, {}, {}
  local function later(due) if not c.next_due or due < c.next_due then c.next_due = due end end
  for i, id in ipairs(c.ids) do
    local wait, gkey, to_park, untouched = nil, nil, false, false
    local task = records[i] and string.match(records[i], '^[^\n]*\n([^\n]*)')
    if task and has((select(2, header(records[i]))), 'g') then gkey = grouping.of(id) end
    local glimit = gkey and grouping.limits(task)
    if glimit and (glimit.conc or glimit.rate) then c.limited = true end
    if glimit and glimit.conc and #grouping.holders(gkey) >= glimit.conc then
      to_park = true
    elseif c.room and #kept_ids >= c.room then
      untouched = true
    elseif task then
      if rates[task] == nil then rates[task] = rate_interval(redis.call('HGET', control, 'rate:' .. task)) or false end
      local slot = task_slots(task, slots, holders)
      if slot or rates[task] then c.limited = true end
      if slot and #holders[task] >= slot then
        wait = now + CONC_GAP
      elseif rates[task] then
        wait = task_pace(task, rates[task], now_us)
      end
      if not wait and glimit and glimit.rate then wait = grouping.pace(gkey, glimit.rate, now_us) end
      if slot and not wait then table.insert(holders[task], id .. '|' .. token) end
      if glimit and glimit.conc and not wait then table.insert(grouping.holders(gkey), id .. '|' .. token) end
    end
    if to_park then
      grouping.park(id, gkey)
      deferred[id] = true
      held = held + 1
    elseif untouched then
      deferred[id] = true  -- not removed from pending below, not leased
      later(c.queue_full and now + CONC_GAP or now)
    elseif wait then
      local _, _, _, priority = header(records[i])
      pend(id, wait, priority)
      deferred[id] = true
      held = held + 1
      later(wait)
    else
      table.insert(kept_ids, id) table.insert(kept_records, records[i] or false)
      table.insert(kept_states, c.states[i] or false)
    end
  end
  grouping.write()
  write_task_holders(holders)
  if next(deferred) then
    local function without(list)
      local out = {}
      for _, id in ipairs(list) do if not deferred[id] then table.insert(out, id) end end
      return out
    end
    c.from_pending, c.from_ranked = without(c.from_pending), without(c.from_ranked)
    c.ids, c.records, c.states = kept_ids, kept_records, kept_states
    tally('limited', held)
  end
end
