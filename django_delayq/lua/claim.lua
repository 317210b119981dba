-- claim.lua: move up to `limit` due jobs from pending to running under a lease.
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] limit (integer >= 0; 0 only reports the next due time)
-- ARGV[2] lease seconds (number): lease_until = now + lease
-- ARGV[3] lease token (string, unique per claim call; ack/fail/extend must present it)
-- ARGV[4] worker id (string, shown in the admin)
-- ARGV[5] now (epoch seconds) or '' for Redis TIME
-- ARGV[6..] optional triples: job id, lease token, unique key ('' for none) of finished jobs,
--           acknowledged first exactly as ack.lua does (a worker's acks and its next claim
--           in one call)
-- Returns {now, next_due, id1, record1, attempts1, id2, ...}: next_due is the earliest
-- pending due_at after the claim ('' when pending is empty); attempts counts this one.
-- An id whose record is missing is dead-lettered with an error instead of returned.
-- When due jobs remain after the claim, one wake token is pushed so a peer worker claims them.
-- With ARGV[6..], the reply ends with one flag per acknowledged triple, as ack.lua returns
-- them (1 acknowledged, 0 lease lost).
local limit, lease, token, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local now = clock(ARGV[5])
local acked = {}
ack_from(6, now, acked)
local out = {fmt(now), ''}
if limit > 0 then
  local ids = redis.call('ZRANGEBYSCORE', P, '-inf', exact(now), 'LIMIT', 0, limit)
  for _, id in ipairs(ids) do
    redis.call('ZREM', P, id)
    local record = redis.call('HGET', J, id)
    local m = get_meta(id)
    if not record then
      push_error(m, {type = 'django_delayq.exceptions.CorruptJob', message = 'job record missing from Redis', at = now}, 10)
      bury(id, m, now)
    else
      m.n = (tonumber(m.n) or 0) + 1
      m.t = token
      m.w = worker
      m.s = now
      set_meta(id, m)
      redis.call('ZADD', R, now + lease, id)
      table.insert(out, id)
      table.insert(out, record)
      table.insert(out, m.n)
    end
  end
end
local head = redis.call('ZRANGE', P, 0, 0, 'WITHSCORES')
if head[2] then
  out[2] = fmt(tonumber(head[2]))
  if limit > 0 and tonumber(head[2]) <= now then wake() end
end
for _, flag in ipairs(acked) do table.insert(out, flag) end
return out
