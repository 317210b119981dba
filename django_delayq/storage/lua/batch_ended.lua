-- batch_ended.lua: members of a batch ended; decide its callbacks.
-- KEYS: batch ended members
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2..] pairs: member job id, outcome ('succeeded', 'dead', 'cancelled' or 'expired')
-- A member's last outcome counts (pairs in the order the member ended them): one that was
-- dead and ends again (requeued from the admin) moves to its new outcome; its death still
-- decides 'death'.
-- Returns decide()'s reply (include/batch.lua): {finished, kind, decided ms, call, ...}, the callbacks
-- decided and not placed yet. Idempotent: an outcome sent again changes nothing, and the
-- reply lists the decided callbacks until they are marked placed.
--- @include "base"
--- @include "batch"
local now = clock(ARGV[1])
hashes(batch, ended, members)
local ids = {}
for i = 2, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
-- The members' outcomes as stored, read at once; then moved here, pair by pair, and
-- written with one HSET and one HINCRBY per outcome counted.
local last, saw_dead, moved, is_moved, deltas, counted = {}, false, {}, {}, {}, {}
local stored = #ids > 0 and batched('HMGET', ended, ids) or {}
for j, id in ipairs(ids) do
  if last[id] == nil then last[id] = stored[j] end
end
local function count(outcome, by)
  if not deltas[outcome] then deltas[outcome] = 0 counted[#counted + 1] = outcome end
  deltas[outcome] = deltas[outcome] + by
end
for i = 2, #ARGV, 2 do
  local id, outcome = ARGV[i], ARGV[i + 1]
  saw_dead = saw_dead or outcome == 'dead'
  local was = last[id]
  if was ~= outcome then
    if not is_moved[id] then moved[#moved + 1] = id is_moved[id] = true end
    last[id] = outcome
    count(outcome, 1)
    if was then count(was, -1) end
  end
end
if #moved > 0 then
  local fields = {}
  for _, id in ipairs(moved) do fields[#fields + 1] = id fields[#fields + 1] = last[id] end
  batched('HSET', ended, fields)
  for _, outcome in ipairs(counted) do redis.call('HINCRBY', batch, 'n:' .. outcome, deltas[outcome]) end
end
return decide(now, saw_dead)
