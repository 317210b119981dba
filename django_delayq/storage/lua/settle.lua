-- settle.lua: a runner is about to start a job whose record leaves max_retries undecided
-- (flag 'u': scheduled by name from a process that does not import the task): write the
-- task's max_retries into the record's header (flag 'u' dropped) and mark the job started,
-- in one step, so a job still undecided was never started (recover.lua hands it back
-- without counting an attempt, as any job not started). The worker waits for the reply and
-- runs the job only on 1.
-- KEYS: running jobs state
-- ARGV[1] job id
-- ARGV[2] lease token (the claim's)
-- ARGV[3] max_retries (integer >= 0): the task's, as the worker knows it
-- ARGV[4] lease_until (epoch milliseconds): the started score, as store.mark_op writes it
-- Returns 1 settled (or decided already) and marked started; 0 not running under that token
-- (the lease was lost: nothing changed, the job must not run). Idempotent: sent again, the
-- header is decided already and the mark only moves a score up (ZADD XX GT).
--- @include "base"
--- @include "record"
--- @include "leases"
local id, token = ARGV[1], ARGV[2]
if not owned(id, token) then return 0 end
local record = redis.call('HGET', jobs, id)
zsets(running)
if record then
  local r, flags, p = string.match(record, '^(%d+)(%l*)()')
  if r and has(flags, 'u') then
    local decided = (string.gsub(flags, 'u', ''))
    redis.call('HSET', jobs, id, ARGV[3] .. decided .. string.sub(record, p))
  end
end
redis.call('ZADD', running, 'XX', 'GT', ARGV[4], id)
return 1
