-- extend.lua: heartbeat: push back the lease deadline of running jobs.
-- KEYS: running state
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] lease (integer milliseconds): lease_until = now + lease
-- ARGV[3..] pairs: job id, lease token
-- Returns one integer per job: 1 extended, 0 lease lost (nothing changed). A job not started
-- yet keeps its not-started score (lease_until - RESERVED). Idempotent.
--- @include "base"
--- @include "leases"
local now = clock(ARGV[1])
local lease = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local score = owned(id, ARGV[i + 1]) and tonumber(redis.call('ZSCORE', running, id))
  if score then
    local lease_until = now + lease
    if score < 0 then lease_until = lease_until - RESERVED end
    redis.call('ZADD', running, 'XX', int(lease_until), id)
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
