-- batch_cancel.lua: cancel a batch: no callback is decided from now on (one decided before
-- is still placed); returns its members that have not ended, for the caller to cancel.
-- KEYS: batch ended members
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- Returns {found (0|1), id1, queue1, id2, queue2, ...}: found 0 when the batch is unknown
-- (never opened, or expired). Idempotent: the first call's time is kept.
--- @include "base"
local now = clock(ARGV[1])
hashes(batch, ended, members)
if redis.call('EXISTS', batch) == 0 then return {0} end
redis.call('HSETNX', batch, 'cancelled', int(now))
local out = {1}
local all_members = redis.call('HGETALL', members)
for i = 1, #all_members, 2 do
  if not redis.call('HGET', ended, all_members[i]) then
    table.insert(out, all_members[i]) table.insert(out, all_members[i + 1])
  end
end
return out
