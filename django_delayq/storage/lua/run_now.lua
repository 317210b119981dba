-- run_now.lua: make pending jobs due now (jobs already due keep their place).
-- KEYS: pending wake ranked groups parked
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2..] job ids
-- A job with a priority (in `ranked`) keeps it.
-- Returns one integer per id: 1 pending (now due), 0 not pending (gone, running or dead).
-- Idempotent.
--- @include "base"
--- @include "priority"
--- @include "wake"
local now = clock(ARGV[1])
zsets(ranked) lists(wake)
local out, found = {}, 0
for i = 2, #ARGV do
  local due, priority = pending_due(ARGV[i])
  if due then
    if due > now then
      if priority == 0 then
        redis.call('ZADD', pending, 'XX', int(now), ARGV[i])
      else
        redis.call('ZADD', ranked, 'XX', int(ranked_score(priority, now)), ARGV[i])
      end
    end
    found = found + 1
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
if found > 0 then wake_worker() end
return out
