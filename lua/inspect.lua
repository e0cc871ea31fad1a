-- admitter: read a tenant's bucket state without changing it.
--
-- KEYS[1]  the tenant's state hash (see decide.lua)
-- ARGV[1]  now in µs, or 0 to read the Redis server's clock (TIME)
-- ARGV[2]  number of limits in the plan
--
-- Reply: {now (µs), tat of limit 0, tat of limit 1, ...}; a missing tat is 0 (full).
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local out = {now}
for i = 1, tonumber(ARGV[2]) do
  out[i + 1] = tonumber(redis.call('HGET', KEYS[1], tostring(i - 1))) or 0
end
return out
