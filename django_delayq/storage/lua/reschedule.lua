-- reschedule.lua: move a pending job's due time, the job found by id or by unique key.
-- KEYS: pending jobs keys wake done ranked groups parked stats
-- ARGV[1] job id, or '' to look it up by ARGV[2]
-- ARGV[2] unique key, or ''
-- ARGV[3] 'delay' (ARGV[4] is milliseconds from Redis's now) or 'at' (ARGV[4] is an epoch in
--         milliseconds; a time in the past means now)
-- ARGV[4] integer (milliseconds)
-- ARGV[5] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[6] the call's id (a string of the caller's, unique to this call: a ULID)
-- ARGV[7] '1' when this call is sent again because the reply to an earlier one was lost,
--         else ''
-- A pending job is in `pending`, in `ranked` (it keeps its priority) or parked in `parked`
-- (a due job of a group at its limit: it goes back to `pending`/`ranked` at its new due
-- time, and claim.lua parks it again while its group is full). A job claimed, running,
-- dead, finished or unknown is not pending: nothing changes. The job keeps its record,
-- attempts, unique key, link, group and trace. A worker is woken when no job of `pending` is
-- due before the new due time (as schedule.lua wakes). A move is counted in `stats`
-- ("rescheduled", the total delayq_jobs_rescheduled_total reads); a re-send is not.
-- Returns {id, due_at, record} when the job was pending and is now due at due_at (epoch
-- milliseconds), {} otherwise.
-- Errors: 'DELAYQ_BAD_DUE' if the due time is not an epoch before year 2286 (nothing changes).
-- Idempotent: a call that moved a job marks 'r:<call id>' in `done` (its score the call's now,
-- dropped after DONE_TTL as the tombstones are). The same call sent again (ARGV[7] '1') finds
-- the mark and moves nothing: it answers {id, the due time the first send set, record}
-- (record '' when the job is gone since; by key, id is the key's holder now, {} when the key
-- names none). Without the mark (the first send never ran, or found nothing to move), a
-- re-send runs as a first send.
-- The path of a job of `pending` (priority 0, not parked) is written out; the others use
-- priority.lua's helpers.
--- @include "base"
--- @include "priority"
--- @include "wake"
--- @include "stats"
local mode, value = ARGV[3], tonumber(ARGV[4])
local now = clock(ARGV[5])
local mark = 'r:' .. ARGV[6]
local id = ARGV[1]
if id == '' then
  id = redis.call('HGET', unique_keys, ARGV[2])
  if not id then return {} end
end
if ARGV[7] == '1' then
  local first = redis.call('ZSCORE', done, mark)
  if first then  -- this very call, sent again: it moved the job
    first = tonumber(first)
    local due = math.max(value, first)
    if mode == 'delay' then due = first + math.max(value, 0) end
    return {id, due, redis.call('HGET', jobs, id) or ''}
  end
end
local due
if mode == 'delay' then due = now + math.max(value, 0) else due = math.max(value, now) end
if not (due < RESERVED) then return redis.error_reply('DELAYQ_BAD_DUE ' .. tostring(due)) end
local at = int(due)
local plain = redis.call('ZSCORE', pending, id)
local priority = 0
if not plain then
  local old
  old, priority = pending_due(id)
  if not old then return {} end
end
-- Reads before writes: is a job of `pending` due before the new time (if not, wake a
-- worker: its sleep may be too long; the HGET fails a `stats` of the wrong type before any
-- write); the mark's ZADD comes first, so a `done` of the wrong type fails the call before
-- anything moved.
redis.call('HGET', stats, 'rescheduled')
local earliest = #redis.call('ZRANGEBYSCORE', pending, '-inf', '(' .. at, 'LIMIT', 0, 1) == 0
if earliest then redis.call('LLEN', wake) end
redis.call('ZADD', done, int(now), mark)
redis.call('ZREMRANGEBYSCORE', done, '-inf', '(' .. int(now - DONE_TTL))
if plain then
  redis.call('ZADD', pending, at, id)
else
  unpend(id)
  pend(id, due, priority)
end
if earliest then wake_worker() end
tally('rescheduled', 1)
return {id, due, redis.call('HGET', jobs, id) or ''}
