-- acks.lua: acknowledge finished jobs (ack.lua, and claim.lua before it claims).
--- @include "base"
--- @include "record"
--- @include "leases"
--- @include "unique_keys"
--- @include "links"
--- @include "groups"
--- @include "keeping"
--- @include "ends"
--- @include "stats"
--- @include "throttle"

-- What an entry not acknowledged answers: -1 when its job is still here under another lease
-- or no longer running (`raw_state` as read), 0 when it is gone.
local function not_acked(id, raw_state)
  if raw_state or redis.call('HEXISTS', jobs, id) == 1 then return -1 end
  return 0
end

-- The acknowledged jobs leave: kept as finished first when `keep` (with their attempt
-- `summaries` and errors), their fields deleted, tombstones for the `marked` ones (`long`:
-- those kept a day), counted.
local function finish_acked(acked_ids, summaries, marked, long, now, keep)
  if keep then
    local records, errs, ends = batched('HMGET', jobs, acked_ids), batched('HMGET', errors, acked_ids), {}
    for j, id in ipairs(acked_ids) do
      ends[j] = {id, 'succeeded', records[j] or '', summaries[id], errs[j] or ''}
    end
    keep_finished(keep, now, ends)
  end
  batched('ZREM', running, acked_ids)
  batched('HDEL', jobs, acked_ids)
  batched('HDEL', state, acked_ids)
  batched('HDEL', errors, acked_ids)
  tombstone(marked, now, long)
  bump('d', #acked_ids, now)
  tally('done', #acked_ids)
end

-- Acknowledge finished jobs given as ARGV quadruples (job id, lease token, info, attempt) from
-- ARGV[first] on; info is the record's flags, then '=' and the unique key if it has one;
-- attempt the summary kept with a finished job (see `kept`; '' when none is kept).
-- Appends one flag per triple to `out`: 1 acknowledged; 0 gone (already acknowledged,
-- e.g. by this very call sent before, or cancelled); -1 held by another lease or no longer
-- running (recovered, claimed again): nothing changed. Counts the acknowledged ones.
-- `released` (optional): ids whose group slot the caller already gave away (claim.lua).
-- `keep` (keep_of): the acknowledged jobs are kept as finished (see `finished`, `kept`).
-- Checks the types of the keys it writes unread before its first write.
local function ack_from(first, now, out, released, keep)
  local ids = {}
  for i = first, #ARGV, 4 do table.insert(ids, ARGV[i]) end
  if #ids == 0 then return end
  local states = batched('HMGET', state, ids)
  zsets(running) hashes(jobs, errors, stats)
  local keyed, flagged, linked, traced, windowed = false, false, false, false, false
  for i = first, #ARGV, 4 do
    local info = ARGV[i + 2]
    local flags = string.match(info, '^[^=]*')
    keyed = keyed or string.find(info, '=', 1, true) ~= nil
    flagged = flagged or has(flags, 'i')
    linked = linked or has(flags, 'l')
    traced = traced or has(flags, 't')
    windowed = windowed or has(flags, 'w')
  end
  if keyed then hashes(unique_keys) end
  if windowed then zsets(throttled) end
  if flagged then zsets(done) end
  if linked then hashes(links, forward) end
  if traced then hashes(trace) end
  if keep then zsets(finished) hashes(kept) end
  local acked_ids, marked, long, linked_ids, traces, summaries = {}, {}, {}, {}, {}, {}
  for j, id in ipairs(ids) do
    local i = first + (j - 1) * 4
    local token, info = ARGV[i + 1], ARGV[i + 2]
    local _, t, held = parse_state(states[j])
    if held and t == token then
      local eq = string.find(info, '=', 1, true)
      local flags = eq and string.sub(info, 1, eq - 1) or info
      if eq then
        local ukey = string.sub(info, eq + 1)
        release_key(ukey, id, flags, now)
        if has(flags, 'd') then release_wait(ukey, id) end
        if has(flags, 'w') then throttle_open(ukey, id, redis.call('HGET', jobs, id), now) end
      end
      table.insert(acked_ids, id)
      if keep then summaries[id] = ARGV[i + 3] or '' end
      if has(flags, 'i') then table.insert(marked, id) end
      if has(flags, 'e') then long[id] = true end
      if has(flags, 'l') then table.insert(linked_ids, id) end
      if has(flags, 't') then table.insert(traces, id) end
      group_left(id, flags, true, released and released[id])
      table.insert(out, 1)
    else
      table.insert(out, not_acked(id, states[j]))
    end
  end
  if #acked_ids > 0 then
    forward_ends(linked_ids, 'succeeded', now)  -- their ends, for the worker to forward
    finish_acked(acked_ids, summaries, marked, long, now, keep)
    if #linked_ids > 0 then batched('HDEL', links, linked_ids) end
    if #traces > 0 then batched('HDEL', trace, traces) end
  end
end

-- ack_from for entries whose info holds only the flags i, k, l, u (claim_plain.lua checks it):
-- no unique key, group, trace or day-long tombstone, so none of their keys is read; `links`
-- and `forward` only when an entry is linked (its end goes to `forward`, as in ack_from).
local function ack_plain(first, now, out, keep)
  local ids = {}
  for i = first, #ARGV, 4 do table.insert(ids, ARGV[i]) end
  if #ids == 0 then return end
  local states = batched('HMGET', state, ids)
  zsets(running) hashes(jobs, errors, stats)
  local flagged, linked = false, false
  for i = first + 2, #ARGV, 4 do
    flagged = flagged or has(ARGV[i], 'i')
    linked = linked or has(ARGV[i], 'l')
  end
  if flagged then zsets(done) end
  if linked then hashes(links, forward) end
  if keep then zsets(finished) hashes(kept) end
  local acked_ids, marked, summaries, linked_ids = {}, {}, {}, {}
  for j, id in ipairs(ids) do
    local i = first + (j - 1) * 4
    local _, t, held = parse_state(states[j])
    if held and t == ARGV[i + 1] then
      table.insert(acked_ids, id)
      if keep then summaries[id] = ARGV[i + 3] or '' end
      if has(ARGV[i + 2], 'i') then table.insert(marked, id) end
      if linked and has(ARGV[i + 2], 'l') then table.insert(linked_ids, id) end
      table.insert(out, 1)
    else
      table.insert(out, not_acked(id, states[j]))
    end
  end
  if #acked_ids > 0 then
    forward_ends(linked_ids, 'succeeded', now)
    finish_acked(acked_ids, summaries, marked, nil, now, keep)
    if #linked_ids > 0 then batched('HDEL', links, linked_ids) end
  end
end
