-- admitter: read a tenant's state without changing it (see state.lua).
--
-- KEYS[1]  the tenant's state
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), born (µs, see clamp_tats), n limits,
--          then n × (limit id, capacity, interval µs)
--
-- Reply: packed int64s {now (µs), lane open (0/1), highest sequence moved to the lane, recent
-- decisions, then one tat per limit (now or earlier for a full limit)}.
local arg = ARGV[1]
local now, born, n = struct.unpack('<lll', arg)
if now == 0 then now = server_now() end
local ids, cap, iv = read_limits(arg, 25, n)
local st = read_state(redis.call('GET', KEYS[1]), ids, iv, n, now)
local tats = clamp_tats(st, n, now, born, cap)
local open = 0
if st.enq > st.done then open = 1 end
local vals = {now, open, st.enq, #st.marks / 2}
for i = 1, n do vals[4 + i] = tats[i] end
return struct.pack('<' .. string.rep('l', 4 + n), unpack(vals))
