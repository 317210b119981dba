-- schedule.lua: store a new job as pending, honouring its unique key.
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] job id (string, ULID)
-- ARGV[2] job record (JSON bytes)
-- ARGV[3] 'delay' (ARGV[4] is seconds from Redis's now) or 'at' (ARGV[4] is epoch seconds;
--         a time in the past means now)
-- ARGV[4] number (seconds)
-- ARGV[5] unique key, or '' for none
-- ARGV[6] 'replace' or 'keep': what to do when a pending job holds the unique key
-- ARGV[7] now (epoch seconds) or '' for Redis TIME
-- Returns {outcome, id, due_at, record}: outcome 'created' | 'replaced' | 'kept'; for 'kept'
-- the id, due_at and record are the existing job's, else record is ''.
-- The same call sent again (same id and record: a client re-sends a command whose reply was
-- lost) changes nothing and returns {'created', id, due_at of the stored job, ''}.
-- Errors: 'DELAYQ_DUPLICATE_ID' if the id is taken by another record (never happens with ULIDs).
local id, record, mode, value, ukey, on_conflict = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local now = clock(ARGV[7])
local due
if mode == 'delay' then due = now + math.max(value, 0) else due = math.max(value, now) end

if ukey ~= '' then
  local existing = redis.call('HGET', U, ukey)
  if existing then
    local score = redis.call('ZSCORE', P, existing)
    if score and existing == id and redis.call('HGET', J, id) == record then
      return {'created', id, fmt(tonumber(score)), ''}  -- this very call, sent again
    end
    if score then
      if on_conflict == 'keep' then
        return {'kept', existing, fmt(tonumber(score)), redis.call('HGET', J, existing) or ''}
      end
      redis.call('HSET', J, existing, record)
      redis.call('ZADD', P, due, existing)
      -- A replaced job starts over: its attempts (a retry waiting) count from 0 again;
      -- the errors of earlier attempts stay on record.
      if redis.call('HEXISTS', M, existing) == 1 then
        local m = get_meta(existing)
        m.n = 0
        set_meta(existing, m)
      end
      wake_if_head(existing)
      return {'replaced', existing, fmt(due), ''}
    end
    -- The key's job is running, dead or gone: the new job takes the key over.
  end
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
