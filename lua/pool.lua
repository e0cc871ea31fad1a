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
-- (no burst when it comes back). V moves to the start of each job granted.
--
-- Waiting. A tenant that asks for more than it is granted waits: it is kept in the waiters (a
-- sorted set by start tag), with the cost of its next job. A tenant's job is granted only when
-- the capacity is free and its start is not after the earliest start of the other waiters: the
-- jobs of every tenant go in the order of their start tags, whoever asks first. Capacity left
-- free for a waiter is kept for it until it asks again (it is woken: the reply names it); a
-- waiter not heard from for `ttl` µs is forgotten, and its turn with it. A release (or a give
-- back of unused grants) answers the tenant to wake: the waiter with the earliest start.
--
-- KEYS[1]  the pool's hash: s (packed int64s: tat, n, then n leases (death, weight, id, at) by
--          death), v (V, a decimal), c (a cursor of the sweep below), ws (the shares of the
--          waiters together), and per tenant t: f:t (F[t]), g:t (the weight granted to t since it
--          last had nothing waiting and nothing ahead: what it received), w:t (waiting: the cost of
--          its next job and its share, packed)
-- KEYS[2]  the waiters by start tag (sorted set)
-- KEYS[3]  the waiters by when they last asked (sorted set, µs)
-- ARGV[1]  packed int64s: op (0 acquire, 1 give back unused grants, 2 release, 3 renew,
--          4 inspect), now (µs, 0: the server's TIME), conc, lease (µs), cap, iv (µs), share,
--          ttl (µs), reask (µs), cost (release; -1: none), k, then k × (job id, weight)
-- ARGV[2]  the tenant
--
-- Reply: {packed int64s, wake}: wake is the tenant to wake ('' for none); the int64s are
--   acquire  granted (a prefix of the jobs), wait (µs, for the first job not granted: until the
--            capacity it needs may be free, at most reask; 0 when all were granted), then the
--            pool's state (below); wake is the waiter whose turn stopped the grant
--   give back / release  found (0/1), weight, taken (µs), then the pool's state
--   renew    found, the lease's new end (µs), then the pool's state
--   inspect  the pool's state, then up to MAX_LISTED tenants as (received, share, waiting) with
--            their names in the reply's third element (a list), active tenants first by start
-- the pool's state: weight in flight, tokens now (-1 without a bucket), waiters, their shares
-- together.
--
-- Redis commands: TIME, HGET/HMGET/HSET/HDEL/HSCAN, ZADD/ZREM/ZSCORE/ZRANGE(BYSCORE)/ZCARD,
-- PEXPIRE. The keys share the hash tag of the pool's name.
local POOL_TAG = 1094995280 -- "APL0"
local MAX_LISTED = 100
local arg = ARGV[1]
local tenant = ARGV[2]
local op, now, conc, lease, cap, iv, share, ttl, reask, cost, k = struct.unpack('<lllllllllll', arg)
if now == 0 then now = server_now() end
local pos = 8 * 11 + 1
local jid, jw = {}, {}
for i = 1, k do jid[i], jw[i], pos = struct.unpack('<ll', arg, pos) end

local function num(s) return tonumber(s) or 0 end
local function dec(x) return string.format('%.17g', x) end

-- the leases and the bucket
local tat, leases = 0, {}
local raw = redis.call('HGET', KEYS[1], 's')
if raw and #raw >= 24 then
  local tag, n
  tag, tat, n = struct.unpack('<lll', raw)
  if tag == POOL_TAG and #raw == 24 + 32 * n then
    local vals = unpack_ints(raw, 25, 4 * n)
    for j = 1, 4 * n, 4 do
      if vals[j] > now then
        leases[#leases + 1] = {vals[j], vals[j + 1], vals[j + 2], vals[j + 3]}
      end
    end
  else
    tat = 0
  end
end
local inuse = 0
for _, l in ipairs(leases) do inuse = inuse + l[2] end
if tat < now then tat = now end
local V = num(redis.call('HGET', KEYS[1], 'v'))
local wshares = num(redis.call('HGET', KEYS[1], 'ws'))

local function tokens()
  if cap <= 0 then return -1 end
  return math.floor((cap * iv - (tat - now)) / iv)
end

local function lease_at(id)
  for j, l in ipairs(leases) do
    if l[3] == id then return j end
  end
  return nil
end

local function lease_put(death, w, id, at)
  local j = #leases
  while j >= 1 and leases[j][1] > death do j = j - 1 end
  table.insert(leases, j + 1, {death, w, id, at})
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

local function best_waiter()
  local b = redis.call('ZRANGE', KEYS[2], 0, 0)
  return b[1] or ''
end

local function state()
  return {inuse, tokens(), redis.call('ZCARD', KEYS[2]), wshares}
end

local function save()
  local vals = {}
  for _, l in ipairs(leases) do
    vals[#vals + 1], vals[#vals + 2], vals[#vals + 3], vals[#vals + 4] = l[1], l[2], l[3], l[4]
  end
  local s = struct.pack('<lll', POOL_TAG, tat, #leases)
  if #vals > 0 then s = s .. pack_ints(vals) end
  redis.call('HSET', KEYS[1], 's', s, 'v', dec(V), 'ws', wshares)
  -- The pool lives while anything of it matters, and a day more: a lease, the bucket's refill,
  -- a waiter, the fairness of the tenants served lately.
  local life = 86400000000
  if #leases > 0 and leases[#leases][1] - now > life then life = leases[#leases][1] - now end
  if tat - now > life then life = tat - now end
  local ms = math.ceil(life / 1000)
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ms) end
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

local function reply(ints, wake)
  return {pack_ints(ints), wake or ''}
end

if op == 0 then
  -- acquire: the jobs go in order while they fit the capacity free and their start is not
  -- after another waiter's (that one's turn comes first: it is woken)
  local F = num(redis.call('HGET', KEYS[1], 'f:' .. tenant))
  local free = math.huge
  if conc > 0 then free = conc - inuse end
  if cap > 0 then free = math.min(free, tokens()) end
  local other, other_start
  local first = redis.call('ZRANGE', KEYS[2], 0, 1, 'WITHSCORES')
  for j = 1, #first, 2 do
    if first[j] ~= tenant then
      other, other_start = first[j], num(first[j + 1])
      break
    end
  end
  local granted, got, turn = 0, 0, false
  for i = 1, k do
    local id, w = jid[i], jw[i]
    if conc > 0 and lease_at(id) then
      granted = i -- granted before (its answer was lost): nothing more is taken
    else
      if w > free then break end
      local start = math.max(F, V)
      if other and start > other_start then
        turn = true
        break
      end
      free = free - w
      inuse = inuse + w
      if conc > 0 then lease_put(now + lease, w, id, now) end
      if cap > 0 then tat = tat + w * iv end
      F = start + w / share
      if start > V then V = start end
      got = got + w
      granted = i
    end
  end
  local wait, wake = 0, ''
  if granted < k then
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
      wake = other -- the capacity free is its turn
    else
      if conc > 0 and inuse + w > conc and #leases > 0 then
        wait = math.min(wait, math.max(leases[1][1] - now, 0))
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
  return reply(ints, wake)
elseif op == 1 or op == 2 then
  -- give back unused grants (1), or release a lease (2, one job: the done message's cost is
  -- reconciled with the bucket and the tenant's finish tag)
  local found, weight, taken = 0, 0, 0
  local F = num(redis.call('HGET', KEYS[1], 'f:' .. tenant))
  local back = 0
  for i = 1, k do
    local id, w = jid[i], jw[i]
    local j = conc > 0 and lease_at(id)
    if j then
      weight, taken = leases[j][2], leases[j][4]
      table.remove(leases, j)
      found = 1
      w = weight
    elseif conc > 0 or op == 2 then
      w = nil -- not held: nothing to give back or reconcile
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
  if op == 1 or found == 1 then redis.call('HSET', KEYS[1], 'f:' .. tenant, dec(F)) end
  inuse = 0
  for _, l in ipairs(leases) do inuse = inuse + l[2] end
  save()
  local ints = {found, weight, taken}
  for _, x in ipairs(state()) do ints[#ints + 1] = x end
  return reply(ints, best_waiter())
elseif op == 3 then
  -- renew
  local found, ends = 0, 0
  local j = lease_at(jid[1])
  if j then
    local l = table.remove(leases, j)
    ends = now + lease
    lease_put(ends, l[2], l[3], l[4])
    found = 1
    save()
  end
  local ints = {found, ends}
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
