-- cancel.lua: delete a pending job, found by id or by unique key.
-- KEYS: pending jobs state keys errors done ranked links forward groups parked trace finished kept wake
-- ARGV[1] job id, or '' to look it up by ARGV[2]
-- ARGV[2] unique key, or ''
-- ARGV[3] now (epoch milliseconds) or '' for Redis TIME (for the tombstone)
-- ARGV[4] finished jobs' max age (integer milliseconds; absent or 0: keep none), see ack.lua
-- ARGV[5] finished jobs' max count per queue (absent or 0: keep none)
-- A pending job is in `pending` or, with a priority, in `ranked`: both are looked in.
-- Returns {id, record} when a pending job was deleted, {} otherwise (unknown, running or dead).
-- A follower (include/followers.lua) is cancelled as a pending job is: by its id, or by the
-- key while the key's job is not pending (running: by key, the job that has not started goes);
-- cancelling the key's pending job (a leader waiting for a retry) promotes its follower.
-- Reads only the record's header (its unique key and flags), whatever the record's size; a
-- job with flag 'i' leaves a tombstone in `done` (see schedule.lua); one with flag 'l' its link
-- in `forward`, outcome 'cancelled' (see include/base.lua). While finished jobs are kept, the job goes
-- to `kept` and `finished`, outcome 'cancelled', with the due time it had (see include/base.lua).
--- @include "base"
--- @include "record"
--- @include "unique_keys"
--- @include "priority"
--- @include "ends"
--- @include "keeping"
--- @include "links"
zsets(pending, ranked, done) hashes(jobs, state, errors, unique_keys, links, forward, trace)
local keep = keep_of(4)
if keep then zsets(finished) hashes(kept) end
local id = ARGV[1]
if id == '' then
  id = redis.call('HGET', unique_keys, ARGV[2]) or ''
end
local due = pending_due(id)
if not due or not unpend(id) then
  -- Not pending: a follower (unique_until='end') waiting for its key's job goes, by id, or by
  -- key while the key's job runs (include/followers.lua).
  id, due = drop_follower(ARGV[1], ARGV[2])
  if not id then return {} end
end
local record = redis.call('HGET', jobs, id) or ''
local _, flags, ukey = header(record)
local now = clock(ARGV[3])
release_key(ukey, id, flags, now)
keep_finished(keep, now, {{id, 'cancelled', record, '', redis.call('HGET', errors, id) or '', due}})
if has(flags, 'l') then forward_end(id, 'cancelled', now) end
forget(id)
if has(flags, 'i') then tombstone({id}, now) end
return {id, record}
