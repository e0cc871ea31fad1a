package bucket

import (
	"context"
	"fmt"
	"time"
)

// A Snapshot is a tenant's bucket state at one instant, for operators and tests.
type Snapshot struct {
	// At is the backend's clock when the state was read.
	At time.Time
	// Limits holds one entry per limit of the plan, in plan order; for a plan in shadow mode,
	// as its shadow state holds them (see BatchResult.ShadowWaits).
	Limits []LimitState
	// Reservations counts the slots booked by waiting jobs and not yet claimed (within their
	// grace). Their weight is already taken from the limits.
	Reservations int
	// LatestSlot is the latest slot booked, zero when there is none.
	LatestSlot time.Time
	// HeldUntil is until when the replica deciding the tenant's queue holds it (see Batch):
	// another replica admits none of its jobs before. Zero when none holds it.
	HeldUntil time.Time
	// Stored is the highest input sequence of the tenant whose forward was seen stored
	// downstream and may still be in the input (see Batch.Stored); 0 when none.
	Stored int64
	// DownstreamUntil is until when the downstream holds the tenant's forwards (a done
	// message's Admit-Retry-After; see Report). Zero when it does not.
	DownstreamUntil time.Time
	// Pool is the plan's pool and the tenants it serves lately (nil: the plan has none).
	Pool *PoolSnapshot
}

// LimitState is one limit's state in a Snapshot.
type LimitState struct {
	// Limit is the limit's name, or its index when unnamed.
	Limit string
	// Kind is the limit's kind.
	Kind Kind
	// Tokens is the whole weight the limit lets through now: a bucket's tokens; a window's or a
	// quota's limit minus what it counts now. Negative when slots booked ahead have taken more
	// than it holds (a debt paid back as time passes).
	Tokens int64
	// Used is what the limit counts against its capacity now: a bucket's capacity minus its
	// whole tokens; a window's takes still in the window; a quota's takes of the current period.
	// Takes booked ahead by waiting jobs count.
	Used int64
	// FullIn is how long until the limit lets its whole capacity through again (zero when it
	// does): a bucket full, a window's last take gone, a quota's last period with takes over.
	FullIn time.Duration
	// NextIn is how long until the limit next gives something back: a bucket's next whole token
	// (zero when full), a window's oldest take leaving it (zero when empty), a quota's period
	// ending (its reset).
	NextIn time.Duration
	// OneFitsIn is how long until a job of weight 1 fits this limit (zero when it fits now).
	OneFitsIn time.Duration
}

// snapshot computes a Snapshot from the limits' state at now (see load in lua/state.lua).
func (p *Plan) snapshot(now int64, ws []work) Snapshot {
	s := Snapshot{At: time.UnixMicro(now), Limits: make([]LimitState, len(p.Limits))}
	for i := range p.specs {
		sp := &p.specs[i]
		ls := LimitState{Limit: p.labels[i], Kind: sp.kind}
		var full, next, one int64
		if sp.kind == KindBucket {
			debt := max(ws[i].tat-now, 0)
			tokens := sp.span - debt
			// floor division: a partial token does not count, negative values round down too.
			q := tokens / sp.iv
			if tokens%sp.iv != 0 && tokens < 0 {
				q--
			}
			ls.Tokens, ls.Used = q, sp.cap-q
			full = debt
			if debt > 0 {
				next = debt - sp.span + (q+1)*sp.iv
			}
			one = max(debt+sp.iv-sp.span, 0)
		} else {
			log := ws[i].log
			u := used(log, now)
			ls.Tokens, ls.Used = sp.cap-u, u
			if len(log) > 0 {
				full, next = log[len(log)-1].death-now, log[0].death-now
			}
			if sp.kind == KindQuota {
				end := sp.lim.periodEnd(now)
				ls.Used, next = 0, end-now
				for _, e := range log {
					if e.death <= end {
						ls.Used += e.weight
					}
				}
			}
			one = logFit(log, sp.cap, now, 1) - now
		}
		ls.FullIn = time.Duration(full) * time.Microsecond
		ls.NextIn = time.Duration(next) * time.Microsecond
		ls.OneFitsIn = time.Duration(one) * time.Microsecond
		s.Limits[i] = ls
	}
	return s
}

// Inspect reads the tenant's state under plan without changing it.
func (m *Memory) Inspect(ctx context.Context, tenant string, plan *Plan) (Snapshot, error) {
	snap, err := m.inspectTenant(ctx, tenant, plan)
	if err == nil {
		snap.Pool, err = inspectPool(ctx, m, tenant, plan)
	}
	return snap, err
}

// inspectTenant reads the tenant's own state.
func (m *Memory) inspectTenant(_ context.Context, tenant string, plan *Plan) (Snapshot, error) {
	if err := checkTenant(tenant); err != nil {
		return Snapshot{}, err
	}
	sh, st, now := m.lock(tenant)
	defer sh.mu.Unlock()
	ls := st // the state whose limits are read: for a plan in shadow mode, its shadow state
	if plan.Shadow {
		ls = sh.tenants[shadowKey(tenant)]
		if ls != nil && ls.expiry <= now {
			ls = nil
		}
	}
	snap := plan.snapshot(now, sh.load(ls, plan, now, m.born()))
	if st != nil {
		snap.setQueue(st.ownerUntil, st.stored, st.hold)
	}
	if ls != nil {
		snap.addBooked(ls.booked, now, m.opts.SlotGrace.Microseconds())
	}
	return snap, nil
}

// Inspect reads the tenant's state under plan from Redis without changing it.
func (r *Redis) Inspect(ctx context.Context, tenant string, plan *Plan) (Snapshot, error) {
	snap, err := r.inspectTenant(ctx, tenant, plan)
	if err == nil {
		snap.Pool, err = inspectPool(ctx, r, tenant, plan)
	}
	return snap, err
}

// inspectTenant reads the tenant's own state.
func (r *Redis) inspectTenant(ctx context.Context, tenant string, plan *Plan) (Snapshot, error) {
	if err := checkTenant(tenant); err != nil {
		return Snapshot{}, err
	}
	if err := r.refreshBorn(ctx); err != nil {
		return Snapshot{}, fmt.Errorf("bucket: redis inspect of tenant %q: %w", tenant, err)
	}
	key := r.keys(tenant)
	if plan.Shadow {
		key = r.keys(tenant, shadowSuffix)
	}
	reply, err := r.run(ctx, r.inspect, func() (keys, args []string) {
		arg := append(packInts(nil, r.now(), r.born.at.Load(), int64(len(plan.Limits))), plan.packed...)
		arg = plan.calendars(arg, r.estimate(), r.reach)
		return key, []string{string(arg)}
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("bucket: redis inspect of tenant %q: %w", tenant, err)
	}
	now, held, stored, hold, ws, booked, err := decodeInspect(plan, reply)
	if err != nil {
		return Snapshot{}, fmt.Errorf("bucket: redis inspect of tenant %q: %w", tenant, err)
	}
	snap := plan.snapshot(now, ws)
	snap.setQueue(held, stored, hold)
	snap.addBooked(booked, now, r.grace)
	return snap, nil
}

// setQueue sets what the snapshot says of the tenant's queue: its owner's hold ends at held
// (µs, zero or past: none), stored, and the downstream's hold ends at hold (µs, likewise).
func (s *Snapshot) setQueue(held, stored, hold int64) {
	if held > s.At.UnixMicro() {
		s.HeldUntil = time.UnixMicro(held)
	}
	if hold > s.At.UnixMicro() {
		s.DownstreamUntil = time.UnixMicro(hold)
	}
	s.Stored = stored
}

// decodeInspect reads inspect.lua's reply: the server's time, until when the queue's owner
// holds it, stored, until when the downstream holds it, every limit's state, and the slots
// booked and not yet claimed.
func decodeInspect(p *Plan, reply []byte) (now, held, stored, hold int64, ws []work, booked []entry, err error) {
	vals := make([]int64, len(reply)/8)
	if len(reply)%8 != 0 || len(vals) < 5 {
		return 0, 0, 0, 0, nil, nil, fmt.Errorf("inspect reply of %d bytes", len(reply))
	}
	if err := unpackInts(reply, vals); err != nil {
		return 0, 0, 0, 0, nil, nil, err
	}
	now, held, stored, hold, vals = vals[0], vals[1], vals[2], vals[4], vals[5:]
	ws = make([]work, len(p.specs))
	for i := range p.specs {
		if len(vals) == 0 {
			return 0, 0, 0, 0, nil, nil, fmt.Errorf("inspect reply too short at limit %d", i)
		}
		if p.specs[i].kind == KindBucket {
			ws[i].tat, vals = vals[0], vals[1:]
			continue
		}
		k := vals[0]
		if k < 0 || int64(len(vals)) < 1+2*k {
			return 0, 0, 0, 0, nil, nil, fmt.Errorf("inspect reply: limit %d has %d entries in %d values", i, k, len(vals)-1)
		}
		for j := int64(0); j < k; j++ {
			ws[i].log = append(ws[i].log, entry{vals[1+2*j], vals[2+2*j]})
		}
		vals = vals[1+2*k:]
	}
	if len(vals) == 0 || vals[0] < 0 || int64(len(vals)) != 1+2*vals[0] {
		return 0, 0, 0, 0, nil, nil, fmt.Errorf("inspect reply: %d values where the booked slots should be", len(vals))
	}
	for j := int64(0); j < vals[0]; j++ {
		booked = append(booked, entry{vals[1+2*j], vals[2+2*j]})
	}
	return now, held, stored, hold, ws, booked, nil
}
