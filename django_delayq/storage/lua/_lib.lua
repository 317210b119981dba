-- _lib.lua: helpers prepended to the scripts by scripts.py (not a script itself). A script
-- carries only the helpers it names, and receives only the keys its header declares
-- ("-- KEYS: pending jobs ..."): scripts.py turns that line into locals with these names.
--
-- The keys of a queue, all in its hash-tag slot:
--   P pending  sorted set  job id -> due_at, for jobs of priority 0 (the default)
--   Q ranked   sorted set  job id -> (100 - priority) * BAND + due_at, for pending jobs of a
--                          priority other than 0 (-100..100, the record header's '^<n>'): in
--                          claim order, highest priority first, then earliest due. A pending
--                          job is in exactly one of P and Q; scripts that find, move or
--                          remove a pending job look in both (pending_due, unpend, pend).
--   K control  hash        "paused" -> epoch ms it was paused (absent: not paused);
--                          "rate:<task>" -> "<count>/<period ms>", "tat:<task>" -> next free
--                          claim time (microseconds); "conc:<task>" -> N, "hold:<task>" ->
--                          "<id>|<token> ..."; "qconc" -> N (the queue's own limit),
--                          "qhold" -> its holders (see claim.lua); "gconc:<task>" -> N,
--                          "grate:<task>" -> "<count>/<period ms>" (limits per group),
--                          "gsweep" -> the last group key claim.lua swept, "gsweep_at" ->
--                          when it may sweep again (ms), "gscan" -> the
--                          HSCAN cursor of its clean-up of Z. The whole key is
--                          absent while a queue has no control state, so claim.lua takes
--                          today's path after one EXISTS of Q, K and Y.
--   R running  sorted set  job id -> lease_until for a job a runner has started;
--                          lease_until - RESERVED (negative) for a job a worker claimed but has
--                          not started yet (prefetched). A runner marks the start with a plain
--                          ZADD XX GT of the started score (store.mark_op).
--   D dead     sorted set  job id -> died_at
--   J jobs     hash        job id -> record: header "\n" body (jobs/job.py); scripts read only the
--                          header: <max_retries><flags>[=<key length>:<key>]
--   S state    hash        job id -> "<n>|<token>" while an attempt holds a lease (the job is in
--                          running), "<n>|~<token>" once it is settled (failed or handed back:
--                          the last attempt's token, so a re-sent call answers the same), "<n>|"
--                          after a recovery or requeue; n counts the attempts made so far
--                          (absent until the job is first claimed)
--   U keys     hash        unique key -> job id (of at most one pending job)
--   W wake     list        tokens that wake a sleeping worker (at most 8 kept)
--   T stats    hash        "d:<minute % 60>" / "f:<minute % 60>" -> "<minute>:<count>" (jobs done
--                          and attempts failed per minute, the last hour), and totals since the
--                          queue began: done, failed, retried, dead, recovered (HINCRBY)
--   E errors   hash        job id -> errors, each framed "<byte length>\n<JSON object>"
--   F done     sorted set  job id -> time it finished or was cancelled, kept DONE_TTL for jobs
--                          whose header has flag 'i', so a schedule re-sent after a lost reply
--                          does not store a finished job again
--   C claims   hash        worker instance -> "<token>\n<id> <id> ..." (its last claim) and
--                          "<instance>/r" -> "<token>\n<id> <outcome> ..." (its last recovery),
--                          so a call re-sent with the same token answers the same
--   X relayed  sorted set  job id -> time a relay stored it from an outbox row (outbox promise I6):
--                          a relay of a marked id never stores it again, however long the
--                          row's DELETE is refused; the relayer removes the mark once the
--                          DELETE committed (ZREM), a worker's relay sweeps old marks whose
--                          rows are gone
--   L links    hash        job id -> link (JSON, read only by Python: batches/links.py) of a job
--                          whose record has flag 'l': the batch it belongs to, its place in a
--                          chain. Kept while the job exists (a requeued dead member keeps it);
--                          forget() deletes it with the record
--   G forward  hash        job id -> "<outcome> <ms>\n<link>": a linked job ended (outcome
--                          'succeeded', 'dead' or 'cancelled', at <ms>), written by the same
--                          script as its ack, final failure, recovery to dead or cancel; the
--                          worker deletes it once the job's batch or chain took the outcome
--                          (batches/forwarding.py), the recovery pass takes what a crash left
--   A groups   hash        job id -> "<task>\n<group>" (its group key) for a job scheduled with
--                          group= (record flag 'g'); while the job is parked, the whole
--                          member of Y ("<task>\n<group>\n<rank, 20 digits>\n<id>").
--                          Kept while the job lives (pending, running, dead), so a retry or
--                          requeue stays in its group; forget() drops it.
--   Y parked   sorted set  (every score 0, ordered by member) the due jobs of a group at its
--                          concurrency limit (claim.lua parks them out of P/Q, so they never
--                          block the jobs of other groups): member "<group key>\n<rank>\n<id>",
--                          rank = ranked_score(priority, due), so a group's jobs are one
--                          range in claim order. A parked job is pending: pending_due,
--                          unpend and pend see it. When a holder of a group leaves running
--                          (ack, fail, release, recover: group_left) its group's first
--                          parked job goes back to P/Q; claim.lua also sweeps one group (at
--                          most 20 a second), so a slot a 0.5.0 worker freed is found too.
--   Z holds    hash        group key -> "<id>|<token> ..." (the group's lease holders, checked
--                          against S at every claim, as "hold:<task>" is); "\n<group key>" ->
--                          the group's next free claim time (microseconds, GCRA as "tat:")
--   V finished sorted set  job id -> when it ended (epoch ms): the jobs that succeeded or were
--                          cancelled, kept for DELAYQ["FINISHED_MAX_AGE"] and at most
--                          DELAYQ["FINISHED_MAX_COUNT"] per queue (0 for either: none kept);
--                          trimmed by the scripts that add to it (keep, trim_kept)
--   I kept     hash        job id -> what is kept of a finished job, read only by Python
--                          (jobs/finished.py): "<outcome> <ended ms>\n" (" <size>" before
--                          the newline: a record above KEPT_RECORD_MAX bytes, of which only
--                          the header and task line are kept; " d<due ms>": a cancelled
--                          job's due time), then framed ("<byte length>\n<bytes>") its
--                          record and its last attempt ("<attempt> <started ms> <duration
--                          ms> <due ms or -> <worker>", '' for a cancelled job), then its
--                          errors as E held them (the failed attempts)
--   O trace    hash        job id -> the context of the span that scheduled it (JSON, read only
--                          by Python: monitoring/tracing.py) of a job whose record has flag
--                          't'. Kept while the job exists (its retries and a requeue link to
--                          it too); forget() and ack delete it with the record
-- Times (scores, ARGV, replies) are integer epoch milliseconds: small sorted sets keep integer
-- scores as integers, where a decimal score would be parsed on every comparison. "now" is
-- Redis's TIME unless a test passes one. Scripts touch no other key and check the types of
-- the keys they write before their first write, so an error never leaves a job half moved.
-- The record header may end with '^<priority>' (an integer -100..100, absent for 0), after
-- the unique key if any: header() returns it.
-- Record flags: 'g' has a group (see A), 't' traced (see O), 'i' keep a tombstone when finished ('e' too: for a
-- day, see tombstone), 'l' linked (see L), 'k' has keyword arguments, 'u' max_retries
-- undecided (scheduled by name from a process that does not import the task: the digits are
-- that process's MAX_RETRIES; the worker writes the task's with settle.lua as it starts the
-- job, so a started job is decided, except one a worker older than 'u' started: scripts
-- then read the digits, as that worker did).
local RESERVED = 10000000000000
local DONE_TTL = 120000
local LONG_TTL = 86400000
local BAND = 17592186044416

local function clock(arg)
  if arg and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An integer as redis.call gets it (a Lua number would be written with %.14g: slower).
local function int(n) return string.format('%d', n) end

-- Fail with WRONGTYPE before any write when a key holds the wrong type: O(1) reads.
local function zsets(...) for _, k in ipairs({...}) do redis.call('ZCARD', k) end end
local function hashes(...) for _, k in ipairs({...}) do redis.call('HLEN', k) end end
local function lists(...) for _, k in ipairs({...}) do redis.call('LLEN', k) end end

-- redis.call(cmd, key, <items>...) in chunks Lua's unpack can take (it stops near 8,000
-- values); the replies of the chunks, concatenated (for HMGET).
local function batched(cmd, key, items)
  local out = {}
  for first = 1, #items, 1000 do
    local reply = redis.call(cmd, key, unpack(items, first, math.min(first + 999, #items)))
    if type(reply) == 'table' then
      for i = 1, #reply do out[#out + 1] = reply[i] end
    end
  end
  return out
end

local function wake()
  if redis.call('RPUSH', W, '1') > 8 then redis.call('LTRIM', W, -8, -1) end
end

-- The header of a record: max_retries (number), flags (string), unique key (string, '' for
-- none), priority (number, 0 when absent); nil for a record without a header (written by
-- 0.1) or a missing one. Only the first bytes are looked at, whatever the size of the record.
local function header(raw)
  if not raw then return nil, '', '', 0 end
  local r, flags, p = string.match(raw, '^(%d+)(%l*)()')
  if not r then return nil, '', '', 0 end
  local ukey = ''
  if string.sub(raw, p, p) == '=' then
    local len, q = string.match(raw, '^(%d+):()', p + 1)
    if len then
      ukey = string.sub(raw, q, q + tonumber(len) - 1)
      p = q + tonumber(len)
    end
  end
  local priority = 0
  if string.sub(raw, p, p) == '^' then
    priority = tonumber(string.match(raw, '^(-?%d+)', p + 1)) or 0
    if priority > 100 or priority < -100 then priority = 0 end
  end
  return tonumber(r), flags, ukey, priority
end

-- A pending job's score in Q (see the key table).
local function ranked_score(priority, due) return (100 - priority) * BAND + due end

local function has(flags, flag) return string.find(flags, flag, 1, true) ~= nil end

-- A parked job's value in A -> its group key, rank (number); nil for a job not parked.
local function parked_parts(v)
  if not v then return nil end
  local gkey, rank = string.match(v, '^([^\n]*\n[^\n]*)\n(%d+)\n')
  if gkey then return gkey, tonumber(rank) end
  return nil
end

-- The due time of a pending job (number), nil when it is not pending; its priority second.
-- A parked job (see Y) is pending too.
local function pending_due(id)
  local s = redis.call('ZSCORE', P, id)
  if s then return tonumber(s), 0 end
  s = redis.call('ZSCORE', Q, id)
  if not s then
    local v = redis.call('HGET', A, id)
    local _, rank = parked_parts(v)
    if rank and redis.call('ZSCORE', Y, v) then s = rank end
  end
  if s then
    s = tonumber(s)
    return s % BAND, 100 - math.floor(s / BAND)
  end
  return nil
end

-- Put a job in pending, due at `due`, in P (priority 0) or Q.
local function pend(id, due, priority)
  if priority == 0 then
    redis.call('ZADD', P, int(due), id)
  else
    redis.call('ZADD', Q, int(ranked_score(priority, due)), id)
  end
end

-- Take a job out of pending (P, Q or parked in Y): true when it was pending.
local function unpend(id)
  if redis.call('ZREM', P, id) == 1 then return true end
  if redis.call('ZREM', Q, id) == 1 then return true end
  local v = redis.call('HGET', A, id)
  local gkey = parked_parts(v)
  if gkey and redis.call('ZREM', Y, v) == 1 then
    redis.call('HSET', A, id, gkey)
    return true
  end
  return false
end

-- schedule.lua: the job `id` (its record names the task) joins `group` ('': none).
local function group_join(id, record, group)
  if group == '' then
    redis.call('HDEL', A, id)
    return
  end
  redis.call('HSET', A, id, string.match(record, '^[^\n]*\n([^\n]*)') .. '\n' .. group)
end

-- Move up to `n` parked jobs of group key `gkey` back to pending (their due times and
-- priorities kept; they are due, so a worker is woken). The count moved.
local function unpark_group(gkey, n)
  local members = redis.call('ZRANGEBYLEX', Y, '[' .. gkey .. '\n', '[' .. gkey .. '\n\255', 'LIMIT', 0, n)
  for _, m in ipairs(members) do
    local _, rank = parked_parts(m)
    local id = string.match(m, '\n([^\n]*)$')
    redis.call('ZREM', Y, m)
    redis.call('HSET', A, id, gkey)
    if math.floor(rank / BAND) == 100 then redis.call('ZADD', P, int(rank % BAND), id)
    else redis.call('ZADD', Q, int(rank), id) end
  end
  if #members > 0 then wake() end
  return #members
end

-- A job of a group (record flag 'g' in `flags`) left running (acknowledged, failed, handed
-- back, recovered): the first parked job of its group, if any, goes back to pending to
-- take the slot (unless `released`: the caller did), and it leaves the group's holders in
-- Z; `finished`: the job is gone (acknowledged), its A entry goes too. Nothing for a job
-- without flag 'g'.
local function group_left(id, flags, finished, released)
  if not flags or not has(flags, 'g') then return end
  local v = redis.call('HGET', A, id)
  if finished then redis.call('HDEL', A, id) end
  if not v then return end
  local gkey = string.match(v, '^([^\n]*\n[^\n]*)')
  local left, gone = {}, false
  for holder in string.gmatch(redis.call('HGET', Z, gkey) or '', '%S+') do
    if string.match(holder, '^[^|]*') ~= id then table.insert(left, holder) else gone = true end
  end
  if gone and #left > 0 then redis.call('HSET', Z, gkey, table.concat(left, ' '))
  elseif gone then redis.call('HDEL', Z, gkey) end
  if not released then unpark_group(gkey, 1) end
end


-- The state "<n>|<token>" -> n (0 when absent or garbage), token (nil when none), whether it
-- holds a lease (a token without the '~' of a settled attempt).
local function parse_state(raw)
  if not raw then return 0, nil, false end
  local n, settled, token = string.match(raw, '^(%d+)|(~?)(.*)$')
  if not n then return 0, nil, false end
  if token == '' then token = nil end
  return tonumber(n), token, settled == '' and token ~= nil
end

local function state_of(id) return parse_state(redis.call('HGET', S, id)) end

-- The state of a settled attempt (`token` kept behind '~'), or with no token (nil).
local function set_state(id, n, token)
  redis.call('HSET', S, id, int(n) .. (token and ('|~' .. token) or '|'))
end

-- Attempts counted if `id` runs under lease `token` (one HGET: the state says it), else nil.
local function owned(id, token)
  local n, t, running = state_of(id)
  if running and t == token then return n end
  return nil
end

local function release_key(ukey, id)
  if ukey ~= '' and redis.call('HGET', U, ukey) == id then redis.call('HDEL', U, ukey) end
end

-- A job going back to pending (retry, recovery, release, requeue) takes its unique key back,
-- so the key names at most one pending job. False when another pending job holds the key
-- (it was scheduled with that key while this one ran or lay dead): the caller dead-letters
-- or keeps this one dead instead of making two pending jobs answer to one key.
local function take_key(ukey, id)
  if ukey == '' then return true end
  local holder = redis.call('HGET', U, ukey)
  if holder and holder ~= id and pending_due(holder) then return false end
  redis.call('HSET', U, ukey, id)
  return true
end

-- An error as a JSON object (its "at" in epoch seconds, like the worker's; `worker` the
-- instance that held the attempt, when known).
local function error_json(kind, message, now, attempt, worker)
  return cjson.encode({type = 'django_delayq.exceptions.' .. kind, message = message,
    at = now / 1000, attempt = attempt, worker = worker})
end

local function superseded(ukey, now)
  return error_json('Superseded', 'not retried: another pending job holds its unique key ' .. ukey, now)
end

-- Append one error (JSON text) to the job's framed list, keeping the last `max_kept`.
-- The list is never decoded here: only the frame lengths are read.
local function push_error(id, err, max_kept)
  local old = redis.call('HGET', E, id) or ''
  local starts, pos = {}, 1
  while pos <= #old do
    local len, body = string.match(old, '^(%d+)\n()', pos)
    if not len then break end
    table.insert(starts, pos)
    pos = body + tonumber(len)
  end
  if pos ~= #old + 1 then old, starts = '', {} end  -- garbage: start the list over
  local keep = max_kept - 1
  if #starts > keep then old = keep > 0 and string.sub(old, starts[#starts - keep + 1]) or '' end
  redis.call('HSET', E, id, old .. #err .. '\n' .. err)
end

local function bump(kind, count, now)
  if count <= 0 then return end
  local minute = math.floor(now / 60000)
  local slot = kind .. ':' .. int(minute % 60)
  local cur = redis.call('HGET', T, slot)
  local total = count
  if cur then
    local m, c = string.match(cur, '^(%d+):(%d+)$')
    if tonumber(m) == minute then total = tonumber(c) + count end
  end
  redis.call('HSET', T, slot, int(minute) .. ':' .. int(total))
end

-- A total of the queue's stats (done, failed, retried, dead, recovered): never reset.
local function tally(field, count)
  if count > 0 then redis.call('HINCRBY', T, field, count) end
end

local function forget(id)
  redis.call('HDEL', J, id) redis.call('HDEL', S, id) redis.call('HDEL', E, id) redis.call('HDEL', L, id)
  redis.call('HDEL', A, id) redis.call('HDEL', O, id)
end

-- A linked job (record flag 'l') ended with `outcome`: its link goes to G, for the worker to
-- forward to its batch or chain (see G). Nothing for a job without a link. The entry's field
-- is the id, or "<id>#<ms>" when an entry of the id waits already (a dead job requeued and
-- ended again before its death was forwarded; the end of a link a unique-key replace takes
-- away, while the job lives on under a new one): no end overwrites another.
local function forward(id, outcome, now)
  local link = redis.call('HGET', L, id)
  if link then
    local field = id
    if redis.call('HEXISTS', G, id) == 1 then field = id .. '#' .. int(now) end
    redis.call('HSET', G, field, outcome .. ' ' .. int(now) .. '\n' .. link)
  end
end

-- Remember for DONE_TTL that `ids` finished (flag 'i'), and drop older tombstones. `long`:
-- ids whose tombstone is kept for a day (flag 'e': a batch's callback or a chain's next step,
-- stored under an id derived from what decided it, which a forwarding re-sent after a crash
-- must find however long ago the job ran): their score is put ahead by LONG_TTL - DONE_TTL.
local function tombstone(ids, now, long)
  if #ids == 0 then return end
  local args, at = {}, int(now)
  for _, id in ipairs(ids) do
    table.insert(args, (long and long[id]) and int(now + LONG_TTL - DONE_TTL) or at)
    table.insert(args, id)
  end
  batched('ZADD', F, args)
  redis.call('ZREMRANGEBYSCORE', F, '-inf', '(' .. int(now - DONE_TTL))
end

-- A kept job's record longer than this (bytes) is kept as its header and task line only.
local KEPT_RECORD_MAX = 65536

-- Keep finished jobs (V, I) when `keep` = {age = ms, count = n} (nil: keep none): `ends` is a
-- list of {id, outcome, record, attempt summary, errors[, due ms]}. Then at most #ends + 100 entries
-- older than the age, and as many beyond the count, are dropped (so each call removes at
-- least what it adds), and both keys expire `age` after this call (turned off, what is left
-- goes by itself).
local function keep_finished(keep, now, ends)
  if not keep or #ends == 0 then return end
  local scores, entries, at = {}, {}, int(now)
  for _, e in ipairs(ends) do
    local record, summary, cut = e[3] or '', e[4] or '', ''
    if #record > KEPT_RECORD_MAX then  -- its header and task only: " <size>" says so
      local first = string.find(record, '\n', 1, true) or #record
      cut = ' ' .. #record
      record = string.sub(record, 1, string.find(record, '\n', first + 1, true) or #record)
    end
    table.insert(scores, at) table.insert(scores, e[1])
    table.insert(entries, e[1])
    if e[6] then cut = cut .. ' d' .. int(e[6]) end  -- a cancelled job's due time
    table.insert(entries, e[2] .. ' ' .. at .. cut .. '\n' .. #record .. '\n' .. record
      .. #summary .. '\n' .. summary .. (e[5] or ''))
  end
  batched('ZADD', V, scores)
  batched('HSET', I, entries)
  local room = #ends + 100
  local old = redis.call('ZRANGEBYSCORE', V, '-inf', '(' .. int(now - keep.age), 'LIMIT', 0, room)
  local excess = redis.call('ZCARD', V) - #old - keep.count
  if excess > 0 then
    local first = #old
    for _, id in ipairs(redis.call('ZRANGE', V, first, first + math.min(excess, room) - 1)) do
      table.insert(old, id)
    end
  end
  if #old > 0 then batched('ZREM', V, old) batched('HDEL', I, old) end
  redis.call('PEXPIRE', V, keep.age) redis.call('PEXPIRE', I, keep.age)
end

-- The keep setting of ARGV[i] (max age, ms) and ARGV[i + 1] (max count): nil when either is
-- 0 or absent (keep none).
local function keep_of(i)
  local age, count = tonumber(ARGV[i] or ''), tonumber(ARGV[i + 1] or '')
  if not age or not count or age <= 0 or count <= 0 then return nil end
  return {age = age, count = count}
end

-- Bounded trim of the dead set: by age, then by count, at most 100 of each per call.
local function trim_dead(now, max_age, max_count)
  local old = redis.call('ZRANGEBYSCORE', D, '-inf', '(' .. int(now - max_age), 'LIMIT', 0, 100)
  for _, id in ipairs(old) do redis.call('ZREM', D, id) forget(id) end
  local excess = redis.call('ZCARD', D) - max_count
  if excess > 0 then
    for _, id in ipairs(redis.call('ZRANGE', D, 0, math.min(excess, 100) - 1)) do
      redis.call('ZREM', D, id)
      forget(id)
    end
  end
end

-- Acknowledge finished jobs given as ARGV quadruples (job id, lease token, info, attempt) from
-- ARGV[first] on; info is the record's flags, then '=' and the unique key if it has one;
-- attempt the summary kept with a finished job (see I; '' when none is kept).
-- Appends one flag per triple to `out`: 1 acknowledged; 0 gone (already acknowledged,
-- e.g. by this very call sent before, or cancelled); -1 held by another lease or no longer
-- running (recovered, claimed again): nothing changed. Counts the acknowledged ones.
-- `released` (optional): ids whose group slot the caller already gave away (claim.lua).
-- `keep` (keep_of): the acknowledged jobs are kept as finished (see V, I).
-- Checks the types of the keys it writes unread before its first write.
local function ack_from(first, now, out, released, keep)
  local ids = {}
  for i = first, #ARGV, 4 do table.insert(ids, ARGV[i]) end
  if #ids == 0 then return end
  local states = batched('HMGET', S, ids)
  zsets(R) hashes(J, E, T)
  local keyed, flagged, linked, traced = false, false, false, false
  for i = first, #ARGV, 4 do
    local info = ARGV[i + 2]
    local flags = string.match(info, '^[^=]*')
    keyed = keyed or string.find(info, '=', 1, true) ~= nil
    flagged = flagged or has(flags, 'i')
    linked = linked or has(flags, 'l')
    traced = traced or has(flags, 't')
  end
  if keyed then hashes(U) end
  if flagged then zsets(F) end
  if linked then hashes(L, G) end
  if traced then hashes(O) end
  if keep then zsets(V) hashes(I) end
  local done, finished, long, links, traces, summaries = {}, {}, {}, {}, {}, {}
  for j, id in ipairs(ids) do
    local i = first + (j - 1) * 4
    local token, info = ARGV[i + 1], ARGV[i + 2]
    local _, t, running = parse_state(states[j])
    if running and t == token then
      local eq = string.find(info, '=', 1, true)
      local flags = eq and string.sub(info, 1, eq - 1) or info
      release_key(eq and string.sub(info, eq + 1) or '', id)
      table.insert(done, id)
      if keep then summaries[id] = ARGV[i + 3] or '' end
      if has(flags, 'i') then table.insert(finished, id) end
      if has(flags, 'e') then long[id] = true end
      if has(flags, 'l') then forward(id, 'succeeded', now) table.insert(links, id) end
      if has(flags, 't') then table.insert(traces, id) end
      group_left(id, flags, true, released and released[id])
      table.insert(out, 1)
    elseif states[j] or redis.call('HEXISTS', J, id) == 1 then
      table.insert(out, -1)
    else
      table.insert(out, 0)
    end
  end
  if #done > 0 then
    if keep then
      local records, errors, ends = batched('HMGET', J, done), batched('HMGET', E, done), {}
      for j, id in ipairs(done) do
        ends[j] = {id, 'succeeded', records[j] or '', summaries[id], errors[j] or ''}
      end
      keep_finished(keep, now, ends)
    end
    batched('ZREM', R, done)
    batched('HDEL', J, done)
    batched('HDEL', S, done)
    batched('HDEL', E, done)
    if #links > 0 then batched('HDEL', L, links) end
    if #traces > 0 then batched('HDEL', O, traces) end
    tombstone(finished, now, long)
    bump('d', #done, now)
    tally('done', #done)
  end
end

-- A batch's keys (storage/keys.py, BATCH_KINDS), in one slot of their own:
--   B batch    hash  "cb:<kind>" -> the callback's call (JSON, Python's), kind 'death',
--                    'success' or 'complete'; "created"; "total" and "sealed" once its
--                    block ended (batch_seal.lua); "n:<outcome>" -> members that ended so;
--                    "cancelled" -> when cancel_batch() ran; "fire:<kind>" -> when the
--                    callback was decided (its job id is derived from it), "placed:<kind>"
--                    -> when its job was stored (batches/forwarding.py)
--   N ended    hash  member id -> 'succeeded' | 'dead' | 'cancelled' (the last outcome: a
--                    requeued dead member that then succeeds moves to 'succeeded')
--   H members  hash  member id -> its queue (written by batch_seal.lua)
-- A finished batch (every member ended and every decided callback placed, or cancelled with
-- none left to place) expires BATCH_TTL (seconds) later. decide() calls one unsealed a day
-- (ABANDONED, ms) after it was opened finished too (no worker looks at it again) and lets
-- it expire BATCH_TTL later (a seal arriving before then still decides its callbacks).
local BATCH_TTL = 604800
local ABANDONED = 86400000

-- Decide the batch's callbacks: 'death' at its first dead member (`saw_dead`: one was recorded
-- by this call, though a later outcome of the same call moved it on), 'success' once every
-- member succeeded, 'complete' once every member ended (none after a cancel). A decision is taken
-- once ("fire:<kind>" keeps its time); a decided callback is returned until Python marks it
-- placed. Returns {finished (0|1), kind, decided ms, call, kind, ...}.
local function decide(now, saw_dead)
  local f = redis.call('HMGET', B, 'total', 'cancelled', 'n:succeeded', 'n:dead', 'n:cancelled')
  local total, cancelled = tonumber(f[1]), f[2]
  local s, d, c = tonumber(f[3] or '0'), tonumber(f[4] or '0'), tonumber(f[5] or '0')
  local due = {}
  if not cancelled then
    due.death = d > 0 or saw_dead == true
    due.success = total ~= nil and s >= total
    due.complete = total ~= nil and s + d + c >= total
  end
  local out, left = {0}, false
  for _, kind in ipairs({'death', 'success', 'complete'}) do
    local spec = redis.call('HGET', B, 'cb:' .. kind)
    if spec and redis.call('HEXISTS', B, 'placed:' .. kind) == 0 then
      local at = redis.call('HGET', B, 'fire:' .. kind)
      if not at and due[kind] then
        at = int(now)
        redis.call('HSET', B, 'fire:' .. kind, at)
      end
      if at then
        left = true
        table.insert(out, kind) table.insert(out, at) table.insert(out, spec)
      end
    end
  end
  local ended = total ~= nil and s + d + c >= total
  if not left and (ended or cancelled) then
    out[1] = 1
    for _, k in ipairs({B, N, H}) do redis.call('EXPIRE', k, BATCH_TTL) end
  elseif total == nil and now - (tonumber(redis.call('HGET', B, 'created') or '') or now) > ABANDONED then
    out[1] = 1  -- a block that never ended (its process died in it): nothing to look at
    for _, k in ipairs({B, N, H}) do redis.call('EXPIRE', k, BATCH_TTL) end
  end
  return out
end
