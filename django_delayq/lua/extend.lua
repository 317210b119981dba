-- extend.lua: heartbeat: push back the lease deadline of running jobs.
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] lease seconds (number): lease_until = now + lease
-- ARGV[2] now (epoch seconds) or '' for Redis TIME
-- ARGV[3..] pairs: job id, lease token
-- Returns one integer per job: 1 extended, 0 lease lost (nothing changed).
local lease = tonumber(ARGV[1])
local now = clock(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if owned(id, ARGV[i + 1]) then
    redis.call('ZADD', R, 'XX', now + lease, id)
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
