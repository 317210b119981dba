-- upgrade.lua: convert one queue from Redis layout 1 (django-delayq 0.1) to this layout, a
-- bounded batch per call; call it again until it answers 0 left.
-- KEYS: pending running dead jobs state errors meta
-- ARGV[1] limit (integer >= 1): at most this many layout-1 set entries looked at per call
-- ARGV[2..] optional triples: job id, the layout-1 record a previous call returned for it,
--           the same job re-encoded as format 3 by Python (jobs/job.py), or '' to keep the old
--           record as it is (Python cannot decode it: the worker dead-letters it as corrupt).
--           A record is replaced only while the job still holds that exact old record.
-- Returns {left, pending, running, dead, records, meta, {id1, record1, id2, ...}}:
--   left     layout-1 entries still in the three sets (0: the queue is converted) plus 1
--            while the meta hash exists;
--   pending, running, dead  entries converted by this call, per set;
--   records  records replaced by this call (from ARGV[2..]);
--   meta     meta fields deleted without a job to convert them for (orphans; once no
--            layout-1 entry is left);
--   {id, record...}  layout-1 records (format 1 or 2) of entries this call did not convert:
--            Python re-encodes them and sends them back in the next call, which converts
--            those entries; at least one, then no more than MAX_HANDED bytes of them (the
--            entries left out come again in a later call).
-- Layout 1: scores in float epoch seconds; `meta` holds per job the JSON {n: attempts counted
-- (the current one included while running), t: lease token, w: worker, s: started, e: [error
-- objects]}; records are JSON (format 1 {t, a, k, u, r} or format 2 [head, args...]), which
-- scripts here cannot read a unique key or max_retries from. An entry is layout 1 when its
-- score is in [0, OLD_SCORES) (10^11: 1973 in milliseconds, year 5138 in seconds; reserved
-- running scores are negative and are never looked at). Converting an entry, in one step:
--   pending  score * 1000; state "<n>|" when meta had n (retried, or requeued: 0)
--   running  a started lease whose deadline is the old one * 1000 (expired unless the 0.1
--            worker might still run it), state "<n - 1>|<worker>#0.1": recover.lua counts the
--            attempt again, so n attempts are counted, as 0.1's recovery had, and
--            its LeaseLost error names the 0.1 worker
--   dead     score * 1000; state "<n>|"
--   meta's errors become `errors` frames "<byte length>\n<JSON>" (re-encoded by cjson: our
--   own error objects, never user arguments), before any error already there; the meta
--   field is deleted.
-- Idempotent: a converted entry's score is >= OLD_SCORES, so it is never converted twice; a
-- call on converted data, or sent again, changes nothing. Entries are converted in score
-- order, pending, then running, then dead; an interrupted run leaves each job either old or
-- new, never half converted. Unique keys (`keys`), the list that wakes workers and the
-- per-minute stats have the same form in both layouts and are kept as they are.
--- @include "base"
local OLD_SCORES = 100000000000
local MAX_HANDED = 8388608
local limit = tonumber(ARGV[1])
zsets(pending, running, dead) hashes(jobs, state, errors, meta)

local replaced, keep = 0, {}
for i = 2, #ARGV, 3 do
  local id, old, new = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HGET', jobs, id) == old then
    if new == '' then
      keep[id] = true
    else
      redis.call('HSET', jobs, id, new)
      replaced = replaced + 1
    end
  end
end

local function legacy(record)
  local first = record and string.sub(record, 1, 1)
  return first == '[' or first == '{'
end

local function ms(seconds) return int(math.floor(tonumber(seconds) * 1000 + 0.5)) end

-- meta's {n, w, e} of a job (n 0 when absent or garbage), and deletes the field.
local function take_meta(id)
  local raw = redis.call('HGET', meta, id)
  if not raw then return nil, nil, {} end
  redis.call('HDEL', meta, id)
  local ok, m = pcall(cjson.decode, raw)
  if not ok or type(m) ~= 'table' then return 0, nil, {} end
  local n = math.max(math.floor(tonumber(m.n) or 0), 0)
  local errs = type(m.e) == 'table' and m.e or {}
  return n, type(m.w) == 'string' and m.w or nil, errs
end

local function move_errors(id, errs)
  local frames = {}
  for _, e in ipairs(errs) do
    if type(e) ~= 'table' then e = {type = 'unknown', message = tostring(e)} end
    local text = cjson.encode(e)
    table.insert(frames, #text .. '\n' .. text)
  end
  if #frames > 0 then
    redis.call('HSET', errors, id, table.concat(frames) .. (redis.call('HGET', errors, id) or ''))
  end
end

local counts = {pending = 0, running = 0, dead = 0}
local wanted, handed = {}, 0
local budget = limit
for _, set in ipairs({{pending, 'pending'}, {running, 'running'}, {dead, 'dead'}}) do
  if budget <= 0 then break end
  local key, kind = set[1], set[2]
  local entries = redis.call('ZRANGEBYSCORE', key, 0, '(' .. int(OLD_SCORES),
    'WITHSCORES', 'LIMIT', 0, budget)
  budget = budget - #entries / 2
  for i = 1, #entries, 2 do
    local id, score = entries[i], entries[i + 1]
    local record = redis.call('HGET', jobs, id)
    if legacy(record) and not keep[id] then
      if #wanted == 0 or handed + #record <= MAX_HANDED then
        table.insert(wanted, id) table.insert(wanted, record)
        handed = handed + #record
      end
    else
      local n, worker, errs = take_meta(id)
      move_errors(id, errs)
      if kind == 'running' then
        worker = string.gsub(worker or '?', '^~', '?~')  -- '~' first would read as settled
        redis.call('HSET', state, id, int(math.max((n or 1) - 1, 0)) .. '|' .. worker .. '#0.1')
      elseif n then
        redis.call('HSET', state, id, int(n) .. '|')
      end
      redis.call('ZADD', key, ms(score), id)
      counts[kind] = counts[kind] + 1
    end
  end
end

local left = 0
for _, key in ipairs({pending, running, dead}) do
  left = left + redis.call('ZCOUNT', key, 0, '(' .. int(OLD_SCORES))
end
local orphans = 0
if left == 0 and redis.call('EXISTS', meta) == 1 then
  orphans = redis.call('HLEN', meta)
  redis.call('UNLINK', meta)
end
if redis.call('EXISTS', meta) == 1 then left = left + 1 end
return {left, counts.pending, counts.running, counts.dead, replaced, orphans, wanted}
