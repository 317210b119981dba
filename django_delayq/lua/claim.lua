-- claim.lua: acknowledge a worker's finished jobs, then lease up to `limit` due jobs to it.
-- KEYS: the queue's eleven keys (see _lib.lua).
-- ARGV[1] now (epoch seconds) or '' for Redis TIME
-- ARGV[2] limit (integer >= 0; 0 only acknowledges and reports the next due time)
-- ARGV[3] lease seconds (number)
-- ARGV[4] lease token (string, unique per claim call; ack, fail, extend and release present it)
-- ARGV[5] worker instance (string): the field of `claims` remembering this worker's last claim
-- ARGV[6..] optional triples: job id, lease token, info of finished jobs, acknowledged first
--           exactly as ack.lua does (a worker's acks and its next claim in one call)
-- Returns {now, next_due, {ack flags}, {id1, record1, attempt1, id2, ...}}: next_due is the
-- earliest pending due_at after the claim ('' when pending is empty); the ack flags are
-- ack.lua's, one per triple; attempt is the number the attempt will have once started.
-- Claimed jobs are leased as not started (score lease_until - RESERVED); the worker's runner
-- marks each one started (ZADD XX GT lease_until) just before running it, so a job whose
-- worker died before starting it is handed back by recover.lua without counting an attempt.
-- Idempotent: sent again with the same token (its reply was lost), it acknowledges nothing new
-- and returns the jobs the first send leased that the token still holds.
-- An id whose record is missing is dead-lettered with an error instead of returned.
-- When due jobs remain after the claim, one wake token is pushed so a peer worker claims them.
local limit, lease, token, instance = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = clock(ARGV[1])
zsets(R, F) hashes(T, E, U) lists(W)
-- Reads first (they check their keys' types too), then writes.
local jobs, ids, records, states = {}, {}, {}, {}
local last = redis.call('HGET', C, instance)
local resend = limit > 0 and last and string.match(last, '^([^\n]*)\n') == token
if limit > 0 and not resend then
  ids = redis.call('ZRANGEBYSCORE', P, '-inf', exact(now), 'LIMIT', 0, limit)
  if #ids > 0 then
    records = batched('HMGET', J, ids)
    states = batched('HMGET', S, ids)
    for i = 1, #ids do
      if not records[i] then zsets(D) break end  -- dead-lettered below
    end
  end
end
local acked = {}
ack_from(6, now, acked)
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
  local reserved = now + lease - RESERVED
  for i, id in ipairs(ids) do
    local n = parse_state(states[i])
    if records[i] then
      table.insert(jobs, id) table.insert(jobs, records[i]) table.insert(jobs, n + 1)
      table.insert(leased, id)
      table.insert(fields, id) table.insert(fields, n .. '|' .. token)
      table.insert(scores, reserved) table.insert(scores, id)
    else
      push_error(id, cjson.encode({type = 'django_delayq.exceptions.CorruptJob',
        message = 'job record missing from Redis', at = now}), 10)
      redis.call('ZADD', D, now, id)
    end
  end
  if #leased > 0 then
    batched('HSET', S, fields)
    batched('ZADD', R, scores)
    redis.call('HSET', C, instance, token .. '\n' .. table.concat(leased, ' '))
  end
end
local head = redis.call('ZRANGE', P, 0, 0, 'WITHSCORES')
local next_due = ''
if head[2] then
  next_due = fmt(tonumber(head[2]))
  if limit > 0 and tonumber(head[2]) <= now then wake() end
end
return {fmt(now), next_due, acked, jobs}
