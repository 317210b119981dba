-- fetch.lua: read one job whole, atomically (read-only).
-- KEYS: pending running dead jobs state errors ranked groups parked
-- ARGV[1] job id
-- Returns {record, state, errors, pending score, running score, dead score}, each false when
-- absent (scores in epoch milliseconds; the pending score is the due time, for a job in
-- `pending` or in `ranked`).
local id = ARGV[1]
return {redis.call('HGET', J, id), redis.call('HGET', S, id), redis.call('HGET', E, id),
  pending_due(id) or false, redis.call('ZSCORE', R, id), redis.call('ZSCORE', D, id)}
