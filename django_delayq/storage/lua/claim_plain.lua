-- claim_plain.lua: acknowledge a worker's finished plain jobs, then lease up to `limit` due
-- jobs of a plain queue to it: what claim.lua does on a queue where none of `ranked`,
-- `control`, `parked` exists, with only the keys and the Lua that path needs.
-- KEYS: pending running dead jobs state claims wake stats errors done finished kept ranked control parked
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] limit (integer >= 0; 0 only acknowledges and reports the next due time)
-- ARGV[3] lease (integer milliseconds)
-- ARGV[4] lease token (string, unique per claim call; ack, fail, extend and release present it)
-- ARGV[5] worker instance (string): the field of `claims` remembering this worker's last claim
-- ARGV[6] finished jobs' max age (integer milliseconds; 0: keep none), as claim.lua's
-- ARGV[7] finished jobs' max count per queue, as claim.lua's
-- ARGV[8..] optional quadruples: job id, lease token, info, attempt summary of finished jobs,
--           as claim.lua's, each info made of the flags i, k, u only (no unique key, no
--           link, group, trace or day-long tombstone: the worker sends claim.lua for a round
--           trip carrying any other); 'i' leaves a tombstone in `done`, as claim.lua's ack.
-- Returns, when none of ranked, control, parked exists (the queue is plain):
--   {now, next_due, {ack flags}, {id1, record1, attempt1, due1, id2, ...}, 'plain'},
--   exactly claim.lua's reply on such a queue (next_due the due_at of the earliest pending
--   job left, '' when none; the ack flags 1 acknowledged, 0 gone, -1 not ours; attempt the
--   number the attempt will have once started; due its due_at, epoch ms).
-- Otherwise {now, 'features', {ack flags}, {}}: the acks are done (a plain ack touches no
-- feature key, so it is right on any queue) and nothing is leased; the worker sends
-- claim.lua, which handles every feature.
-- Errors: DELAYQ_NOT_PLAIN (before any write) when an ack's info holds anything else.
-- Jobs are leased as claim.lua leases them (not started: score lease_until - RESERVED,
-- state "<n>|<token>", the claim remembered in `claims`), so ack, fail, extend, release and
-- recover treat them alike; a record missing is dead-lettered with an error, as there; one
-- wake token is pushed when due jobs remain after the claim.
-- Idempotent: sent again with the same token (its reply was lost), it acknowledges nothing
-- new (those acks answer 0) and returns the jobs the first send leased that the token still
-- holds, whatever the queue's state now (on a queue no longer plain: without 'plain', and
-- next_due = now, so the worker asks claim.lua where the next job is).
local limit, lease, token, instance = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = clock(ARGV[1])
local tombstones = false
for i = 10, #ARGV, 4 do
  if string.find(ARGV[i], '[^iku]') then
    return redis.error_reply('DELAYQ_NOT_PLAIN claim_plain.lua takes acks of the flags i, k, u only, got ' .. ARGV[i] .. ' for ' .. ARGV[i - 2] .. ': send claim.lua')
  end
  tombstones = tombstones or has(ARGV[i], 'i')
end
-- Reads first (they check their keys' types too); then the keys this call will write
-- without having read them are checked; then the writes.
local last = redis.call('HGET', C, instance)
local resend = limit > 0 and last and string.match(last, '^([^\n]*)\n') == token
local plain = redis.call('EXISTS', Q, K, Y) == 0
local ids, got, next_due = {}, {}, nil
if plain then
  if limit > 0 and not resend then
    got = redis.call('ZRANGEBYSCORE', P, '-inf', int(now), 'WITHSCORES', 'LIMIT', 0, limit)
    for i = 1, #got, 2 do ids[#ids + 1] = got[i] end
  end
  local after = redis.call('ZRANGE', P, #ids, #ids, 'WITHSCORES')
  next_due = after[2] and tonumber(after[2])
elseif resend then
  next_due = now  -- where the queue's next job is, claim.lua (sent next) will tell
end
local records, states = {}, {}
if #ids > 0 then
  records = batched('HMGET', J, ids)
  states = batched('HMGET', S, ids)
  zsets(R)
  for i = 1, #ids do
    if not records[i] then zsets(D) hashes(E, T) break end  -- dead-lettered below
  end
end
local wakes = plain and limit > 0 and next_due and next_due <= now
if wakes then lists(W) end
-- The acks: what claim.lua does for entries of the flags i, k, u.
local acked, done, summaries, finished = {}, {}, {}, {}
local keep = keep_of(6)
if #ARGV >= 8 then
  local acking = {}
  for i = 8, #ARGV, 4 do acking[#acking + 1] = ARGV[i] end
  local held = batched('HMGET', S, acking)
  zsets(R) hashes(J, E, T)
  if tombstones then zsets(F) end
  if keep then zsets(V) hashes(I) end
  for j, id in ipairs(acking) do
    local i = 8 + (j - 1) * 4
    local _, t, running = parse_state(held[j])
    if running and t == ARGV[i + 1] then
      done[#done + 1] = id
      summaries[#done] = ARGV[i + 3] or ''
      if has(ARGV[i + 2], 'i') then finished[#finished + 1] = id end
      acked[j] = 1
    elseif held[j] or redis.call('HEXISTS', J, id) == 1 then
      acked[j] = -1
    else
      acked[j] = 0
    end
  end
end
if #done > 0 then
  if keep then
    local kept_records, errs, ends = batched('HMGET', J, done), batched('HMGET', E, done), {}
    for j, id in ipairs(done) do
      ends[j] = {id, 'succeeded', kept_records[j] or '', summaries[j], errs[j] or ''}
    end
    keep_finished(keep, now, ends)
  end
  batched('ZREM', R, done)
  batched('HDEL', J, done)
  batched('HDEL', S, done)
  batched('HDEL', E, done)
  tombstone(finished, now, nil)
  bump('d', #done, now)
  tally('done', #done)
end
if not (plain or resend) then return {now, 'features', acked, {}} end
local jobs = {}
if resend then
  -- This call, sent again: the jobs the first send leased, if the token still holds them.
  for id in string.gmatch(string.sub(last, #token + 2), '%S+') do
    local n = owned(id, token)
    local record = n and redis.call('HGET', J, id)
    if record then
      jobs[#jobs + 1] = id jobs[#jobs + 1] = record jobs[#jobs + 1] = n + 1 jobs[#jobs + 1] = ''
    end
  end
elseif #ids > 0 then
  batched('ZREM', P, ids)
  local leased, fields, scores = {}, {}, {}
  local reserved = int(now + lease - RESERVED)
  local running = '|' .. token
  for i, id in ipairs(ids) do
    local n = parse_state(states[i])
    if records[i] then
      jobs[#jobs + 1] = id jobs[#jobs + 1] = records[i] jobs[#jobs + 1] = n + 1
      jobs[#jobs + 1] = int(tonumber(got[2 * i]))
      leased[#leased + 1] = id
      fields[#fields + 1] = id fields[#fields + 1] = (n == 0 and '0' or int(n)) .. running
      scores[#scores + 1] = reserved scores[#scores + 1] = id
    else
      push_error(id, error_json('CorruptJob', 'job record missing from Redis', now), 10)
      redis.call('ZADD', D, int(now), id)
      tally('dead', 1)
    end
  end
  if #leased > 0 then
    batched('HSET', S, fields)
    batched('ZADD', R, scores)
    redis.call('HSET', C, instance, token .. '\n' .. table.concat(leased, ' '))
  end
end
if wakes then wake() end
if plain then return {now, next_due or '', acked, jobs, 'plain'} end
return {now, next_due or '', acked, jobs}
