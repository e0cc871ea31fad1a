-- admitter: charge a tenant's state with what one replica decided on its own copy of it while
-- Redis was unreachable (bucket.Fallback, fail mode local), so that the tenant's limits count
-- it when Redis decides again: no second burst after an outage. What the replica sends is the
-- difference between its copy at the outage's start and its copy now, applied on top of what
-- Redis holds now (which other replicas may have changed meanwhile):
--   bucket  inc µs more owed: tat = max(tat, now) + inc (the replica's takes not yet refilled)
--   window, quota  takes (death, weight) to add
--   concurrency    leases (death, weight, id, at) taken or renewed on the copy, put in place of
--          any lease of the same id (one without an id, 0: a request's, is added beside the
--          others); then the ids of leases released on the copy, dropped
-- and the jobs admitted on the copy within the redeem window, as recent decisions, the highest
-- input sequence seen stored, and until when the downstream holds the tenant's forwards (the
-- later of the copy's and Redis's).
--
-- KEYS[1]  the tenant's state
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), born (µs, see load), redeem (µs),
--          extra key life (ms), stored (0: none), n limits, the memory marker's tag (-1: none;
--          see memory_of), then the plan's n limits and calendars (see read_limits)
-- ARGV[2]  packed int64s: per limit, in the plan's order, a count k then k values: a bucket
--          k = 1 (inc) or 0; a window or quota k = 2t, t × (death, weight); a concurrency limit
--          k = 4t, t × (death, weight, id, at), then r and r ids; then m and m × (job, at);
--          then the hold (µs, 0: none)
--
-- Reply: packed int64s {the weight the limits let through now: the minimum (see remaining)}.
--
-- Redis commands: TIME, GET, and one SET ... PX or DEL.
local arg, d = ARGV[1], ARGV[2]
local now, born, redeem, pad, stored, n, mtag = struct.unpack('<lllllll', arg)
if now == 0 then now = server_now() end
memory_of(KEYS[1], false, mtag, born)
local lims = read_limits(arg, 57, n)
check_calendars(lims, n, now)
local st = read_state(redis.call('GET', KEYS[1]), lims, n, now)
local ws = load(st, lims, n, now, born)
local pos = 1
for i = 1, n do
  local l, k = lims[i]
  k, pos = struct.unpack('<l', d, pos)
  if l.kind == BUCKET then
    for _ = 1, k do
      local inc
      inc, pos = struct.unpack('<l', d, pos)
      local t = ws[i]
      if t < now then t = now end
      ws[i] = t + inc
    end
  elseif l.kind == CONC then
    for _ = 1, k / 4 do
      local de, w, id, at
      de, w, id, at, pos = struct.unpack('<llll', d, pos)
      if id ~= 0 then
        local j = lease_find(ws, i, id)
        if j then lease_drop(ws, i, j) end
      end
      if de > now then lease_put(ws, i, de, w, id, at) end
    end
    local r
    r, pos = struct.unpack('<l', d, pos)
    for _ = 1, r do
      local id
      id, pos = struct.unpack('<l', d, pos)
      local j = lease_find(ws, i, id)
      if j then lease_drop(ws, i, j) end
    end
  else
    for _ = 1, k / 2 do
      local de, w
      de, w, pos = struct.unpack('<ll', d, pos)
      if de > now then log_add(ws[i], de, w) end
    end
  end
end
local m
m, pos = struct.unpack('<l', d, pos)
for _ = 1, m do
  local job, at
  job, at, pos = struct.unpack('<ll', d, pos)
  if at + redeem > now and not find_mark(st, job) then add_mark(st, job, at) end
end
if stored > st.stored then st.stored = stored end
local hold
hold, pos = struct.unpack('<l', d, pos)
if hold > st.hold and hold > now then st.hold = hold end
write_state(KEYS[1], st, lims, ws, n, now, redeem, pad)
local r = remaining(lims, ws, n, now)
return struct.pack('<l', r)
