-- admitter: a tenant's state, shared by every script that reads or writes it. This prelude is
-- prepended to decide.lua, admit.lua and inspect.lua when they are embedded (see lua.go).
--
-- The state is one string of packed little-endian int64s ('<l'), self-describing:
--
--   [1] TAG        layout version (STATE_TAG or SHORT_TAG; older tags are read too, see below);
--                  anything else is read as "no state": every limit forgotten (see load)
--   [2] n          number of limit records
--   [3] stored     the highest input sequence of the tenant whose forward was seen stored
--                  downstream (0: none known): a job at or below it is not forwarded again
--   [4] keep       until when (µs) the state must last for stored's sake (a removal of stored
--                  jobs from the input not yet confirmed); 0: no longer than the rest
--   [5] owner      the replica deciding the tenant's queue (a number naming it; 0: none)
--   [6] owner_until  until when (µs) it holds the queue: another replica admits nothing before
--   [7] m          number of recent decisions
--   [8] until      the state's logical expiry (µs): read as absent from then on, whenever Redis
--                  evicts the key, so that decisions do not depend on when it does
--   [9] hwm        the highest job id ever marked (below): a job above it was never decided, and
--                  its decision is not looked up (the common case: input sequences only grow)
--   [10] hwa       the highest job id ever marked admitted (at > 0), likewise
--   then m pairs   (job, at): a job admitted at `at` whose forward its owner has not said
--                  stored yet (above stored), within the redeem window. Oldest first; they are
--                  read only when a job at or below hwm is asked about, and otherwise carried
--                  over as bytes
--   then n records (limit id, len*4 + kind, then len values): a limit's state, keyed by the
--                  limit's stable id (a hash of its name) and its kind, so a plan that reorders,
--                  adds or removes limits keeps the state of every limit it still has, and a
--                  limit whose kind changes starts afresh. By kind:
--                    0 bucket  len 2: tat, the time at which the bucket is full again (GCRA),
--                              and the interval (µs per token) it was kept under, so that a
--                              plan that changes the rate keeps the tokens used, not the time
--                              owed (len 1, a tat alone, is read as kept under the plan's)
--                    1 window  len 2k: k takes (death, weight), sorted by death: weight counted
--                    2 quota   until death (see the arithmetic below)
--                    3 concurrency  len 4k: k leases (death, weight, lease id, at), sorted by
--                              death (then by when they were taken): a job's weight counted
--                              while it runs, until it is released or its lease ends (death);
--                              taken at `at`; id 0 is a lease nobody can release (all in flight
--                              when the memory began, see load)
--                  and, when Decide has slots booked and not yet claimed, one more record of id
--                  BOOKED_ID (-1, no limit's) and kind 0: len 2k, k entries (death, count) sorted
--                  by death, a booked slot counted until its slot + grace; at most MAX_BOOKED
--                  entries, the two closest merged into the later one when a booking would make
--                  more (the count then lasts until the later death). n counts it. A reader that
--                  does not know it skips it as a record of no limit of its plan.
--                  And, while the downstream asked for no more of the tenant's jobs (a done
--                  message's Admit-Retry-After: see lease.lua), one record of id HOLD_ID (-2)
--                  and kind 0, len 1: until when (µs) its forwards wait. n counts it.
--
-- SHORT_TAG ("ADM6") is the same layout with a header of 8 values, without hwm and hwa: it is
-- written when there are no recent decisions (m = 0), which is every idle tenant's state (16
-- bytes fewer, a smaller allocation in Redis). Older layouts are read: V4_TAG ("ADM4", header of
-- 9: n, then a lane gate of three values, m, until, hwm, hwa), V3_TAG ("ADM3": the same without
-- hwm and hwa; read with m > 0, every job is looked up) and OLD_TAG ("ADM2", V3's header and n
-- pairs (limit id, tat) instead of records: buckets); their lane gate is ignored (lanes are no
-- more: a tenant's queue is its input), stored and owner read as none.
--
-- Every value is an integer below 2^53 (µs, sequences, 52-bit ids, weights), exact in Lua's
-- doubles.
--
-- The arithmetic of each kind (bucket/kinds.go mirrors it function by function):
--   bucket  GCRA. Capacity C, one token every I µs: at now it holds (C*I - (tat - now)) / I
--           tokens; weight w fits at s when max(tat, s) + w*I - s <= C*I; taking w at s moves tat
--           to max(tat, s) + w*I.
--   window  a log of takes: a take at s dies at ceil(s/grain)*grain + window (grain 1 µs: exact).
--   quota   a log of takes: a take at s dies at the end of the calendar period holding s.
--   concurrency  a log of leases: a take at s dies at s + lease, sooner when released, later
--           when renewed. Its tags (id, at) ride beside the log in ws.tags[i].
--           Any log counts used(s) at time s, the weight of the takes whose death is after s,
--           and weight w fits at s when used(s) + w <= limit. used only falls as s grows: the
--           earliest fit is found walking the deaths in order, and holds from then on.
local STATE_TAG = 1094995253 -- "ADM5"
local SHORT_TAG = 1094995254 -- "ADM6"
local V4_TAG = 1094995252 -- "ADM4"
local V3_TAG = 1094995251 -- "ADM3"
local OLD_TAG = 1094995250 -- "ADM2"
local UNKNOWN_HWM = 9007199254740991 -- 2^53 - 1: every job may have been decided
-- MAX_MARKS, MAX_BOOKED, MAX_LISTED and PHANTOM_PERCENT are defined before this prelude, from
-- Go (lua.go): one definition for both sides.
local BOOKED_ID = -1
local HOLD_ID = -2
local BUCKET, WINDOW, QUOTA, CONC = 0, 1, 2, 3

-- fmts caches the struct formats of n int64s.
local fmts = {}
local function fmt(n)
  local f = fmts[n]
  if not f then
    f = '<' .. string.rep('l', n)
    fmts[n] = f
  end
  return f
end

-- unpack_ints reads count int64s of s from pos into a new table; it returns the table and the
-- position after them. (struct.unpack returns every value on the Lua stack: read in chunks.)
local function unpack_ints(s, pos, count)
  if count <= 200 then
    if count == 0 then return {}, pos end
    local out = {struct.unpack(fmt(count), s, pos)}
    pos = out[count + 1]
    out[count + 1] = nil
    return out, pos
  end
  local out, done = {}, 0
  while done < count do
    local c = math.min(count - done, 200)
    local vals = {struct.unpack(fmt(c), s, pos)}
    for i = 1, c do out[done + i] = vals[i] end
    pos, done = vals[c + 1], done + c
  end
  return out, pos
end

-- pack_ints packs the int64s of vals (in chunks, for the same reason).
local function pack_ints(vals)
  if #vals <= 200 then return struct.pack(fmt(#vals), unpack(vals)) end
  local parts = {}
  for i = 1, #vals, 200 do
    local j = math.min(i + 199, #vals)
    parts[#parts + 1] = struct.pack(fmt(j - i + 1), unpack(vals, i, j))
  end
  return table.concat(parts)
end

-- read_limits parses n plan limits from arg at pos: per limit id, kind and three parameters
-- (bucket: capacity, interval µs; window: limit, window µs, grain µs; quota: limit; concurrency:
-- limit, lease µs), then each
-- quota's calendar: a count m and m ascending period boundaries (µs), from the client, since
-- Lua knows no time zones. It returns one table per limit: {id, kind, a, b, c, cal}, with a the
-- bucket's span (capacity x interval) or the limit, b the interval, the window or the lease, c
-- the grain.
local function read_limits(arg, pos, n)
  local v
  v, pos = unpack_ints(arg, pos, 5 * n)
  local lims = {}
  for i = 1, n do
    local o = 5 * (i - 1)
    local l = {id = v[o + 1], kind = v[o + 2], a = v[o + 3], b = v[o + 4], c = v[o + 5]}
    if l.kind == BUCKET then l.a = l.a * l.b end
    lims[i] = l
  end
  for i = 1, n do
    if lims[i].kind == QUOTA then
      local m
      m, pos = struct.unpack('<l', arg, pos)
      lims[i].cal, pos = unpack_ints(arg, pos, m)
    end
  end
  return lims
end

-- check_calendars refuses a call whose quota calendars do not hold now.
local function check_calendars(lims, n, now)
  for i = 1, n do
    local cal = lims[i].cal
    if cal and (now < cal[1] or now >= cal[#cal]) then
      error({err = 'ERR admitter: the quota calendar covers [' .. string.format('%.0f', cal[1]) .. ', ' ..
        string.format('%.0f', cal[#cal]) .. ') µs but the server time is ' .. string.format('%.0f', now) ..
        ': its clock is too far from the client host\'s'})
    end
  end
end

-- period_end is the end of the calendar period holding s: the first boundary of cal after s. A
-- time before the calendar is in a period that ended by its first boundary (enough for a
-- forgotten quota: it is over by now).
local function period_end(cal, s)
  if s < cal[1] then return cal[1] end
  for j = 2, #cal do
    if cal[j] > s then return cal[j] end
  end
  error({err = 'ERR admitter: a take at ' .. string.format('%.0f', s) .. ' µs lies past the quota calendar'})
end

-- death is when a take at s of window or quota limit l leaves its count: the end of the sub-window
-- holding s plus the window, or the end of the period holding s (Go: spec.death).
local function death(l, s)
  if l.kind == QUOTA then return period_end(l.cal, s) end
  return math.ceil(s / l.c) * l.c + l.b
end

-- forgotten_share is what quota l counts as used when it was forgotten at born, in the
-- period ending at d: the share of the period elapsed by then, limit x (born - start) / (d -
-- start) rounded down (doubles, as Go's Plan.forgotten computes it). born lies in the calendar
-- whenever d is after now (the calendar starts before now's period).
local function forgotten_share(l, born, d)
  local cal, start = l.cal, l.cal[1]
  for j = 2, #cal do
    if cal[j] > born then break end
    start = cal[j]
  end
  return math.floor(l.a * (born - start) / (d - start))
end

-- read_state parses raw (nil when absent) at time now for the plan's limits. recs[i] is the
-- stored state of limit i (a tat, or a log as a flat list death, weight, ...), nil when the
-- state does not know it. A state that does not parse is read as absent.
local function read_state(raw, lims, n, now)
  local st = {stored = 0, keep = 0, owner = 0, owner_until = 0, m = 0, mraw = '', new = {}, hwm = 0, hwa = 0, recs = {}, booked = {}, hold = 0}
  if not raw or #raw < 8 * 7 then return st end
  local tag = struct.unpack('<l', raw)
  local _, hdr, cnt, stored, keep, owner, ountil, m, expiry, hwm, hwa = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
  if tag == STATE_TAG then
    hdr = 10
    if #raw < 8 * hdr then return st end
    _, cnt, stored, keep, owner, ountil, m, expiry, hwm, hwa = struct.unpack('<llllllllll', raw)
  elseif tag == SHORT_TAG then
    hdr = 8
    if #raw < 8 * hdr then return st end
    _, cnt, stored, keep, owner, ountil, m, expiry = struct.unpack('<llllllll', raw)
    if m > 0 then hwm, hwa = UNKNOWN_HWM, UNKNOWN_HWM end
  elseif tag == V4_TAG then
    hdr = 9
    if #raw < 8 * hdr then return st end
    _, cnt, _, _, _, m, expiry, hwm, hwa = struct.unpack('<lllllllll', raw)
  elseif tag == V3_TAG or tag == OLD_TAG then
    hdr = 7
    _, cnt, _, _, _, m, expiry = struct.unpack('<lllllll', raw)
    if m > 0 then hwm, hwa = UNKNOWN_HWM, UNKNOWN_HWM end
  else
    return st
  end
  local mpos = 8 * hdr + 1
  if expiry <= now or m < 0 or #raw < mpos - 1 + 16 * m then return st end
  local pos = mpos + 16 * m
  local recs, booked, hold = {}, {}, 0
  for _ = 1, cnt do
    local id, kind, len
    if tag == OLD_TAG then
      if pos + 15 > #raw then return st end
      id, pos = struct.unpack('<l', raw, pos)
      kind, len = BUCKET, 1
    else
      if pos + 15 > #raw then return st end
      local desc
      id, desc, pos = struct.unpack('<ll', raw, pos)
      kind, len = desc % 4, math.floor(desc / 4)
    end
    if len < 0 or pos - 1 + 8 * len > #raw then return st end
    if id == BOOKED_ID and tag ~= OLD_TAG then
      local log = unpack_ints(raw, pos, len)
      for j = 1, #log, 2 do
        if log[j] > now then booked[#booked + 1], booked[#booked + 2] = log[j], log[j + 1] end
      end
    elseif id == HOLD_ID and tag ~= OLD_TAG and len == 1 then
      hold = struct.unpack('<l', raw, pos)
      if hold <= now then hold = 0 end
    end
    for i = 1, n do
      if lims[i].id == id and lims[i].kind == kind then
        if kind == BUCKET then
          local tat = struct.unpack('<l', raw, pos)
          if len >= 2 then
            local was = struct.unpack('<l', raw, pos + 8)
            local iv = lims[i].b
            if was > 0 and was ~= iv and tat > now then tat = now + math.ceil((tat - now) * iv / was) end
          end
          recs[i] = tat
        else
          recs[i] = unpack_ints(raw, pos, len)
        end
      end
    end
    pos = pos + 8 * len
  end
  if pos ~= #raw + 1 then return st end
  st.stored, st.keep, st.owner, st.owner_until = stored, keep, owner, ountil
  st.recs, st.hwm, st.hwa, st.booked, st.hold = recs, hwm, hwa, booked, hold
  st.m, st.mraw = m, string.sub(raw, mpos, mpos - 1 + 16 * m)
  return st
end

-- marks_of returns the job → at table of the recent decisions, read on first use.
local function marks_of(st)
  local byjob = st.byjob
  if byjob then return byjob end
  byjob = {}
  if st.m > 0 then
    local v = unpack_ints(st.mraw, 1, 2 * st.m)
    for i = 1, 2 * st.m, 2 do byjob[v[i]] = v[i + 1] end
  end
  local new = st.new
  for i = 1, #new, 2 do byjob[new[i]] = new[i + 1] end
  st.byjob = byjob
  return byjob
end

-- find_mark returns the recent decision of job, or nil. With admitted set, only an admission
-- (at > 0) is looked for: a job above hwa has none.
local function find_mark(st, job, admitted)
  if job > st.hwm or (admitted and job > st.hwa) then return nil end
  return marks_of(st)[job]
end

-- add_mark records a decision of job at time at (see the layout above).
local function add_mark(st, job, at)
  local new = st.new
  new[#new + 1], new[#new + 2] = job, at
  if st.byjob then st.byjob[job] = at end
  if job > st.hwm then st.hwm = job end
  if at > 0 and job > st.hwa then st.hwa = job end
end

-- mark_count is the number of recent decisions.
local function mark_count(st)
  return st.m + #st.new / 2
end

-- book counts a slot booked by Decide, counted until death (its slot + grace), in st.booked:
-- sorted by death, one entry per death; past MAX_BOOKED entries, the two whose deaths are
-- closest (the first such pair) are merged into the later one.
local function book(st, death)
  local b = st.booked
  local j = #b - 1
  while j >= 1 and b[j] > death do j = j - 2 end
  if j >= 1 and b[j] == death then
    b[j + 1] = b[j + 1] + 1
    return
  end
  table.insert(b, j + 2, 1)
  table.insert(b, j + 2, death)
  if #b / 2 > MAX_BOOKED then
    local best, at = -1, 1
    for k = 1, #b - 3, 2 do
      local gap = b[k + 2] - b[k]
      if best < 0 or gap < best then best, at = gap, k end
    end
    b[at + 3] = b[at + 3] + b[at + 1]
    table.remove(b, at)
    table.remove(b, at)
  end
end

-- unbook uncounts a booked slot claimed by its job, counted until death: from the first entry
-- dying at or after death (where a merge put it). It reports whether it found one.
local function unbook(st, death)
  local b = st.booked
  for j = 1, #b, 2 do
    if b[j] >= death then
      if b[j + 1] > 1 then
        b[j + 1] = b[j + 1] - 1
      else
        table.remove(b, j)
        table.remove(b, j)
      end
      return true
    end
  end
  return false
end

-- The server's memory marker (see memory.lua), when the caller can name it: on one server its tag
-- is 0; on a Redis Cluster it lives in another slot than a tenant's keys (tag -1: not checked).
-- A call that finds a limit without state takes it as used to a bound at born, the time the
-- caller believes this server last lost admitter's state (see load). If the server restarted
-- empty since the caller last asked (a reconnection carried the call, built before, to the new
-- server), that belief is old and the limit would be taken for unused: a burst. So the first
-- limit without state of a call reads the marker, and a marker that is absent (no replica has
-- looked at the new server yet) or records a later loss refuses the call; the caller asks when
-- the server's memory began, and calls again (bucket.Redis exec).
local mem_key, mem_born, mem_checked = nil, 0, false

-- memory_of sets the marker of this call: key is one of its keys (prefix .. '{' ..), pool says it
-- is a pool's (prefix .. 'pool{'), tag the marker's tag (-1: none), born the caller's.
local function memory_of(key, pool, tag, born)
  mem_key, mem_born, mem_checked = nil, born, false
  if tag < 0 then return end
  local prefix = string.sub(key, 1, string.find(key, '{', 1, true) - 1)
  if pool then prefix = string.sub(prefix, 1, -5) end
  mem_key = prefix .. 'memory{' .. string.format('%d', tag) .. '}'
end

-- check_memory refuses the call when the marker says the caller's born is old (see above).
local function check_memory()
  if not mem_key or mem_checked then return end
  mem_checked = true
  local lost = redis.call('HGET', mem_key, 'lost')
  if not lost or tonumber(lost) > mem_born then
    error({err = 'ERR admitter: stale memory: this server lost admitter\'s state after the call was made; ask when its memory began'})
  end
end

-- phantom_end is when the slots of a concurrency limit or a pool with a lease of `lease` µs,
-- forgotten at born, stop being counted (exact in doubles for any lease up to 100 years; Go:
-- phantomEnd).
local function phantom_end(born, lease)
  local q = math.floor(lease / 100)
  return born + q * PHANTOM_PERCENT + math.ceil((lease - 100 * q) * PHANTOM_PERCENT / 100)
end

-- load returns each limit's state at now: a bucket's tat, no earlier than now (a full bucket is
-- tat = now); a window's or a quota's log of the takes it still counts (death > now). A limit
-- the state does not know is unused, unless the server is known to have forgotten (born, µs,
-- when what it knew was lost; 0 when nothing is known lost: a tenant never seen): then it was
-- used up to a stated bound at born. A bucket was empty then and has refilled since; a window
-- counted its whole limit until born + window; a quota, the share of its period elapsed at born
-- (limit x elapsed / period, rounded down) until the period's end; a concurrency limit, every
-- slot, as a lease of id 0 that nobody can name, until PHANTOM_PERCENT of a lease after born
-- (the jobs running then report meanwhile, each taking its weight out of it: see lease.lua). A
-- Redis that restarted without its data must not take every limit for unused, or a burst
-- follows every restart; nor a quota for used up, or its tenants wait for the rest of the period
-- (see Go's Plan.forgotten, the twin of this).
local function load(st, lims, n, now, born)
  local ws = {tags = {}}
  st.expired = 0
  for i = 1, n do
    local l, r = lims[i], st.recs[i]
    if not r then check_memory() end
    if l.kind == BUCKET then
      local t = r or (born + l.a)
      if t < now then t = now end
      ws[i] = t
    elseif l.kind == CONC then
      local log, tags = {}, {}
      if r then
        for j = 1, #r, 4 do
          if r[j] > now then
            log[#log + 1], log[#log + 2] = r[j], r[j + 1]
            tags[#tags + 1], tags[#tags + 2] = r[j + 2], r[j + 3]
          elseif r[j + 2] ~= 0 then
            st.expired = st.expired + 1
          end
        end
      elseif born > 0 and phantom_end(born, l.b) > now then
        log[1], log[2], tags[1], tags[2] = phantom_end(born, l.b), l.a, 0, born
      end
      ws[i], ws.tags[i] = log, tags
    else
      local log = {}
      if r then
        -- sorted by death: the takes no longer counted are a prefix
        local first = 1
        while first < #r and r[first] <= now do first = first + 2 end
        if first == 1 then
          log = r
        else
          for j = first, #r do log[j - first + 1] = r[j] end
        end
      elseif born > 0 then
        local d, w = born + l.b, l.a
        if l.kind == QUOTA then
          d = period_end(l.cal, born)
          if d > now then w = forgotten_share(l, born, d) end
        end
        if d > now and w > 0 then log[1], log[2] = d, w end
      end
      ws[i] = log
    end
  end
  return ws
end

-- lease_find is the position in ws[i] of lease id (the log's index of its death), or nil.
local function lease_find(ws, i, id)
  local tags = ws.tags[i]
  for j = 1, #tags, 2 do
    if tags[j] == id then return j end
  end
  return nil
end

-- lease_drop removes the lease at position j of ws[i] and returns its weight and when it was
-- taken.
local function lease_drop(ws, i, j)
  local log, tags = ws[i], ws.tags[i]
  local w, at = log[j + 1], tags[j + 1]
  table.remove(log, j)
  table.remove(log, j)
  table.remove(tags, j)
  table.remove(tags, j)
  return w, at
end

-- lease_put adds a lease of weight w taken at `at` dying at d, after those dying no later.
local function lease_put(ws, i, d, w, id, at)
  local log, tags = ws[i], ws.tags[i]
  local j = #log - 1
  while j >= 1 and log[j] > d do j = j - 2 end
  table.insert(log, j + 2, w)
  table.insert(log, j + 2, d)
  table.insert(tags, j + 2, at)
  table.insert(tags, j + 2, id)
end

-- write_state stores the state with the limits' states ws, keeping the recent decisions
-- younger than redeem whose job is above stored (at most MAX_MARKS, the newest): an admission is
-- remembered until its owner says its forward was stored (admit.lua). The key lives as long as
-- any of it matters: a bucket not yet full, a take a window or quota still counts, a recent
-- decision, an owner's hold on the queue, or stored while keep says so. When nothing matters the
-- key is deleted. pad is extra ms on every TTL (tests with a pinned clock). It returns what it
-- stored, nil when it deleted the key.
local function write_state(key, st, lims, ws, n, now, redeem, pad)
  -- The oldest recent decisions go: those older than redeem, and those of jobs at or below
  -- stored in its span of ids (a prefix: they are kept in the order they were made, and a
  -- tenant's jobs are admitted in the order of their ids), then those beyond MAX_MARKS.
  -- Decisions made now are never older, nor stored.
  local cut = now - redeem
  local old, raw, new = st.m, st.mraw, st.new
  local span = math.floor(st.stored / JOB_SPAN)
  local first = 0 -- old decisions dropped
  while first < old do
    local job, at = struct.unpack('<ll', raw, 16 * first + 1)
    if math.abs(at) >= cut and (job > st.stored or math.floor(job / JOB_SPAN) ~= span) then break end
    first = first + 1
  end
  local m = old - first + #new / 2
  local drop_new = 0
  if m > MAX_MARKS then
    first = first + m - MAX_MARKS
    if first > old then first, drop_new = old, first - old end
    m = MAX_MARKS
  end
  local life = 0
  for i = 1, n do
    local last = ws[i]
    if lims[i].kind ~= BUCKET then last = ws[i][#ws[i] - 1] or 0 end
    if last - now > life then life = last - now end
  end
  if m > 0 and redeem > life then life = redeem end
  if st.owner_until - now > life then life = st.owner_until - now end
  if st.stored > 0 and st.keep - now > life then life = st.keep - now end
  local booked = st.booked
  if #booked > 0 and booked[#booked - 1] - now > life then life = booked[#booked - 1] - now end
  if st.hold - now > life then life = st.hold - now end
  if life <= 0 then
    redis.call('DEL', key)
    return nil
  end
  local marks = ''
  if first < old then marks = string.sub(raw, 16 * first + 1) end
  if #new > 2 * drop_new then
    local vals = {}
    for i = 2 * drop_new + 1, #new do vals[#vals + 1] = new[i] end
    marks = marks .. pack_ints(vals)
  end
  local vals = {}
  for i = 1, n do
    local l = lims[i]
    if l.kind == BUCKET then
      vals[#vals + 1], vals[#vals + 2], vals[#vals + 3], vals[#vals + 4] = l.id, 4 * 2 + BUCKET, ws[i], l.b
    elseif l.kind == CONC then
      local log, tags = ws[i], ws.tags[i]
      vals[#vals + 1], vals[#vals + 2] = l.id, 4 * 2 * #log + CONC
      for j = 1, #log, 2 do
        vals[#vals + 1], vals[#vals + 2], vals[#vals + 3], vals[#vals + 4] = log[j], log[j + 1], tags[j], tags[j + 1]
      end
    else
      local log = ws[i]
      vals[#vals + 1], vals[#vals + 2] = l.id, 4 * #log + l.kind
      for j = 1, #log do vals[#vals + 1] = log[j] end
    end
  end
  if #booked > 0 then
    vals[#vals + 1], vals[#vals + 2] = BOOKED_ID, 4 * #booked + BUCKET
    for j = 1, #booked do vals[#vals + 1] = booked[j] end
  end
  local recs = n
  if #booked > 0 then recs = n + 1 end
  if st.hold > now then
    vals[#vals + 1], vals[#vals + 2], vals[#vals + 3] = HOLD_ID, 4 * 1 + BUCKET, st.hold
    recs = recs + 1
  end
  local head
  if m > 0 then
    head = struct.pack('<llllllllll', STATE_TAG, recs, st.stored, st.keep, st.owner, st.owner_until, m, now + life, st.hwm, st.hwa)
  else
    head = struct.pack('<llllllll', SHORT_TAG, recs, st.stored, st.keep, st.owner, st.owner_until, 0, now + life)
  end
  local raw = head .. marks .. pack_ints(vals)
  redis.call('SET', key, raw, 'PX', math.ceil(life / 1000) + pad)
  return raw
end

-- server_now is the Redis server's clock in µs, read once per script call (every batch of a
-- call decided by admit.lua sees the same time).
local server_time
local function server_now()
  if not server_time then
    local t = redis.call('TIME')
    server_time = t[1] * 1000000 + t[2]
  end
  return server_time
end

-- used is the weight log counts at s.
local function used(log, s)
  local u = 0
  for j = 1, #log, 2 do
    if log[j] > s then u = u + log[j + 1] end
  end
  return u
end

-- log_fit is the earliest time >= s at which weight w fits under lim.
local function log_fit(log, lim, s, w)
  local u = used(log, s)
  if u + w <= lim then return s end
  for j = 1, #log, 2 do
    if log[j] > s then
      u = u - log[j + 1]
      if u + w <= lim and (j + 2 > #log or log[j + 2] > log[j]) then return log[j] end
    end
  end
  return s
end

-- log_add records weight w dying at d, keeping the log sorted and one entry per death.
local function log_add(log, d, w)
  local j = #log - 1
  while j >= 1 and log[j] > d do j = j - 2 end
  if j >= 1 and log[j] == d then
    log[j + 1] = log[j + 1] + w
    return
  end
  table.insert(log, j + 2, w)
  table.insert(log, j + 2, d)
end

-- slot is the earliest time >= now at which weight w fits every limit, and the binding limit
-- (0-based: the first whose own earliest fit is that time, when it is after now).
local function slot(lims, ws, n, now, w)
  local s, bind = now, 0
  for i = 1, n do
    local l, si = lims[i]
    if l.kind == BUCKET then
      si = ws[i] + w * l.b - l.a
    else
      si = log_fit(ws[i], l.a, now, w)
    end
    if si > s then s, bind = si, i - 1 end
  end
  return s, bind
end

-- take charges weight w to every limit at time s; a concurrency limit takes lease id (a job
-- already holding one gives it up first: one lease per job).
local function take(lims, ws, n, s, w, id)
  for i = 1, n do
    local l = lims[i]
    if l.kind == BUCKET then
      local t = ws[i]
      if t < s then t = s end
      ws[i] = t + w * l.b
    elseif l.kind == WINDOW or l.kind == QUOTA then
      log_add(ws[i], death(l, s), w)
    else
      if id ~= 0 then
        local j = lease_find(ws, i, id)
        if j then lease_drop(ws, i, j) end
      end
      lease_put(ws, i, s + l.b, w, id, s)
    end
  end
end

-- charge_late charges cost, admitted `late` µs before now and reaching downstream only now,
-- again at now: a bucket what it refilled meanwhile, min(cost, late / interval) tokens (it may
-- go into debt), a window or a quota the weight. Concurrency limits are left as they are.
local function charge_late(lims, ws, n, now, cost, late)
  for i = 1, n do
    local l = lims[i]
    if l.kind == BUCKET then
      local t = ws[i]
      if t < now then t = now end
      ws[i] = t + math.min(late, cost * l.b)
    elseif l.kind == WINDOW or l.kind == QUOTA then
      log_add(ws[i], death(l, now), cost)
    end
  end
end

-- remaining is the whole weight every limit lets through now (the minimum, never negative) and
-- the limit holding it (0-based).
local function remaining(lims, ws, n, now)
  local best, bi = -1, 0
  for i = 1, n do
    local l, r = lims[i]
    if l.kind == BUCKET then
      r = math.floor((l.a - (ws[i] - now)) / l.b)
    else
      r = l.a - used(ws[i], now)
    end
    if r < 0 then r = 0 end
    if best < 0 or r < best then best, bi = r, i - 1 end
  end
  return best, bi
end
