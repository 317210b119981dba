-- cancel.lua: delete a pending job, found by id or by unique key.
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] job id, or '' to look it up by ARGV[2]
-- ARGV[2] unique key, or ''
-- Returns {id, record} when a pending job was deleted, {} otherwise (unknown, running or dead).
local id = ARGV[1]
if id == '' then
  id = redis.call('HGET', U, ARGV[2])
  if not id then return {} end
end
if redis.call('ZREM', P, id) == 0 then return {} end
local record = redis.call('HGET', J, id) or ''
release_key(record_field(id, 'u'), id)
forget(id)
return {id, record}
