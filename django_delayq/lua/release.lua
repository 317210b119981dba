-- release.lua: a stopping worker hands back jobs it cannot finish: running -> pending,
-- due now, and the attempt is not counted (the job did not fail).
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] now (epoch seconds) or '' for Redis TIME
-- ARGV[2..] pairs: job id, lease token
-- Returns one integer per job: 1 released, 0 lease lost (nothing changed).
-- A released job takes its unique key back; if another pending job holds it, the job is
-- dead-lettered with a 'Superseded' error instead (still 1: the worker is done with it).
local now = clock(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local m = owned(id, ARGV[i + 1])
  if m then
    redis.call('ZREM', R, id)
    m.t = nil
    m.w = nil
    local ukey = record_field(id, 'u')
    if take_key(ukey, id) then
      m.n = math.max((tonumber(m.n) or 1) - 1, 0)
      set_meta(id, m)
      redis.call('ZADD', P, now, id)
    else
      push_error(m, superseded(ukey, now), 10)
      bury(id, m, now)
    end
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
wake()
return out
