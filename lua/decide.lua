-- admitter: decide whether one request of weight w may run now, booking a slot when it may not
-- (see state.lua for the tenant's state). This is the verb for callers that come back by
-- themselves at a time they are told: a request with a job key books the earliest slot at
-- which every limit holds w tokens after the slots booked ahead of it, and is admitted without
-- a second charge when it returns at or after that slot. Queued jobs use admit.lua instead.
--
-- Every limit is GCRA state: tat, the time (µs) at which the bucket is full again. A limit of
-- capacity C refilling one token every I µs holds (C*I - (tat - now)) / I tokens at time now. A
-- job of weight w fits a limit at time s when max(tat, s) + w*I - s <= C*I. Taking slot s moves
-- each limit's tat to max(tat, s) + w*I.
--
-- KEYS[1]  the tenant's state
-- KEYS[2]  optional: the job's key, one packed int64: the booked slot (µs, > 0) while the job
--          waits, or -(expiry µs) once it is admitted. Either way it carries its own logical
--          expiry, so decisions do not depend on when Redis evicts it.
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), weight (>= 1), horizon (µs: a slot
--          further ahead is not booked), grace (µs: how long a booked slot is honoured after it
--          passes), marker life (µs: how long an admitted job is remembered), extra key life (ms
--          added to every PX; 0 in production), redeem and lane life (µs: how long the queue's
--          recent decisions and an open lane are kept, see admit.lua), born (µs, see
--          clamp_tats), then per limit: id, capacity, interval (µs).
--
-- Reply: packed int64s {status, remaining, wait (µs), binding limit (0-based)}.
-- status: 0 admitted and charged, 1 admitted at its booked slot (charged when booked),
--         2 already admitted (duplicate), 3 delayed with a slot booked, 4 throttled: nothing
--         booked, because the slot lies beyond the horizon or there is no job key to hold it
--         (wait is the time to the slot, at most the horizon), 5 returned before its booked slot.
--
-- Redis commands: TIME, one GET or MGET, and at most two SET ... PX.
local arg = ARGV[1]
local n = (#arg / 8 - 9) / 3
local now, w, horizon, grace, life, pad, redeem, keep_open, born = struct.unpack('<lllllllll', arg)
if now == 0 then now = server_now() end
local ids, cap, iv = read_limits(arg, 73, n)
local job = KEYS[2]

local raw, jobval
if job then
  local v = redis.call('MGET', KEYS[1], job)
  raw, jobval = v[1], v[2]
else
  raw = redis.call('GET', KEYS[1])
end
local st = read_state(raw, ids, iv, n, now)
local tats = clamp_tats(st, n, now, born, cap)

if jobval and #jobval == 8 then
  local v = struct.unpack('<l', jobval)
  if v < 0 and -v > now then
    local r, b = remaining(tats, cap, iv, n, now)
    return struct.pack('<llll', 2, r, 0, b)
  end
  if v > 0 and v + grace > now then
    local r, b = remaining(tats, cap, iv, n, now)
    if now < v then return struct.pack('<llll', 5, r, v - now, b) end
    redis.call('SET', job, struct.pack('<l', -(now + life)), 'PX', math.ceil(life / 1000) + pad)
    return struct.pack('<llll', 1, r, 0, b)
  end
end

local s, bind = slot(tats, cap, iv, n, now, w)
if s - now > horizon or (s > now and not job) then
  local r = remaining(tats, cap, iv, n, now)
  return struct.pack('<llll', 4, r, math.min(s - now, horizon), bind)
end

for i = 1, n do
  local t = tats[i]
  if t < s then t = s end
  tats[i] = t + w * iv[i]
end
write_state(KEYS[1], st, ids, iv, tats, n, now, redeem, keep_open, pad)

local r, b = remaining(tats, cap, iv, n, now)
if s == now then
  if job then
    redis.call('SET', job, struct.pack('<l', -(now + life)), 'PX', math.ceil(life / 1000) + pad)
  end
  return struct.pack('<llll', 0, r, 0, b)
end
redis.call('SET', job, struct.pack('<l', s), 'PX', math.ceil((s - now + grace) / 1000) + pad)
return struct.pack('<llll', 3, r, s - now, bind)
