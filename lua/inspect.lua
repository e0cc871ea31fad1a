-- admitter: read a tenant's state without changing it (see state.lua).
--
-- KEYS[1]  the tenant's state
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), n limits, then n limit ids
--
-- Reply: packed int64s {now (µs), lane open (0/1), highest sequence moved to the lane, recent
-- decisions, then one tat per limit (0 for a full limit)}.
local arg = ARGV[1]
local now, n = struct.unpack('<ll', arg)
if now == 0 then now = server_now() end
local ids, pos = {}, 17
for i = 1, n do ids[i], pos = struct.unpack('<l', arg, pos) end
local st = read_state(redis.call('GET', KEYS[1]), ids, n, now)
local open = 0
if st.enq > st.done then open = 1 end
local vals = {now, open, st.enq, #st.marks / 2}
for i = 1, n do vals[4 + i] = st.tats[i] or 0 end
return struct.pack('<' .. string.rep('l', 4 + n), unpack(vals))
