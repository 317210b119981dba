-- run_now.lua: make pending jobs due now (jobs already due keep their place).
-- KEYS: pending wake
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2..] job ids
-- Returns one integer per id: 1 pending (now due), 0 not pending (gone, running or dead).
-- Idempotent.
local now = clock(ARGV[1])
lists(W)
local out, found = {}, 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', P, ARGV[i])
  if score then
    if tonumber(score) > now then redis.call('ZADD', P, 'XX', int(now), ARGV[i]) end
    found = found + 1
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
if found > 0 then wake() end
return out
