-- claim_plain.lua: acknowledge a worker's finished plain jobs, then lease up to `limit` due
-- jobs to it when the queue is plain for them: what claim.lua does where neither `ranked`
-- nor `parked` exists and `control` (if it exists) holds nothing claim.lua would apply to
-- those jobs (controls.lua: "paused", "qconc", "qhold", "fair", their tasks' "rate:<task>" and
-- "conc:<task>", a grouped job's task's "gconc:<task>" and "grate:<task>"; a limit of
-- another task does not count), with only the keys and the Lua that path needs.
-- KEYS: pending running dead jobs state claims wake stats errors done finished kept ranked control parked links forward
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] limit (integer >= 0; 0 only acknowledges and reports the next due time)
-- ARGV[3] lease (integer milliseconds)
-- ARGV[4] lease token (string, unique per claim call; ack, fail, extend and release present it)
-- ARGV[5] worker instance (string): the field of `claims` remembering this worker's last claim
-- ARGV[6] finished jobs' max age (integer milliseconds; 0: keep none), as claim.lua's
-- ARGV[7] finished jobs' max count per queue, as claim.lua's
-- ARGV[8..] optional quadruples: job id, lease token, info, attempt summary of finished jobs,
--           as claim.lua's, each info made of the flags i, k, l, u only (no unique key,
--           group, trace or day-long tombstone: the worker sends claim.lua for a round trip
--           carrying any other); 'i' leaves a tombstone in `done`, 'l' (a batch member, a
--           chain step) its end in `forward` and its link deleted, as claim.lua's ack.
-- Returns, when the queue is plain for the due jobs it read (those fields read in one HMGET
-- after their records, only while `control` exists):
--   {now, next_due, {ack flags}, {id1, record1, attempt1, due1, id2, ...}, 'plain'},
--   exactly claim.lua's reply on such a queue (next_due the due_at of the earliest pending
--   job left, '' when none; the ack flags 1 acknowledged, 0 gone, -1 not ours; attempt the
--   number the attempt will have once started; due its due_at, epoch ms).
-- Otherwise {now, 'features', {ack flags}, {}}: the acks are done (a plain ack touches no
-- feature key, so it is right on any queue) and nothing is leased or written (one due job
-- of a limited task among those read is enough); the worker sends claim.lua, which handles
-- every feature.
-- Errors: DELAYQ_NOT_PLAIN (before any write) when an ack's info holds anything else.
-- Jobs are leased as claim.lua leases them (not started: score lease_until - RESERVED,
-- state "<n>|<token>", the claim remembered in `claims`), so ack, fail, extend, release and
-- recover treat them alike; a record missing is dead-lettered with an error, as there; one
-- wake token is pushed when due jobs remain after the claim.
-- Idempotent: sent again with the same token (its reply was lost), it acknowledges nothing
-- new (those acks answer 0) and returns the jobs the first send leased that the token still
-- holds, whatever the queue's state now (with 'plain' unless `ranked` or `parked` exists or
-- `control` holds a pause or a queue limit; without it next_due = now, so the worker asks
-- claim.lua where the next job is).
--- @include "base"
--- @include "record"
--- @include "leases"
--- @include "wake"
--- @include "acks"
--- @include "lease_out"
--- @include "controls"

local limit, lease, token, instance = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = clock(ARGV[1])
for i = 10, #ARGV, 4 do
  if string.find(ARGV[i], '[^ikul]') then
    return redis.error_reply('DELAYQ_NOT_PLAIN claim_plain.lua takes acks of the flags i, k, l, u only, got ' .. ARGV[i] .. ' for ' .. ARGV[i - 2] .. ': send claim.lua')
  end
end
-- Reads first (they check their keys' types too); then the keys this call will write
-- without having read them are checked; then the writes.
local last = redis.call('HGET', claims, instance)
local resend = limit > 0 and last and string.match(last, '^([^\n]*)\n') == token
-- `ranked` and `parked` are named twice: an odd count says `control` exists, two or more
-- that `ranked` or `parked` does (one EXISTS for the three).
local found = redis.call('EXISTS', ranked, ranked, parked, parked, control)
local plain, controlled = found < 2, found % 2 == 1
local ids, got, next_due = {}, {}, nil
if plain then
  if limit > 0 and not resend then
    got = redis.call('ZRANGEBYSCORE', pending, '-inf', int(now), 'WITHSCORES', 'LIMIT', 0, limit)
    for i = 1, #got, 2 do ids[#ids + 1] = got[i] end
  end
  local after = redis.call('ZRANGE', pending, #ids, #ids, 'WITHSCORES')
  next_due = after[2] and tonumber(after[2])
end
local records, states = {}, {}
if #ids > 0 then records = batched('HMGET', jobs, ids) end
if plain and controlled and controls_apply(records) then
  plain, ids, records = false, {}, {}  -- claim.lua leases them, nothing here
end
if resend and not plain then
  next_due = now  -- where the queue's next job is, claim.lua (sent next) will tell
end
if #ids > 0 then
  states = batched('HMGET', state, ids)
  zsets(running)
  for i = 1, #ids do
    if not records[i] then zsets(dead) hashes(errors, stats) break end  -- dead-lettered below
  end
end
local wakes = plain and limit > 0 and next_due and next_due <= now
if wakes then lists(wake) end
local acked = {}
ack_plain(8, now, acked, keep_of(6))
if not (plain or resend) then return {now, 'features', acked, {}} end
local reply = {}
if resend then
  reply = resent_jobs(last, token)
elseif #ids > 0 then
  batched('ZREM', pending, ids)
  local due_of = {}
  for i, id in ipairs(ids) do due_of[id] = int(tonumber(got[2 * i])) end
  reply = lease_out(ids, records, states, due_of, now, now + lease, token, instance)
end
if wakes then wake_worker() end
if plain then return {now, next_due or '', acked, reply, 'plain'} end
return {now, next_due or '', acked, reply}
