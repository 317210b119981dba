-- occur.lua: store occurrences of recurring schedules (recurring/), each at most once.
-- KEYS: pending jobs wake done ranked
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] decided at (epoch milliseconds, Redis's clock): when the caller read the durable
--         record (the database) that allowed these occurrences; after ARGV[2] + STALE the
--         call is refused whole (a finished occurrence keeps its tombstone DONE_TTL > STALE,
--         so one that ran after the read is still seen here)
-- ARGV[3] milliseconds: wake a sleeping worker only for an occurrence due within this
--         (its MAX_SLEEP: a worker never sleeps longer, so a later one needs no wake; each
--         wake costs a claim round trip)
-- ARGV[4..] triples: job id (deterministic, recurring/ids.py), record (flag 'i'), due at
--         (epoch milliseconds; a time in the past means now)
-- An occurrence goes where schedule.lua puts a job: `pending`, or `ranked` when its record's
-- header carries a priority other than 0 (the task's @task(priority=...)).
-- Returns one outcome a triple, in order: 'created'; 'exists' (the id is pending, claimed,
-- running or dead); 'done' (a tombstone: it finished or was cancelled within DONE_TTL);
-- 'stale' (refused: the decision is older than STALE).
-- Idempotent: sent again it finds its own jobs and answers 'exists'.
--- @include "base"
--- @include "record"
--- @include "priority"
--- @include "wake"
local STALE = 60000
local now = clock(ARGV[1])
local decided = tonumber(ARGV[2])
local wake_within = tonumber(ARGV[3])
local out = {}
if decided and now > decided + STALE then
  for i = 4, #ARGV, 3 do out[#out + 1] = 'stale' end
  return out
end
zsets(pending, done, ranked) hashes(jobs) lists(wake)
local woke = false
for i = 4, #ARGV, 3 do
  local id, record, due = ARGV[i], ARGV[i + 1], math.max(tonumber(ARGV[i + 2]), now)
  if redis.call('HEXISTS', jobs, id) == 1 then
    out[#out + 1] = 'exists'
  elseif redis.call('ZSCORE', done, id) then
    out[#out + 1] = 'done'
  else
    local _, _, _, priority = header(record)
    local soon = due <= now + wake_within
    -- (a prioritised one may be claimed before earlier jobs of `pending`: it always wakes, if soon)
    local earliest = soon and (priority ~= 0
      or #redis.call('ZRANGEBYSCORE', pending, '-inf', '(' .. int(due), 'LIMIT', 0, 1) == 0)
    redis.call('HSET', jobs, id, record)
    pend(id, due, priority)
    if earliest and not woke then wake_worker() woke = true end
    out[#out + 1] = 'created'
  end
end
return out
