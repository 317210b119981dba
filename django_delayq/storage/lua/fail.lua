-- fail.lua: an attempt failed: retry later, or dead-letter when attempts are used up.
-- KEYS: pending running dead jobs state keys wake stats errors ranked links forward groups parked holds trace
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] job id
-- ARGV[3] lease token
-- ARGV[4] error (JSON object: type, message, traceback, attempt, at, worker)
-- ARGV[5] retry delay (integer milliseconds); negative: never retry (dead-letter now)
-- ARGV[6] max_retries for a record without a header (written by 0.1); the header's wins
--         (a record with flag 'u' was settled by settle.lua when its attempt started; one
--         a worker older than flag 'u' ran is read by its digits, the producer's setting)
-- ARGV[7] dead max age (integer milliseconds): older dead jobs are trimmed
-- ARGV[8] dead max count (integer): the oldest beyond it are trimmed
-- ARGV[9] errors kept per job (integer >= 1)
-- Returns {'retry', due_at} | {'dead', died_at} | {'lost', ''} (not running under that token:
-- nothing changed). The failed attempt is counted; the job is retried while attempts <=
-- max_retries. Idempotent: sent again after a lost reply, it answers what the first send did
-- (the token stays in the job's state until the job is claimed again).
-- A retry goes back to `pending`, or to `ranked` for a job with a priority (its header's).
-- A retry takes the unique key back; if another pending job holds it (scheduled with that
-- key while this one ran), this job is dead-lettered with a 'Superseded' error instead. A dead
-- job with flag 'l' leaves its link in `forward`, outcome 'dead' (see include/base.lua).
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
local id, token, err, delay = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local now = clock(ARGV[1])
zsets(pending, ranked, running, dead) hashes(jobs, state, unique_keys, stats, errors, links, forward, trace) lists(wake)
local n = owned(id, token)
if not n then
  local _, t, held = state_of(id)
  if t == token and not held then
    local due = pending_due(id)
    if due then return {'retry', due} end
    local died = redis.call('ZSCORE', dead, id)
    if died then return {'dead', tonumber(died)} end
  end
  return {'lost', ''}
end
local max_retries, flags, ukey, priority = header(redis.call('HGET', jobs, id))
max_retries = max_retries or tonumber(ARGV[6])
n = n + 1
push_error(id, err, tonumber(ARGV[9]))
redis.call('ZREM', running, id)
group_left(id, flags)
set_state(id, n, token)
bump('f', 1, now)
tally('failed', 1)
local retry = delay >= 0 and n <= max_retries
if retry and not take_key(ukey, id) then
  push_error(id, superseded(ukey, now), tonumber(ARGV[9]))
  retry = false
end
if retry then
  local due = now + delay
  local earliest = #redis.call('ZRANGEBYSCORE', pending, '-inf', '(' .. int(due), 'LIMIT', 0, 1) == 0
  pend(id, due, priority)
  if earliest then wake_worker() end
  tally('retried', 1)
  return {'retry', due}
end
release_key(ukey, id, flags, now)
if has(flags, 'l') then forward_end(id, 'dead', now) end
redis.call('ZADD', dead, int(now), id)
tally('dead', 1)
trim_dead(now, tonumber(ARGV[7]), tonumber(ARGV[8]))
return {'dead', now}
