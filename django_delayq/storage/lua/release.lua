-- release.lua: a stopping worker hands back jobs it will not finish: running -> pending,
-- due now, and the attempt is not counted (the job did not fail).
-- KEYS: pending running dead jobs state keys wake stats errors claims ranked links forward groups parked holds
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] worker instance whose `claims` entries to drop (it stops), or ''
-- ARGV[3..] pairs: job id, lease token
-- Returns one integer per job: 1 back in pending; 2 dead-lettered instead, with a 'Superseded'
-- error, because another pending job holds its unique key; 0 not running under that token
-- (nothing changed). Idempotent: sent again after a lost reply, it answers 1 or 2 again.
-- A job dead-lettered here leaves its link, if any, in `forward` (include/base.lua).
--- @include "base"
--- @include "record"
--- @include "leases"
--- @include "unique_keys"
--- @include "priority"
--- @include "wake"
--- @include "stats"
--- @include "errors"
--- @include "links"
--- @include "groups"
local now = clock(ARGV[1])
zsets(pending, ranked, running, dead) hashes(jobs, state, unique_keys, errors, claims, stats, links, forward) lists(wake)
local out, back = {}, false
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local n = owned(id, token)
  if n then
    redis.call('ZREM', running, id)
    set_state(id, n, token)  -- settled: the token stays, so a re-sent release answers the same
    local _, flags, ukey, priority = header(redis.call('HGET', jobs, id))
    group_left(id, flags)
    if take_key(ukey, id) then
      pend(id, now, priority)
      table.insert(out, 1)
      back = true
    else
      push_error(id, superseded(ukey, now), 10)
      forward_end(id, 'dead', now)
      redis.call('ZADD', dead, int(now), id)
      tally('dead', 1)
      table.insert(out, 2)
    end
  else
    local _, t, held = state_of(id)
    if t == token and not held and pending_due(id) then
      table.insert(out, 1)
    elseif t == token and not held and redis.call('ZSCORE', dead, id) then
      table.insert(out, 2)
    else
      table.insert(out, 0)
    end
  end
end
if ARGV[2] ~= '' then redis.call('HDEL', claims, ARGV[2], ARGV[2] .. '/r') end
if back then wake_worker() end  -- a peer takes the jobs handed back
return out
