package policy

import (
	"context"
	"fmt"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/wire"
)

// InspectTimeout bounds Inspect: reading a tenant's reservations scans Redis, which may take
// longer than a decision.
const InspectTimeout = 5 * time.Second

// Inspect reads tenant's state under its plan without changing it, and says how long a request
// of weight 1 would wait now and, when the tenant is paused, until when (PausedUntil). A
// *wire.RequestError refuses the tenant (unknown-tenant, invalid-tenant); any other error is the
// limiter's.
func (p *Policy) Inspect(ctx context.Context, tenant string) (wire.TenantState, error) {
	plan, err := p.plans.Load().Lookup(tenant)
	if err != nil {
		return wire.TenantState{}, wire.Refuse(wire.CodeUnknownTenant, "tenant %q has no plan and the plans set no default_plan", tenant)
	}
	ctx, cancel := context.WithTimeout(ctx, InspectTimeout)
	defer cancel()
	snap, err := p.limiter.Inspect(ctx, tenant, plan)
	if err != nil {
		if code, ok := wire.CodeOf(err); ok {
			return wire.TenantState{}, wire.Refuse(code, "tenant %q cannot be used: %v", tenant, err)
		}
		return wire.TenantState{}, fmt.Errorf("policy: inspect tenant %q: %w", tenant, err)
	}
	st := TenantState(tenant, plan, snap)
	if until, paused := p.PausedUntil(tenant); paused {
		until = until.UTC()
		st.PausedUntil = &until
	}
	return st, nil
}

// Pools reads every pool the plans name (their rules, what they hold, whom they serve).
func (p *Policy) Pools(ctx context.Context) ([]wire.PoolState, error) {
	ctx, cancel := context.WithTimeout(ctx, InspectTimeout)
	defer cancel()
	var out []wire.PoolState
	for _, pool := range p.plans.Load().Pools() {
		snap, err := p.limiter.InspectPool(ctx, pool)
		if err != nil {
			return out, fmt.Errorf("policy: inspect pool %s: %w", pool.Name, err)
		}
		out = append(out, poolState(pool, snap, 0))
	}
	return out, nil
}

// poolState is a pool's snapshot as the API tells it; share is the tenant's (0: no tenant's).
func poolState(pool *bucket.Pool, snap bucket.PoolSnapshot, share int64) wire.PoolState {
	s := wire.PoolState{Name: pool.Name, Rule: pool.Rule(), Concurrency: pool.Concurrency, Capacity: pool.Capacity,
		InFlight: snap.InFlight, Tokens: snap.Tokens, Waiting: snap.Waiting, WaitingShares: snap.WaitingShares, Share: share}
	if snap.DownstreamUntil > 0 {
		t := time.UnixMicro(snap.DownstreamUntil).UTC()
		s.DownstreamUntil = &t
	}
	if pool.Adaptive != nil {
		s.Limit, s.AdaptiveMin, s.LimitReason = snap.Limit, pool.Adaptive.Min, bucket.LimitWhyText(snap.LimitWhy)
		s.FloorMs, s.TimePerJobMs = float64(snap.Floor)/1000, float64(snap.TimePerJob)/1000
	}
	if pool.Breaker != nil {
		s.Breaker = bucket.BreakerName(snap.Breaker)
		if snap.BreakerUntil > 0 {
			t := time.UnixMicro(snap.BreakerUntil).UTC()
			s.BreakerUntil = &t
		}
		if snap.Breaker == bucket.BreakerHalfOpen {
			s.Probes = snap.Probes
		}
	}
	for _, pt := range snap.Tenants {
		s.Tenants = append(s.Tenants, wire.PoolTenant{Tenant: pt.Tenant, Share: pt.Share, Received: pt.Received, Waiting: pt.Waiting})
	}
	return s
}

// TenantState turns a snapshot of tenant's buckets under plan into what Inspect returns.
func TenantState(tenant string, plan *bucket.Plan, snap bucket.Snapshot) wire.TenantState {
	s := wire.TenantState{Tenant: tenant, Plan: plan.Name, Shadow: plan.Shadow, At: snap.At.UTC(), Reservations: snap.Reservations,
		Limits: make([]wire.LimitState, 0, len(snap.Limits))}
	if !snap.LatestSlot.IsZero() {
		t := snap.LatestSlot.UTC()
		s.LatestSlot = &t
	}
	if !snap.HeldUntil.IsZero() {
		t := snap.HeldUntil.UTC()
		s.HeldUntil = &t
	}
	if !snap.DownstreamUntil.IsZero() {
		t := snap.DownstreamUntil.UTC()
		s.DownstreamUntil = &t
	}
	if snap.Pool != nil && plan.Pool != nil {
		ps := poolState(plan.Pool, *snap.Pool, max(plan.Share, 1))
		s.Pool = &ps
	}
	var wait time.Duration
	for i, ls := range snap.Limits {
		l := plan.Limits[i]
		w := max(ls.OneFitsIn, 0)
		st := wire.LimitState{Limit: ls.Limit, Kind: l.Kind.String(), Rule: l.Rule(), Capacity: l.Capacity, Tokens: ls.Tokens, Used: ls.Used,
			FullInMs: ms(ls.FullIn), NextInMs: ms(ls.NextIn), WaitMs: wire.Millis(w)}
		switch l.Kind {
		case bucket.KindBucket:
			st.Rate, st.IntervalMs = l.Rate, ms(l.Interval)
		case bucket.KindQuota:
			t := snap.At.Add(ls.NextIn).UTC()
			st.ResetsAt = &t
		}
		s.Limits = append(s.Limits, st)
		if w > wait {
			wait, s.Limit = w, ls.Limit
		}
	}
	s.WaitMs = wire.Millis(wait)
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
