-- schedule.lua: store a new job as pending, honouring its unique key.
-- KEYS: pending jobs state keys wake done errors relayed ranked links forward groups parked trace throttled control
-- ARGV[1] job id (string, ULID)
-- ARGV[2] job record (bytes: header "\n" body, see jobs/job.py)
-- ARGV[3] 'delay' (ARGV[4] is milliseconds from Redis's now) or 'at' (ARGV[4] is an epoch in
--         milliseconds; a time in the past means now)
-- ARGV[4] integer (milliseconds)
-- ARGV[5] unique key, or '' for none
-- ARGV[6] 'replace' or 'keep': what to do when a pending job holds the unique key
-- ARGV[7] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[8] '1' when this call is sent again (the reply to an earlier one was lost), else ''
-- ARGV[9] '1' for the relay of an outbox row (outbox/rows.py; ARGV[8] is '1' too), else '' or
--         absent. (a) Run once (outbox promise I6): an id marked in `relayed` is never stored again:
--         the reply is {'created', id, due_at, ''} while its job waits, runs or lies dead,
--         {'done', id, '', ''} once it is gone; whatever the outcome, the id is marked
--         (ZADD relayed now id). (b) Adopt the unique key (outbox promise I3): a pending job of
--         another id holding the key is removed (a tombstone of it if its record has flag
--         'i', as cancel.lua leaves) and this job is created under ARGV[1], so it runs
--         under the id the row had; with on_conflict 'keep' the holder is kept as without
--         ARGV[9]. Idempotent: sent again it finds its mark and changes nothing.
-- ARGV[10] the queue's name, with KEYS[17], the registry {prefix}:queues (one Redis only; a cluster
--         caller SADDs beside), SADDed first, so a lost registry heals; '' without KEYS[17].
-- ARGV[11] the job's link (JSON: its batch, its place in a chain; see `links` in include/base.lua), or
--         '' or absent for none; its record then has flag 'l'. Written under the id that holds
--         the record: a new job's, or a replaced key holder's (whose own link, if any, is
--         forwarded as 'cancelled': its batch or chain loses it; not when it is this very
--         link, a member of the same batch replaced in its block). Not written for 'kept'.
-- ARGV[12] the job's group ('' or absent: none; `groups` in include/base.lua): the new job, or the
--         one a replace rewrites, joins it (flag 'g'); due now on a fair queue, in its turn (fair.lua).
-- ARGV[13] the context of the span that scheduled the job (JSON, see `trace` in include/base.lua), or
--         '' or absent for none; its record then has flag 't'. Written under the id that
--         holds the record, as ARGV[11] (a replace drops the holder's). Not written for 'kept'.
-- ARGV[14] max_wait (milliseconds, a debounce's cap), or '' or absent for none: with a unique
--         key, a replace moves the key's job to min(its due time asked, first + max_wait),
--         first being the due time the key's job had when it was created (or, for a job
--         created without max_wait, when a replace with it first met it): that first due
--         time is kept in `keys` under the field "\0d" .. key as "<job id>|<ms>" (written
--         only by calls with ARGV[14]; a field naming another job than the key's is stale
--         and overwritten; ack.lua deletes it with a job whose record has flag 'd'; a job
--         attempted before, a retry waiting, counts from its due time as it is met).
--         A new job under the key records its own due time there. Read only with ARGV[14].
-- ARGV[15] (a relay, ARGV[9], with ARGV[14]) the row's first due time (ms, outbox/debounce.py):
--         a relay adopting from a pending holder is capped as above, keeping the earlier first.
-- A key no pending job holds, while a window of unique_for= holds it (include/throttle.lua,
-- which also sweeps ended windows), stores nothing: {'throttled', finished job id, window end,
-- ''} whatever on_conflict says (an outbox row's relay, ARGV[9], is not throttled).
-- A key's job with flag 'h' (unique_until='end') holds the key while it runs too: 'keep'
-- answers it ({'kept', id, '', record}), a replace stores or rewrites its one follower
-- ({'created', id, due_at, ''} under ARGV[1], or {'replaced', follower, due_at, ''}), due
-- at max(due_at, the end of the key's job): include/followers.lua.
-- A job whose record's header has a priority ('^<n>', see include/base.lua) waits in `ranked`, others
-- in `pending`; a replace moves the key's job to where its new record's priority puts it.
-- Returns {outcome, id, due_at, record}: outcome 'created' | 'replaced' | 'kept' | 'done';
-- due_at in epoch milliseconds ('throttled': the window's end); for 'kept' the id, due_at and record are the existing job's,
-- else record is ''.
-- Idempotent: the same call sent again (same id and record) changes nothing and returns
-- {'created', id, due_at of the stored job, ''} while the job waits, runs or lies dead, and
-- {'done', id, '', ''} when it already finished or was cancelled (a tombstone in `done`,
-- kept DONE_TTL for records with flag 'i'; checked only when ARGV[8] is '1'). A replace sent
-- again returns {'replaced', holder, ...} while the key's job holds this record, and 'done'
-- once it finished (the replace leaves a tombstone of this call's id for flag 'i').
-- Errors: 'DELAYQ_DUPLICATE_ID' (the id taken by another record); 'DELAYQ_BAD_DUE' (not before 2286).
--- @include "base"
--- @include "record"
--- @include "leases"
--- @include "priority"
--- @include "wake"
--- @include "ends"
--- @include "links"
--- @include "groups"
--- @include "throttle"
--- @include "followers"
--- @include "fair"
local id, record, mode, value, ukey, on_conflict = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local now, adopt = clock(ARGV[7]), ARGV[9] == '1'
local link, trace_ctx, group = ARGV[11] or '', ARGV[13] or '', ARGV[12] or ''
local max_wait = tonumber(ARGV[14] or '')
if KEYS[17] then redis.call('SADD', KEYS[17], ARGV[10]) end
-- The reply, with the id marked as relayed in relay mode.
local function finish(reply)
  if adopt then redis.call('ZADD', relayed, int(now), id) end
  return reply
end
if adopt then
  zsets(relayed)
  if redis.call('ZSCORE', relayed, id) then
    if redis.call('HGET', jobs, id) then
      return {'created', id, pending_due(id) or '', ''}
    end
    return {'done', id, '', ''}
  end
end
local due
if mode == 'delay' then due = now + math.max(value, 0) else due = math.max(value, now) end
if not (due < RESERVED) then return redis.error_reply('DELAYQ_BAD_DUE ' .. tostring(due)) end
local at = int(due)
local _, _, _, priority = header(record)
if priority ~= 0 then zsets(ranked) end

if ARGV[8] == '1' then
  local stored = redis.call('HGET', jobs, id)
  if stored == record then  -- this very call, sent again (a follower: its leader fifth)
    local at_now = pending_due(id)
    return finish({'created', id, at_now or due, '', not at_now and leader_of(id, record) or nil})
  end
  if not stored then
    -- This very call replaced the key's job, which still holds its record (pending, or
    -- claimed since: then it must not be stored again beside it).
    local holder = ukey ~= '' and redis.call('HGET', unique_keys, ukey)
    if holder and not adopt and redis.call('HGET', jobs, holder) == record then
      return finish({'replaced', holder, pending_due(holder) or due, ''})
    end
    if redis.call('ZSCORE', done, id) then return finish({'done', id, '', ''}) end
  end
end
-- Reads before writes: is a pending job due before this one (if not, wake a worker: its
-- sleep may be too long; the read also checks the pending key's type), the key's holder.
local existing = ukey ~= '' and redis.call('HGET', unique_keys, ukey)
local score = existing and pending_due(existing)
if ukey ~= '' and not score and existing ~= id then  -- unique_until='end': include/followers.lua
  local reply
  reply, existing, score = while_leader_runs(existing, ukey, id, record, due, now, on_conflict, adopt, trace_ctx, group)
  if reply then return finish(reply) end
end
-- A debounce (ARGV[14]): a replace never moves the key's job past its first due + max_wait.
local wait_mark, first_due = max_wait and ukey ~= '' and ('\0d' .. ukey), nil
if wait_mark and score and existing ~= id and on_conflict ~= 'keep' then
  local held = redis.call('HGET', unique_keys, wait_mark)
  local held_id, held_due = string.match(held or '', '^(.*)|(%d+)$')
  -- A job attempted already (a retry waiting) ran once: its debounce starts over from now.
  first_due = held_id == existing and state_of(existing) == 0 and tonumber(held_due) or score
  due = math.min(due, first_due + max_wait)
  at = int(due)
end
if wait_mark and adopt and ARGV[15] then first_due = math.min(first_due or math.huge, tonumber(ARGV[15])) end
local earliest = #redis.call('ZRANGEBYSCORE', pending, '-inf', '(' .. at, 'LIMIT', 0, 1) == 0
local turn = takes_turn(group, due, now)
if score then
  if existing == id then return finish({'created', id, tonumber(score), ''}) end
  if on_conflict == 'keep' then
    return finish({'kept', existing, tonumber(score), redis.call('HGET', jobs, existing) or ''})
  end
  if adopt then
    -- The holder goes (as cancel.lua removes it); the new job below takes the key.
    zsets(done) hashes(state, errors, links, forward, trace)
    local _, held_flags = header(redis.call('HGET', jobs, existing) or '')
    unpend(existing)
    forward_end(existing, 'cancelled', now)
    forget(existing)
    if held_flags and has(held_flags, 'i') then tombstone({existing}, now) end
    score = nil
  end
end
if score then
  -- Replace: the pending job takes the new record and due time and starts over (its
  -- attempts count from 0 again; errors of earlier attempts stay on record).
  local n, token = state_of(existing)
  local _, flags = header(record)
  if earliest then lists(wake) end
  if has(flags, 'i') then zsets(done) end
  hashes(links, forward, trace)
  unpend(existing)
  -- The holder's link ends here, unless this call carries the same one: a member replaced
  -- in its own batch's block stays that member, pending (nothing of it ended).
  if redis.call('HGET', links, existing) ~= link then forward_end(existing, 'cancelled', now) end
  if link ~= '' then redis.call('HSET', links, existing, link) else redis.call('HDEL', links, existing) end
  if trace_ctx ~= '' then redis.call('HSET', trace, existing, trace_ctx) else redis.call('HDEL', trace, existing) end
  redis.call('HSET', jobs, existing, record)
  if turn then take_turn(existing, record, group, due, priority)
  else pend(existing, due, priority) group_join(existing, record, group) end
  if n > 0 then set_state(existing, 0, token) end
  -- The replaced job may finish before this call, sent again after a lost reply, arrives:
  -- this call's id then answers 'done' (a tombstone, like a finished job's).
  if has(flags, 'i') then tombstone({id}, now) end
  if first_due then redis.call('HSET', unique_keys, wait_mark, existing .. '|' .. int(first_due)) end
  if earliest then wake_worker() end
  return finish({'replaced', existing, due, ''})
end
if ukey ~= '' and not adopt then
  local succeeded, ends = throttle_check(ukey, now)
  if succeeded then return finish({'throttled', succeeded, ends, ''}) end
end
-- A new job (the key's job, if any, is running, dead or gone: the new job takes the key).
if earliest then lists(wake) end
if link ~= '' then hashes(links) end
if trace_ctx ~= '' then hashes(trace) end
if redis.call('HSETNX', jobs, id, record) == 0 then
  if redis.call('HGET', jobs, id) == record then  -- this very call, sent again
    return finish({'created', id, pending_due(id) or due, ''})
  end
  return redis.error_reply('DELAYQ_DUPLICATE_ID ' .. id)
end
if ukey ~= '' then redis.call('HSET', unique_keys, ukey, id) end
if wait_mark then redis.call('HSET', unique_keys, wait_mark, id .. '|' .. (first_due and int(first_due) or at)) end
if link ~= '' then redis.call('HSET', links, id, link) end
if trace_ctx ~= '' then redis.call('HSET', trace, id, trace_ctx) end
if turn then take_turn(id, record, group, due, priority)
else pend(id, due, priority) if group ~= '' then group_join(id, record, group) end end
if earliest then wake_worker() end
return finish({'created', id, due, ''})
