-- schedule_many.lua: store a batch of new jobs without unique keys as pending, in one call
-- (schedule_many() sends jobs with a unique key through schedule.lua).
-- KEYS: pending jobs wake done relayed ranked links groups parked
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] '1' when this call is sent again because the reply to an earlier one was lost;
--         'relay' for the relay of outbox rows (outbox/rows.py): as '1', and run once (outbox promise
--         I6): a job whose id is marked in `relayed` is never stored again (listed, as one
--         an earlier send created), and every job of the batch is marked (ZADD relayed now)
-- ARGV[3..] quintuples: job id (string, ULID), job record (bytes), 'delay' or 'at', integer
--           (milliseconds from now for 'delay', an epoch in milliseconds for 'at'), the job's
--           link (JSON, see `links` in include/base.lua; its record has flag 'l') or ''
-- A job whose record's header has a priority waits in `ranked` (see schedule.lua).
-- Returns {now, i1, due_at1, i2, due_at2, ...} (epoch milliseconds): every job not listed was
-- created with due_at = now + max(delay, 0) or max(at, now) (the caller computes it, saving
-- the reply). Listed are the jobs (1-based index in the batch) that this call did not create
-- because an earlier send of it did: due_at is the stored job's, or '' when it already
-- finished (a tombstone in `done`, checked only when ARGV[2] is '1'). One wake token is
-- pushed when the earliest pending job is from the batch.
-- Errors (before anything is written): 'DELAYQ_DUPLICATE_ID' if an id is taken by another
-- record (never happens with ULIDs); 'DELAYQ_BAD_DUE' for a due time that is not an epoch
-- before year 2286.
--- @include "base"
--- @include "record"
--- @include "priority"
--- @include "wake"
local now = clock(ARGV[1])
local relay = ARGV[2] == 'relay'
local resend = relay or ARGV[2] == '1'
local out, plan, earliest = {now}, {}, nil
zsets(pending) lists(wake)
if relay then zsets(relayed) end
local marks, ids, found = {}, {}, nil
for i = 3, #ARGV, 5 do ids[#ids + 1] = ARGV[i] end
for i = 3, #ARGV, 5 do
  local id, record, value = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 3])
  local due
  if ARGV[i + 2] == 'delay' then due = now + math.max(value, 0) else due = math.max(value, now) end
  if not (due < RESERVED) then return redis.error_reply('DELAYQ_BAD_DUE ' .. tostring(due)) end
  -- The stored records of every id, read once where the first job's was (one HMGET per
  -- 1,000 ids rather than an HGET per job)
  found = found or batched('HMGET', jobs, ids)
  local index = (i + 2) / 5
  local stored = found[index]
  if relay then table.insert(marks, int(now)) table.insert(marks, id) end
  if relay and redis.call('ZSCORE', relayed, id) then  -- relayed before: never stored again
    table.insert(out, index)
    table.insert(out, stored and (pending_due(id) or due) or '')
  elseif stored == record then  -- this very job, sent again
    table.insert(out, index)
    table.insert(out, pending_due(id) or due)
  elseif stored then
    return redis.error_reply('DELAYQ_DUPLICATE_ID ' .. id)
  elseif resend and redis.call('ZSCORE', done, id) then
    table.insert(out, index)
    table.insert(out, '')
  else
    table.insert(plan, i)  -- its place in ARGV
    table.insert(plan, due)
    if not earliest or due < earliest then earliest = due end
  end
end
if #plan > 0 then  -- pairs: a job's place in ARGV, its due time
  local wakes = #redis.call('ZRANGEBYSCORE', pending, '-inf', '(' .. int(earliest), 'LIMIT', 0, 1) == 0
  local fields, scores, ranked_args, link_args = {}, {}, {}, {}
  local due_of, score_of = nil, nil  -- the last due time written as a score (most are alike)
  for n = 1, #plan, 2 do
    local i, due = plan[n], plan[n + 1]
    local id, record, link = ARGV[i], ARGV[i + 1], ARGV[i + 4]
    fields[n], fields[n + 1] = id, record
    if link ~= '' then table.insert(link_args, id) table.insert(link_args, link) end
    -- a priority follows the flags (no unique key here): header() reads it when one may
    local after, priority = string.match(record, '^%d+%l*()'), 0
    if after and string.sub(record, after, after) ~= '\n' then
      local _, _, _, read = header(record)
      priority = read
    end
    if priority == 0 then
      if due ~= due_of then due_of, score_of = due, int(due) end
      table.insert(scores, score_of) table.insert(scores, id)
    else
      table.insert(ranked_args, int(ranked_score(priority, due))) table.insert(ranked_args, id)
    end
  end
  if #ranked_args > 0 then zsets(ranked) end
  if #link_args > 0 then hashes(links) end
  batched('HSET', jobs, fields)
  if #link_args > 0 then batched('HSET', links, link_args) end
  if #scores > 0 then batched('ZADD', pending, scores) end
  if #ranked_args > 0 then batched('ZADD', ranked, ranked_args) end
  if wakes then wake_worker() end
end
if #marks > 0 then batched('ZADD', relayed, marks) end
return out
