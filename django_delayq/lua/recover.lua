-- recover.lua: jobs whose lease expired (their worker died) go back to pending, due now,
-- or to the dead-letter set when they have used all their attempts.
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] limit (integer): at most this many jobs per call
-- ARGV[2] default max_retries (integer), for records that do not carry their own
-- ARGV[3] dead max age (seconds): older dead jobs are trimmed (a bounded batch on every
--         call, so a quiet queue's dead set is trimmed too: workers call this periodically)
-- ARGV[4] dead max count (integer): the oldest beyond it are trimmed
-- ARGV[5] errors kept per job (integer)
-- ARGV[6] now (epoch seconds) or '' for Redis TIME
-- Returns {id1, 'retry' | 'dead', id2, ...}.
-- A retried job takes its unique key back; if another pending job holds it, the job is
-- dead-lettered with a 'Superseded' error instead (see take_key in _lib.lua).
local limit, default_max = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = clock(ARGV[6])
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', R, '-inf', '(' .. exact(now), 'LIMIT', 0, limit)) do
  redis.call('ZREM', R, id)
  local m = get_meta(id)
  local worker = m.w or '?'
  push_error(m, {type = 'django_delayq.exceptions.LeaseLost', attempt = m.n, at = now,
    message = 'lease expired: worker ' .. worker .. ' stopped heartbeating (crashed, killed or cut off)'},
    tonumber(ARGV[5]))
  m.t = nil
  m.w = nil
  local max_retries = tonumber(record_field(id, 'r')) or default_max
  local ukey = record_field(id, 'u')
  local retry = redis.call('HEXISTS', J, id) == 1 and (tonumber(m.n) or 0) <= max_retries
  if retry and not take_key(ukey, id) then
    push_error(m, superseded(ukey, now), tonumber(ARGV[5]))
    retry = false
  end
  if retry then
    set_meta(id, m)
    redis.call('ZADD', P, now, id)
    table.insert(out, id)
    table.insert(out, 'retry')
  else
    release_key(ukey, id)
    bury(id, m, now)
    table.insert(out, id)
    table.insert(out, 'dead')
  end
end
if #out > 0 then wake() end
trim_dead(now, tonumber(ARGV[3]), tonumber(ARGV[4]))
return out
