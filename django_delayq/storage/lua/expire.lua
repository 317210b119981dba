-- expire.lua: claimed jobs whose expiry passed before they started end 'expired', never run.
-- KEYS: running jobs state keys stats errors done links forward pending ranked wake groups parked holds trace finished kept
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME (the end's time)
-- ARGV[2] finished jobs' max age (integer milliseconds; 0: keep none), see ack.lua
-- ARGV[3] finished jobs' max count per queue (integer; 0: keep none)
-- ARGV[4..] triples: job id, lease token (of the claim that leased it; the job was not
--           started), its due time (epoch milliseconds, or '' when not known)
-- Returns one integer per job: 1 expired; 0 gone (nothing to do: already ended, e.g. by this
-- very call sent before); -1 no longer held under that token (recovered, claimed again):
-- nothing changed. Idempotent: sent again after a lost reply, a job it expired is gone (0).
-- The caller decided (the record's expiry, flag 'x', against the claim's now:
-- worker/expiry.py); this script reads only the record's header. An expired job leaves
-- `running` and the job's fields go as a cancelled job's do: its unique key is released, a
-- job with flag 'i' leaves a tombstone (a day with 'e'), one with flag 'l' its link in
-- `forward`, outcome 'expired', one with flag 'g' its group's slot; while finished jobs are
-- kept it goes to `kept` and `finished`, outcome 'expired', with its due time. Counted in
-- `stats` ("expired", the total delayq_jobs_expired_total reads).
--- @include "base"
--- @include "record"
--- @include "leases"
--- @include "unique_keys"
--- @include "links"
--- @include "groups"
--- @include "keeping"
--- @include "ends"
--- @include "stats"
local now = clock(ARGV[1])
local keep = keep_of(2)
zsets(running, done) hashes(jobs, state, unique_keys, stats, errors, links, forward, groups, trace)
if keep then zsets(finished) hashes(kept) end
local out, ends, count = {}, {}, 0
for i = 4, #ARGV, 3 do
  local id, token, due = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2] or '')
  local raw_state = redis.call('HGET', state, id)
  local _, t, held = parse_state(raw_state)
  if held and t == token then
    local record = redis.call('HGET', jobs, id) or ''
    local _, flags, ukey = header(record)
    release_key(ukey, id, flags, now)
    redis.call('ZREM', running, id)
    group_left(id, flags, true)
    if has(flags, 'l') then forward_end(id, 'expired', now) end
    table.insert(ends, {id, 'expired', record, '', redis.call('HGET', errors, id) or '', due})
    forget(id)
    if has(flags, 'i') then tombstone({id}, now, has(flags, 'e') and {[id] = true} or nil) end
    count = count + 1
    table.insert(out, 1)
  elseif raw_state or redis.call('HEXISTS', jobs, id) == 1 then
    table.insert(out, -1)
  else
    table.insert(out, 0)
  end
end
keep_finished(keep, now, ends)
tally('expired', count)
return out
