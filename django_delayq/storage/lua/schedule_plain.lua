-- schedule_plain.lua: store a plain job as pending: what schedule.lua does for a record with
-- no unique key, priority 0 and none of the flags 'e', 'l', 'g', 't' (jobs/record.py's
-- Encoded.plain_schedule), off the outbox and not relayed, in a fraction of its Lua.
-- KEYS: pending jobs wake done
-- ARGV[1] job id (string, ULID)
-- ARGV[2] job record (bytes, see jobs/record.py; read only by Python)
-- ARGV[3] 'delay' (ARGV[4] is milliseconds from Redis's now) or 'at' (ARGV[4] is an epoch in
--         milliseconds; a time in the past means now)
-- ARGV[4] integer (milliseconds)
-- ARGV[5] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[6] '1' when this call is sent again because the reply to an earlier one was lost,
--         else ''
-- ARGV[7] the queue's name, with KEYS[5] (both optional, one Redis only): KEYS[5] is the
--         registry of queues, {prefix}:queues; the queue is added to it (SADD) before
--         anything else, whatever the outcome, as schedule.lua does.
-- The job waits in `pending`; a worker is woken (an entry pushed on `wake`, at most 8 kept)
-- when no pending job is due before it, as schedule.lua wakes.
-- Returns the job's due_at (an integer, epoch milliseconds): it was created; or 0: it was
-- done (one integer, not schedule.lua's {outcome, id, due_at}: the caller knows the id, and
-- an integer is the cheapest reply to send and read).
-- Idempotent: the same call sent again (same id and record) changes nothing and returns
-- the due_at of the stored job while the job waits, runs or lies dead ('created'), and 0
-- when it already finished (its id in `done`, kept DONE_TTL for records with flag 'i';
-- checked only when ARGV[6] is '1'), as schedule.lua answers 'done'.
-- Errors: 'DELAYQ_DUPLICATE_ID' if the id is taken by another record (never happens with
-- ULIDs); 'DELAYQ_BAD_DUE' if the due time is not an epoch before year 2286.
-- It names one helper, wake_worker (each helper a script names is a closure Lua makes on
-- every call), and base's constant RESERVED; the rest is written out.
--- @include "base"
--- @include "wake"

local id, record, value = ARGV[1], ARGV[2], tonumber(ARGV[4])
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if KEYS[5] then redis.call('SADD', KEYS[5], ARGV[7]) end
local due
if ARGV[3] == 'delay' then due = now + math.max(value, 0) else due = math.max(value, now) end
if not (due < RESERVED) then return redis.error_reply('DELAYQ_BAD_DUE ' .. tostring(due)) end
local at = string.format('%d', due)
if ARGV[6] == '1' then
  local stored = redis.call('HGET', jobs, id)
  if stored == record then  -- this very call, sent again
    return tonumber(redis.call('ZSCORE', pending, id)) or due
  end
  if not stored and redis.call('ZSCORE', done, id) then return 0 end
end
-- Reads before writes: is a pending job due before this one (if not, wake a worker: its
-- sleep may be too long; the read also checks the pending key's type, LLEN the wake's).
local earliest = #redis.call('ZRANGEBYSCORE', pending, '-inf', '(' .. at, 'LIMIT', 0, 1) == 0
if earliest then redis.call('LLEN', wake) end
if redis.call('HSETNX', jobs, id, record) == 0 then
  if redis.call('HGET', jobs, id) == record then  -- this very call, sent again
    return tonumber(redis.call('ZSCORE', pending, id)) or due
  end
  return redis.error_reply('DELAYQ_DUPLICATE_ID ' .. id)
end
redis.call('ZADD', pending, at, id)
if earliest then wake_worker() end
return due
