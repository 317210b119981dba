-- _lib.lua: helpers prepended to every script by store.py (not a script itself).
--
-- Every script receives the same KEYS, all in one queue's hash-tag slot:
--   KEYS[1] pending  sorted set  member: job id, score: due_at (epoch seconds)
--   KEYS[2] running  sorted set  member: job id, score: lease_until (epoch seconds)
--   KEYS[3] dead     sorted set  member: job id, score: died_at (epoch seconds)
--   KEYS[4] jobs     hash        job id -> job record (JSON written by Python, never re-encoded here;
--                                format 2 [head, args...] or format 1 {t, a, k, u, r}: see job.py)
--   KEYS[5] meta     hash        job id -> state JSON {n: attempts, t: lease token, w: worker,
--                                s: started_at, e: [errors]} (absent until a job is first claimed)
--   KEYS[6] keys     hash        unique key -> job id
--   KEYS[7] wake     list        tokens that wake a sleeping worker (at most 8 kept)
--   KEYS[8] stats    hash        "d:<minute % 60>" / "f:<minute % 60>" -> "<minute>:<count>"
-- Scripts touch no other key. Times are Redis's TIME unless a test passes "now".
local P, R, D, J, M, U, W, S = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]

local function clock(arg)
  if arg and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function fmt(x) return string.format('%.6f', x) end
-- Full precision, for score ranges: fmt() could round below a stored score.
local function exact(x) return string.format('%.17g', x) end

local function wake()
  if redis.call('RPUSH', W, '1') > 8 then redis.call('LTRIM', W, -8, -1) end
end

-- Wake a worker when `id` is now the earliest pending job (its sleep may be too long).
local function wake_if_head(id)
  local head = redis.call('ZRANGE', P, 0, 0)
  if head[1] == id then wake() end
end

local function get_meta(id)
  local raw = redis.call('HGET', M, id)
  if not raw then return {} end
  local ok, m = pcall(cjson.decode, raw)
  if ok and type(m) == 'table' then return m end
  return {}
end

local function set_meta(id, m) redis.call('HSET', M, id, cjson.encode(m)) end

-- The meta of `id` if it is running under lease `token`, else nil.
local function owned(id, token)
  if not redis.call('ZSCORE', R, id) then return nil end
  local m = get_meta(id)
  if m.t ~= token then return nil end
  return m
end

-- A field ('u' unique key, 'r' max_retries) of the job record, or nil (absent, or a
-- missing or corrupt record). Format 2 records are arrays [head, args...] whose head is
-- the task name or an object holding the fields; format 1 records are that object.
local function record_field(id, name)
  local raw = redis.call('HGET', J, id)
  if not raw then return nil end
  local ok, r = pcall(cjson.decode, raw)
  if not ok or type(r) ~= 'table' then return nil end
  if r[1] ~= nil then r = r[1] end
  if type(r) == 'table' then return r[name] end
  return nil
end

local function release_key(ukey, id)
  if ukey and ukey ~= '' and redis.call('HGET', U, ukey) == id then redis.call('HDEL', U, ukey) end
end

-- A job going back to pending (retry, recovery, requeue) takes its unique key back, so the
-- key names at most one pending job. False when another pending job holds the key (it was
-- scheduled with that key while this one ran or lay dead): the caller dead-letters or
-- keeps this one dead instead of making two pending jobs answer to one key.
local function take_key(ukey, id)
  if not ukey or ukey == '' then return true end
  local holder = redis.call('HGET', U, ukey)
  if holder and holder ~= id and redis.call('ZSCORE', P, holder) then return false end
  redis.call('HSET', U, ukey, id)
  return true
end

local function superseded(ukey, now)
  return {type = 'django_delayq.exceptions.Superseded', at = now,
    message = 'not retried: another pending job holds its unique key ' .. ukey}
end

local function push_error(m, err, max_kept)
  local list = m.e
  if type(list) ~= 'table' then list = {} end
  table.insert(list, err)
  while #list > max_kept do table.remove(list, 1) end
  m.e = list
end

local function decode_error(raw)
  local ok, e = pcall(cjson.decode, raw)
  if ok and type(e) == 'table' then return e end
  return {type = 'unknown', message = tostring(raw)}
end

local function bump(kind, count, now)
  if count <= 0 then return end
  local minute = math.floor(now / 60)
  local slot = kind .. ':' .. (minute % 60)
  local cur = redis.call('HGET', S, slot)
  local total = count
  if cur then
    local m, c = string.match(cur, '^(%d+):(%d+)$')
    if tonumber(m) == minute then total = tonumber(c) + count end
  end
  redis.call('HSET', S, slot, string.format('%d:%d', minute, total))
end

local function forget(id)
  redis.call('HDEL', J, id)
  redis.call('HDEL', M, id)
end

local function bury(id, m, now)
  m.t = nil
  set_meta(id, m)
  redis.call('ZADD', D, now, id)
end

-- Bounded trim of the dead set: by age, then by count, at most 100 of each per call.
local function trim_dead(now, max_age, max_count)
  local old = redis.call('ZRANGEBYSCORE', D, '-inf', '(' .. exact(now - max_age), 'LIMIT', 0, 100)
  for _, id in ipairs(old) do
    redis.call('ZREM', D, id)
    forget(id)
  end
  local excess = redis.call('ZCARD', D) - max_count
  if excess > 0 then
    for _, id in ipairs(redis.call('ZRANGE', D, 0, math.min(excess, 100) - 1)) do
      redis.call('ZREM', D, id)
      forget(id)
    end
  end
end

-- Acknowledge finished jobs given as ARGV triples (job id, lease token, unique key or '')
-- from ARGV[first] on: a job still running under that token is deleted and its unique key
-- released. Appends one flag per triple to `out` (1 acknowledged, 0 lease lost: nothing
-- changed) and counts the acknowledged ones in the throughput stats.
local function ack_from(first, now, out)
  local done = 0
  for i = first, #ARGV, 3 do
    local id, token, ukey = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    if owned(id, token) then
      redis.call('ZREM', R, id)
      release_key(ukey, id)
      forget(id)
      done = done + 1
      table.insert(out, 1)
    else
      table.insert(out, 0)
    end
  end
  bump('d', done, now)
end
