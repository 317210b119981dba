-- requeue.lua: dead-letter -> pending, due now, with attempts reset to 0 (errors are kept).
-- KEYS: pending dead jobs state keys wake ranked groups parked
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2..] job ids
-- Returns one integer per id: 1 requeued; 0 not dead (gone, or requeued meanwhile); 2 kept
-- dead because another pending job holds its unique key (a key names at most one pending
-- job); 3 kept dead because its record is missing. A job with a priority goes to `ranked`. A requeued job takes its unique key back.
--- @include "base"
--- @include "record"
--- @include "leases"
--- @include "unique_keys"
--- @include "priority"
--- @include "wake"
local now = clock(ARGV[1])
zsets(pending, ranked, dead) hashes(jobs, state, unique_keys) lists(wake)
local out, moved = {}, 0
for i = 2, #ARGV do
  local id = ARGV[i]
  if not redis.call('ZSCORE', dead, id) then
    table.insert(out, 0)
  else
    local record = redis.call('HGET', jobs, id)
    local _, _, ukey, priority = header(record)
    if not record then
      table.insert(out, 3)
    elseif not take_key(ukey, id) then
      table.insert(out, 2)
    else
      redis.call('ZREM', dead, id)
      set_state(id, 0, nil)
      pend(id, now, priority)
      moved = moved + 1
      table.insert(out, 1)
    end
  end
end
if moved > 0 then wake_worker() end
return out
