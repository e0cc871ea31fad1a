-- admitter: a tenant's state, shared by every script that reads or writes it. This prelude is
-- prepended to decide.lua, admit.lua and inspect.lua when they are embedded (see lua.go).
--
-- The state is one string of packed little-endian int64s ('<l'), self-describing:
--
--   [1] TAG        layout version (STATE_TAG); anything else is read as "no state": every
--                  limit full, the lane closed, nothing recent
--   [2] n          number of limit entries
--   [3] enq        highest input sequence moved to the tenant's lane (0: none)
--   [4] enq_at     when the last job was moved to the lane (µs)
--   [5] done       the lane is closed through this sequence: it is open while enq > done
--   [6] m          number of recent decisions
--   [7] until      the state's logical expiry (µs): read as absent from then on, whenever Redis
--                  evicts the key, so that decisions do not depend on when it does
--   then m pairs   (job, at): a job decided within the redeem window; at > 0 admitted at that
--                  time, at < 0 moved to the lane at -at
--   then n triples (limit id, tat, interval): a limit's GCRA state, keyed by the limit's stable
--                  id (a hash of its name), so a plan that reorders, adds or removes limits keeps
--                  the state of every limit it still has; the interval it was kept under lets a
--                  plan that changes the rate keep the tokens used, not the time owed
--
-- Every value is an integer below 2^53 (µs, sequences, 52-bit ids), exact in Lua's doubles.
local STATE_TAG = 1094995251 -- "ADM3"
local STATE_HDR = 7
local MAX_MARKS = 64

-- read_state parses raw (nil when absent) at time now for the plan's limit ids and intervals.
-- tats[i] is nil for a limit the state does not know (a full bucket). A limit kept under
-- another interval keeps the tokens it had used: the time owed is scaled to the new interval.
local function read_state(raw, ids, iv, n, now)
  local st = {enq = 0, enq_at = 0, done = 0, marks = {}, byjob = {}, tats = {}}
  if not raw or #raw < 8 * STATE_HDR then return st end
  local tag, cnt, enq, enq_at, done, m, expiry = struct.unpack('<lllllll', raw)
  if tag ~= STATE_TAG or expiry <= now or #raw ~= 8 * (STATE_HDR + 2 * m + 3 * cnt) then return st end
  st.enq, st.enq_at, st.done = enq, enq_at, done
  local pos = 8 * STATE_HDR + 1
  local marks, byjob = st.marks, st.byjob
  for i = 1, 2 * m do marks[i], pos = struct.unpack('<l', raw, pos) end
  for i = 1, 2 * m, 2 do byjob[marks[i]] = marks[i + 1] end
  local tats = st.tats
  for _ = 1, cnt do
    local id, tat, was
    id, tat, was, pos = struct.unpack('<lll', raw, pos)
    for i = 1, n do
      if ids[i] == id then
        if was ~= iv[i] and tat > now then tat = now + math.ceil((tat - now) * iv[i] / was) end
        tats[i] = tat
      end
    end
  end
  return st
end

-- find_mark returns the recent decision of job, or nil.
local function find_mark(st, job)
  return st.byjob[job]
end

-- add_mark records a decision of job at time at (see the layout above).
local function add_mark(st, job, at)
  local marks = st.marks
  marks[#marks + 1], marks[#marks + 2] = job, at
  st.byjob[job] = at
end

-- write_state stores the state with tats aligned to ids, keeping only the recent decisions
-- younger than redeem (at most MAX_MARKS, the newest). The key lives as long as any of it
-- matters: a limit not yet full, a recent decision, or an open lane (keep_open µs). When
-- nothing matters the key is deleted. pad is extra ms on every TTL (tests with a pinned clock).
local function write_state(key, st, ids, iv, tats, n, now, redeem, keep_open, pad)
  local marks = st.marks
  local kept, first = {}, 1
  local cut = now - redeem
  while first < #marks and math.abs(marks[first + 1]) < cut do first = first + 2 end
  if (#marks - first + 1) / 2 > MAX_MARKS then first = #marks - 2 * MAX_MARKS + 1 end
  for i = first, #marks do kept[#kept + 1] = marks[i] end
  local m = #kept / 2
  local life = 0
  for i = 1, n do
    if tats[i] - now > life then life = tats[i] - now end
  end
  if m > 0 and redeem > life then life = redeem end
  if st.enq > st.done and keep_open > life then life = keep_open end
  if life <= 0 then
    redis.call('DEL', key)
    return
  end
  local vals = {STATE_TAG, n, st.enq, st.enq_at, st.done, m, now + life}
  for i = 1, #kept do vals[STATE_HDR + i] = kept[i] end
  local base = STATE_HDR + #kept
  for i = 1, n do
    vals[base + 3 * i - 2] = ids[i]
    vals[base + 3 * i - 1] = tats[i]
    vals[base + 3 * i] = iv[i]
  end
  redis.call('SET', key, struct.pack('<' .. string.rep('l', #vals), unpack(vals)), 'PX', math.ceil(life / 1000) + pad)
end

-- read_limits parses n limits (id, capacity, interval µs) from arg at pos: ids, capacity
-- windows (capacity × interval) and intervals.
local function read_limits(arg, pos, n)
  local ids, cap, iv = {}, {}, {}
  for i = 1, n do
    local c, v
    ids[i], c, v, pos = struct.unpack('<lll', arg, pos)
    cap[i], iv[i] = c * v, v
  end
  return ids, cap, iv
end

-- server_now is the Redis server's clock in µs.
local function server_now()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

-- clamp_tats returns each limit's tat, no earlier than now (a full bucket is tat = now). A limit
-- with no state was empty when the server's memory began (born, µs; 0 when it is not known to
-- have lost anything) and has refilled since: a Redis that restarted without its data must not
-- take every bucket for full, or a burst follows every restart.
local function clamp_tats(st, n, now, born, cap)
  local tats = {}
  for i = 1, n do
    local t = st.tats[i]
    if not t then t = born + cap[i] end
    if t < now then t = now end
    tats[i] = t
  end
  return tats
end

-- slot is the earliest time ≥ now at which weight w fits every limit, and the binding limit
-- (0-based) that sets it.
local function slot(tats, cap, iv, n, now, w)
  local s, bind = now, 0
  for i = 1, n do
    local si = tats[i] + w * iv[i] - cap[i]
    if si > s then s, bind = si, i - 1 end
  end
  return s, bind
end

-- remaining is the whole tokens every limit holds now (the minimum) and the limit holding it.
local function remaining(tats, cap, iv, n, now)
  local best, bi = -1, 0
  for i = 1, n do
    local r = math.floor((cap[i] - (tats[i] - now)) / iv[i])
    if r < 0 then r = 0 end
    if best < 0 or r < best then best, bi = r, i - 1 end
  end
  return best, bi
end
