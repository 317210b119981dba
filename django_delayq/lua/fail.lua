-- fail.lua: an attempt failed: retry later, or dead-letter when attempts are used up.
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] job id
-- ARGV[2] lease token
-- ARGV[3] error (JSON object: type, message, traceback, attempt, at)
-- ARGV[4] retry delay in seconds (number); negative: never retry (dead-letter now)
-- ARGV[5] max_retries (integer): retried while attempts <= max_retries
-- ARGV[6] unique key ('' for none), released when the job dies
-- ARGV[7] dead max age (seconds): older dead jobs are trimmed
-- ARGV[8] dead max count (integer): the oldest beyond it are trimmed
-- ARGV[9] errors kept per job (integer)
-- ARGV[10] now (epoch seconds) or '' for Redis TIME
-- Returns {'retry', due_at} | {'dead', died_at} | {'lost', ''} (lease lost: nothing changed).
-- A retry takes the unique key back; if another pending job holds it (scheduled with that
-- key while this one ran), this job is dead-lettered with a 'Superseded' error instead.
local id, token, delay, max_retries, ukey = ARGV[1], ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local now = clock(ARGV[10])
local m = owned(id, token)
if not m then return {'lost', ''} end
push_error(m, decode_error(ARGV[3]), tonumber(ARGV[9]))
redis.call('ZREM', R, id)
bump('f', 1, now)
local retry = delay >= 0 and (tonumber(m.n) or 0) <= max_retries
if retry and not take_key(ukey, id) then
  push_error(m, superseded(ukey, now), tonumber(ARGV[9]))
  retry = false
end
if retry then
  m.t = nil
  m.w = nil
  set_meta(id, m)
  local due = now + delay
  redis.call('ZADD', P, due, id)
  wake_if_head(id)
  return {'retry', fmt(due)}
end
release_key(ukey, id)
bury(id, m, now)
trim_dead(now, tonumber(ARGV[7]), tonumber(ARGV[8]))
return {'dead', fmt(now)}
