-- release.lua: a stopping worker hands back jobs it cannot finish: running -> pending,
-- due now, and the attempt is not counted (the job did not fail).
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] now (epoch seconds) or '' for Redis TIME
-- ARGV[2..] pairs: job id, lease token
-- Returns one integer per job: 1 released, 0 lease lost (nothing changed).
local now = clock(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local m = owned(id, ARGV[i + 1])
  if m then
    redis.call('ZREM', R, id)
    m.n = math.max((tonumber(m.n) or 1) - 1, 0)
    m.t = nil
    m.w = nil
    set_meta(id, m)
    redis.call('ZADD', P, now, id)
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
wake()
return out
