-- keep.lua: keep jobs cancelled outside Redis (their outbox rows deleted:
-- outbox/placement.py) as finished, outcome 'cancelled', as cancel.lua keeps the others.
-- KEYS: finished kept
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2] finished jobs' max age (integer milliseconds; 0: keep none), see ack.lua
-- ARGV[3] finished jobs' max count per queue (0: keep none)
-- ARGV[4..] triples: job id, record, due time (epoch milliseconds, or '')
-- Returns how many jobs were kept (0 when keeping is off).
--- @include "base"
--- @include "keeping"
local keep = keep_of(2)
if not keep then return 0 end
zsets(finished) hashes(kept)
local ends = {}
for i = 4, #ARGV, 3 do
  table.insert(ends, {ARGV[i], 'cancelled', ARGV[i + 1], '', '', tonumber(ARGV[i + 2])})
end
keep_finished(keep, clock(ARGV[1]), ends)
return #ends
