-- claim.lua: acknowledge a worker's finished jobs, then lease up to `limit` due jobs to it.
-- KEYS: pending running dead jobs state keys wake stats errors done claims ranked control links forward groups parked holds trace finished kept throttled
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] limit (integer >= 0; 0 only acknowledges and reports the next due time)
-- ARGV[3] lease (integer milliseconds)
-- ARGV[4] lease token (string, unique per claim call; ack, fail, extend and release present it)
-- ARGV[5] worker instance (string): the field of `claims` remembering this worker's last claim
-- ARGV[6] finished jobs' max age (integer milliseconds; 0: keep none), as ack.lua's ARGV[2]
-- ARGV[7] finished jobs' max count per queue, as ack.lua's ARGV[3]
-- ARGV[8..] optional quadruples: job id, lease token, info, attempt of finished jobs,
--           acknowledged first exactly as ack.lua does (a worker's acks and its next claim
--           in one call).
-- Returns {now, next_due, {ack flags}, {id1, record1, attempt1, due1, id2, ...}}: next_due is
-- the due_at of the earliest pending job left ('' when none); the ack flags are ack.lua's, one
-- per entry; attempt is the number the attempt will have once started; due the job's due_at
-- (epoch ms; '' for a job the call re-sends or unparks: its due time is not at hand), so
-- the worker knows each job's lateness.
-- A fifth element 'plain' follows when claim_plain.lua would have claimed what this call
-- read: none of ranked, control, parked existed at its start; or, on the general path, no
-- pause, no queue limit ("qconc"), not fair, no limit applied to a job it read (hold_back's
-- `limited`), it read at least one job when `control` exists (reading none, it cannot tell
-- whether the next are of a limited task), and neither `ranked` nor `parked` exists at its
-- end (one EXISTS more). The worker may then send claim_plain.lua next.
-- Claimed jobs are leased as not started (score lease_until - RESERVED); the worker's runner
-- marks each one started (ZADD XX GT lease_until) just before running it, so a job whose
-- worker died before starting it is handed back by recover.lua without counting an attempt.
-- Idempotent: sent again with the same token (its reply was lost), it acknowledges nothing new
-- and returns the jobs the first send leased that the token still holds.
-- An id whose record is missing is dead-lettered with an error instead of returned.
-- When due jobs remain after the claim, one wake token is pushed so a peer worker claims them.
-- Queue control: while none of `ranked`, `control` and `parked` exists (no job with a
-- priority, no limit, the queue not paused) the claim reads `pending` only (one EXISTS
-- more). Otherwise it takes the general path: due jobs highest priority first, then
-- earliest due (read_due in priority.lua); a paused queue (`control` field "paused") leases
-- nothing and reports no next_due (its workers sleep until a wake token: resume pushes
-- one), acknowledgements still go through; the limits of rate (rate.lua), concurrency
-- (concurrency.lua, the task's and the queue's own) and groups (group_limits.lua) hold
-- back the jobs over them: they stay pending (or parked), no attempt counted, and next_due
-- says when to claim again. While `parked` exists, a call reads up to twice its room (at
-- most 16 more) so the jobs it parks do not leave the room empty: it leases what the room
-- allows, and the due jobs it read past the room and did not park stay pending untouched
-- (next_due is then now, or CONC_GAP ahead when the queue's own limit is full).
-- A fair queue (`control` field "fair") reads its due jobs in turns, group by group
-- (fair_read in fair.lua), not by read_due; no sweep and no read past the room there, and
-- an acknowledgement hands no parked job back to pending (it stays in its turn). While
-- `control` holds no field but "fair" and "fturn" (no pause, no limit: one HLEN), the jobs
-- go from their turns straight to the lease, without hold_back.
--- @include "base"
--- @include "priority"
--- @include "wake"
--- @include "keeping"
--- @include "acks"
--- @include "concurrency"
--- @include "group_limits"
--- @include "limits"
--- @include "lease_out"
--- @include "fair"
local limit, lease, token, instance = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = clock(ARGV[1])
-- Reads first (they check their keys' types too); then the keys this call will write
-- without having read them are checked; then the writes.
local last = redis.call('HGET', claims, instance)
local resend = limit > 0 and last and string.match(last, '^([^\n]*)\n') == token
local want = (limit > 0 and not resend) and limit or 0
-- What the claim read: the due ids (from `pending`, from `ranked`), their records and
-- states, the due time of the first job left (nil: none); on the general path its limits
-- per group, its room when it reads past it (nil: it does not), whether the queue's own
-- limit capped it.
local read = {ids = {}, from_pending = {}, from_ranked = {}, records = {}, states = {}}
-- The queue's own limit (nil: none), its live holders, the "qhold" field as read.
local qslots, queue_held, queue_hold_was = nil, nil, nil
-- `ranked` and `parked` are named twice: an odd count says `control` exists.
local found = redis.call('EXISTS', ranked, ranked, parked, parked, control)
local controlled, has_control, paused, fair, bare = found > 0, found % 2 == 1, false, false, false
if not controlled then
  if want > 0 then
    read.ids = redis.call('ZRANGEBYSCORE', pending, '-inf', int(now), 'LIMIT', 0, limit)
    read.from_pending = read.ids
  end
  -- The job after the claimed ones: its due time is the reply's next_due, and a wake token
  -- goes to a peer when it is due already.
  local after = redis.call('ZRANGE', pending, #read.ids, #read.ids, 'WITHSCORES')
  read.next_due = after[2] and tonumber(after[2])
else
  local marks = redis.call('HMGET', control, 'paused', 'fair', 'fturn')
  paused, fair = marks[1] ~= false, marks[2] ~= false
  -- Fair and nothing else: no field of a pause or a limit, so no limit holds a job back.
  bare = fair and redis.call('HLEN', control) == (marks[3] and 2 or 1)
  if paused then want = 0 end
  if not bare then
    qslots, queue_held, queue_hold_was = queue_limit()
    if qslots and want > math.max(qslots - #queue_held, 0) then
      want, read.queue_full = math.max(qslots - #queue_held, 0), true
    end
    read.grouping = group_limits(now)
  end
  if bare then read.grouping = {released = fair_released()}
  elseif want > 0 and redis.call('EXISTS', parked) == 1 then
    read.grouping.release_acked(fair)
    -- Groups at their limit are about: read past the jobs that will be parked (a fair
    -- queue's buckets are in `parked` too: fair.lua reads them, no sweep moves them).
    if not fair then read.grouping.sweep() read.room, want = want, math.min(want * 2, want + 16) end
  end
  if fair and want > 0 then
    read.ids, read.from_pending, read.from_ranked, read.next_due, read.due_of = fair_read(want, now, marks[3] or nil, bare)
  else read.ids, read.from_pending, read.from_ranked, read.next_due = read_due(want, now) end
  if read.queue_full and read.next_due and read.next_due <= now then read.next_due = now + CONC_GAP end
  if paused then read.next_due = nil end
end
local read_jobs = #read.ids > 0
if read_jobs then
  read.records = batched('HMGET', jobs, read.ids)
  read.states = batched('HMGET', state, read.ids)
  if controlled and not bare then hold_back(read, now, token) end
  -- Fair: the buckets left hold only jobs of groups at their limit; claim again later.
  if fair and #read.ids == 0 and read.next_due and read.next_due <= now then read.next_due = now + CONC_GAP end
end
local ids, records, states, next_due = read.ids, read.records, read.states, read.next_due
if #ids > 0 then
  zsets(running)
  for i = 1, #ids do
    if not records[i] then zsets(dead) hashes(errors, stats) break end  -- dead-lettered below
  end
end
local wakes = limit > 0 and next_due and next_due <= now
if wakes then lists(wake) end
local acked = {}
ack_from(8, now, acked, read.grouping and read.grouping.released or {}, keep_of(6))
local reply = {}
if resend then
  reply = resent_jobs(last, token)
elseif #ids > 0 then
  local due_of = read.due_of or take_out(read.from_pending, read.from_ranked)
  local leased
  reply, leased = lease_out(ids, records, states, due_of, now, now + lease, token, instance)
  if qslots then
    for _, id in ipairs(leased) do table.insert(queue_held, id .. '|' .. token) end
  end
end
write_queue_holders(qslots, queue_held, queue_hold_was)
if wakes then wake_worker() end
-- claim_plain.lua may claim next when it would have claimed these jobs: no pause, no queue
-- limit, no limit of their tasks (hold_back's `limited`), neither `ranked` nor `parked`
-- left (controls.lua's test, on what this call read); beside a `control` hash, only once
-- the call read jobs (reading none, it cannot tell whether the next are of a limited task).
local plain = not controlled
if controlled and not paused and not fair and not qslots and not read.limited and (read_jobs or not has_control) then
  plain = redis.call('EXISTS', ranked, parked) == 0
end
if plain then return {now, next_due or '', acked, reply, 'plain'} end
return {now, next_due or '', acked, reply}
