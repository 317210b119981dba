-- claim.lua: acknowledge a worker's finished jobs, then lease up to `limit` due jobs to it.
-- KEYS: pending running dead jobs state keys wake stats errors done claims
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] limit (integer >= 0; 0 only acknowledges and reports the next due time)
-- ARGV[3] lease (integer milliseconds)
-- ARGV[4] lease token (string, unique per claim call; ack, fail, extend and release present it)
-- ARGV[5] worker instance (string): the field of `claims` remembering this worker's last claim
-- ARGV[6..] optional triples: job id, lease token, info of finished jobs, acknowledged first
--           exactly as ack.lua does (a worker's acks and its next claim in one call)
-- Returns {now, next_due, {ack flags}, {id1, record1, attempt1, id2, ...}}: next_due is the
-- due_at of the earliest pending job left ('' when none); the ack flags are ack.lua's, one
-- per triple; attempt is the number the attempt will have once started.
-- Claimed jobs are leased as not started (score lease_until - RESERVED); the worker's runner
-- marks each one started (ZADD XX GT lease_until) just before running it, so a job whose
-- worker died before starting it is handed back by recover.lua without counting an attempt.
-- Idempotent: sent again with the same token (its reply was lost), it acknowledges nothing new
-- and returns the jobs the first send leased that the token still holds.
-- An id whose record is missing is dead-lettered with an error instead of returned.
-- When due jobs remain after the claim, one wake token is pushed so a peer worker claims them.
local limit, lease, token, instance = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = clock(ARGV[1])
-- Reads first (they check their keys' types too); then the keys this call will write
-- without having read them are checked; then the writes.
local last = redis.call('HGET', C, instance)
local resend = limit > 0 and last and string.match(last, '^([^\n]*)\n') == token
local ids = {}
if limit > 0 and not resend then
  ids = redis.call('ZRANGEBYSCORE', P, '-inf', int(now), 'LIMIT', 0, limit)
end
-- The job after the claimed ones: its due time is the reply's next_due, and a wake token
-- goes to a peer when it is due already.
local after = redis.call('ZRANGE', P, #ids, #ids, 'WITHSCORES')
local next_due = after[2] and tonumber(after[2])
local records, states = {}, {}
if #ids > 0 then
  records = batched('HMGET', J, ids)
  states = batched('HMGET', S, ids)
  zsets(R)
  for i = 1, #ids do
    if not records[i] then zsets(D) hashes(E, T) break end  -- dead-lettered below
  end
end
local wakes = limit > 0 and next_due and next_due <= now
if wakes then lists(W) end
local acked = {}
ack_from(6, now, acked)
local jobs = {}
if resend then
  -- This call, sent again: the jobs the first send leased, if the token still holds them.
  for id in string.gmatch(string.sub(last, #token + 2), '%S+') do
    local n = owned(id, token)
    local record = n and redis.call('HGET', J, id)
    if record then
      table.insert(jobs, id) table.insert(jobs, record) table.insert(jobs, n + 1)
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
      table.insert(jobs, id) table.insert(jobs, records[i]) table.insert(jobs, n + 1)
      table.insert(leased, id)
      table.insert(fields, id) table.insert(fields, (n == 0 and '0' or int(n)) .. running)
      table.insert(scores, reserved) table.insert(scores, id)
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
return {now, next_due or '', acked, jobs}
