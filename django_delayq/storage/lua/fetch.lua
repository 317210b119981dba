-- fetch.lua: read one job whole, atomically (read-only).
-- KEYS: pending running dead jobs state errors ranked groups parked kept keys
-- ARGV[1] job id
-- Returns {record, state, errors, pending score, running score, dead score}, each false when
-- absent (scores in epoch milliseconds; the pending score is the due time, for a job in
-- `pending` or in `ranked`), then what is kept of it once it finished (see `kept` in include/base.lua),
-- false when nothing is; then, for a record in no set that is its key's follower
-- (unique_until='end', include/followers.lua), "<leader id>|<not before ms>", else false.
--- @include "base"
--- @include "priority"
--- @include "followers"
local id = ARGV[1]
local record, due = redis.call('HGET', jobs, id), pending_due(id) or false
local run, died = redis.call('ZSCORE', running, id), redis.call('ZSCORE', dead, id)
local waits = record and not due and not run and not died and follower_of(id, record)
return {record, redis.call('HGET', state, id), redis.call('HGET', errors, id),
  due, run, died, redis.call('HGET', kept, id), waits or false}
