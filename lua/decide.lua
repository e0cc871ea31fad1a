-- admitter: decide whether one request of weight w may run now, booking a slot when it may not
-- (see state.lua for the tenant's state). This is the verb for callers that come back by
-- themselves at a time they are told: a request with a job key books the earliest slot at
-- which every limit lets w through after the slots booked ahead of it, and is admitted without
-- a second charge when it returns at or after that slot. Queued jobs use admit.lua instead.
--
-- Every limit, whatever its kind (see state.lua), tells the earliest time at which w fits it;
-- the slot is the latest of them, at which w fits them all (each kind's fit holds from its
-- earliest time on). Taking the slot charges w to every limit at that time, so that the jobs
-- booked later queue behind it.
--
-- KEYS[1]  the tenant's state
-- KEYS[2]  optional: the job's key, one packed int64: the booked slot (µs, > 0) while the job
--          waits, or -(expiry µs) once it is admitted. Either way it carries its own logical
--          expiry, so decisions do not depend on when Redis evicts it.
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), weight (>= 1), horizon (µs: a slot
--          further ahead is not booked), grace (µs: how long a booked slot is honoured after it
--          passes), marker life (µs: how long an admitted job is remembered), extra key life (ms
--          added to every PX; 0 in production), redeem (µs: how long the queue's recent
--          decisions are kept, see admit.lua), born (µs, see load),
--          n limits, lease id (the id of the lease a concurrency limit takes: a hash of the job
--          key, 0 for none: such a lease only ends), the memory marker's tag (-1: none; see
--          memory_of), then the plan's limits and calendars (see read_limits).
--
-- Reply: packed int64s {status, remaining, wait (µs), binding limit (0-based), leases expired
-- (ended unreleased, dropped from the state by this call)}.
-- status: 0 admitted and charged, 1 admitted at its booked slot (charged when booked),
--         2 already admitted (duplicate), 3 delayed with a slot booked, 4 throttled: nothing
--         booked, because the slot lies beyond the horizon or there is no job key to hold it
--         (wait is the time to the slot, however far), 5 returned before its booked slot.
--
-- The tenant's state counts the slots booked and not yet claimed (see book in state.lua), so that
-- inspect.lua reads them from the one key: a booking adds to it, a claim at the slot takes from
-- it.
--
-- Redis commands: TIME, one GET or MGET, and at most two SET ... PX (or a SET and a DEL).
local arg = ARGV[1]
local now, w, horizon, grace, life, pad, redeem, born, n, lease, mtag = struct.unpack('<lllllllllll', arg)
if now == 0 then now = server_now() end
memory_of(KEYS[1], false, mtag, born)
local lims = read_limits(arg, 89, n)
check_calendars(lims, n, now)
local job = KEYS[2]

local raw, jobval
if job then
  local v = redis.call('MGET', KEYS[1], job)
  raw, jobval = v[1], v[2]
else
  raw = redis.call('GET', KEYS[1])
end
local st = read_state(raw, lims, n, now)
local ws = load(st, lims, n, now, born)

if jobval and #jobval == 8 then
  local v = struct.unpack('<l', jobval)
  if v < 0 and -v > now then
    local r, b = remaining(lims, ws, n, now)
    return struct.pack('<lllll', 2, r, 0, b, 0)
  end
  if v > 0 and v + grace > now then
    local r, b = remaining(lims, ws, n, now)
    if now < v then return struct.pack('<lllll', 5, r, v - now, b, 0) end
    redis.call('SET', job, struct.pack('<l', -(now + life)), 'PX', math.ceil(life / 1000) + pad)
    local expired = 0
    if unbook(st, v + grace) then
      write_state(KEYS[1], st, lims, ws, n, now, redeem, pad)
      expired = st.expired
    end
    return struct.pack('<lllll', 1, r, 0, b, expired)
  end
end

local s, bind = slot(lims, ws, n, now, w)
if s - now > horizon or (s > now and not job) then
  local r = remaining(lims, ws, n, now)
  return struct.pack('<lllll', 4, r, s - now, bind, 0)
end

take(lims, ws, n, s, w, lease)
if s > now then book(st, s + grace) end
write_state(KEYS[1], st, lims, ws, n, now, redeem, pad)

local r, b = remaining(lims, ws, n, now)
if s == now then
  if job then
    redis.call('SET', job, struct.pack('<l', -(now + life)), 'PX', math.ceil(life / 1000) + pad)
  end
  return struct.pack('<lllll', 0, r, 0, b, st.expired)
end
redis.call('SET', job, struct.pack('<l', s), 'PX', math.ceil((s - now + grace) / 1000) + pad)
return struct.pack('<lllll', 3, r, s - now, bind, st.expired)
