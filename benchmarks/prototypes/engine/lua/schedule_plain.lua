-- schedule_plain.lua (prototype): store a plain job (no unique key, priority, group, link,
-- trace; a record without flag 'i') as pending.
-- KEYS[1] pending  KEYS[2] jobs  KEYS[3] wake  KEYS[4] queues (the registry; optional)
-- ARGV[1] job id  ARGV[2] record  ARGV[3] delay (integer ms from Redis's now)
-- ARGV[4] now (epoch ms) or '' for Redis TIME  ARGV[5] the queue's name (with KEYS[4])
-- Returns {'created', id, due_at}. Sent again with the same record: the same answer.
local pending, jobs, wake, queues = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, record = ARGV[1], ARGV[2]
local now = tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
local due = now + math.max(tonumber(ARGV[3]), 0)
-- Reads first (they check the types): the earliest pending job, for the wake.
local first = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
if queues then redis.call('SADD', queues, ARGV[5]) end
if redis.call('HSETNX', jobs, id, record) == 0 then
  if redis.call('HGET', jobs, id) ~= record then
    return redis.error_reply('DELAYQ_DUPLICATE_ID ' .. id)
  end
  return {'created', id, tonumber(redis.call('ZSCORE', pending, id)) or due}
end
redis.call('ZADD', pending, due, id)
if not first[2] or tonumber(first[2]) >= due then  -- no pending job due before it
  if redis.call('RPUSH', wake, '1') > 8 then redis.call('LTRIM', wake, -8, -1) end
end
return {'created', id, due}
