-- record.lua: the header of a job's record (max_retries, flags, unique key, priority).

-- The header of a record: max_retries (number), flags (string), unique key (string, '' for
-- none), priority (number, 0 when absent); nil for a record without a header (written by
-- 0.1) or a missing one. Only the first bytes are looked at, whatever the size of the record.
local function header(raw)
  if not raw then return nil, '', '', 0 end
  local r, flags, p = string.match(raw, '^(%d+)(%l*)()')
  if not r then return nil, '', '', 0 end
  local ukey = ''
  if string.sub(raw, p, p) == '=' then
    local len, q = string.match(raw, '^(%d+):()', p + 1)
    if len then
      ukey = string.sub(raw, q, q + tonumber(len) - 1)
      p = q + tonumber(len)
    end
  end
  local priority = 0
  if string.sub(raw, p, p) == '^' then
    priority = tonumber(string.match(raw, '^(-?%d+)', p + 1)) or 0
    if priority > 100 or priority < -100 then priority = 0 end
  end
  return tonumber(r), flags, ukey, priority
end

local function has(flags, flag) return string.find(flags, flag, 1, true) ~= nil end
