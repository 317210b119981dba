-- fetch.lua: read one job whole, atomically (read-only).
-- KEYS: pending running dead jobs state errors ranked groups parked kept
-- ARGV[1] job id
-- Returns {record, state, errors, pending score, running score, dead score}, each false when
-- absent (scores in epoch milliseconds; the pending score is the due time, for a job in
-- `pending` or in `ranked`), then what is kept of it once it finished (see `kept` in include/base.lua),
-- false when nothing is.
--- @include "base"
--- @include "priority"
local id = ARGV[1]
return {redis.call('HGET', jobs, id), redis.call('HGET', state, id), redis.call('HGET', errors, id),
  pending_due(id) or false, redis.call('ZSCORE', running, id), redis.call('ZSCORE', dead, id), redis.call('HGET', kept, id)}
