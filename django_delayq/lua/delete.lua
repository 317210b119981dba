-- delete.lua: delete dead-letter jobs for good.
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1..] job ids
-- Returns one integer per id: 1 deleted, 0 not dead (gone or requeued meanwhile).
local out = {}
for i = 1, #ARGV do
  if redis.call('ZREM', D, ARGV[i]) == 1 then
    forget(ARGV[i])
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
