-- admitter: decide the head of one tenant's queue, in order, in one call (see state.lua for the
-- tenant's state). A tenant's queue is its jobs in the input stream, in the order they were
-- stored; one replica at a time reads its head and asks about it (its owner, below).
--
-- Nothing is booked for the future: a job is charged when it is admitted, at the server's time,
-- so the times at which jobs are admitted are themselves paced (in any interval of length t, at
-- most C + r·t per bucket, at most the limit per window or calendar period), whatever happened
-- before: a crash, a replica joining, a slot passed while nobody was there. Jobs are admitted in
-- order while they fit; the first that does not fits after the wait in the reply (outcome 2),
-- and so does every job after it.
--
-- The owner. The replica that asks (owner, a number naming it) holds the tenant's queue for
-- `olife` µs from the call: while it does, another replica's call admits nothing (outcome 2, the
-- wait until the holder's time ends, binding limit -1). Every call of the holder extends it. So
-- the forwards one replica decided and has not yet seen stored cannot land beside forwards
-- another replica decides meanwhile: a replica that stalls or dies holds the queue for at most
-- olife after its last call, and one that changes its mind (a membership change) waits that long,
-- unless the holder gives its hold up (olife 0: its hold ends now).
--
-- Stored. `stored` is the highest input sequence of the tenant whose forward the owner has seen
-- stored downstream: a job at or below the highest ever given is answered 3 (stored: remove it,
-- do not forward it again), whoever asks and however long after. The owner passes it while a
-- removal of stored jobs from the input is not confirmed, with `keep` µs: how long the state
-- must remember it (the output's duplicate window covers a repeated forward for less). A job id
-- is its stream's sequence within a span of JOB_SPAN ids that names the stream: stored covers
-- the jobs of its own span only (a tenant whose jobs move to another stream starts afresh).
--
-- Late. The owner's forwards stored `late` µs or more after their decision reach downstream
-- beside what the limits gave meanwhile: their weight lw, `lt` µs late, is charged again before
-- anything is decided (charge_late).
--
-- Once. An admission is remembered (a recent decision: see state.lua) until the owner says its
-- forward was stored (stored passes it), or `redeem` after it: a job asked about again meanwhile
-- is answered "redeemed", with how long ago it was admitted, and charged nothing. Whoever asks
-- (a retried call whose answer was lost, a replica that took the queue over from one that died
-- between its forward and its removal) learns that the job may be downstream already: it looks
-- the forward up before repeating it, and a forward it makes only now is late (charged then, as
-- lw). So a job is charged once and forwarded once, however long after its decision it is read
-- again.
--
-- Shadow (a plan trialled, not enforced): every job not stored is admitted now (outcome 0), and
-- the plan's decision is computed on the tenant's shadow state (KEYS[2]) instead: the job takes
-- the earliest slot at which its weight fits every limit after the jobs before it, as it would
-- have waited, and its wait to that slot is in the reply. A slot further than `horizon` µs is not
-- taken, and the wait is given as the horizon: at least that long. No owner is taken.
--
-- Peek. With peek set the call decides and changes nothing: it answers each job stored (3),
-- redeemed (4 + a, see Once) or neither (2, wait 0), held by another owner counting as neither,
-- so that a pooled batch learns which of its jobs were admitted before asking the pool for them
-- (bucket/pool.go admitPooled).
--
-- KEYS[1]  the tenant's state
-- KEYS[2]  shadow: the tenant's shadow state (the same layout)
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), shadow (0/1), redeem (µs), late (µs,
--          unused), horizon (µs), owner, olife (µs), stored (input sequence, 0: none), keep (µs),
--          lw (weight), lt (µs), k jobs, n limits, extra key life (ms, 0 in production), born
--          (µs, see load), mirror (0/1), the memory marker's tag (-1: none; see memory_of), peek
--          (0/1), then k × (job id, weight), then the plan's n limits and calendars (see
--          read_limits).
--
-- A concurrency limit takes a lease for each job admitted, its id the job's (see lease.lua).
--
-- Downstream. While the downstream asked for no more of the tenant's jobs (the state's hold: a
-- done message's Admit-Retry-After, see lease.lua), no job is admitted but those redeemed:
-- outcome 2, the wait until the hold ends, binding limit -2.
--
-- Reply: packed int64s {wait (µs), binding limit (0-based; -1: held by another owner; -2: held by
-- the downstream),
-- remaining, leases expired (ended unreleased, dropped from the state by this call), then one
-- outcome per job}: 0 admitted, 2 not yet, 3 stored before, 4 + a (a ≥ 0) admitted a µs ago and
-- not said stored since (redeemed), 1 redeemed in shadow. wait
-- and the binding limit concern the first job not admitted (0 when all were); otherwise the
-- limit holding the fewest tokens. Shadow adds one value per job: its shadow wait (µs; 0 when it
-- fitted at once), and remaining and the binding limit are the shadow state's. Mirror (not with
-- shadow) adds now (µs) and the length b in bytes of the tenant's state as the call leaves it,
-- then that state (b bytes, the layout above; none when the key is absent): the caller's local
-- copy of it (bucket.Local).
--
-- Redis commands: TIME, GET (two in shadow), and one SET ... PX or DEL (two in shadow).
local arg = ARGV[1]
local now, shadow, redeem, late, horizon, owner, olife, stored, keep, lw, lt, k, n, pad, born, mirror, mtag, peek =
  struct.unpack('<llllllllllllllllll', arg)
if now == 0 then now = server_now() end
shadow = shadow == 1
memory_of(KEYS[1], false, mtag, born)
local pos = 8 * 18 + 1
local jid, jw = {}, {}
for i = 1, k do jid[i], jw[i], pos = struct.unpack('<ll', arg, pos) end
local lims = read_limits(arg, pos, n)
check_calendars(lims, n, now)
local raw = redis.call('GET', KEYS[1])
local st = read_state(raw, lims, n, now)
local ws = load(st, lims, n, now, born)

if peek == 1 then
  local held = st.owner ~= 0 and st.owner ~= owner and st.owner_until > now
  local vals = {0, 0, 0, 0}
  for i = 1, k do
    local job, o = jid[i], 2
    local at = find_mark(st, job, true)
    if job <= st.stored and math.floor(job / JOB_SPAN) == math.floor(st.stored / JOB_SPAN) then
      o = 3
    elseif not held and at and at > 0 and at + redeem >= now then
      o = 4 + math.max(now - at, 0)
    end
    vals[4 + i] = o
  end
  return pack_ints(vals)
end

local out = {}
local wait, bind = -1, 0
local changed = false
if stored > st.stored then st.stored, changed = stored, true end
if keep > 0 then st.keep, changed = now + keep, true end

local sst, sws, swait, schanged = nil, nil, {}, false
if shadow then
  sst = read_state(redis.call('GET', KEYS[2]), lims, n, now)
  sws = load(sst, lims, n, now, born)
end

local held = not shadow and st.owner ~= 0 and st.owner ~= owner and st.owner_until > now
if not shadow and not held then
  st.owner, st.owner_until, changed = owner, now + olife, true
  if lw > 0 then charge_late(lims, ws, n, now, lw, lt) end
end

for i = 1, k do
  local job, w = jid[i], jw[i]
  if job <= st.stored and math.floor(job / JOB_SPAN) == math.floor(st.stored / JOB_SPAN) then
    out[i] = 3
  elseif held then
    if wait < 0 then wait, bind = st.owner_until - now, -1 end
    out[i] = 2
  elseif shadow then
    out[i], swait[i] = 0, 0
    local sat = find_mark(sst, job)
    if sat and sat + SHADOW_REDEEM >= now then
      out[i], swait[i] = 1, math.max(sat - now, 0)
    else
      local s = slot(lims, sws, n, now, w)
      if s - now <= horizon then
        take(lims, sws, n, s, w, job)
        add_mark(sst, job, s)
        schanged = true
      end
      swait[i] = math.min(s - now, horizon)
    end
  else
    local at = find_mark(st, job, true)
    if at and at + redeem < now then at = nil end
    if at and at > 0 then
      -- Admitted before, not said stored: charged nothing (see Once), even behind a job that
      -- waits (it waits with it, but is known admitted: never expired as if it were not).
      out[i] = 4 + math.max(now - at, 0)
    elseif st.hold > now then
      -- The downstream asked for no more of the tenant's jobs until st.hold (see lease.lua):
      -- binding limit -2.
      if wait < 0 then wait, bind = st.hold - now, -2 end
      out[i] = 2
    else
      local s, b = slot(lims, ws, n, now, w)
      if s == now and wait < 0 then
        take(lims, ws, n, now, w, job)
        add_mark(st, job, now)
        out[i] = 0
      else
        if wait < 0 then wait, bind = s - now, b end
        out[i] = 2
      end
    end
  end
end

local r, rb = remaining(lims, sws or ws, n, now)
if wait < 0 then wait, bind = 0, rb end
if changed then raw = write_state(KEYS[1], st, lims, ws, n, now, redeem, pad) end
if schanged then write_state(KEYS[2], sst, lims, sws, n, now, SHADOW_REDEEM, pad) end
local expired = 0
if changed then expired = st.expired end
local vals = {wait, bind, r, expired}
for i = 1, k do vals[4 + i] = out[i] end
if shadow then
  for i = 1, k do vals[4 + k + i] = swait[i] or 0 end
end
if mirror == 1 and not shadow then
  raw = raw or ''
  return pack_ints(vals) .. struct.pack('<ll', now, #raw) .. raw
end
return pack_ints(vals)
