-- schedule_many.lua: store a batch of new jobs without unique keys as pending, in one call
-- (schedule_many() sends jobs with a unique key through schedule.lua).
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] now (epoch seconds) or '' for Redis TIME
-- ARGV[2..] quadruples: job id (string, ULID), job record (JSON bytes), 'delay' or 'at',
--           number (seconds from now for 'delay', epoch seconds for 'at'; as schedule.lua)
-- Returns {now, i1, due_at1, i2, due_at2, ...}: `now` is formatted as '%.6f' and the script
-- computes with exactly that value, so every job not listed was created with
-- due_at = now + max(delay, 0) or max(at, now) (the caller computes it, saving the reply).
-- Listed are the jobs (1-based index in the batch) that were already stored with the same
-- record (a client re-sends a call whose reply was lost): nothing changed, here is the due_at
-- of the stored job. One wake token is pushed when the earliest pending job is from the batch.
-- Errors: 'DELAYQ_DUPLICATE_ID' if an id is taken by another record (never happens with
-- ULIDs); the jobs before it in the batch are stored.
local now = tonumber(fmt(clock(ARGV[1])))
local out, mine = {fmt(now)}, {}
for i = 2, #ARGV, 4 do
  local id, record, value = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 3])
  local due
  if ARGV[i + 2] == 'delay' then due = now + math.max(value, 0) else due = math.max(value, now) end
  if redis.call('HSETNX', J, id, record) == 1 then
    redis.call('ZADD', P, due, id)
    mine[id] = true
  elseif redis.call('HGET', J, id) == record then  -- this very job, sent again
    table.insert(out, (i + 2) / 4)
    table.insert(out, fmt(tonumber(redis.call('ZSCORE', P, id)) or due))
  else
    return redis.error_reply('DELAYQ_DUPLICATE_ID ' .. id)
  end
end
local head = redis.call('ZRANGE', P, 0, 0)
if head[1] and mine[head[1]] then wake() end
return out
