-- batch.lua: a batch's callbacks, decided in the batch's own slot.
--- @include "base"

--
-- A batch's keys (storage/keys.py, BATCH_KINDS), in one slot of their own:
--   batch      hash  "cb:<kind>" -> the callback's call (JSON, Python's), kind 'death',
--                    'success' or 'complete'; "created"; "total" and "sealed" once its
--                    block ended (batch_seal.lua); "n:<outcome>" -> members that ended so;
--                    "cancelled" -> when cancel_batch() ran; "fire:<kind>" -> when the
--                    callback was decided (its job id is derived from it), "placed:<kind>"
--                    -> when its job was stored (batches/forwarding.py)
--   ended      hash  member id -> 'succeeded' | 'dead' | 'cancelled' | 'expired' (the last
--                    outcome: a requeued dead member that then succeeds moves to 'succeeded';
--                    'expired': not started before its expiry, expire.lua)
--   members    hash  member id -> its queue (written by batch_seal.lua)
-- A finished batch (every member ended and every decided callback placed, or cancelled with
-- none left to place) expires BATCH_TTL (seconds) later. decide() calls one unsealed a day
-- (ABANDONED, ms) after it was opened finished too (no worker looks at it again) and lets
-- it expire BATCH_TTL later (a seal arriving before then still decides its callbacks).
local BATCH_TTL = 604800
local ABANDONED = 86400000

-- Decide the batch's callbacks: 'death' at its first dead member (`saw_dead`: one was recorded
-- by this call, though a later outcome of the same call moved it on), 'success' once every
-- member succeeded, 'complete' once every member ended (none after a cancel; an expired member
-- ended as a cancelled one did: it counts for 'complete', never for 'success' or 'death'). A decision is taken
-- once ("fire:<kind>" keeps its time); a decided callback is returned until Python marks it
-- placed. Returns {finished (0|1), kind, decided ms, call, kind, ...}.
local function decide(now, saw_dead)
  local f = redis.call('HMGET', batch, 'total', 'cancelled', 'n:succeeded', 'n:dead', 'n:cancelled', 'n:expired')
  local total, cancelled = tonumber(f[1]), f[2]
  local s, d = tonumber(f[3] or '0'), tonumber(f[4] or '0')
  local c = tonumber(f[5] or '0') + tonumber(f[6] or '0')  -- cancelled or expired: ended, not run
  local due = {}
  if not cancelled then
    due.death = d > 0 or saw_dead == true
    due.success = total ~= nil and s >= total
    due.complete = total ~= nil and s + d + c >= total
  end
  local out, left = {0}, false
  for _, kind in ipairs({'death', 'success', 'complete'}) do
    local spec = redis.call('HGET', batch, 'cb:' .. kind)
    if spec and redis.call('HEXISTS', batch, 'placed:' .. kind) == 0 then
      local at = redis.call('HGET', batch, 'fire:' .. kind)
      if not at and due[kind] then
        at = int(now)
        redis.call('HSET', batch, 'fire:' .. kind, at)
      end
      if at then
        left = true
        table.insert(out, kind) table.insert(out, at) table.insert(out, spec)
      end
    end
  end
  local over = total ~= nil and s + d + c >= total
  if not left and (over or cancelled) then
    out[1] = 1
    for _, k in ipairs({batch, ended, members}) do redis.call('EXPIRE', k, BATCH_TTL) end
  elseif total == nil and now - (tonumber(redis.call('HGET', batch, 'created') or '') or now) > ABANDONED then
    out[1] = 1  -- a block that never ended (its process died in it): nothing to look at
    for _, k in ipairs({batch, ended, members}) do redis.call('EXPIRE', k, BATCH_TTL) end
  end
  return out
end
