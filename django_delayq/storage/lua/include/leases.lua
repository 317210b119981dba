-- leases.lua: a job's attempt state in `state` ("<n>|<token>"), who holds its lease.
--- @include "base"

-- The state "<n>|<token>" -> n (0 when absent or garbage), token (nil when none), whether it
-- holds a lease (a token without the '~' of a settled attempt).
local function parse_state(raw)
  if not raw then return 0, nil, false end
  local n, settled, token = string.match(raw, '^(%d+)|(~?)(.*)$')
  if not n then return 0, nil, false end
  if token == '' then token = nil end
  return tonumber(n), token, settled == '' and token ~= nil
end

local function state_of(id) return parse_state(redis.call('HGET', state, id)) end

-- The state of a settled attempt (`token` kept behind '~'), or with no token (nil).
local function set_state(id, n, token)
  redis.call('HSET', state, id, int(n) .. (token and ('|~' .. token) or '|'))
end

-- Attempts counted if `id` runs under lease `token` (one HGET: the state says it), else nil.
local function owned(id, token)
  local n, t, held = state_of(id)
  if held and t == token then return n end
  return nil
end
