-- extend.lua: heartbeat: push back the lease deadline of running jobs.
-- KEYS: the queue's eleven keys (see _lib.lua).
-- ARGV[1] now (epoch seconds) or '' for Redis TIME
-- ARGV[2] lease seconds (number): lease_until = now + lease
-- ARGV[3..] pairs: job id, lease token
-- Returns one integer per job: 1 extended, 0 lease lost (nothing changed). A job not started
-- yet keeps its not-started score (lease_until - RESERVED). Idempotent.
local now = clock(ARGV[1])
local lease = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local n, score = owned(id, ARGV[i + 1])
  if n then
    local until_ = now + lease
    if score < 0 then until_ = until_ - RESERVED end
    redis.call('ZADD', R, 'XX', until_, id)
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
