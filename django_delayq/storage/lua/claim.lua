-- claim.lua: acknowledge a worker's finished jobs, then lease up to `limit` due jobs to it.
-- KEYS: pending running dead jobs state keys wake stats errors done claims ranked control links forward groups parked holds trace finished kept
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] limit (integer >= 0; 0 only acknowledges and reports the next due time)
-- ARGV[3] lease (integer milliseconds)
-- ARGV[4] lease token (string, unique per claim call; ack, fail, extend and release present it)
-- ARGV[5] worker instance (string): the field of `claims` remembering this worker's last claim
-- ARGV[6] finished jobs' max age (integer milliseconds; 0: keep none), as ack.lua's ARGV[2]
-- ARGV[7] finished jobs' max count per queue, as ack.lua's ARGV[3]
-- ARGV[8..] optional quadruples: job id, lease token, info, attempt of finished jobs,
--           acknowledged first exactly as ack.lua does (a worker's acks and its next claim
--           in one call). Before 0.7: triples from ARGV[6].
-- Returns {now, next_due, {ack flags}, {id1, record1, attempt1, due1, id2, ...}}: next_due is
-- the due_at of the earliest pending job left ('' when none); the ack flags are ack.lua's, one
-- per entry; attempt is the number the attempt will have once started; due the job's due_at
-- (epoch ms; '' for a job the call re-sends or unparks: its due time is not at hand), so
-- the worker knows each job's lateness. (Before 0.7: triples, without due.)
-- A fifth element 'plain' follows when none of ranked, control, parked existed at the call's
-- start: the worker may send claim_plain.lua next.
-- Claimed jobs are leased as not started (score lease_until - RESERVED); the worker's runner
-- marks each one started (ZADD XX GT lease_until) just before running it, so a job whose
-- worker died before starting it is handed back by recover.lua without counting an attempt.
-- Idempotent: sent again with the same token (its reply was lost), it acknowledges nothing new
-- and returns the jobs the first send leased that the token still holds.
-- An id whose record is missing is dead-lettered with an error instead of returned.
-- When due jobs remain after the claim, one wake token is pushed so a peer worker claims them.
-- Queue control: while neither `ranked` nor `control` exists (no job with a priority, the
-- queue not paused) the claim reads `pending` only, as it always did (one EXISTS more).
-- Otherwise due jobs are taken highest priority first, then earliest due: the bands of
-- `ranked` with a priority above 0, then `pending` (priority 0), then the bands below 0,
-- each band read from its first job (at most one read per band present, and one range
-- read per band that gives jobs). A paused queue (`control` field "paused") leases
-- nothing and reports no next_due (its workers sleep until a wake token: resume pushes one);
-- acknowledgements still go through.
-- Rate limits (also only on that path): `control` field "rate:<task>" = "<count>/<period ms>"
-- (written by workers from @task(rate=...)) paces the task's claims to one every
-- period / count (GCRA without burst, field "tat:<task>" = the next free time in
-- microseconds), so no window of one period holds more than count claims (above 1000/s, at
-- most one millisecond's worth more: the claims of one millisecond, whose time this
-- script knows to the millisecond, take the slots of all of it). A due job over its
-- task's limit stays pending, its due time moved to when the limit allows it (no attempt
-- counted, never leased); next_due includes that time, so workers sleep until then. Each such
-- hold-back is counted in `stats` (total "limited").
-- Concurrency limits (same path): `control` field "conc:<task>" = N (from
-- @task(concurrency=N)) lets at most N attempts of the task hold a lease at once across all
-- workers. Field "hold:<task>" lists the holders ("<id>|<token> ..."); each is checked
-- against `state` at every claim (a holder counts only while it still holds that lease), so a
-- slot frees as its job is acknowledged, fails, is handed back, or is recovered after its
-- worker died (its lease expired). A due job over the limit stays pending, due CONC_GAP ms
-- later (no attempt counted), also counted in "limited".
-- The queue's own concurrency limit (same path): `control` field "qconc" = N (from
-- DELAYQ['QUEUES'], written by workers) lets at most N attempts of the queue's jobs hold a
-- lease at once across all workers. Field "qhold" lists the holders as "hold:<task>" does,
-- each checked the same way at every claim; a holder this very call acknowledges (ARGV[8..])
-- counts as free. The claim takes at most the free slots; due jobs left behind stay
-- pending untouched (no attempt counted) and next_due is then CONC_GAP ms ahead, so workers
-- poll for a free slot instead of waking each other. "qhold" left without "qconc" (the
-- limit was removed) is dropped.
-- Limits per group (same path; `control` fields "gconc:<task>" = N and "grate:<task>" =
-- "<count>/<period ms>", from @task(group_concurrency=, group_rate=)): a job scheduled with
-- group= (record flag 'g', its group key "<task>\n<group>" in `groups`) is checked against
-- its group's limits as the task's are checked against the task's. Holders per group key
-- live in `holds` (checked against `state` at every claim, and dropped as they leave running:
-- group_left in _lib.lua). A due job of a group at its concurrency limit is parked: moved
-- out of `pending`/`ranked` into `parked` (see _lib.lua), so it is never read again until a
-- slot frees (the next claims read the jobs behind it: no head-of-line blocking, and no
-- claim reads a parked job twice). A due job over its group's rate stays pending, due when
-- the group's rate allows it, the jobs of one group held back by one call spread one rate
-- interval apart. A call also sweeps one group of `parked` (round robin, cursor in `control`
-- field "gsweep"; at most one sweep per SWEEP_GAP ms, "gsweep_at"): its parked jobs go back
-- to pending for the group's free slots, which heals a slot no hook freed (a 0.5.0 worker's
-- ack, a limit raised or removed). While
-- `parked` exists, a call reads up to twice its room (at most 16 more) so the jobs it
-- parks do not leave the room empty: it leases what the room allows, and the due jobs it
-- read past the room and did not park stay pending untouched (next_due is then now, or
-- CONC_GAP ahead when the queue's own limit is full). The fast path above is taken only
-- while `parked` does not exist either.
local CONC_GAP = 250
local SWEEP_GAP = 50
local limit, lease, token, instance = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = clock(ARGV[1])
-- Reads first (they check their keys' types too); then the keys this call will write
-- without having read them are checked; then the writes.
local last = redis.call('HGET', C, instance)
local resend = limit > 0 and last and string.match(last, '^([^\n]*)\n') == token
local ids, from_pending, from_ranked, next_due = {}, {}, {}, nil
-- The queue's concurrency limit (nil: none), its live holders, whether it capped this claim,
-- and the "qhold" field as read.
local qslots, queue_held, queue_full, queue_hold_was = nil, nil, false, nil
-- The claim's room when it reads past it (jobs of full groups about: see below), else nil.
local room = nil
-- The helpers of limits per group, made only on the general path (a Lua function costs
-- each call that makes it, and the fast path needs none of them).
local group_limits, group_holders, group_pace, write_groups, group_of, park, release_acked, sweep_parked
local group_limit_of, group_live, group_tat, group_virtual, group_dirty
local released = {}
local controlled = redis.call('EXISTS', Q, K, Y) > 0
if controlled then
  -- Limits per group: a task's ({conc = N or nil, rate = microseconds or nil}), the live
  -- holders of a group key (read once per call, written back after the limits are applied),
  -- its rate state (as stored, as advanced by the jobs this call holds back, written or not).
  group_limit_of, group_live, group_tat, group_virtual, group_dirty = {}, {}, {}, {}, {}
  group_limits = function(task)
    local l = group_limit_of[task]
    if l == nil then
      local conc, rate = unpack(redis.call('HMGET', K, 'gconc:' .. task, 'grate:' .. task))
      local count, period = string.match(rate or '', '^(%d+)/(%d+)$')
      l = {conc = tonumber(conc or '')}
      if count and tonumber(count) > 0 then l.rate = math.ceil(tonumber(period) * 1000 / tonumber(count)) end
      group_limit_of[task] = l
    end
    return l
  end
  group_holders = function(gkey)
    local live = group_live[gkey]
    if not live then
      local acking = {}
      for i = 8, #ARGV, 4 do acking[ARGV[i] .. '|' .. ARGV[i + 1]] = true end
      live = {}
      for h_id, h_token in string.gmatch(redis.call('HGET', Z, gkey) or '', '([^|%s]+)|(%S+)') do
        local holder = h_id .. '|' .. h_token
        if not acking[holder] and owned(h_id, h_token) then table.insert(live, holder) end
      end
      group_live[gkey] = live
    end
    return live
  end
  -- nil when the group's rate allows a claim now (taking it), else when it will.
  group_pace = function(gkey, rate, now_us)
    local tat = group_tat[gkey]
    if tat == nil then
      tat = tonumber(redis.call('HGET', Z, '\n' .. gkey) or '') or 0
      group_tat[gkey] = tat
    end
    if tat > now_us + (rate < 1000 and 999 or 0) then
      local at = math.max(group_virtual[gkey] or tat, tat)
      group_virtual[gkey] = at + rate
      return math.ceil(at / 1000)
    end
    group_tat[gkey], group_dirty[gkey] = math.max(tat, now_us) + rate, true
    return nil
  end
  write_groups = function()
    for gkey, live in pairs(group_live) do
      if #live > 0 then redis.call('HSET', Z, gkey, table.concat(live, ' '))
      else redis.call('HDEL', Z, gkey) end
    end
    for gkey, _ in pairs(group_dirty) do redis.call('HSET', Z, '\n' .. gkey, int(group_tat[gkey])) end
    if next(group_dirty) then
      -- The rate state of groups that went quiet: a next free time already past counts as
      -- none, so it is dropped, 20 fields looked at per call that paces a group (cursor in
      -- `control` field "gscan"), and `holds` does not grow with every group ever seen.
      local scan = redis.call('HSCAN', Z, redis.call('HGET', K, 'gscan') or '0', 'COUNT', 20)
      for i = 1, #scan[2], 2 do
        local field = scan[2][i]
        if string.sub(field, 1, 1) == '\n' and (tonumber(scan[2][i + 1]) or 0) <= now * 1000 then
          redis.call('HDEL', Z, field)
        end
      end
      redis.call('HSET', K, 'gscan', scan[1])
    end
  end
  group_of = function(id)
    local v = redis.call('HGET', A, id)
    return v and string.match(v, '^([^\n]*\n[^\n]*)')
  end
  -- A due job of a full group leaves pending for `parked` (see _lib.lua).
  park = function(id, gkey)
    local due, priority = pending_due(id)
    unpend(id)
    local member = gkey .. '\n' .. string.format('%020d', ranked_score(priority, due)) .. '\n' .. id
    redis.call('ZADD', Y, 0, member)
    redis.call('HSET', A, id, member)
  end
  -- The slots this call's acknowledgements free (ARGV[8..], flag 'g' in their info, still
  -- holding their lease): each group's first parked job goes back to pending before the
  -- jobs are read, so this very call can claim it (ack_from then only drops the holder).
  release_acked = function()
    for i = 8, #ARGV, 4 do
      local id = ARGV[i]
      if has(string.match(ARGV[i + 2], '^[^=]*'), 'g') and owned(id, ARGV[i + 1]) then
        local gkey = group_of(id)
        if gkey then unpark_group(gkey, 1) released[id] = true end
      end
    end
  end
  -- One group of `parked` (the one after the cursor): its jobs go back to pending for the
  -- group's free slots (the holders this call acknowledges still count: release_acked
  -- gave their slots).
  sweep_parked = function()
    local cursor, at = unpack(redis.call('HMGET', K, 'gsweep', 'gsweep_at'))
    if now < (tonumber(at or '') or 0) then return end
    zsets(P, Q, Y) hashes(A, Z) lists(W)
    local first = {}
    if cursor then first = redis.call('ZRANGEBYLEX', Y, '(' .. cursor .. '\n\255', '+', 'LIMIT', 0, 1) end
    if not first[1] then first = redis.call('ZRANGEBYLEX', Y, '-', '+', 'LIMIT', 0, 1) end
    local gkey = parked_parts(first[1])
    if not gkey then return end
    redis.call('HSET', K, 'gsweep', gkey, 'gsweep_at', int(now + SWEEP_GAP))
    local conc = group_limits(string.match(gkey, '^[^\n]*')).conc
    local free = 100
    if conc then
      free = conc
      for h_id, h_token in string.gmatch(redis.call('HGET', Z, gkey) or '', '([^|%s]+)|(%S+)') do
        if owned(h_id, h_token) then free = free - 1 end
      end
    end
    if free > 0 then unpark_group(gkey, free) end
  end
end
if not controlled then
  if limit > 0 and not resend then
    ids = redis.call('ZRANGEBYSCORE', P, '-inf', int(now), 'LIMIT', 0, limit)
    from_pending = ids
  end
  -- The job after the claimed ones: its due time is the reply's next_due, and a wake token
  -- goes to a peer when it is due already.
  local after = redis.call('ZRANGE', P, #ids, #ids, 'WITHSCORES')
  next_due = after[2] and tonumber(after[2])
else
  local want = (limit > 0 and not resend) and limit or 0
  local paused = redis.call('HEXISTS', K, 'paused') == 1
  if paused then want = 0 end
  local qconc, qhold = unpack(redis.call('HMGET', K, 'qconc', 'qhold'))
  qslots = tonumber(qconc or '')
  if qslots then
    queue_held = {}
    local acking = {}
    for i = 8, #ARGV, 4 do acking[ARGV[i] .. '|' .. ARGV[i + 1]] = true end
    for h_id, h_token in string.gmatch(qhold or '', '([^|%s]+)|(%S+)') do
      if not acking[h_id .. '|' .. h_token] and owned(h_id, h_token) then
        table.insert(queue_held, h_id .. '|' .. h_token)
      end
    end
    local free = math.max(qslots - #queue_held, 0)
    if want > free then want, queue_full = free, true end
  end
  queue_hold_was = qhold
  local function later(due) if not next_due or due < next_due then next_due = due end end
  if want > 0 and redis.call('EXISTS', Y) == 1 then
    release_acked()
    sweep_parked()
    -- Groups at their limit are about: read past the jobs that will be parked (at most 2
    -- times the room, 16 more), so one call fills its room; the jobs read beyond it that
    -- it does not park are left pending as they are.
    room, want = want, math.min(want * 2, want + 16)
  end
  local pending_read = false
  local function from_p()
    pending_read = true
    local got = {}
    if want > #ids then
      got = redis.call('ZRANGEBYSCORE', P, '-inf', int(now), 'LIMIT', 0, want - #ids)
      for _, id in ipairs(got) do table.insert(ids, id) table.insert(from_pending, id) end
    end
    local after = redis.call('ZRANGE', P, #got, #got, 'WITHSCORES')
    if after[2] then later(tonumber(after[2])) end
  end
  local cursor = 0
  while true do
    local first = redis.call('ZRANGEBYSCORE', Q, int(cursor), '+inf', 'LIMIT', 0, 1, 'WITHSCORES')
    if not first[1] then break end
    local band = math.floor(tonumber(first[2]) / BAND)
    if band >= 100 and not pending_read then from_p() end  -- priority 0 sorts between
    local base = band * BAND
    local took = 0
    if want > #ids and tonumber(first[2]) - base <= now then
      local got = redis.call('ZRANGEBYSCORE', Q, int(base), int(base + now), 'LIMIT', 0, want - #ids)
      for _, id in ipairs(got) do table.insert(ids, id) table.insert(from_ranked, id) end
      took = #got
    end
    if took == 0 then
      later(tonumber(first[2]) - base)
    else
      local after = redis.call('ZRANGEBYSCORE', Q, int(base), '(' .. int(base + BAND), 'LIMIT', took, 1, 'WITHSCORES')
      if after[2] then later(tonumber(after[2]) - base) end
    end
    cursor = base + BAND
  end
  if not pending_read then from_p() end
  if queue_full and next_due and next_due <= now then next_due = now + CONC_GAP end
  if paused then next_due = nil end
end
local records, states = {}, {}
if #ids > 0 then
  records = batched('HMGET', J, ids)
  states = batched('HMGET', S, ids)
end
if controlled and #ids > 0 then
  -- Rate limits: jobs over their task's limit stay pending, due when it allows them.
  zsets(R, Y) hashes(T, A, Z)
  local rates, deferred, held = {}, {}, 0
  local slots, holders = {}, {}  -- per task: the limit (false: none), live holders
  local now_us = now * 1000
  local kept_ids, kept_records, kept_states = {}, {}, {}
  for i, id in ipairs(ids) do
    local wait, gkey, parked, untouched = nil, nil, false, false
    local task = records[i] and string.match(records[i], '^[^\n]*\n([^\n]*)')
    if task and has((select(2, header(records[i]))), 'g') then gkey = group_of(id) end
    local glimit = gkey and group_limits(task)
    if glimit and glimit.conc and #group_holders(gkey) >= glimit.conc then
      parked = true
    elseif room and #kept_ids >= room then
      untouched = true
    elseif task then
      local rate = rates[task]
      if rate == nil then
        local raw = redis.call('HGET', K, 'rate:' .. task)
        local count, period
        if raw then count, period = string.match(raw, '^(%d+)/(%d+)$') end
        rate = false
        if count and tonumber(count) > 0 then
          rate = math.ceil(tonumber(period) * 1000 / tonumber(count))
        end
        rates[task] = rate
      end
      local slot = slots[task]
      if slot == nil then
        slot = tonumber(redis.call('HGET', K, 'conc:' .. task) or '') or false
        slots[task] = slot
        if slot then
          local live = {}
          for h_id, h_token in string.gmatch(redis.call('HGET', K, 'hold:' .. task) or '', '([^|%s]+)|(%S+)') do
            if owned(h_id, h_token) then table.insert(live, h_id .. '|' .. h_token) end
          end
          holders[task] = live
        end
      end
      if slot and #holders[task] >= slot then
        wait = now + CONC_GAP
      elseif rate then
        local tat = tonumber(redis.call('HGET', K, 'tat:' .. task) or '0') or 0
        -- `now` counts milliseconds: a claim may take the slots of the rest of its
        -- millisecond when they are closer than that (a rate above 1000/s), else a rate of
        -- 5000/s would give one claim a millisecond, 1000/s.
        if tat > now_us + (rate < 1000 and 999 or 0) then
          wait = math.ceil(tat / 1000)
        else
          redis.call('HSET', K, 'tat:' .. task, int(math.max(tat, now_us) + rate))
        end
      end
      if not wait and glimit and glimit.rate then wait = group_pace(gkey, glimit.rate, now_us) end
      if slot and not wait then table.insert(holders[task], id .. '|' .. token) end
      if glimit and glimit.conc and not wait then table.insert(group_holders(gkey), id .. '|' .. token) end
    end
    if parked then
      park(id, gkey)
      deferred[id] = true
      held = held + 1
    elseif untouched then
      deferred[id] = true  -- not removed from pending below, not leased
      local at = queue_full and now + CONC_GAP or now
      if not next_due or at < next_due then next_due = at end
    elseif wait then
      local _, _, _, priority = header(records[i])
      pend(id, wait, priority)
      deferred[id] = true
      held = held + 1
      if not next_due or wait < next_due then next_due = wait end
    else
      table.insert(kept_ids, id) table.insert(kept_records, records[i] or false)
      table.insert(kept_states, states[i] or false)
    end
  end
  write_groups()
  for task, live in pairs(holders) do
    if #live > 0 then
      redis.call('HSET', K, 'hold:' .. task, table.concat(live, ' '))
    else
      redis.call('HDEL', K, 'hold:' .. task)
    end
  end
  if next(deferred) then
    local function without(list)
      local out = {}
      for _, id in ipairs(list) do if not deferred[id] then table.insert(out, id) end end
      return out
    end
    from_pending, from_ranked = without(from_pending), without(from_ranked)
    ids, records, states = kept_ids, kept_records, kept_states
    tally('limited', held)
  end
end
if #ids > 0 then
  zsets(R)
  for i = 1, #ids do
    if not records[i] then zsets(D) hashes(E, T) break end  -- dead-lettered below
  end
end
local wakes = limit > 0 and next_due and next_due <= now
if wakes then lists(W) end
local acked = {}
ack_from(8, now, acked, released, keep_of(6))
local jobs = {}
if resend then
  -- This call, sent again: the jobs the first send leased, if the token still holds them.
  for id in string.gmatch(string.sub(last, #token + 2), '%S+') do
    local n = owned(id, token)
    local record = n and redis.call('HGET', J, id)
    if record then
      table.insert(jobs, id) table.insert(jobs, record) table.insert(jobs, n + 1)
      table.insert(jobs, '')
    end
  end
elseif #ids > 0 then
  local due_of = {}
  if #from_pending > 0 then
    local scores = batched('ZMSCORE', P, from_pending)
    for i, id in ipairs(from_pending) do
      local score = tonumber(scores[i])
      if score then due_of[id] = int(score) end
    end
    batched('ZREM', P, from_pending)
  end
  if #from_ranked > 0 then
    local scores = batched('ZMSCORE', Q, from_ranked)
    for i, id in ipairs(from_ranked) do
      local score = tonumber(scores[i])
      if score then due_of[id] = int(score % BAND) end
    end
    batched('ZREM', Q, from_ranked)
  end
  local leased, fields, scores = {}, {}, {}
  local reserved = int(now + lease - RESERVED)
  local running = '|' .. token
  for i, id in ipairs(ids) do
    local n = parse_state(states[i])
    if records[i] then
      table.insert(jobs, id) table.insert(jobs, records[i]) table.insert(jobs, n + 1)
      table.insert(jobs, due_of[id] or '')
      table.insert(leased, id)
      table.insert(fields, id) table.insert(fields, (n == 0 and '0' or int(n)) .. running)
      table.insert(scores, reserved) table.insert(scores, id)
    else
      push_error(id, error_json('CorruptJob', 'job record missing from Redis', now), 10)
      redis.call('ZADD', D, int(now), id)
      tally('dead', 1)
    end
  end
  if #leased > 0 then
    batched('HSET', S, fields)
    batched('ZADD', R, scores)
    redis.call('HSET', C, instance, token .. '\n' .. table.concat(leased, ' '))
  end
  if qslots then
    for _, id in ipairs(leased) do table.insert(queue_held, id .. '|' .. token) end
  end
end
if qslots then
  local holders = table.concat(queue_held, ' ')
  if holders == '' then
    if queue_hold_was then redis.call('HDEL', K, 'qhold') end
  elseif holders ~= queue_hold_was then
    redis.call('HSET', K, 'qhold', holders)
  end
elseif queue_hold_was then
  redis.call('HDEL', K, 'qhold')
end
if wakes then wake() end
if not controlled then return {now, next_due or '', acked, jobs, 'plain'} end
return {now, next_due or '', acked, jobs}
