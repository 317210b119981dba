-- controls.lua: whether anything of a queue's `control` hash applies to the jobs a claim
-- read, for claim_plain.lua on a queue whose control hash exists (a limit of another task,
-- a group limit of a task whose jobs are not grouped): the fields claim.lua's general path
-- would act on, read in one HMGET. The queue's "paused", "qconc" and "qhold" (the holders a
-- removed queue limit left, which claim.lua drops), "fair" (fair.lua's turns); per task of the jobs, "rate:<task>" and
-- "conc:<task>" (rate.lua, concurrency.lua); for a task with a grouped job among them
-- (record flag 'g'), "gconc:<task>" and "grate:<task>" (group_limits.lua). A field that is
-- set counts, whatever its value: claim.lua reads it then.
--- @include "base"
--- @include "record"

-- Whether any of those fields is set for the jobs of `records` (as HMGET read them: false
-- for a missing record, which names no task).
local function controls_apply(records)
  local fields, seen = {'paused', 'qconc', 'qhold', 'fair'}, {}  -- seen: task -> 1, 2 once grouped
  for i = 1, #records do
    local raw = records[i]
    local task = raw and string.match(raw, '^[^\n]*\n([^\n]*)')  -- as hold_back reads it
    local was = task and seen[task]
    if task and was ~= 2 then
      if not was then
        seen[task] = 1
        fields[#fields + 1] = 'rate:' .. task
        fields[#fields + 1] = 'conc:' .. task
      end
      if has(string.match(raw, '^%d+(%l*)') or '', 'g') then  -- header()'s flags, cheaper
        seen[task] = 2
        fields[#fields + 1] = 'gconc:' .. task
        fields[#fields + 1] = 'grate:' .. task
      end
    end
  end
  local values = batched('HMGET', control, fields)
  for i = 1, #values do
    if values[i] then return true end
  end
  return false
end
