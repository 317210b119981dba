-- schedule.lua: store a new job as pending, honouring its unique key.
-- KEYS: the queue's eleven keys (see _lib.lua).
-- ARGV[1] job id (string, ULID)
-- ARGV[2] job record (bytes: header "\n" body, see job.py)
-- ARGV[3] 'delay' (ARGV[4] is seconds from Redis's now) or 'at' (ARGV[4] is epoch seconds;
--         a time in the past means now)
-- ARGV[4] number (seconds)
-- ARGV[5] unique key, or '' for none
-- ARGV[6] 'replace' or 'keep': what to do when a pending job holds the unique key
-- ARGV[7] now (epoch seconds) or '' for Redis TIME
-- ARGV[8] '1' when this call is sent again because the reply to an earlier one was lost,
--         else ''
-- Returns {outcome, id, due_at, record}: outcome 'created' | 'replaced' | 'kept' | 'done';
-- for 'kept' the id, due_at and record are the existing job's, else record is ''.
-- Idempotent: the same call sent again (same id and record) changes nothing and returns
-- {'created', id, due_at of the stored job, ''} while the job waits, runs or lies dead, and
-- {'done', id, '', ''} when it already finished or was cancelled (a tombstone in `done`,
-- kept DONE_TTL seconds for records with flag 'i'; checked only when ARGV[8] is '1').
-- Errors: 'DELAYQ_DUPLICATE_ID' if the id is taken by another record (never happens with
-- ULIDs); 'DELAYQ_BAD_DUE' if the due time is not a finite epoch before year 2286.
local id, record, mode, value, ukey, on_conflict = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local now = clock(ARGV[7])
local due
if mode == 'delay' then due = now + math.max(value, 0) else due = math.max(value, now) end
if not (due < RESERVED) then return redis.error_reply('DELAYQ_BAD_DUE ' .. tostring(due)) end
zsets(P) lists(W)

if ARGV[8] == '1' then
  local stored = redis.call('HGET', J, id)
  if stored == record then  -- this very call, sent again
    local score = redis.call('ZSCORE', P, id)
    return {'created', id, fmt(tonumber(score) or due), ''}
  end
  if not stored and redis.call('ZSCORE', F, id) then return {'done', id, '', ''} end
end
if ukey ~= '' then
  local existing = redis.call('HGET', U, ukey)
  local score = existing and redis.call('ZSCORE', P, existing)
  if score then
    if existing == id then return {'created', id, fmt(tonumber(score)), ''} end
    if on_conflict == 'keep' then
      return {'kept', existing, fmt(tonumber(score)), redis.call('HGET', J, existing) or ''}
    end
    -- Replace: the pending job takes the new record and due time and starts over (its
    -- attempts count from 0 again; errors of earlier attempts stay on record).
    redis.call('HSET', J, existing, record)
    redis.call('ZADD', P, due, existing)
    local n, token = state_of(existing)
    if n > 0 then set_state(existing, 0, token) end
    wake_if_head(existing)
    return {'replaced', existing, fmt(due), ''}
  end
  -- The key's job is running, dead or gone: the new job takes the key over.
end
if redis.call('HSETNX', J, id, record) == 0 then
  if redis.call('HGET', J, id) == record then  -- this very call, sent again
    return {'created', id, fmt(tonumber(redis.call('ZSCORE', P, id)) or due), ''}
  end
  return redis.error_reply('DELAYQ_DUPLICATE_ID ' .. id)
end
if ukey ~= '' then redis.call('HSET', U, ukey, id) end
redis.call('ZADD', P, due, id)
wake_if_head(id)
return {'created', id, fmt(due), ''}
