-- ack.lua: a batch of jobs finished successfully: delete them.
-- KEYS: running jobs state keys stats errors done links forward pending ranked wake groups parked holds trace finished kept throttled
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME (for the stats and tombstones)
-- ARGV[2] finished jobs' max age (integer milliseconds; 0: keep none), see `kept` in include/base.lua
-- ARGV[3] finished jobs' max count per queue (integer; 0: keep none)
-- ARGV[4..] quadruples: job id, lease token, info (the record's flags, then '=' and the unique
--           key if it has one: 'i', 'i=order:42', '=order:42' or ''), the attempt as kept
--           ("<attempt> <started ms> <duration ms> <worker>", or '')
-- Returns one integer per job: 1 acknowledged; 0 gone (nothing to do: already acknowledged,
-- e.g. by this very call sent before, or cancelled); -1 no longer running under that token
-- (recovered, claimed again, or dead): nothing changed. Idempotent.
-- A finished job's unique key is released if it still names the job; a job with flag 'i'
-- leaves a tombstone in `done` for DONE_TTL (see schedule.lua; a day with flag 'e'). A job with
-- flag 'l' (info's flags) leaves its link in `forward`, outcome 'succeeded' (see include/base.lua); one
-- with flag 't' loses its entry in `trace` (see include/base.lua). While finished jobs are kept, each
-- acknowledged job's record, errors and attempt go to `kept` and `finished` (see include/base.lua).
--- @include "base"
--- @include "keeping"
--- @include "acks"
local out = {}
ack_from(4, clock(ARGV[1]), out, nil, keep_of(2))
return out
