-- concurrency.lua: concurrency limits of claim.lua's general path. `control` field
-- "conc:<task>" = N (from @task(concurrency=N)) lets at most N attempts of the task hold a
-- lease at once across all workers; field "hold:<task>" lists the holders ("<id>|<token>
-- ..."). Each holder is checked against `state` at every claim (it counts only while it
-- still holds that lease), so a slot frees as its job is acknowledged, fails, is handed
-- back, or is recovered after its worker died. A due job over the limit stays pending, due
-- CONC_GAP ms later (no attempt counted), counted in "limited". The queue's own limit,
-- "qconc" = N (from DELAYQ['QUEUES'], written by workers), with its holders in "qhold",
-- checked the same way (a holder the very call acknowledges counts as free): the claim
-- takes at most the free slots; due jobs left behind stay pending untouched and next_due is
-- then CONC_GAP ms ahead, so workers poll for a free slot instead of waking each other.
-- "qhold" left without "qconc" (the limit was removed) is dropped.
--- @include "leases"

local CONC_GAP = 250

-- The holders ("<id>|<token> ...") that still hold their lease, but those in `acking`.
local function live_holders(holders, acking)
  local live = {}
  for h_id, h_token in string.gmatch(holders or '', '([^|%s]+)|(%S+)') do
    local holder = h_id .. '|' .. h_token
    if not (acking and acking[holder]) and owned(h_id, h_token) then table.insert(live, holder) end
  end
  return live
end

-- The leases this call acknowledges (ARGV[8..] quadruples): "<id>|<token>" -> true.
local function acking_now()
  local acking = {}
  for i = 8, #ARGV, 4 do acking[ARGV[i] .. '|' .. ARGV[i + 1]] = true end
  return acking
end

-- The queue's own limit: its slots (nil: none), its live holders, "qhold" as read.
local function queue_limit()
  local qconc, qhold = unpack(redis.call('HMGET', control, 'qconc', 'qhold'))
  local slots = tonumber(qconc or '')
  return slots, slots and live_holders(qhold, acking_now()), qhold
end

-- Write the queue's holders back (`held`; `was`: "qhold" as read), or drop a "qhold" left
-- by a removed limit.
local function write_queue_holders(slots, held, was)
  if not slots then
    if was then redis.call('HDEL', control, 'qhold') end
    return
  end
  local holders = table.concat(held, ' ')
  if holders == '' then
    if was then redis.call('HDEL', control, 'qhold') end
  elseif holders ~= was then
    redis.call('HSET', control, 'qhold', holders)
  end
end

-- A task's limit (false: none), read once per call into `slots`, its live holders into
-- `holders`.
local function task_slots(task, slots, holders)
  local slot = slots[task]
  if slot == nil then
    slot = tonumber(redis.call('HGET', control, 'conc:' .. task) or '') or false
    slots[task] = slot
    if slot then holders[task] = live_holders(redis.call('HGET', control, 'hold:' .. task)) end
  end
  return slot
end

-- Write the tasks' holders back.
local function write_task_holders(holders)
  for task, live in pairs(holders) do
    if #live > 0 then
      redis.call('HSET', control, 'hold:' .. task, table.concat(live, ' '))
    else
      redis.call('HDEL', control, 'hold:' .. task)
    end
  end
end
