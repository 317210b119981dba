-- ends.lua: a job leaves for good: its fields go, a tombstone in `done` remembers it; the
-- dead set's trim.
--- @include "base"

local function forget(id)
  redis.call('HDEL', jobs, id) redis.call('HDEL', state, id) redis.call('HDEL', errors, id) redis.call('HDEL', links, id)
  redis.call('HDEL', groups, id) redis.call('HDEL', trace, id)
end

-- Remember for DONE_TTL that `ids` finished (flag 'i'), and drop older tombstones. `long`:
-- ids whose tombstone is kept for a day (flag 'e': a batch's callback or a chain's next step,
-- stored under an id derived from what decided it, which a forwarding re-sent after a crash
-- must find however long ago the job ran): their score is put ahead by LONG_TTL - DONE_TTL.
local function tombstone(ids, now, long)
  if #ids == 0 then return end
  local args, at = {}, int(now)
  for _, id in ipairs(ids) do
    table.insert(args, (long and long[id]) and int(now + LONG_TTL - DONE_TTL) or at)
    table.insert(args, id)
  end
  batched('ZADD', done, args)
  redis.call('ZREMRANGEBYSCORE', done, '-inf', '(' .. int(now - DONE_TTL))
end

-- Bounded trim of the dead set: by age, then by count, at most 100 of each per call.
local function trim_dead(now, max_age, max_count)
  local old = redis.call('ZRANGEBYSCORE', dead, '-inf', '(' .. int(now - max_age), 'LIMIT', 0, 100)
  for _, id in ipairs(old) do redis.call('ZREM', dead, id) forget(id) end
  local excess = redis.call('ZCARD', dead) - max_count
  if excess > 0 then
    for _, id in ipairs(redis.call('ZRANGE', dead, 0, math.min(excess, 100) - 1)) do
      redis.call('ZREM', dead, id)
      forget(id)
    end
  end
end
