-- admitter: read a tenant's state without changing it (see state.lua).
--
-- KEYS[1]  the tenant's state
-- KEYS[2]  optional: the state whose limits are read instead of KEYS[1]'s (a plan in shadow
--          mode: the tenant's shadow state, see admit.lua)
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), born (µs, see load), n limits, then
--          the plan's limits and calendars (see read_limits)
--
-- Reply: packed int64s {now (µs), until when the queue's owner holds it (µs; see admit.lua),
-- stored (see state.lua), recent decisions, until when the downstream holds the tenant's
-- forwards (µs, 0: it does not; see lease.lua), then per limit its state at now (see load): a
-- bucket's tat (now for a full one); a window's or a quota's count of takes k, then k × (death,
-- weight); then the slots booked and not yet claimed: a count of entries k, then k × (death,
-- count), death being slot + grace}.
--
-- Redis commands: TIME, one GET (two for a shadow plan), on the tenant's keys alone.
local arg = ARGV[1]
local now, born, n = struct.unpack('<lll', arg)
if now == 0 then now = server_now() end
local lims = read_limits(arg, 25, n)
check_calendars(lims, n, now)
local st = read_state(redis.call('GET', KEYS[1]), lims, n, now)
local ls = st
if KEYS[2] then ls = read_state(redis.call('GET', KEYS[2]), lims, n, now) end
local ws = load(ls, lims, n, now, born)
local vals = {now, st.owner_until, st.stored, mark_count(st), st.hold}
for i = 1, n do
  if lims[i].kind == BUCKET then
    vals[#vals + 1] = ws[i]
  else
    local log = ws[i]
    vals[#vals + 1] = #log / 2
    for j = 1, #log do vals[#vals + 1] = log[j] end
  end
end
local booked = ls.booked
vals[#vals + 1] = #booked / 2
for j = 1, #booked do vals[#vals + 1] = booked[j] end
return pack_ints(vals)
