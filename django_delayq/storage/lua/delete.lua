-- delete.lua: delete dead-letter jobs for good.
-- KEYS: dead jobs state errors done links groups trace
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME (for tombstones)
-- ARGV[2..] job ids
-- Returns one integer per id: 1 deleted, 0 not dead (gone or requeued meanwhile).
-- A job with flag 'i' leaves a tombstone in `done` (see schedule.lua).
zsets(D, F) hashes(J, S, E, L, O)
local now = clock(ARGV[1])
local out, finished = {}, {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', D, id) == 1 then
    local _, flags = header(redis.call('HGET', J, id))
    if has(flags, 'i') then table.insert(finished, id) end
    forget(id)
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
tombstone(finished, now)
return out
