-- lease_out.lua: claim.lua hands out the jobs it claimed: out of pending, leased as not
-- started (score lease_until - RESERVED in `running`: the worker's runner marks each one
-- started just before running it), the reply's entries; and answers a re-sent claim.
--- @include "base"
--- @include "leases"
--- @include "priority"
--- @include "stats"
--- @include "errors"

-- A claim sent again with its `token` (its reply was lost): the jobs the first send leased
-- (`last`, the worker's field of `claims`) that the token still holds, as reply entries
-- {id, record, attempt, ''}.
local function resent_jobs(last, token)
  local reply = {}
  for id in string.gmatch(string.sub(last, #token + 2), '%S+') do
    local n = owned(id, token)
    local record = n and redis.call('HGET', jobs, id)
    if record then
      table.insert(reply, id) table.insert(reply, record) table.insert(reply, n + 1)
      table.insert(reply, '')
    end
  end
  return reply
end

-- Take the claimed jobs out of `pending` and `ranked`: their due times (id -> ms).
local function take_out(from_pending, from_ranked)
  local due_of = {}
  if #from_pending > 0 then
    local scores = batched('ZMSCORE', pending, from_pending)
    for i, id in ipairs(from_pending) do
      local score = tonumber(scores[i])
      if score then due_of[id] = int(score) end
    end
    batched('ZREM', pending, from_pending)
  end
  if #from_ranked > 0 then
    local scores = batched('ZMSCORE', ranked, from_ranked)
    for i, id in ipairs(from_ranked) do
      local score = tonumber(scores[i])
      if score then due_of[id] = int(score % BAND) end
    end
    batched('ZREM', ranked, from_ranked)
  end
  return due_of
end

-- Lease `ids` (their `records` and `states` as read, `due_of` their due times) to `token`
-- until `lease_until`, remembered in `claims` for the worker `instance`; an id whose record
-- is missing is dead-lettered with an error instead. Returns the reply's entries {id,
-- record, attempt, due, ...} and the ids leased.
local function lease_out(ids, records, states, due_of, now, lease_until, token, instance)
  local reply, leased, fields, scores = {}, {}, {}, {}
  local reserved = int(lease_until - RESERVED)
  local held_mark = '|' .. token
  for i, id in ipairs(ids) do
    local n = parse_state(states[i])
    if records[i] then
      table.insert(reply, id) table.insert(reply, records[i]) table.insert(reply, n + 1)
      table.insert(reply, due_of[id] or '')
      table.insert(leased, id)
      table.insert(fields, id) table.insert(fields, (n == 0 and '0' or int(n)) .. held_mark)
      table.insert(scores, reserved) table.insert(scores, id)
    else
      push_error(id, error_json('CorruptJob', 'job record missing from Redis', now), 10)
      redis.call('ZADD', dead, int(now), id)
      tally('dead', 1)
    end
  end
  if #leased > 0 then
    batched('HSET', state, fields)
    batched('ZADD', running, scores)
    redis.call('HSET', claims, instance, token .. '\n' .. table.concat(leased, ' '))
  end
  return reply, leased
end
