-- admitter: a capacity pool shared by the tenants of every plan that names it (bucket/pool.go
-- mirrors this script function by function; the conformance suite runs both).
--
-- A pool counts what is downstream: at most `conc` weighted jobs in flight (each holds a slot,
-- a lease, from its grant until released or `lease` µs later, renewed: later), and/or a bucket
-- of `cap` tokens refilling one every `iv` µs (GCRA, as a tenant's bucket). When the pool is the
-- bottleneck, what it frees goes to the tenants that wait, in proportion to their shares:
-- start-time fair queuing on cost. Each tenant t has a finish tag F[t]; the pool a virtual clock
-- V. A job of weight w of t starts at max(F[t], V) and finishes at start + w / share: a tenant
-- with share 3 is served three times the weight of one with share 1 while both wait. A tenant
-- that had nothing waiting starts at V, not at its old finish: what it did not use is not banked
-- (no burst when it comes back). V moves to the start of each job granted, but not past the
-- start of another tenant that waits.
--
-- Waiting. A tenant that asks for more than it is granted waits: it is kept in the waiters (a
-- sorted set by start tag, ties by name), with the cost of its next job and its share. Capacity
-- that frees is reserved for the waiters in the order of their jobs' start tags: a job is
-- granted only when it fits in what is free less the jobs of the other waiters that start
-- before it (a waiter is taken to have a backlog of jobs like its next: with start s, cost c and
-- share h, its jobs start at s, s + c/h, s + 2c/h, …; only the first SCAN waiters are looked at,
-- and past them nothing is granted). So the jobs of every tenant go in the order of their start
-- tags, whoever asks first, and a waiter slow to ask again holds back only its own jobs. A
-- waiter is woken to ask again: a release (or a give back of unused grants) names the waiters
-- whose reserved jobs the capacity it freed covers; a job refused for the others' turn names
-- the first of them. A waiter not heard from for `ttl` µs is forgotten, and
-- its reservation with it.
--
-- KEYS[1]  the pool's hash: t (the bucket's tat, µs), u (the weight in flight), v (V, a
--          decimal), c (a cursor of the sweep below), ws (the shares of the waiters together),
--          h (until when the downstream holds the pool's forwards, µs; 0: it does not);
--          per lease l:<id> (its weight and when it was taken, packed); and per tenant t: f:t
--          (F[t]), g:t (the weight granted to t since it last had nothing waiting and nothing
--          ahead: what it received), w:t (waiting: the cost of its next job and its share, packed)
-- KEYS[2]  the waiters by start tag (sorted set)
-- KEYS[3]  the waiters by when they last asked (sorted set, µs)
-- KEYS[4]  the leases by when they end (sorted set of the ids packed as int64s, µs): each call
--          touches only the leases it names and those that ended, not every lease
-- ARGV[1]  packed int64s: op (0 acquire, 1 give back unused grants, 2 release, 3 renew,
--          4 inspect, 5 start, 6 merge), now (µs, 0: the server's TIME), conc, lease (µs), cap,
--          iv (µs), share, ttl (µs), reask (µs), cost (release; -1: none), scan (the waiters a
--          call looks at: reservations, wakes), wake_jobs (the reserved jobs a release looks
--          at), max_conc (the most leases a pool holds), born (µs: when the server lost what it
--          knew, 0: nothing known lost), outcome (release: 0 ok, 1 failed, 2 overloaded), phold
--          (release: µs from now the downstream asked for no more of the pool's jobs; 0: none),
--          owed (merge: µs the bucket owes beyond what the server holds, see merge; else 0), the
--          breaker's bfail (percent; 0: none), bwin, bcool (µs), bprobes, bmin, the adaptive
--          limit's amin (0: not adaptive), the memory marker's tag (-1: none; see memory_of), k,
--          then k × (job id, weight); for merge, k/2 leases,
--          each two pairs (id, weight), (death, taken at): put in place of any lease of the same
--          id, or, of weight 0, dropped
-- ARGV[2]  the tenant
--
-- Forgotten. A pool whose state is absent while the server is known to have lost what it knew
-- (born) counts every slot as held by a lease of id 0 until PHANTOM_PERCENT of a lease after
-- born (phantom_end), and its bucket as empty at born: the jobs in flight then are not known by
-- name. A release or a renewal of a lease the pool does not hold, while that lease of id 0
-- lasts, is one of those jobs reporting: its weight leaves the forgotten slots, and renewed it
-- holds a lease of its own again. A start renews the job's lease, or takes a slot again for a
-- job whose lease ended while it waited for a worker, when one is free (fairness does not apply:
-- the job was granted before), without charging the bucket again.
--
-- Reply: {packed int64s, wakes}: wakes are the tenants to wake (a list, often empty); the
-- int64s are
--   acquire  granted (a prefix of the jobs), wait (µs, for the first job not granted: until the
--            capacity it needs may be free, at most reask; 0 when all were granted), then the
--            pool's state (below), then the (1-based) indices of the jobs granted before (a
--            lease of theirs held already: nothing taken now); wakes the first waiter when its
--            turn stopped the grant
--   give back / release  found (0/1), weight, ran (µs from the lease's take to now: the job's
--            time downstream; 0 when not held), then the pool's state
--   renew    found, the lease's new end (µs), then the pool's state
--   start    found, the lease's new end (µs), the wait (µs, not found: until a slot may be
--            free), then the pool's state
--   merge    1, then the pool's state (the bucket owes `owed` more: tat = max(tat, now) + owed)
--   inspect  the pool's state, then up to MAX_LISTED tenants as (received, share, waiting) with
--            their names in the reply's third element (a list), active tenants first by start
-- the pool's state: weight in flight, tokens now (-1 without a bucket), waiters, their shares
-- together, until when the downstream holds its forwards (µs; 0: it does not), the breaker's
-- state (0 closed, 1 open, 2 half-open), until when (µs; 0 when closed), its probes out.
--
-- The state goes on with the limit in force (conc for a pool not adaptive), the floor (µs; 0: not
-- measured), the last window's time per job (µs), why the limit last moved (0 starting, 1 grew,
-- 2 shrank, 3 halved for jobs overloaded, 4 measuring the floor), and when the breaker last changed
-- state (µs; 0: never).
--
-- Adaptive (amin > 0; see bucket.Adaptive): conc is the ceiling; the limit in force moves
-- between amin and it after each release's time downstream (now − the lease's take) and
-- outcome, in windows (ADAPT_* are generated from Go: lua.go). It takes the place of conc in
-- every grant and start; the slots forgotten still count conc.
--
-- Breaker (bfail > 0; see bucket.Breaker): a release's outcome counts over a window of bwin
-- µs (two halves); with at least bmin outcomes of which bfail percent or more bad, the pool opens
-- for bcool µs (grants nothing new), then is half-open (grants bprobes jobs), and closes when
-- as many come back ok. Its fields in KEYS[1]: bs, bu, bp, bk, bw, bn, bb, pn, pb, bt.
--
-- Downstream. A release with phold > 0 (a done message's Admit-Retry-After with
-- Admit-Retry-Scope: pool) holds every forward of the pool until now + phold, or later if they
-- already wait longer (h in KEYS[1]): an acquire grants nothing new meanwhile and answers the
-- wait until then, leaving the waiters as they are.
--
-- Redis commands: TIME, HGET/HMGET/HSET/HDEL/HINCRBY/HSCAN, ZADD/ZREM/ZSCORE/ZRANGE(BYSCORE)/ZCARD,
-- PEXPIRE. The keys share the hash tag of the pool's name.
local PAGE = 8 -- the waiters read at once
local arg = ARGV[1]
local tenant = ARGV[2]
local op, now, conc, lease, cap, iv, share, ttl, reask, cost, SCAN, WAKE_JOBS, MAX_CONC, born, outcome, phold, owed,
  bfail, bwin, bcool, bprobes, bmin, amin, mtag, k = struct.unpack('<lllllllllllllllllllllllll', arg)
if now == 0 then now = server_now() end
memory_of(KEYS[1], true, mtag, born)
local pos = 8 * 25 + 1
local jid, jw = {}, {}
for i = 1, k do jid[i], jw[i], pos = struct.unpack('<ll', arg, pos) end

local function num(s) return tonumber(s) or 0 end
local function dec(x) return string.format('%.17g', x) end

-- the leases and the bucket
local head = redis.call('HMGET', KEYS[1], 't', 'u', 'v', 'ws', 'h', 'bs', 'bu', 'bp', 'bk', 'bw', 'bn', 'bb', 'pn', 'pb',
  'al', 'af', 'aw', 'an', 'as', 'ao', 'ap', 'aq', 'am', 'ar', 'ax', 'bt')
local tat, inuse = num(head[1]), num(head[2])
local V, wshares = num(head[3]), num(head[4])
if not head[1] and not head[2] and not head[3] then check_memory() end
local hold = num(head[5])
if hold <= now then hold = 0 end

-- The breaker (Go: breakerState, function by function): bs closed (0), open (1: until bu) or
-- half-open (2: bp probes let through, bk of them back ok; bu: when probes out are taken for
-- lost); the window's current half from bw (bn outcomes, bb bad), the previous half's (pn, pb).
local bs, bu, bp, bk = num(head[6]), num(head[7]), num(head[8]), num(head[9])
local bw, bn, bb, pn, pb = num(head[10]), num(head[11]), num(head[12]), num(head[13]), num(head[14])
local bt = num(head[26]) -- when the breaker last changed state (µs)
local function breaker_tick()
  if bfail <= 0 then
    bs = 0
    return
  end
  if bs == 1 and now >= bu then bs, bu, bp, bk, bt = 2, now + bcool, 0, 0, now end
  if bs == 2 and now >= bu and bp >= bprobes then bu, bp, bk = now + bcool, 0, 0 end
end
breaker_tick()

-- breaker_report counts an outcome (bad: failed or overloaded), opening or closing the breaker.
local function breaker_report(bad)
  if bfail <= 0 then return end
  if bs == 0 then
    local cur = now - now % bwin
    if cur ~= bw then
      if cur == bw + bwin then pn, pb = bn, bb else pn, pb = 0, 0 end
      bn, bb, bw = 0, 0, cur
    end
    bn = bn + 1
    if bad then
      bb = bb + 1
      local f = (bwin - (now - bw)) / bwin
      local tot, nbad = pn * f + bn, pb * f + bb
      if tot >= bmin and nbad * 100 >= bfail * tot then bs, bu, bp, bk, bt = 1, now + bcool, 0, 0, now end
    end
  elseif bs == 2 then
    if bad then
      bs, bu, bp, bk, bt = 1, now + bcool, 0, 0, now
      return
    end
    bk = bk + 1
    if bk >= bprobes then bs, bu, bp, bk, bw, bn, bb, pn, pb, bt = 0, 0, 0, 0, 0, 0, 0, 0, 0, now end
  end
end

-- breaker_admits reports whether the breaker lets one more job through (a probe when half-open).
local function breaker_admits()
  if bfail <= 0 or bs == 0 then return true end
  if bs == 2 and bp < bprobes then
    bp = bp + 1
    return true
  end
  return false
end

-- The adaptive limit (amin > 0; Go: adaptState, function by function): al the limit (a decimal;
-- 0: amin), af the floor (µs; 0: not measured), the window from aw (an outcomes, as their times,
-- ao overloaded), ap windows still held at amin, aq when the next measure of the floor is due,
-- am whether the last window closed at amin, ar its time per job, ax why the limit last moved.
local al, af, aw, an, as, ao = num(head[15]), num(head[16]), num(head[17]), num(head[18]), num(head[19]), num(head[20])
local ap, aq, am, ar, ax = num(head[21]), num(head[22]), num(head[23]) == 1, num(head[24]), num(head[25])

-- adapt_in_force is the limit in force: conc when the pool is not adaptive.
local function adapt_in_force()
  if amin <= 0 then return conc end
  if ap > 0 or af == 0 then return amin end
  return math.min(math.max(amin, math.floor(al)), conc)
end

-- adapt_report counts a job's time downstream (rtt, µs) and whether it came back overloaded; a
-- window that closes moves the limit.
local function adapt_report(rtt, overloaded)
  if amin <= 0 then return end
  if an == 0 then aw = now end
  an, as = an + 1, as + rtt
  if overloaded then ao = ao + 1 end
  if now - aw < math.max(ADAPT_WINDOW, 2 * af) or an < ADAPT_SAMPLES then return end
  if al < amin then al = amin end
  local avg = as / an
  local at_min = adapt_in_force() == amin
  if at_min and (am or af == 0) and ao == 0 then -- a window wholly at amin: the floor
    af, aq = math.floor(avg), now + ADAPT_PROBE_EVERY
  elseif ao == 0 and math.floor(avg) < af then -- faster than the floor: so is the floor
    af = math.floor(avg)
  end
  am = at_min
  if af == 0 then
    ax = 0
  elseif ap > 0 then
    ap, ax = ap - 1, 4
  elseif now >= aq then
    ap, aq, ax = 2, now + ADAPT_PROBE_EVERY, 4
  elseif ao > 0 then
    al, ax = al * ADAPT_DECREASE / 100, 3
  else
    local g = math.min(math.max(ADAPT_TOLERANCE * af / 100 / avg, 0.5), 1)
    local nl = al * g + math.max(1, al * ADAPT_GROW / 100)
    ax = 1
    if nl < al then ax = 2 end
    al = nl
  end
  al = math.min(math.max(al, amin), conc)
  ar = math.floor(avg)
  an, as, ao = 0, 0, 0
end

-- breaker_wait is how long a job the breaker held back waits (µs).
local function breaker_wait()
  if bs == 1 then return math.max(bu - now, 1) end
  return math.min(reask, math.max(bu - now, 1))
end
local forgotten = not head[1] and not head[2] and not head[3] and born > 0
if forgotten and cap > 0 then tat = born + cap * iv end
if tat < now then tat = now end

-- lease_at is the weight and the start of the lease id, nil when it is not held.
local function lease_at(id)
  local l = redis.call('HGET', KEYS[1], 'l:' .. struct.pack('<l', id))
  if not l then return nil end
  return struct.unpack('<ll', l)
end

local function lease_put(death, w, id, at)
  local m = struct.pack('<l', id)
  redis.call('ZADD', KEYS[4], death, m)
  redis.call('HSET', KEYS[1], 'l:' .. m, struct.pack('<ll', w, at))
  inuse = inuse + w
end

local function lease_drop(m, w)
  redis.call('ZREM', KEYS[4], m)
  redis.call('HDEL', KEYS[1], 'l:' .. m)
  inuse = inuse - w
end

-- The slots of a pool the server forgot are held by a lease nobody can name (see above).
local made = false
if forgotten and conc > 0 and phantom_end(born, lease) > now then
  if op == 4 then
    inuse = inuse + conc
  else
    lease_put(phantom_end(born, lease), conc, 0, born)
    made = true
  end
end

-- forgotten_report takes weight w of a lease the pool does not hold out of the forgotten slots
-- (the lease of id 0), if they are still counted; it reports whether they were.
local function forgotten_report(w)
  local zw, zat = lease_at(0)
  if not zw then return false end
  local m = struct.pack('<l', 0)
  local zd = redis.call('ZSCORE', KEYS[4], m)
  lease_drop(m, zw)
  if zw > w then lease_put(num(zd), zw - w, 0, zat) end
  return true
end

-- Leases that ended unreleased are dropped (at most MAX_CONC, the most a pool holds; an
-- inspection only leaves them out).
local ended = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, MAX_CONC)
for _, m in ipairs(ended) do
  local l = redis.call('HGET', KEYS[1], 'l:' .. m)
  local w = l and struct.unpack('<ll', l) or 0
  if op == 4 then inuse = inuse - w else lease_drop(m, w) end
end
if inuse < 0 then inuse = 0 end

local function tokens()
  if cap <= 0 then return -1 end
  return math.floor((cap * iv - (tat - now)) / iv)
end

-- unwait forgets that t waits.
local function unwait(t)
  local w = redis.call('HGET', KEYS[1], 'w:' .. t)
  if w then
    local _, sh = struct.unpack('<ll', w)
    wshares = wshares - sh
    redis.call('HDEL', KEYS[1], 'w:' .. t)
  end
  redis.call('ZREM', KEYS[2], t)
  redis.call('ZREM', KEYS[3], t)
end

-- Waiters not heard from for ttl are forgotten.
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - ttl, 'LIMIT', 0, 64)
for _, t in ipairs(stale) do unwait(t) end

-- waiter_cost is the cost of waiter t's next job.
local function waiter_cost(t)
  local w = redis.call('HGET', KEYS[1], 'w:' .. t)
  if not w then return 0 end
  local c = struct.unpack('<ll', w)
  return c
end

-- free is the capacity free now: slots and tokens.
local function free_now()
  local f = math.huge
  if conc > 0 then f = adapt_in_force() - inuse end
  if cap > 0 then f = math.min(f, tokens()) end
  return f
end

-- freed_wakes names the waiters to wake after a release or a give back turned free_before
-- into free: the owners of the reserved jobs (every waiter's, in the order of their starts, as
-- the grants go) that fit in what is free now and did not before (the others were woken by the
-- release that made room for them), or, when nothing more is free (expired leases freed it
-- earlier), of the last that fits. At most WAKE_JOBS jobs are looked at.
local function freed_wakes(free_before)
  local free = free_now()
  local from = free - math.max(free - free_before, 1)
  local heads = {}
  local ws, done = {}, false -- the waiters read so far (pages of PAGE, SCAN at most)
  local nextw = 1 -- the next waiter not loaded (its next job is the earliest of theirs)
  local wakes, woken, pos = {}, {}, 0
  for _ = 1, WAKE_JOBS do
    -- the earliest job: of the heads loaded, or the next waiter's (loaded then)
    local h
    while true do
      h = nil
      for _, o in ipairs(heads) do
        if not h or o[2] < h[2] or (o[2] == h[2] and o[1] < h[1]) then h = o end
      end
      if nextw > #ws and not done and #ws < 2 * SCAN then
        local page = redis.call('ZRANGE', KEYS[2], #ws / 2, #ws / 2 + PAGE - 1, 'WITHSCORES')
        done = #page < 2 * PAGE
        for _, x in ipairs(page) do ws[#ws + 1] = x end
      end
      if nextw > #ws then break end
      local t, s = ws[nextw], num(ws[nextw + 1])
      if h and (s > h[2] or (s == h[2] and t > h[1])) then break end
      nextw = nextw + 2
      local w = redis.call('HGET', KEYS[1], 'w:' .. t)
      if w then
        local c, sh = struct.unpack('<ll', w)
        if c > 0 then heads[#heads + 1] = {t, s, c, sh} end
      end
    end
    if not h then break end
    if pos + h[3] > free then break end
    pos = pos + h[3]
    if pos > from and not woken[h[1]] then
      woken[h[1]] = true
      wakes[#wakes + 1] = h[1]
    end
    h[2] = h[2] + h[3] / h[4]
  end
  return wakes
end

local function state()
  return {inuse, tokens(), redis.call('ZCARD', KEYS[2]), wshares, hold, bs, bs > 0 and bu or 0, bp,
    adapt_in_force(), af, ar, ax, bt}
end

local function save()
  redis.call('HSET', KEYS[1], 't', tat, 'u', conc > 0 and inuse or 0, 'v', dec(V), 'ws', wshares, 'h', hold)
  if bfail > 0 then
    redis.call('HSET', KEYS[1], 'bs', bs, 'bu', bu, 'bp', bp, 'bk', bk, 'bw', bw, 'bn', bn, 'bb', bb, 'pn', pn, 'pb', pb, 'bt', bt)
  end
  if amin > 0 then
    redis.call('HSET', KEYS[1], 'al', dec(al), 'af', af, 'aw', aw, 'an', an, 'as', as, 'ao', ao, 'ap', ap, 'aq', aq,
      'am', am and 1 or 0, 'ar', ar, 'ax', ax)
  end
  -- The pool lives while anything of it matters, and a day more: a lease, the bucket's refill,
  -- a waiter, the fairness of the tenants served lately.
  local life = 86400000000
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  if last[2] and num(last[2]) - now > life then life = num(last[2]) - now end
  if tat - now > life then life = tat - now end
  local ms = math.ceil(life / 1000)
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ms) end
end

-- sweep drops a few tenants whose finish tag V has passed and that do not wait: they start at V
-- again anyway (bounded memory whatever the number of tenants).
local function sweep()
  local res = redis.call('HSCAN', KEYS[1], num(redis.call('HGET', KEYS[1], 'c')), 'MATCH', 'f:*', 'COUNT', 16)
  redis.call('HSET', KEYS[1], 'c', res[1])
  local kv = res[2]
  for j = 1, #kv, 2 do
    local t = string.sub(kv[j], 3)
    if num(kv[j + 1]) <= V and not redis.call('ZSCORE', KEYS[2], t) then
      redis.call('HDEL', KEYS[1], kv[j], 'g:' .. t)
    end
  end
end

local function reply(ints, wakes)
  return {pack_ints(ints), wakes or {}}
end

if op == 0 then
  -- acquire: the jobs go in order while they fit the capacity free and their start is not
  -- after another waiter's (that one's turn comes first: it is woken)
  local F = num(redis.call('HGET', KEYS[1], 'f:' .. tenant))
  local free = free_now()
  -- the other waiters by start (the first SCAN), and what those before a start reserve
  -- other(i) is the i-th other waiter by start (i ≤ SCAN; nil past them), read in pages
  local others, read, done = {}, 0, false
  local function other(i)
    while #others < i and #others < SCAN and not done do
      local page = redis.call('ZRANGE', KEYS[2], read, read + PAGE - 1, 'WITHSCORES')
      read = read + #page / 2
      done = #page < 2 * PAGE
      for j = 1, #page, 2 do
        if page[j] ~= tenant and #others < SCAN then others[#others + 1] = {page[j], num(page[j + 1])} end
      end
    end
    return others[i]
  end
  -- reserved_before is the weight of the others' jobs that start before start (ties: by name),
  -- or anything above limit once it is known to be.
  local function reserved_before(start, limit)
    local r = 0
    local i = 1
    while other(i) do
      local o = others[i]
      i = i + 1
      if o[2] > start or (o[2] == start and o[1] > tenant) then return r end -- it and those after are later
      if not o[3] then
        local w = redis.call('HGET', KEYS[1], 'w:' .. o[1])
        o[3], o[4] = 0, 1
        if w then o[3], o[4] = struct.unpack('<ll', w) end
      end
      if o[3] > 0 then
        local x = (start - o[2]) * o[4] / o[3]
        local n = math.ceil(x)
        if n == x and o[1] < tenant then n = n + 1 end
        r = r + n * o[3]
        if r > limit then return r end
      end
    end
    if #others == SCAN then -- past the waiters looked at, nothing is known
      local self = redis.call('ZSCORE', KEYS[2], tenant) and 1 or 0
      if redis.call('ZCARD', KEYS[2]) - self > SCAN then return math.huge end
    end
    return r
  end
  local granted, got, turn, held, broken = 0, 0, false, false, false
  local before = {} -- the jobs granted before: their indices
  for i = 1, k do
    local id, w = jid[i], jw[i]
    if conc > 0 and lease_at(id) then
      granted = i -- granted before (its answer was lost): nothing more is taken
      before[#before + 1] = i
    else
      if hold > 0 then
        held = true -- the downstream asked for no more of the pool's jobs until hold
        break
      end
      if bs == 1 then
        broken = true -- open: whatever is free
        break
      end
      if w > free then break end
      local start = math.max(F, V)
      if w > free - reserved_before(start, free - w) then
        turn = true
        break
      end
      if not breaker_admits() then
        broken = true -- open, or half-open with its probes out
        break
      end
      free = free - w
      if conc > 0 then lease_put(now + lease, w, id, now) else inuse = inuse + w end
      if cap > 0 then tat = tat + w * iv end
      F = start + w / share
      -- V follows the jobs granted, but not past another waiter's start: a job granted ahead of
      -- it (capacity to spare) does not move its turn
      local vs = start
      if other(1) and others[1][2] < vs then vs = others[1][2] end
      if vs > V then V = vs end
      got = got + w
      granted = i
    end
  end
  local wait, wakes = 0, {}
  if held then
    wait = hold - now -- a waiter neither made nor forgotten: the hold is every tenant's alike
  elseif broken then
    wait = breaker_wait() -- likewise
  elseif granted < k then
    local w = jw[granted + 1]
    local was = redis.call('HGET', KEYS[1], 'w:' .. tenant)
    if was then
      local _, sh = struct.unpack('<ll', was)
      wshares = wshares - sh
    end
    wshares = wshares + share
    redis.call('ZADD', KEYS[2], dec(math.max(F, V)), tenant)
    redis.call('ZADD', KEYS[3], now, tenant)
    redis.call('HSET', KEYS[1], 'w:' .. tenant, struct.pack('<ll', w, share))
    wait = reask
    if turn then
      wakes[1] = others[1][1] -- the capacity free is the others' turn: the first asks again
    else
      local first = conc > 0 and inuse + w > adapt_in_force() and redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
      if first and first[2] then
        wait = math.min(wait, math.max(num(first[2]) - now, 0))
      end
      if cap > 0 and w > tokens() then
        wait = math.min(wait, (w - tokens()) * iv)
      end
    end
  elseif redis.call('ZSCORE', KEYS[2], tenant) then
    unwait(tenant)
  end
  redis.call('HSET', KEYS[1], 'f:' .. tenant, dec(F))
  if got > 0 then redis.call('HINCRBY', KEYS[1], 'g:' .. tenant, got) end
  sweep()
  save()
  local ints = {granted, wait}
  for _, x in ipairs(state()) do ints[#ints + 1] = x end
  for _, i in ipairs(before) do ints[#ints + 1] = i end
  return reply(ints, wakes)
elseif op == 1 or op == 2 then
  -- give back unused grants (1), or release a lease (2, one job: the done message's cost is
  -- reconciled with the bucket and the tenant's finish tag)
  local found, weight, ran = 0, 0, 0
  local free_before = free_now()
  if op == 2 and phold > 0 and now + phold > hold then hold = now + phold end
  local F = num(redis.call('HGET', KEYS[1], 'f:' .. tenant))
  local back = 0
  for i = 1, k do
    local id, w = jid[i], jw[i]
    local lw, lat
    if conc > 0 then lw, lat = lease_at(id) end
    if lw then
      weight, ran = lw, math.max(now - lat, 0)
      if op == 2 then adapt_report(ran, outcome == 2) end
      lease_drop(struct.pack('<l', id), lw)
      found = 1
      w = weight
    else
      if op == 2 and conc > 0 and forgotten_report(w) then found, weight = 1, w end
      if conc > 0 or op == 2 then
        w = nil -- not held: nothing to give back or reconcile
      end
    end
    if w then
      if op == 1 then
        back = back + w
        if cap > 0 then
          tat = tat - w * iv
          if tat < now then tat = now end
        end
      elseif cost >= 0 and cost ~= w then
        local d = cost - w
        if cap > 0 then
          tat = tat + d * iv
          if tat < now then tat = now end
        end
        F = F + d / share
        redis.call('HINCRBY', KEYS[1], 'g:' .. tenant, d)
      end
    end
  end
  if op == 1 and back > 0 then
    F = F - back / share
    redis.call('HINCRBY', KEYS[1], 'g:' .. tenant, -back)
  end
  if op == 2 and found == 1 then breaker_report(outcome ~= 0) end
  if op == 1 or found == 1 then redis.call('HSET', KEYS[1], 'f:' .. tenant, dec(F)) end
  save()
  local ints = {found, weight, ran}
  for _, x in ipairs(state()) do ints[#ints + 1] = x end
  return reply(ints, freed_wakes(free_before))
elseif op == 3 or op == 5 then
  -- renew, or start
  local found, ends, wait = 0, 0, 0
  local id, w = jid[1], jw[1]
  if lease_at(id) then
    ends = now + lease
    redis.call('ZADD', KEYS[4], 'XX', ends, struct.pack('<l', id))
    found = 1
  elseif conc > 0 and op == 5 and hold > 0 then
    wait = hold - now -- a job taken again is a forward: none while the downstream holds them
  elseif conc > 0 and ((op == 3 and forgotten_report(w)) or (op == 5 and inuse + w <= adapt_in_force() and breaker_admits())) then
    ends = now + lease
    lease_put(ends, w, id, now)
    found = 1
  elseif op == 5 and conc > 0 and inuse + w <= adapt_in_force() then
    wait = breaker_wait()
  elseif op == 5 and conc > 0 then
    local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
    wait = reask
    if first[2] then wait = math.max(num(first[2]) - now, 1) end
  end
  if found == 1 or #ended > 0 or made then save() end
  local ints = {found, ends}
  if op == 5 then ints[3] = wait end
  for _, x in ipairs(state()) do ints[#ints + 1] = x end
  return reply(ints)
elseif op == 6 then
  -- merge: what a replica decided on its own copy of the pool while Redis was away: the tokens
  -- it took and not yet refilled (owed), its leases, and the downstream's hold it keeps (phold)
  if phold > 0 and now + phold > hold then hold = now + phold end
  if cap > 0 then tat = tat + owed end
  for i = 1, k - 1, 2 do
    local id, w, death, at = jid[i], jw[i], jid[i + 1], jw[i + 1]
    local lw = lease_at(id)
    if lw then lease_drop(struct.pack('<l', id), lw) end
    if w > 0 and death > now then lease_put(death, w, id, at) end
  end
  save()
  local ints = {1}
  for _, x in ipairs(state()) do ints[#ints + 1] = x end
  return reply(ints)
end
-- inspect: nothing is written
local ints = state()
local names = {}
local listed = {}
local ws = redis.call('ZRANGE', KEYS[2], 0, MAX_LISTED - 1)
for _, t in ipairs(ws) do listed[#listed + 1] = {t, 1} end
if #listed < MAX_LISTED then
  local res = redis.call('HSCAN', KEYS[1], 0, 'MATCH', 'g:*', 'COUNT', 1000)
  for j = 1, #res[2], 2 do
    local t = string.sub(res[2][j], 3)
    if #listed < MAX_LISTED and not redis.call('ZSCORE', KEYS[2], t) then listed[#listed + 1] = {t, 0} end
  end
end
for _, e in ipairs(listed) do
  local t = e[1]
  local sh = 0
  local w = redis.call('HGET', KEYS[1], 'w:' .. t)
  if w then _, sh = struct.unpack('<ll', w) end
  ints[#ints + 1], ints[#ints + 2], ints[#ints + 3] = num(redis.call('HGET', KEYS[1], 'g:' .. t)), sh, e[2]
  names[#names + 1] = t
end
return {pack_ints(ints), '', names}
