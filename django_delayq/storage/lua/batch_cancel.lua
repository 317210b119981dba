-- batch_cancel.lua: cancel a batch: no callback is decided from now on (one decided before
-- is still placed); returns its members that have not ended, for the caller to cancel.
-- KEYS: batch ended members
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- Returns {found (0|1), id1, queue1, id2, queue2, ...}: found 0 when the batch is unknown
-- (never opened, or expired). Idempotent: the first call's time is kept.
local now = clock(ARGV[1])
hashes(B, N, H)
if redis.call('EXISTS', B) == 0 then return {0} end
redis.call('HSETNX', B, 'cancelled', int(now))
local out = {1}
local members = redis.call('HGETALL', H)
for i = 1, #members, 2 do
  if not redis.call('HGET', N, members[i]) then
    table.insert(out, members[i]) table.insert(out, members[i + 1])
  end
end
return out
