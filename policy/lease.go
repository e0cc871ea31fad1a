package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/admitter/admitter/bucket"
)

// LeaseLimiter is a Limiter that also releases and renews leases (see bucket.KindConcurrency):
// *bucket.Redis and *bucket.Memory implement it.
type LeaseLimiter interface {
	Release(ctx context.Context, req bucket.LeaseRequest) (bucket.LeaseResult, error)
	Renew(ctx context.Context, req bucket.LeaseRequest) (bucket.LeaseResult, error)
}

var (
	_ LeaseLimiter = (*bucket.Redis)(nil)
	_ LeaseLimiter = (*bucket.Memory)(nil)
	_ Charger      = (*bucket.Redis)(nil)
	_ Charger      = (*bucket.Memory)(nil)
)

// Charger is a Limiter that charges jobs stored late (see bucket.Memory.Charge).
type Charger interface {
	Charge(ctx context.Context, tenant string, plan *bucket.Plan, weight int64, late time.Duration, fence string) error
}

// Charge takes weight again from tenant's limits for jobs admitted and then stored downstream
// only `late` after (see bucket.Memory.Charge), in one limiter call bounded by the timeout, so
// that what their late arrival adds downstream is paid for by the decisions after it. Nothing
// is charged under a plan in shadow mode (it paces nothing) or by a limiter without Charge.
// fence, when not empty, is lowered in the same call (see Fence); charged reports whether the
// call was made (else the caller lowers fence itself).
func (p *Policy) Charge(ctx context.Context, tenant string, weight int64, late time.Duration, fence string) (charged bool, err error) {
	plan, err := p.plans.Load().Lookup(tenant)
	if err != nil {
		return false, err
	}
	c, ok := p.limiter.(Charger)
	if !ok || plan.Shadow || weight < 1 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return true, c.Charge(ctx, tenant, plan, min(weight, bucket.MaxCost), late, fence)
}

// Fencer is a Limiter with fences (see bucket.Memory.Fence).
type Fencer interface {
	Fence(ctx context.Context, tenant, id string, life time.Duration) error
	Unfence(ctx context.Context, tenant, id string) error
}

var (
	_ Fencer = (*bucket.Redis)(nil)
	_ Fencer = (*bucket.Memory)(nil)
)

// Fence raises the fence id on tenant, or extends it, to end life from now, in one limiter call
// bounded by the timeout: until it is lowered or ends, no job of the tenant is admitted (see
// bucket.Memory.Fence). A limiter without fences raises none.
func (p *Policy) Fence(ctx context.Context, tenant, id string, life time.Duration) error {
	f, ok := p.limiter.(Fencer)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return f.Fence(ctx, tenant, id, life)
}

// Unfence lowers the fence id on tenant, in one limiter call bounded by the timeout.
func (p *Policy) Unfence(ctx context.Context, tenant, id string) error {
	f, ok := p.limiter.(Fencer)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return f.Unfence(ctx, tenant, id)
}

// ErrNoLeases: the tenant's plan has no concurrency limit, so its jobs hold no lease to release
// or renew.
var ErrNoLeases = errors.New("policy: the plan has no concurrency limit")

// Release ends the lease of a job of tenant (the job is done) under the tenant's plan, charging
// or giving back the difference of its actual cost (bucket.NoCost: none), in one limiter call
// bounded by the timeout. A lease not held is no error: LeaseResult.Held says.
func (p *Policy) Release(ctx context.Context, tenant string, lease, cost int64) (bucket.LeaseResult, *bucket.Plan, error) {
	return p.lease(ctx, tenant, lease, cost, false)
}

// Renew moves the end of the lease of a job of tenant to its plan's lease from now.
func (p *Policy) Renew(ctx context.Context, tenant string, lease int64) (bucket.LeaseResult, *bucket.Plan, error) {
	return p.lease(ctx, tenant, lease, bucket.NoCost, true)
}

func (p *Policy) lease(ctx context.Context, tenant string, lease, cost int64, renew bool) (bucket.LeaseResult, *bucket.Plan, error) {
	plan, err := p.plans.Load().Lookup(tenant)
	if err != nil {
		return bucket.LeaseResult{}, nil, err
	}
	if !plan.Leases() {
		return bucket.LeaseResult{}, plan, fmt.Errorf("%w: plan %s of tenant %q", ErrNoLeases, plan.Name, tenant)
	}
	ll, ok := p.limiter.(LeaseLimiter)
	if !ok {
		return bucket.LeaseResult{}, plan, fmt.Errorf("policy: the limiter %T has no leases", p.limiter)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req := bucket.LeaseRequest{Tenant: tenant, Plan: plan, Lease: lease, Cost: cost}
	var res bucket.LeaseResult
	if renew {
		res, err = ll.Renew(ctx, req)
	} else {
		res, err = ll.Release(ctx, req)
	}
	if err != nil {
		if !errors.Is(err, bucket.ErrInvalidLease) && !errors.Is(err, bucket.ErrInvalidCost) {
			p.failed(err)
		}
		return res, plan, err
	}
	p.ok()
	return res, plan, nil
}
