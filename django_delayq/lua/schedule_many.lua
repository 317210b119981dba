-- schedule_many.lua: store a batch of new jobs without unique keys as pending, in one call
-- (schedule_many() sends jobs with a unique key through schedule.lua).
-- KEYS: the queue's eleven keys (see _lib.lua).
-- ARGV[1] now (epoch seconds) or '' for Redis TIME
-- ARGV[2] '1' when this call is sent again because the reply to an earlier one was lost
-- ARGV[3..] quadruples: job id (string, ULID), job record (bytes), 'delay' or 'at',
--           number (seconds from now for 'delay', epoch seconds for 'at'; as schedule.lua)
-- Returns {now, i1, due_at1, i2, due_at2, ...}: `now` is formatted as '%.6f' and the script
-- computes with exactly that value, so every job not listed was created with
-- due_at = now + max(delay, 0) or max(at, now) (the caller computes it, saving the reply).
-- Listed are the jobs (1-based index in the batch) that this call did not create because an
-- earlier send of it did: due_at is the stored job's, or '' when it already finished (a
-- tombstone in `done`, checked only when ARGV[2] is '1'). One wake token is pushed when the
-- earliest pending job is from the batch.
-- Errors (before anything is written): 'DELAYQ_DUPLICATE_ID' if an id is taken by another
-- record (never happens with ULIDs); 'DELAYQ_BAD_DUE' for a due time that is not a finite
-- epoch before year 2286.
local now = tonumber(fmt(clock(ARGV[1])))
local resend = ARGV[2] == '1'
local out, mine, plan = {fmt(now)}, {}, {}
zsets(P) lists(W)
for i = 3, #ARGV, 4 do
  local id, record, value = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 3])
  local due
  if ARGV[i + 2] == 'delay' then due = now + math.max(value, 0) else due = math.max(value, now) end
  if not (due < RESERVED) then return redis.error_reply('DELAYQ_BAD_DUE ' .. tostring(due)) end
  local stored = redis.call('HGET', J, id)
  local index = (i + 1) / 4
  if stored == record then  -- this very job, sent again
    table.insert(out, index)
    table.insert(out, fmt(tonumber(redis.call('ZSCORE', P, id)) or due))
  elseif stored then
    return redis.error_reply('DELAYQ_DUPLICATE_ID ' .. id)
  elseif resend and redis.call('ZSCORE', F, id) then
    table.insert(out, index)
    table.insert(out, '')
  else
    table.insert(plan, {id, record, due})
  end
end
if #plan > 0 then
  local fields, scores = {}, {}
  for _, job in ipairs(plan) do
    table.insert(fields, job[1]) table.insert(fields, job[2])
    table.insert(scores, job[3]) table.insert(scores, job[1])
    mine[job[1]] = true
  end
  batched('HSET', J, fields)
  batched('ZADD', P, scores)
end
local head = redis.call('ZRANGE', P, 0, 0)
if head[1] and mine[head[1]] then wake() end
return out
