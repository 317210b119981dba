-- claim_plain.lua (prototype): acknowledge a worker's finished plain jobs, then lease up to
-- `limit` due plain jobs to it. For a queue whose `features` flag is unset (no priority,
-- group, limit, pause, link or trace in it): the Python side sends claim.lua otherwise.
-- KEYS[1] pending  KEYS[2] running  KEYS[3] jobs  KEYS[4] state  KEYS[5] claims
-- KEYS[6] wake  KEYS[7] stats  KEYS[8] errors  KEYS[9] finished  KEYS[10] kept
-- ARGV[1] now or ''  ARGV[2] limit  ARGV[3] lease (ms)  ARGV[4] token  ARGV[5] instance
-- ARGV[6] keep max age (ms, 0: none)  ARGV[7] keep max count
-- ARGV[8..] quadruples of finished jobs: id, token, info, attempt summary
-- Returns {now, next_due, {ack flags}, {id, record, attempt, due, ...}}, as claim.lua.
local pending, running, jobs, state, claims = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local wake, stats, errors, finished, kept = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local RESERVED = 10000000000000
local limit, lease, token, instance = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
-- acks (the plain ones: info '' ; flags would send claim.lua)
local acked, done, summaries = {}, {}, {}
if #ARGV >= 8 then
  local ids = {}
  for i = 8, #ARGV, 4 do ids[#ids + 1] = ARGV[i] end
  local states = redis.call('HMGET', state, unpack(ids))
  for j, id in ipairs(ids) do
    local raw = states[j]
    local t = raw and string.match(raw, '^%d+|(.*)$')
    if t == ARGV[8 + (j - 1) * 4 + 1] then
      done[#done + 1] = id
      summaries[#done] = ARGV[8 + (j - 1) * 4 + 3] or ''
      acked[j] = 1
    elseif raw or redis.call('HEXISTS', jobs, id) == 1 then
      acked[j] = -1
    else
      acked[j] = 0
    end
  end
end
if #done > 0 then
  local age, count = tonumber(ARGV[6]), tonumber(ARGV[7])
  if age > 0 and count > 0 then
    local records, errs = redis.call('HMGET', jobs, unpack(done)), redis.call('HMGET', errors, unpack(done))
    local scores, entries = {}, {}
    for j, id in ipairs(done) do
      local record, summary = records[j] or '', summaries[j]
      scores[#scores + 1] = now scores[#scores + 1] = id
      entries[#entries + 1] = id
      entries[#entries + 1] = 'succeeded ' .. now .. '\n' .. #record .. '\n' .. record .. #summary .. '\n' .. summary .. (errs[j] or '')
    end
    redis.call('ZADD', finished, unpack(scores))
    redis.call('HSET', kept, unpack(entries))
    local room = #done + 100
    local old = redis.call('ZRANGEBYSCORE', finished, '-inf', '(' .. (now - age), 'LIMIT', 0, room)
    local excess = redis.call('ZCARD', finished) - #old - count
    if excess > 0 then
      for _, id in ipairs(redis.call('ZRANGE', finished, #old, #old + math.min(excess, room) - 1)) do old[#old + 1] = id end
    end
    if #old > 0 then redis.call('ZREM', finished, unpack(old)) redis.call('HDEL', kept, unpack(old)) end
    redis.call('PEXPIRE', finished, age) redis.call('PEXPIRE', kept, age)
  end
  redis.call('ZREM', running, unpack(done))
  redis.call('HDEL', jobs, unpack(done))
  redis.call('HDEL', state, unpack(done))
  redis.call('HDEL', errors, unpack(done))
  local minute = math.floor(now / 60000)
  local slot = 'd:' .. (minute % 60)
  local cur = redis.call('HGET', stats, slot)
  local total = #done
  if cur then
    local m, c = string.match(cur, '^(%d+):(%d+)$')
    if tonumber(m) == minute then total = tonumber(c) + total end
  end
  redis.call('HSET', stats, slot, minute .. ':' .. total)
  redis.call('HINCRBY', stats, 'done', #done)
end
local jobs_out = {}
local last = limit > 0 and redis.call('HGET', claims, instance)
if last and string.match(last, '^([^\n]*)\n') == token then
  for id in string.gmatch(string.sub(last, #token + 2), '%S+') do
    local raw = redis.call('HGET', state, id)
    local n, t = string.match(raw or '', '^(%d+)|(.*)$')
    if t == token then
      jobs_out[#jobs_out + 1] = id
      jobs_out[#jobs_out + 1] = redis.call('HGET', jobs, id)
      jobs_out[#jobs_out + 1] = tonumber(n) + 1
      jobs_out[#jobs_out + 1] = ''
    end
  end
  return {now, '', acked, jobs_out}
end
local got = limit > 0 and redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit) or {}
if #got > 0 then
  local ids = {}
  for i = 1, #got, 2 do ids[#ids + 1] = got[i] end
  local records = redis.call('HMGET', jobs, unpack(ids))
  local states = redis.call('HMGET', state, unpack(ids))
  local fields, scores, leased = {}, {}, {}
  local reserved = now + lease - RESERVED
  for j, id in ipairs(ids) do
    local n = tonumber(string.match(states[j] or '', '^(%d+)|') or '0')
    if records[j] then
      jobs_out[#jobs_out + 1] = id
      jobs_out[#jobs_out + 1] = records[j]
      jobs_out[#jobs_out + 1] = n + 1
      jobs_out[#jobs_out + 1] = got[2 * j]
      fields[#fields + 1] = id fields[#fields + 1] = n .. '|' .. token
      scores[#scores + 1] = reserved scores[#scores + 1] = id
      leased[#leased + 1] = id
    end
  end
  redis.call('ZREM', pending, unpack(ids))
  if #leased > 0 then
    redis.call('HSET', state, unpack(fields))
    redis.call('ZADD', running, unpack(scores))
    redis.call('HSET', claims, instance, token .. '\n' .. table.concat(leased, ' '))
  end
end
local after = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
local next_due = after[2] and tonumber(after[2]) or ''
if limit > 0 and after[2] and tonumber(after[2]) <= now then
  if redis.call('RPUSH', wake, '1') > 8 then redis.call('LTRIM', wake, -8, -1) end
end
return {now, next_due, acked, jobs_out}
