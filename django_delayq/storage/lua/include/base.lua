-- base.lua: what every script uses: the clock, integers as Redis takes them, the type
-- checks before a first write, commands over many items. Every entry includes it first.
--
-- The keys of a queue, all in its hash-tag slot:
--   pending    sorted set  job id -> due_at, for jobs of priority 0 (the default)
--   ranked     sorted set  job id -> (100 - priority) * BAND + due_at, for pending jobs of a
--                          priority other than 0 (-100..100, the record header's '^<n>'): in
--                          claim order, highest priority first, then earliest due. A pending
--                          job is in exactly one of `pending` and `ranked`; scripts that find, move or
--                          remove a pending job look in both (pending_due, unpend, pend).
--   control    hash        "paused" -> epoch ms it was paused (absent: not paused);
--                          "rate:<task>" -> "<count>/<period ms>", "tat:<task>" -> next free
--                          claim time (microseconds); "conc:<task>" -> N, "hold:<task>" ->
--                          "<id>|<token> ..."; "qconc" -> N (the queue's own limit),
--                          "qhold" -> its holders (see claim.lua); "gconc:<task>" -> N,
--                          "grate:<task>" -> "<count>/<period ms>" (limits per group),
--                          "gsweep" -> the last group key claim.lua swept, "gsweep_at" ->
--                          when it may sweep again (ms), "gscan" -> the
--                          HSCAN cursor of its clean-up of `holds`. The whole key is
--                          absent while a queue has no control state, so claim.lua takes
--                          today's path after one EXISTS of `ranked`, `control` and `parked`.
--   running    sorted set  job id -> lease_until for a job a runner has started;
--                          lease_until - RESERVED (negative) for a job a worker claimed but has
--                          not started yet (prefetched). A runner marks the start with a plain
--                          ZADD XX GT of the started score (store.mark_op).
--   dead       sorted set  job id -> died_at
--   jobs       hash        job id -> record: header "\n" body (jobs/job.py); scripts read only the
--                          header: <max_retries><flags>[=<key length>:<key>]
--   state      hash        job id -> "<n>|<token>" while an attempt holds a lease (the job is in
--                          running), "<n>|~<token>" once it is settled (failed or handed back:
--                          the last attempt's token, so a re-sent call answers the same), "<n>|"
--                          after a recovery or requeue; n counts the attempts made so far
--                          (absent until the job is first claimed)
--   keys       hash        unique key -> job id (of at most one pending job); its local is
--                          unique_keys (Lua's KEYS is taken)
--   wake       list        tokens that wake a sleeping worker (at most 8 kept)
--   stats      hash        "d:<minute % 60>" / "f:<minute % 60>" -> "<minute>:<count>" (jobs done
--                          and attempts failed per minute, the last hour), and totals since the
--                          queue began: done, failed, retried, dead, recovered (HINCRBY)
--   errors     hash        job id -> errors, each framed "<byte length>\n<JSON object>"
--   done       sorted set  job id -> time it finished or was cancelled, kept DONE_TTL for jobs
--                          whose header has flag 'i', so a schedule re-sent after a lost reply
--                          does not store a finished job again
--   claims     hash        worker instance -> "<token>\n<id> <id> ..." (its last claim) and
--                          "<instance>/r" -> "<token>\n<id> <outcome> ..." (its last recovery),
--                          so a call re-sent with the same token answers the same
--   relayed    sorted set  job id -> time a relay stored it from an outbox row (outbox promise I6):
--                          a relay of a marked id never stores it again, however long the
--                          row's DELETE is refused; the relayer removes the mark once the
--                          DELETE committed (ZREM), a worker's relay sweeps old marks whose
--                          rows are gone
--   links      hash        job id -> link (JSON, read only by Python: batches/links.py) of a job
--                          whose record has flag 'l': the batch it belongs to, its place in a
--                          chain. Kept while the job exists (a requeued dead member keeps it);
--                          forget() deletes it with the record
--   forward    hash        job id -> "<outcome> <ms>\n<link>": a linked job ended (outcome
--                          'succeeded', 'dead' or 'cancelled', at <ms>), written by the same
--                          script as its ack, final failure, recovery to dead or cancel; the
--                          worker deletes it once the job's batch or chain took the outcome
--                          (batches/forwarding.py), the recovery pass takes what a crash left
--   groups     hash        job id -> "<task>\n<group>" (its group key) for a job scheduled with
--                          group= (record flag 'g'); while the job is parked, the whole
--                          member of `parked` ("<task>\n<group>\n<rank, 20 digits>\n<id>").
--                          Kept while the job lives (pending, running, dead), so a retry or
--                          requeue stays in its group; forget() drops it.
--   parked     sorted set  (every score 0, ordered by member) the due jobs of a group at its
--                          concurrency limit (claim.lua parks them out of `pending`/`ranked`, so they never
--                          block the jobs of other groups): member "<group key>\n<rank>\n<id>",
--                          rank = ranked_score(priority, due), so a group's jobs are one
--                          range in claim order. A parked job is pending: pending_due,
--                          unpend and pend see it. When a holder of a group leaves running
--                          (ack, fail, release, recover: group_left) its group's first
--                          parked job goes back to `pending`/`ranked`; claim.lua also sweeps one group (at
--                          most 20 a second), so a slot a 0.5.0 worker freed is found too.
--   holds      hash        group key -> "<id>|<token> ..." (the group's lease holders, checked
--                          against `state` at every claim, as "hold:<task>" is); "\n<group key>" ->
--                          the group's next free claim time (microseconds, GCRA as "tat:")
--   finished   sorted set  job id -> when it ended (epoch ms): the jobs that succeeded or were
--                          cancelled, kept for DELAYQ["FINISHED_MAX_AGE"] and at most
--                          DELAYQ["FINISHED_MAX_COUNT"] per queue (0 for either: none kept);
--                          trimmed by the scripts that add to it (keep, trim_kept)
--   kept       hash        job id -> what is kept of a finished job, read only by Python
--                          (jobs/finished.py): "<outcome> <ended ms>\n" (" <size>" before
--                          the newline: a record above KEPT_RECORD_MAX bytes, of which only
--                          the header and task line are kept; " d<due ms>": a cancelled
--                          job's due time), then framed ("<byte length>\n<bytes>") its
--                          record and its last attempt ("<attempt> <started ms> <duration
--                          ms> <due ms or -> <worker>", '' for a cancelled job), then its
--                          errors as `errors` held them (the failed attempts)
--   trace      hash        job id -> the context of the span that scheduled it (JSON, read only
--                          by Python: monitoring/tracing.py) of a job whose record has flag
--                          't'. Kept while the job exists (its retries and a requeue link to
--                          it too); forget() and ack delete it with the record
--   throttled  sorted set  unique key -> end of its unique_for= window (epoch ms), opened when
--                          a job with flag 'w' succeeded; `keys` holds "\0t" .. key ->
--                          "<finished id>|<end ms>" beside it (include/throttle.lua)
-- Times (scores, ARGV, replies) are integer epoch milliseconds: small sorted sets keep integer
-- scores as integers, where a decimal score would be parsed on every comparison. "now" is
-- Redis's TIME unless a test passes one. Scripts touch no other key and check the types of
-- the keys they write before their first write, so an error never leaves a job half moved.
-- The record header may end with '^<priority>' (an integer -100..100, absent for 0), after
-- the unique key if any: header() returns it.
-- Record flags: 'g' has a group (see `groups`), 't' traced (see `trace`), 'i' keep a tombstone when finished ('e' too: for a
-- day, see tombstone), 'l' linked (see `links`), 'k' has keyword arguments, 'u' max_retries
-- undecided (scheduled by name from a process that does not import the task: the digits are
-- that process's MAX_RETRIES; the worker writes the task's with settle.lua as it starts the
-- job, so a started job is decided, except one a worker older than 'u' started: scripts
-- then read the digits, as that worker did).
local RESERVED = 10000000000000
local DONE_TTL = 120000
local LONG_TTL = 86400000

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
