-- ack.lua: a batch of jobs finished successfully: delete them.
-- KEYS: the queue's eight keys (see _lib.lua).
-- ARGV[1] now (epoch seconds) or '' for Redis TIME (for the throughput counter only)
-- ARGV[2..] triples: job id, lease token, unique key ('' for none)
-- Returns one integer per job: 1 acknowledged, 0 lease lost (the job is no longer running
-- under that token: it was recovered or claimed again; nothing is changed).
local out = {}
ack_from(2, clock(ARGV[1]), out)
return out
