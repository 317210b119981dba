-- links.lua: a linked job (record flag 'l', a batch member or chain step) ended: its end
-- goes to `forward` for the worker to pass on.
--- @include "base"

-- A linked job (record flag 'l') ended with `outcome`: its link goes to `forward`, for the worker to
-- forward to its batch or chain (see `forward`). Nothing for a job without a link. The entry's field
-- is the id, or "<id>#<ms>" when an entry of the id waits already (a dead job requeued and
-- ended again before its death was forwarded; the end of a link a unique-key replace takes
-- away, while the job lives on under a new one): no end overwrites another.
local function forward_end(id, outcome, now)
  local link = redis.call('HGET', links, id)
  if link then
    local field = id
    if redis.call('HEXISTS', forward, id) == 1 then field = id .. '#' .. int(now) end
    redis.call('HSET', forward, field, outcome .. ' ' .. int(now) .. '\n' .. link)
  end
end

-- forward_end for the jobs `ids` that all ended with `outcome` (an ack's linked jobs): the same
-- entries, read and written in one HMGET of `links`, one of `forward` and one HSET, instead of
-- three commands a job. A job listed twice gets its second entry under "<id>#<ms>", as there.
local function forward_ends(ids, outcome, now)
  if #ids == 0 then return end
  local found, waiting = batched('HMGET', links, ids), batched('HMGET', forward, ids)
  local at, entries, written = int(now), {}, {}
  for i, id in ipairs(ids) do
    if found[i] then
      local field = id
      if waiting[i] or written[id] then field = id .. '#' .. at end
      written[id] = true
      entries[#entries + 1] = field
      entries[#entries + 1] = outcome .. ' ' .. at .. '\n' .. found[i]
    end
  end
  if #entries > 0 then batched('HSET', forward, entries) end
end
