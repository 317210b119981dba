-- followers.lua: unique_until='end' (record flag 'h'): the key's job holds its key while it
-- runs too, and a replace meanwhile stores one follower. In `keys`, the field
-- "\0f" .. key -> "<follower id>|<not before, epoch ms>": the follower's record (and its
-- group, trace) are stored, but it is in no set (get_job: status 'waiting') until the key's
-- job (the leader: the job the key names) ends, however it ends (ack, dead, cancelled,
-- expired): it is then pending, due at max(not before, the end), and takes the key.
--- @include "base"
--- @include "record"
--- @include "leases"
--- @include "priority"
--- @include "wake"
--- @include "ends"
--- @include "groups"

-- The key `ukey`'s job ended (or never promoted its follower: an older worker acked it):
-- its follower, if any, becomes pending and takes the key when no job holds it. Its id.
local function promote_follower(ukey, now)
  local mark = '\0f' .. ukey
  local held = redis.call('HGET', unique_keys, mark)
  if not held then return nil end
  redis.call('HDEL', unique_keys, mark)
  local fid, after = string.match(held, '^(.*)|(%d+)$')
  local record = fid and redis.call('HGET', jobs, fid)
  if not record then return nil end
  local _, _, _, priority = header(record)
  if not redis.call('HGET', unique_keys, ukey) then redis.call('HSET', unique_keys, ukey, fid) end
  pend(fid, math.max(tonumber(after), now), priority)
  wake_worker()
  return fid
end

-- fetch.lua: for the job `id` whose `record` is in no set, "<leader>|<not before ms>" when it
-- is its key's follower (leader: the job the key names, '' when none), else false.
local function follower_of(id, record)
  local ukey = select(3, header(record))
  if ukey == '' then return false end
  local held = redis.call('HGET', unique_keys, '\0f' .. ukey)
  if not held or string.sub(held, 1, #id + 1) ~= id .. '|' then return false end
  return (redis.call('HGET', unique_keys, ukey) or '') .. string.sub(held, #id + 1)
end

-- schedule.lua, a re-send: the leader the follower `id` waits for, or nil when it is none.
local function leader_of(id, record)
  local waits = follower_of(id, record)
  return waits and string.match(waits, '^(.*)|%d+$') or nil
end

-- A follower leaves without running (cancel.lua): by id (`id`, its record's key read) or,
-- with id '', by key (`ukey`). Its id and not-before time, or nil when it is no follower.
local function drop_follower(id, ukey)
  if id ~= '' then
    ukey = select(3, header(redis.call('HGET', jobs, id)))
  end
  if ukey == '' then return nil end
  local mark = '\0f' .. ukey
  local fid, after = string.match(redis.call('HGET', unique_keys, mark) or '', '^(.*)|(%d+)$')
  if not fid or (id ~= '' and fid ~= id) then return nil end
  redis.call('HDEL', unique_keys, mark)
  return fid, tonumber(after)
end

-- schedule.lua, when the key `ukey` names no pending job (`existing`: the job it names, or
-- false). A leader with flag 'h' whose attempt holds its lease holds the key: 'keep' answers
-- it ({'kept', leader, '', its record}); a replace stores the follower under `id` or, when
-- there is one, rewrites it (its id kept: {'replaced', follower, due, ''}). Otherwise a
-- follower whose leader left without promoting it is promoted first. Returns the reply, or
-- nil and the job the key names then (and its due time) for schedule.lua to go on with.
local function while_leader_runs(existing, ukey, id, record, due, now, on_conflict, adopt, trace_ctx, group)
  local leader_flags = existing and select(2, header(redis.call('HGET', jobs, existing)))
  if not (leader_flags and has(leader_flags, 'h') and select(3, state_of(existing))) then
    local fid = promote_follower(ukey, now)
    if fid then return nil, fid, pending_due(fid) end
    return nil, existing, nil
  end
  if on_conflict == 'keep' then return {'kept', existing, '', redis.call('HGET', jobs, existing)} end
  local mark = '\0f' .. ukey
  local fid = string.match(redis.call('HGET', unique_keys, mark) or '', '^(.*)|%d+$')
  local _, flags = header(record)
  hashes(trace, groups)
  if fid and (adopt and fid ~= id) then  -- the relay's row takes the follower's place
    local _, old_flags = header(redis.call('HGET', jobs, fid))
    forget(fid)
    if has(old_flags, 'i') then zsets(done) tombstone({fid}, now) end
    fid = nil
  end
  if fid then
    redis.call('HSET', jobs, fid, record)
    -- The replaced record's call may come back (a lost reply): its id answers 'done' then.
    if has(flags, 'i') and fid ~= id then zsets(done) tombstone({id}, now) end
  elseif redis.call('HSETNX', jobs, id, record) == 0 then
    return redis.error_reply('DELAYQ_DUPLICATE_ID ' .. id)
  else
    fid = id
  end
  if trace_ctx ~= '' then redis.call('HSET', trace, fid, trace_ctx) else redis.call('HDEL', trace, fid) end
  group_join(fid, record, group)
  redis.call('HSET', unique_keys, mark, fid .. '|' .. int(due))
  return {fid == id and 'created' or 'replaced', fid, due, '', existing}
end
