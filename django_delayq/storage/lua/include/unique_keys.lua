-- unique_keys.lua: a unique key names at most one pending job (`unique_keys`).
--- @include "priority"
--- @include "followers"

-- The job `id` ended (succeeded, dead, cancelled, expired): its key goes if it names the job.
-- A job with flag 'h' (`flags`; unique_until='end') held it through its run: its follower,
-- if any, becomes pending now (`now`), taking the key (include/followers.lua).
local function release_key(ukey, id, flags, now)
  if ukey == '' then return end
  if redis.call('HGET', unique_keys, ukey) == id then redis.call('HDEL', unique_keys, ukey) end
  if has(flags, 'h') then promote_follower(ukey, now) end
end

-- A debounced job (flag 'd', schedule.lua's ARGV[14]) ends: the first due time kept for its key
-- goes, unless it names another job (the key's next one).
local function release_wait(ukey, id)
  if ukey == '' then return end
  local mark = '\0d' .. ukey
  local held = redis.call('HGET', unique_keys, mark)
  if held and string.sub(held, 1, #id + 1) == id .. '|' then redis.call('HDEL', unique_keys, mark) end
end

-- A job going back to pending (retry, recovery, release, requeue) takes its unique key back,
-- so the key names at most one pending job. False when another pending job holds the key
-- (it was scheduled with that key while this one ran or lay dead): the caller dead-letters
-- or keeps this one dead instead of making two pending jobs answer to one key.
local function take_key(ukey, id)
  if ukey == '' then return true end
  local holder = redis.call('HGET', unique_keys, ukey)
  if holder and holder ~= id and pending_due(holder) then return false end
  redis.call('HSET', unique_keys, ukey, id)
  return true
end
