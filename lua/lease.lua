-- admitter: release, renew or start a job's lease on the tenant's concurrency limits, and
-- reconcile its cost (see state.lua for the tenant's state).
--
-- A concurrency limit counts the weight of the jobs in flight: admit.lua (and decide.lua) take a
-- lease for each job admitted, by the job's lease id, dying `lease` µs later. This script ends a
-- lease before that (release: the job is done), moves its end to now + lease (renew: the job
-- still runs), or, when a worker is about to begin the job, renews it, or takes it again if it
-- ended while the job waited for a worker and the slots are free now (start; otherwise nothing
-- changes and the reply says how long until they may be). A lease that is not held (never taken,
-- released before, or ended) is not found: nothing changes, so a repeated release or renewal is
-- harmless.
--
-- Forgotten slots. While a limit counts the slots Redis forgot (a lease of id 0, see load), a
-- release or a renewal of a lease it does not know is a job that was running when the state was
-- lost, reporting: its weight (the message's) leaves the forgotten slots, and a renewed job holds
-- a lease of its own again. So the slots are known again as soon as the running jobs report,
-- however long the lease.
--
-- Reconciliation: a release with a cost c (the job's actual weight) charges the difference
-- c - w to the plan's other limits, w being the weight the lease was taken with, at now:
--   bucket  c > w: the bucket takes c - w more tokens (it may go into debt: the tenant waits the
--           longer); c < w: it gets w - c tokens back, never beyond full.
--   window  c > w: a take of c - w at now, counted one window; c < w: w - c comes off the take
--           the job was admitted with (at most its weight), if it is still in the window.
--   quota   c > w: c - w more this period; c < w: w - c comes off the job's take if its period
--           is the current one (a period over is not reopened).
-- The reconciliation is applied only with a lease that was held: its weight is known, and
-- releasing it makes a repeated done message charge nothing.
--
-- Retry-After: a release with hold > 0 (the done message's Admit-Retry-After, in µs from now)
-- holds the tenant's forwards until now + hold, or later if they already wait longer (the
-- state's hold: see admit.lua), whether the lease was held or not (the downstream said so).
--
-- KEYS[1]  the tenant's state
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), mode (0 release, 1 renew, 2 start),
--          lease id, cost (-1: none), the job's weight (for a lease not held), redeem (µs), extra
--          key life (ms), born (µs, see load), hold (µs, release: 0 for none), n limits, the
--          memory marker's tag (-1: none; see memory_of), then the plan's limits and calendars (see
--          read_limits).
--
-- Reply: packed int64s {found (0/1), the lease's weight (0 when not found), leases expired
-- (ended unreleased, dropped from the state by this call), the lease's new end (µs, renew and
-- start), for a start not found the wait (µs) until its slots may be free, and for a release of
-- a lease held the time from its take to now (µs: the job's time downstream)}.
--
-- Redis commands: TIME, GET, and at most one SET ... PX or DEL.
local arg = ARGV[1]
local now, mode, id, cost, jw, redeem, pad, born, hold, n, mtag = struct.unpack('<lllllllllll', arg)
if now == 0 then now = server_now() end
memory_of(KEYS[1], false, mtag, born)
local lims = read_limits(arg, 89, n)
check_calendars(lims, n, now)
local st = read_state(redis.call('GET', KEYS[1]), lims, n, now)
local ws = load(st, lims, n, now, born)

local found, weight, taken, ends, held, wait = 0, 0, 0, 0, false, 0
for i = 1, n do
  if lims[i].kind == CONC then
    local j = lease_find(ws, i, id)
    if j then
      local w, at = lease_drop(ws, i, j)
      if mode ~= 0 then
        ends = now + lims[i].b
        lease_put(ws, i, ends, w, id, at)
      end
      found, weight, taken, held = 1, w, at, true
    elseif mode ~= 2 then
      local z = lease_find(ws, i, 0)
      if z then
        local zd = ws[i][z]
        local zw, zat = lease_drop(ws, i, z)
        if zw > jw then lease_put(ws, i, zd, zw - jw, 0, zat) end
        if mode == 1 then
          ends = now + lims[i].b
          lease_put(ws, i, ends, jw, id, now)
        end
        found, weight = 1, jw
      end
    end
  end
end
if found == 0 and mode == 2 then
  local fits = true
  for i = 1, n do
    if lims[i].kind == CONC then
      local s = log_fit(ws[i], lims[i].a, now, jw)
      if s > now or used(ws[i], now) + jw > lims[i].a then
        fits = false
        if s - now > wait then wait = s - now end
      end
    end
  end
  if fits then
    for i = 1, n do
      if lims[i].kind == CONC then
        ends = now + lims[i].b
        lease_put(ws, i, ends, jw, id, now)
      end
    end
    found, weight = 1, jw
  end
end
local held_more = mode == 0 and hold > 0 and now + hold > st.hold
if held_more then st.hold = now + hold end
if found == 0 then
  if held_more then write_state(KEYS[1], st, lims, ws, n, now, redeem, pad) end
  return struct.pack('<llllll', 0, 0, 0, 0, wait, 0)
end

if held and mode == 0 and cost >= 0 and cost ~= weight then
  local d = cost - weight
  for i = 1, n do
    local l = lims[i]
    if l.kind == BUCKET then
      if d > 0 then
        local t = ws[i]
        if t < now then t = now end
        ws[i] = t + d * l.b
      else
        local t = ws[i] + d * l.b
        if t < now then t = now end
        ws[i] = t
      end
    elseif l.kind == WINDOW or l.kind == QUOTA then
      if d > 0 then
        log_add(ws[i], death(l, now), d)
      else
        local log, dt = ws[i], death(l, taken)
        for j = 1, #log, 2 do
          if log[j] == dt then
            local back = math.min(-d, log[j + 1])
            if back == log[j + 1] then
              table.remove(log, j)
              table.remove(log, j)
            else
              log[j + 1] = log[j + 1] - back
            end
            break
          end
        end
      end
    end
  end
end
write_state(KEYS[1], st, lims, ws, n, now, redeem, pad)
local ran = 0
if held and mode == 0 then ran = math.max(now - taken, 0) end
return struct.pack('<llllll', 1, weight, st.expired, ends, 0, ran)
