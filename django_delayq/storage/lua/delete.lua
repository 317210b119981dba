-- delete.lua: delete dead-letter jobs for good.
-- KEYS: dead jobs state errors done links groups trace
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME (for tombstones)
-- ARGV[2..] job ids
-- Returns one integer per id: 1 deleted, 0 not dead (gone or requeued meanwhile).
-- A job with flag 'i' leaves a tombstone in `done` (see schedule.lua).
--- @include "base"
--- @include "record"
--- @include "ends"
zsets(dead, done) hashes(jobs, state, errors, links, trace)
local now = clock(ARGV[1])
local out, marked = {}, {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', dead, id) == 1 then
    local _, flags = header(redis.call('HGET', jobs, id))
    if has(flags, 'i') then table.insert(marked, id) end
    forget(id)
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
tombstone(marked, now)
return out
