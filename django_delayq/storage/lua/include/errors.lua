-- errors.lua: a job's errors in `errors`, each framed "<byte length>\n<JSON object>".

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
  local old = redis.call('HGET', errors, id) or ''
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
  redis.call('HSET', errors, id, old .. #err .. '\n' .. err)
end
