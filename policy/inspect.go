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
// of weight 1 would wait now. A *wire.RequestError refuses the tenant (unknown-tenant,
// invalid-tenant); any other error is the limiter's.
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
	return TenantState(tenant, plan, snap), nil
}

// TenantState turns a snapshot of tenant's buckets under plan into what Inspect returns.
func TenantState(tenant string, plan *bucket.Plan, snap bucket.Snapshot) wire.TenantState {
	s := wire.TenantState{Tenant: tenant, Plan: plan.Name, At: snap.At.UTC(), LaneOpen: snap.LaneOpen, Reservations: snap.Reservations,
		Limits: make([]wire.LimitState, 0, len(snap.Limits))}
	if !snap.LatestSlot.IsZero() {
		t := snap.LatestSlot.UTC()
		s.LatestSlot = &t
	}
	var wait time.Duration
	for i, ls := range snap.Limits {
		l := plan.Limits[i]
		// The limit holds one token once it is at most capacity-1 tokens from full.
		w := max(ls.FullIn-time.Duration(l.Capacity-1)*l.Interval, 0)
		s.Limits = append(s.Limits, wire.LimitState{Limit: ls.Limit, Capacity: l.Capacity, Rate: l.Rate, Tokens: ls.Tokens,
			FullInMs: float64(ls.FullIn) / float64(time.Millisecond), IntervalMs: float64(l.Interval) / float64(time.Millisecond), WaitMs: wire.Millis(w)})
		if w > wait {
			wait, s.Limit = w, ls.Limit
		}
	}
	s.WaitMs = wire.Millis(wait)
	return s
}
