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
local saw_dead = false
for i = 2, #ARGV, 2 do
  local id, outcome = ARGV[i], ARGV[i + 1]
  saw_dead = saw_dead or outcome == 'dead'
  local was = redis.call('HGET', ended, id)
  if was ~= outcome then
    redis.call('HSET', ended, id, outcome)
    redis.call('HINCRBY', batch, 'n:' .. outcome, 1)
    if was then redis.call('HINCRBY', batch, 'n:' .. was, -1) end
  end
end
return decide(now, saw_dead)
