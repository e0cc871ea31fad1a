package policy

import (
	"context"
	"errors"
	"fmt"

	"github.com/admitter/admitter/bucket"
)

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
	ll := p.limiter
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
