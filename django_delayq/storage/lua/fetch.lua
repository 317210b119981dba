-- fetch.lua: read one job whole, atomically (read-only).
-- KEYS: pending running dead jobs state errors ranked groups parked kept
-- ARGV[1] job id
-- Returns {record, state, errors, pending score, running score, dead score}, each false when
-- absent (scores in epoch milliseconds; the pending score is the due time, for a job in
-- `pending` or in `ranked`), then what is kept of it once it finished (see `kept` in _lib.lua),
-- false when nothing is.
local id = ARGV[1]
return {redis.call('HGET', J, id), redis.call('HGET', S, id), redis.call('HGET', E, id),
  pending_due(id) or false, redis.call('ZSCORE', R, id), redis.call('ZSCORE', D, id), redis.call('HGET', I, id)}
