-- rate.lua: rate limits of claim.lua's general path. `control` field "rate:<task>" =
-- "<count>/<period ms>" (written by workers from @task(rate=...)) paces the task's claims
-- to one every period / count (GCRA without burst, field "tat:<task>" = the next free time
-- in microseconds), so no window of one period holds more than count claims (above
-- 1000/s, at most one millisecond's worth more: the claims of one millisecond, whose time
-- the script knows to the millisecond, take the slots of all of it). A due job over its
-- task's limit stays pending, its due time moved to when the limit allows it (no attempt
-- counted, never leased); next_due includes that time, so workers sleep until then. Each
-- such hold-back is counted in `stats` (total "limited"). A group's rate ("grate:<task>")
-- is paced the same way (group_limits.lua).
--- @include "base"

-- A rate "<count>/<period ms>" as the microseconds between two claims; nil for none.
local function rate_interval(raw)
  local count, period = string.match(raw or '', '^(%d+)/(%d+)$')
  if count and tonumber(count) > 0 then return math.ceil(tonumber(period) * 1000 / tonumber(count)) end
  return nil
end

-- nil when the task's rate allows a claim at `now_us` (taking it: its next free time moves
-- on), else the time (ms) it will. `now` counts milliseconds: a claim may take the slots of
-- the rest of its millisecond when they are closer than that (a rate above 1000/s), else a
-- rate of 5000/s would give one claim a millisecond, 1000/s.
local function task_pace(task, rate, now_us)
  local tat = tonumber(redis.call('HGET', control, 'tat:' .. task) or '0') or 0
  if tat > now_us + (rate < 1000 and 999 or 0) then return math.ceil(tat / 1000) end
  redis.call('HSET', control, 'tat:' .. task, int(math.max(tat, now_us) + rate))
  return nil
end
