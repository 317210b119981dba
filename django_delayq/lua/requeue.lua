-- requeue.lua: dead-letter -> pending, due now, with attempts reset to 0 (errors are kept).
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] now (epoch seconds) or '' for Redis TIME
-- ARGV[2..] job ids
-- Returns one integer per id: 1 requeued, 0 not dead (gone, or requeued meanwhile).
-- A job whose record is missing stays dead (0), and so does one whose unique key another
-- pending job holds (0): a key names at most one pending job. Otherwise the job takes its
-- unique key back.
local now = clock(ARGV[1])
local out, moved = {}, 0
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZSCORE', D, id) and redis.call('HEXISTS', J, id) == 1
      and take_key(record_field(id, 'u'), id) then
    redis.call('ZREM', D, id)
    local m = get_meta(id)
    m.n = 0
    set_meta(id, m)
    redis.call('ZADD', P, now, id)
    moved = moved + 1
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
if moved > 0 then wake() end
return out
