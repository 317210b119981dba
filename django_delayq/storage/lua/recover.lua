-- recover.lua: jobs whose lease expired (their worker died or was cut off) go back to pending,
-- due now (in `ranked` for a job with a priority), or to the dead-letter set when they have used all their attempts.
-- KEYS: pending running dead jobs state keys wake stats errors claims ranked links forward groups parked holds trace
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] limit (integer): at most this many jobs per call
-- ARGV[3] token of this recovery (string, unique per call)
-- ARGV[4] worker instance of the caller (the field "<instance>/r" of `claims` remembers the call)
-- ARGV[5] max_retries for a record without a header (written by 0.1); the header's wins
--         (flag 'u', undecided: such a job was never started by a worker that knows the
--         flag, as settle.lua decides and marks in one step, so it is refunded; one a worker
--         older than the flag started is read by its digits, as that worker would)
-- ARGV[6] dead max age (integer milliseconds): older dead jobs are trimmed (a bounded batch
--         on every call, so a quiet queue's dead set is trimmed too: workers call this
--         periodically)
-- ARGV[7] dead max count (integer): the oldest beyond it are trimmed
-- ARGV[8] errors kept per job (integer >= 1)
-- Returns {id1, outcome1, attempts1, record1, lost_token1, error1, id2, ...}: outcome 'refund'
-- (the worker never started it: back to pending, no attempt counted), 'retry' (started: the
-- attempt is counted, a LeaseLost error recorded, back to pending) or 'dead' (that was its
-- last attempt, its record is missing, or its unique key is held by another pending job: see
-- take_key in include/unique_keys.lua); attempts as counted now; record '' when missing; lost_token the
-- lease that expired; error the JSON of the last error recorded by this call ('' for a
-- refund). Idempotent: sent again with the same token, it moves nothing and returns the same
-- jobs (lost_token and error ''). Counts every job it moves in the stats' totals (recovered,
-- and retried or dead). A job moved to dead leaves its link, if any, in `forward` (include/base.lua).
--- @include "base"
--- @include "record"
--- @include "leases"
--- @include "unique_keys"
--- @include "priority"
--- @include "wake"
--- @include "stats"
--- @include "errors"
--- @include "ends"
--- @include "links"
--- @include "groups"
local now = clock(ARGV[1])
local limit, token, instance, default_max = tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local max_kept = tonumber(ARGV[8])
zsets(pending, ranked, running, dead) hashes(jobs, state, unique_keys, errors, claims, stats, links, forward, trace) lists(wake)
local out = {}
local last = redis.call('HGET', claims, instance .. '/r')
if last and string.match(last, '^([^\n]*)\n') == token then
  for id, outcome in string.gmatch(string.sub(last, #token + 2), '(%S+) (%a+)') do
    local n = state_of(id)
    table.insert(out, id) table.insert(out, outcome) table.insert(out, n)
    table.insert(out, redis.call('HGET', jobs, id) or '') table.insert(out, '') table.insert(out, '')
  end
  return out
end
local function move(id, outcome, n, lost, record, ukey, err, priority)
  local flags = select(2, header(record))
  group_left(id, flags)
  if outcome ~= 'dead' and not record then
    err = error_json('CorruptJob', 'job record missing from Redis', now)
    push_error(id, err, max_kept)
    outcome = 'dead'
  end
  if outcome ~= 'dead' and not take_key(ukey, id) then
    err = superseded(ukey, now)
    push_error(id, err, max_kept)
    outcome = 'dead'
  end
  if outcome == 'dead' then
    release_key(ukey, id, flags, now)
    forward_end(id, 'dead', now)
    redis.call('ZADD', dead, int(now), id)
    tally('dead', 1)
  else
    pend(id, now, priority)
    if outcome == 'retry' then tally('retried', 1) end
  end
  tally('recovered', 1)
  table.insert(out, id) table.insert(out, outcome) table.insert(out, n)
  table.insert(out, record or '') table.insert(out, lost or '') table.insert(out, err or '')
end
local dead_workers = {}
local unstarted = redis.call('ZRANGEBYSCORE', running, '-inf', '(' .. int(now - RESERVED), 'LIMIT', 0, limit)
local started = {}
if #unstarted < limit then
  started = redis.call('ZRANGEBYSCORE', running, 0, '(' .. int(now), 'LIMIT', 0, limit - #unstarted)
end
for _, id in ipairs(unstarted) do
  redis.call('ZREM', running, id)
  local n, lost = state_of(id)
  set_state(id, n, nil)
  local record = redis.call('HGET', jobs, id)
  local _, _, ukey, priority = header(record)
  if lost then dead_workers[string.match(lost, '^(.*)#') or lost] = true end
  move(id, 'refund', n, lost, record, ukey, nil, priority)
end
for _, id in ipairs(started) do
  redis.call('ZREM', running, id)
  local n, lost = state_of(id)
  n = n + 1
  set_state(id, n, nil)
  local worker = lost and (string.match(lost, '^(.*)#') or lost) or '?'
  dead_workers[worker] = true
  local err = error_json('LeaseLost',
    'lease expired: worker ' .. worker .. ' stopped heartbeating (crashed, killed or cut off)', now, n,
    lost and worker or nil)
  push_error(id, err, max_kept)
  local record = redis.call('HGET', jobs, id)
  local max_retries, _, ukey, priority = header(record)
  move(id, n <= (max_retries or default_max) and 'retry' or 'dead', n, lost, record, ukey, err,
    priority)
end
for worker, _ in pairs(dead_workers) do redis.call('HDEL', claims, worker, worker .. '/r') end
if #out > 0 then
  local entries = {}
  for i = 1, #out, 6 do table.insert(entries, out[i] .. ' ' .. out[i + 1]) end
  redis.call('HSET', claims, instance .. '/r', token .. '\n' .. table.concat(entries, ' '))
  wake_worker()
end
trim_dead(now, tonumber(ARGV[6]), tonumber(ARGV[7]))
return out
