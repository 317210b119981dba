-- batch_seal.lua: a batch's block ended: record its members and total, decide its callbacks.
-- KEYS: batch ended members
-- ARGV[1] now (epoch milliseconds) or '' for Redis TIME
-- ARGV[2..] pairs: member job id, its queue (each member once)
-- Members may have ended before this call (their outcomes are in `ended` already): a batch
-- whose members all ended decides its callbacks here.
-- Returns decide()'s reply (include/batch.lua): {finished, kind, decided ms, call, ...}: the
-- callbacks decided and not placed yet.
-- Idempotent: sent again (or after the batch was sealed) it records nothing and answers what
-- decide() answers then.
--- @include "base"
--- @include "batch"
local now = clock(ARGV[1])
hashes(batch, ended, members)
if not redis.call('HGET', batch, 'total') then
  local pairs_ = {}
  for i = 2, #ARGV do table.insert(pairs_, ARGV[i]) end
  if #pairs_ > 0 then batched('HSET', members, pairs_) end
  redis.call('HSET', batch, 'total', int(#pairs_ / 2), 'sealed', int(now))
end
return decide(now)
