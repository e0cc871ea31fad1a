-- admitter: decide a batch of one tenant's queued jobs, in order, in one call (see state.lua for
-- the tenant's state).
--
-- Nothing is booked for the future: a job is charged when it is admitted, at the server's time,
-- so the times at which jobs are admitted are themselves paced (in any interval of length t, at
-- most C + r·t per bucket, at most the limit per window or calendar period), whatever happened
-- before: a crash, a replica joining, a slot passed
-- while nobody was there. A job that cannot go now is told how long until its weight fits.
--
-- Modes:
--   0 ingest  jobs as they arrive. While the tenant's lane is open (jobs of its are waiting in
--             it), every job is moved to the lane behind them (outcome 2): first in, first out.
--             Otherwise a job is admitted if it fits now; the first that does not is moved to the
--             lane and opens it, and so is every job after it.
--   1 lane    the head of the lane: admitted in order while they fit; the first that does not
--             fits after the wait in the reply (outcome 4), and so does every job after it.
--   3 hold    ingest while the tenant is paused: every job is moved to the lane (opening it),
--             none is admitted.
--   2 close   the lane is empty up to input sequence `through`: close it, unless a job was moved
--             to it after that sequence and less than `quiet` ago (its move may still be under
--             way). The reply's open flag says which.
--   4, 5      ingest and lane under a plan in shadow mode (trialled, not enforced): every job
--             that ingest or lane would decide is admitted now (outcome 0), and the plan's
--             decision is computed on the tenant's shadow state (KEYS[2]) instead: the job
--             takes the earliest slot at which its weight fits every limit after the jobs
--             before it, as it would have waited, and its wait to that slot is in the reply.
--             A slot further than `through` (the horizon, µs) is not taken, and the wait is
--             given as the horizon: at least that long. While the lane is open (jobs that
--             waited before the plan became shadow), ingest still moves jobs behind them, so
--             that the tenant's order holds; the lane then lets them all go.
--
-- Fences (modes 0 and 1): while a fence of the tenant stands (KEYS[2], see fence.lua: forwards
-- decided earlier are not yet confirmed stored), no job is admitted: ingest moves them to the
-- lane, the lane's head does not fit yet; the reply's wait is until the last fence's end and its
-- binding limit is -1. A job admitted before (outcome 1) is still answered so.
--
-- Idempotency: a job decided less than `redeem` ago is answered as it was (outcomes 1 and 3) and
-- charged nothing, but for an admission 100 ms (LATE) or more ago: its forward reaches
-- downstream only now, beside what the limits refilled since, so that is taken back
-- (charge_late, as for a store confirmed late) and its admission becomes now; a job asked
-- about later is decided afresh. That is what makes a retried call
-- harmless (a call that timed out may have run), and what makes a crash cost capacity rather
-- than a burst: a job admitted by a replica that died before forwarding it is charged again when
-- another replica forwards it later.
--
-- KEYS[1]  the tenant's state
-- KEYS[2]  modes 4 and 5: the tenant's shadow state (the same layout); modes 0 and 1, when
--          given: the tenant's fences (see fence.lua)
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), mode, redeem (µs), quiet (µs),
--          through (input sequence, mode 2), k jobs, n limits, extra key life (ms, 0 in
--          production), born (µs, see load), then k × (job id, weight), then the plan's n
--          limits and calendars (see read_limits).
--
-- A concurrency limit takes a lease for each job admitted, its id the job's (see lease.lua).
--
-- Reply: packed int64s {wait (µs), binding limit (0-based; -1: a fence), remaining, lane open (0/1), leases
-- expired (ended unreleased, dropped from the state by this call), then one outcome per job}:
-- 0 admitted, 1 admitted before (redeemed, nothing charged), 2 moved to the lane, 3 moved to
-- the lane before, 4 not yet (lane mode). wait and the binding limit concern the
-- first job not admitted (0 when all were); otherwise the limit holding the fewest tokens.
-- Modes 4 and 5 add one value per job: its shadow wait (µs; 0 when it fitted at once or was not
-- decided here), and remaining and the binding limit are the shadow state's.
--
-- Redis commands: TIME, GET, ZRANGE (the fences), and one SET ... PX or DEL.
local arg = ARGV[1]
local now, mode, redeem, quiet, through, k, n, pad, born = struct.unpack('<lllllllll', arg)
if now == 0 then now = server_now() end
local pos = 73
local jid, jw = {}, {}
for i = 1, k do jid[i], jw[i], pos = struct.unpack('<ll', arg, pos) end
local lims = read_limits(arg, pos, n)
check_calendars(lims, n, now)
local st = read_state(redis.call('GET', KEYS[1]), lims, n, now)
local ws = load(st, lims, n, now, born)

local out = {}
local wait, bind = -1, 0
local open = st.enq > st.done
local changed = false

local shadow, sst, sws, swait, schanged = false, nil, nil, {}, false
if mode == 4 or mode == 5 then
  shadow, mode = true, mode - 4
  sst = read_state(redis.call('GET', KEYS[2]), lims, n, now)
  sws = load(sst, lims, n, now, born)
end

local fenced = 0 -- when the last fence ends
if not shadow and (mode == 0 or mode == 1) and KEYS[2] then fenced = fence_end(KEYS[2], now) end

if mode == 2 then
  if open and (st.enq <= through or now - st.enq_at > quiet) then
    st.done = st.enq
    open = false
    changed = true
  end
else
  local moving = mode == 3 -- ingest: every job from here on goes to the lane
  if mode == 3 then mode = 0 end
  for i = 1, k do
    local job, w = jid[i], jw[i]
    local at = find_mark(st, job, mode == 1) -- the lane asks only whether it was admitted
    if at and math.abs(at) + redeem < now then at = nil end
    if at and at > 0 then
      out[i] = 1
      if not shadow and now - at >= LATE then
        -- Admitted by a call whose answer was lost, forwarded only now: charged for what the
        -- limits gave since (see charge_late), and its admission is now.
        charge_late(lims, ws, n, now, w, now - at)
        add_mark(st, job, now)
        changed = true
      end
    elseif mode == 0 and at and at < 0 then
      out[i], moving = 3, true
    elseif mode == 0 and (open or moving) then
      out[i] = 2
    elseif shadow then
      out[i], swait[i] = 0, 0
      local sat = find_mark(sst, job)
      if sat and sat + redeem >= now then
        out[i], swait[i] = 1, math.max(sat - now, 0)
      else
        local s = slot(lims, sws, n, now, w)
        if s - now <= through then
          take(lims, sws, n, s, w, job)
          add_mark(sst, job, s)
          schanged = true
        end
        swait[i] = math.min(s - now, through)
      end
    elseif fenced > 0 then
      if wait < 0 then wait, bind = fenced - now, -1 end
      if mode == 0 then out[i], moving = 2, true else out[i] = 4 end
    else
      local s, b = slot(lims, ws, n, now, w)
      if s == now and wait < 0 then
        take(lims, ws, n, now, w, job)
        add_mark(st, job, now)
        out[i], changed = 0, true
      else
        if wait < 0 then wait, bind = s - now, b end
        if mode == 0 then out[i], moving = 2, true else out[i] = 4 end
      end
    end
    if out[i] == 2 then
      add_mark(st, job, -now)
      if job > st.enq then st.enq = job end
      st.enq_at, open, changed = now, true, true
    end
  end
end

local r, rb = remaining(lims, sws or ws, n, now)
if wait < 0 then wait, bind = 0, rb end
if changed then write_state(KEYS[1], st, lims, ws, n, now, redeem, 2 * quiet, pad) end
if schanged then write_state(KEYS[2], sst, lims, sws, n, now, redeem, 0, pad) end
local o = 0
if open then o = 1 end
local expired = 0
if changed then expired = st.expired end
local vals = {wait, bind, r, o, expired}
for i = 1, k do vals[5 + i] = out[i] end
if shadow then
  for i = 1, k do vals[5 + k + i] = swait[i] or 0 end
end
return pack_ints(vals)
