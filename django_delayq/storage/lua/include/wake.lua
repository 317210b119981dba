-- wake.lua: wake a sleeping worker.
--- @include "base"

local function wake_worker()
  if redis.call('RPUSH', wake, '1') > 8 then redis.call('LTRIM', wake, -8, -1) end
end
