-- promote_followers.lua: followers (unique_until='end', include/followers.lua) whose leader
-- ended without promoting them (a 0.7.0 worker acked, failed or recovered it during a rolling
-- deploy) become pending: one step of a scan of `keys`, run by the recovery duty
-- (storage/followers.py), not by any transition of a job's life.
-- KEYS: pending running jobs state keys wake ranked groups parked
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] cursor of the scan of `keys` ('0' starts it), as the last call returned it
-- ARGV[3] how many fields of `keys` to look at (HSCAN's COUNT hint)
-- Returns {next cursor ('0': the scan went round), id of each follower promoted...}.
-- A follower mark ("\0f" .. key) is promoted (promote_follower: pending at max(not before,
-- now), the key its own when it names no job) when the key's job, its leader, has ended:
-- the key names no job, or one whose record is gone (acked), or one neither pending (in
-- `pending`, `ranked` or `parked`: a retry is not an end) nor running (in `running`, or its
-- state holding a lease): dead, or the follower itself. The key leaves the ended job, as
-- its end does (release_key), and the follower takes it. A mark naming no record is dropped.
-- Idempotent: a re-send finds no mark for what it promoted, and a leader pending or running
-- again holds its follower back; a key without a follower mark is never touched.
--- @include "base"
--- @include "leases"
--- @include "priority"
--- @include "followers"
local now = clock(ARGV[1])
local scan = redis.call('HSCAN', unique_keys, ARGV[2], 'MATCH', '\0f*', 'COUNT', tonumber(ARGV[3]))
local out, fields = {scan[1]}, scan[2]
if #fields == 0 then return out end
zsets(pending, ranked, parked) hashes(jobs, state) lists(wake)
for i = 1, #fields, 2 do
  local ukey = string.sub(fields[i], 3)
  local leader = redis.call('HGET', unique_keys, ukey)
  local over = not leader or redis.call('HEXISTS', jobs, leader) == 0
  if not over then
    over = not pending_due(leader) and not redis.call('ZSCORE', running, leader)
      and not select(3, state_of(leader))
  end
  if over then
    if leader then redis.call('HDEL', unique_keys, ukey) end  -- as its end would have
    local fid = promote_follower(ukey, now)
    if fid then table.insert(out, fid) end
  end
end
return out
