-- admitter: decide whether a tenant's job of weight w may run now.
--
-- Every limit of the plan is a token bucket kept as GCRA state: tat, the time (µs) at which the
-- bucket is full again. A limit of capacity C refilling one token every I µs holds
-- (C*I - (tat - now)) / I tokens at time now. A job of weight w fits a limit at time s when
-- max(tat, s) + w*I - s <= C*I. The job's slot is the earliest s >= now at which it fits every
-- limit; taking it moves each limit's tat to max(tat, s) + w*I. A slot in the future is a
-- reservation: later jobs queue behind it, spaced at the plan's rate.
--
-- KEYS[1]  the tenant's state: a hash of limit index -> tat (µs), absent fields mean "full".
-- KEYS[2]  optional: the job's key. Its value is the booked slot (µs, > 0) while the job waits,
--          or -(expiry µs) once it is admitted; either way it carries its own logical expiry so
--          decisions do not depend on when Redis evicts it.
-- ARGV[1]  now in µs, or 0 to read the Redis server's clock (TIME)
-- ARGV[2]  weight (integer >= 1)
-- ARGV[3]  horizon (µs): a slot further ahead than this is not booked
-- ARGV[4]  grace (µs): how long a booked slot is honoured after it passes
-- ARGV[5]  marker life (µs): how long an admitted job is remembered
-- ARGV[6]  extra key life (ms) added to every PEXPIRE (0 in production)
-- ARGV[7..] per limit: capacity, interval (µs)
--
-- Reply: {status, remaining, wait (µs), binding limit (0-based)}; all integers.
-- status: 0 admitted and charged, 1 admitted at its booked slot (charged when booked),
--         2 already admitted (duplicate), 3 delayed with a slot booked, 4 throttled: nothing
--         booked, because the slot lies beyond the horizon or there is no job key to hold it
--         (wait is the time to the slot, at most the horizon), 5 returned before its booked slot.

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local w = tonumber(ARGV[2])
local horizon = tonumber(ARGV[3])
local pad = tonumber(ARGV[6])
local n = (#ARGV - 6) / 2

local fields = {}
for i = 1, n do fields[i] = tostring(i - 1) end
local tats = redis.call('HMGET', KEYS[1], unpack(fields))
local cap, iv = {}, {}
for i = 1, n do
  cap[i] = tonumber(ARGV[5 + 2 * i]) * tonumber(ARGV[6 + 2 * i])
  iv[i] = tonumber(ARGV[6 + 2 * i])
  local t = tonumber(tats[i])
  if t == nil or t < now then t = now end
  tats[i] = t
end

-- remaining: whole tokens every limit holds now; binding: the limit holding the fewest.
local function remaining()
  local best, bi = -1, 0
  for i = 1, n do
    local r = math.floor((cap[i] - (tats[i] - now)) / iv[i])
    if r < 0 then r = 0 end
    if best < 0 or r < best then best, bi = r, i - 1 end
  end
  return best, bi
end

local function int(x) return string.format('%d', x) end

local job = KEYS[2]
if job then
  local v = tonumber(redis.call('GET', job))
  if v ~= nil then
    if v < 0 and -v > now then
      local r, b = remaining()
      return {2, r, 0, b}
    end
    if v > 0 and v + tonumber(ARGV[4]) > now then
      local r, b = remaining()
      if now < v then return {5, r, v - now, b} end
      local life = tonumber(ARGV[5])
      redis.call('SET', job, int(-(now + life)), 'PX', int(math.ceil(life / 1000) + pad))
      return {1, r, 0, b}
    end
  end
end

local slot, bind = now, 0
for i = 1, n do
  local s = tats[i] + w * iv[i] - cap[i]
  if s > slot then slot, bind = s, i - 1 end
end
if slot - now > horizon or (slot > now and not job) then
  local r = remaining()
  return {4, r, math.min(slot - now, horizon), bind}
end

local hset, last = {}, now
for i = 1, n do
  local t = tats[i]
  if t < slot then t = slot end
  t = t + w * iv[i]
  tats[i] = t
  if t > last then last = t end
  hset[2 * i - 1] = fields[i]
  hset[2 * i] = int(t)
end
redis.call('HSET', KEYS[1], unpack(hset))
redis.call('PEXPIRE', KEYS[1], int(math.ceil((last - now) / 1000) + pad))

local r, b = remaining()
if slot == now then
  if job then
    local life = tonumber(ARGV[5])
    redis.call('SET', job, int(-(now + life)), 'PX', int(math.ceil(life / 1000) + pad))
  end
  return {0, r, 0, b}
end
if job then
  redis.call('SET', job, int(slot), 'PX', int(math.ceil((slot - now + tonumber(ARGV[4])) / 1000) + pad))
end
return {3, r, slot - now, bind}
