-- throttle.lua: unique_for= windows. A keyed job whose record has flag 'w' carries a window
-- (milliseconds) in a trailer of JSON whitespace at its end (jobs/record.py): once it
-- succeeded (acks.lua), its key holds until now + window: schedule.lua stores no job under
-- it and answers 'throttled' with the finished job's id. The window lives in `keys` under
-- "\0t" .. key as "<finished job id>|<window end ms>" and in `throttled` (sorted set:
-- key -> window end), so windows of keys never scheduled again are swept: each keyed
-- schedule that meets no pending holder removes up to THROTTLE_SWEEP ended ones.
--- @include "record"

local THROTTLE_SWEEP = 10
local WINDOW_DIGIT = {[32] = 0, [9] = 1, [13] = 2, [10] = 3}  -- ' ' '\t' '\r' '\n'

-- The window (ms) of a record with flag 'w': its last 24 bytes, or the 24 before them when
-- it also has flag 'x' (the expiry's trailer stays last); nil when not there (cut, damaged).
local function window_of(record)
  local _, flags = header(record)
  if not record or not has(flags, 'w') then return nil end
  local last = has(flags, 'x') and #record - 24 or #record
  if last < 24 then return nil end
  local value = 0
  for i = last - 23, last do
    local digit = WINDOW_DIGIT[string.byte(record, i)]
    if not digit then return nil end
    value = value * 4 + digit
  end
  return value
end

-- A keyed job with flag 'w' succeeded at `now`: its key holds until now + its window.
local function throttle_open(ukey, id, record, now)
  local window = ukey ~= '' and window_of(record)
  if not window then return end
  local ends = int(now + window)
  redis.call('HSET', unique_keys, '\0t' .. ukey, id .. '|' .. ends)
  redis.call('ZADD', throttled, ends, ukey)
end

-- schedule.lua, for key `ukey` that no pending job holds: the finished job's id and the
-- window's end (ms) while a window holds the key, else nil. Ended windows go: the key's own
-- and up to THROTTLE_SWEEP others (reads first: both keys' types are checked before a write).
local function throttle_check(ukey, now)
  local held = redis.call('HGET', unique_keys, '\0t' .. ukey)
  local over = redis.call('ZRANGEBYSCORE', throttled, '-inf', int(now), 'LIMIT', 0, THROTTLE_SWEEP)
  local holder, ends = string.match(held or '', '^(.*)|(%d+)$')
  ends = tonumber(ends)
  if ends and ends <= now then table.insert(over, ukey) end
  for _, k in ipairs(over) do redis.call('HDEL', unique_keys, '\0t' .. k) end
  if #over > 0 then batched('ZREM', throttled, over) end
  if ends and ends > now then return holder, ends end
  return nil
end
