-- admitter: read a tenant's bucket state without changing it.
--
-- KEYS[1]  the tenant's state (see decide.lua)
-- ARGV[1]  packed int64s (see decide.lua): now (µs, 0 = the server's TIME), number of limits
--
-- Reply: packed int64s {now (µs), tat of limit 0, tat of limit 1, ...}; 0 for a full limit.
local now, n = struct.unpack('<ll', ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local state = redis.call('GET', KEYS[1])
local tats = {}
if state and #state == 8 * n then tats = {struct.unpack('<' .. string.rep('l', n), state)} end
local out = {now}
for i = 1, n do out[i + 1] = tats[i] or 0 end
return struct.pack('<' .. string.rep('l', n + 1), unpack(out, 1, n + 1))
