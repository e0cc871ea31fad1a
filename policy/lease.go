package policy

import (
	"context"
	"errors"
	"fmt"

	"github.com/admitter/admitter/bucket"
)

// ErrNoLeases: the tenant's plan has no concurrency limit (nor its pool), so its jobs hold no
// lease to renew or start.
var ErrNoLeases = errors.New("policy: the plan has no concurrency limit")

// A LeaseOp is what a lease message asks: the job is done (release), still runs (renew), or is
// about to begin (start).
type LeaseOp int

const (
	LeaseRelease LeaseOp = iota
	LeaseRenew
	LeaseStart
)

// Lease releases, renews or starts the lease of a job of tenant under the tenant's plan (see
// bucket.Limiter's verbs), in one limiter call bounded by the timeout. weight is the job's (0:
// 1), used for a lease the limiter does not hold (lost with Redis, or ended before a start); cost
// (release only) is its actual cost (bucket.NoCost: none), whose difference is charged or given
// back; rep (release only) what the worker said of the job. A lease not held is no error:
// LeaseResult.Held says.
//
// A plan without leases (Plan.Leases false) takes no lease to renew or start (ErrNoLeases), but
// its jobs are done too: a release holds the tenant's forwards, or its pool's, as rep's
// RetryAfter asks, and is otherwise answered not held without a limiter call. Its cost is not
// reconciled: only a lease records what a job was charged, and ends once.
func (p *Policy) Lease(ctx context.Context, op LeaseOp, tenant string, lease, weight, cost int64, rep bucket.Report) (bucket.LeaseResult, *bucket.Plan, error) {
	plan, err := p.plans.Load().Lookup(tenant)
	if err != nil {
		return bucket.LeaseResult{}, nil, err
	}
	if !plan.Leases() && op != LeaseRelease {
		return bucket.LeaseResult{}, plan, fmt.Errorf("%w: plan %s of tenant %q", ErrNoLeases, plan.Name, tenant)
	}
	if !plan.Leases() && rep.RetryAfter == 0 {
		return bucket.LeaseResult{}, plan, nil // nothing to hold, no lease to end
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req := bucket.LeaseRequest{Tenant: tenant, Plan: plan, Lease: lease, Cost: cost, Weight: weight, Report: rep}
	var res bucket.LeaseResult
	switch op {
	case LeaseRenew:
		req.Cost, req.Report = bucket.NoCost, bucket.Report{}
		res, err = p.limiter.Renew(ctx, req)
	case LeaseStart:
		req.Cost, req.Report = bucket.NoCost, bucket.Report{}
		res, err = p.limiter.Start(ctx, req)
	default:
		res, err = p.limiter.Release(ctx, req)
	}
	if err != nil {
		if !errors.Is(err, bucket.ErrInvalidLease) && !errors.Is(err, bucket.ErrInvalidCost) && !errors.Is(err, bucket.ErrInvalidWeight) {
			p.failed(err)
		}
		return res, plan, err
	}
	p.ok(res.Local)
	return res, plan, nil
}

// Release ends the lease of a job of tenant (the job is done): Lease with LeaseRelease.
func (p *Policy) Release(ctx context.Context, tenant string, lease, cost int64) (bucket.LeaseResult, *bucket.Plan, error) {
	return p.Lease(ctx, LeaseRelease, tenant, lease, 0, cost, bucket.Report{})
}

// Renew moves the end of the lease of a job of tenant to its plan's lease from now: Lease with
// LeaseRenew.
func (p *Policy) Renew(ctx context.Context, tenant string, lease int64) (bucket.LeaseResult, *bucket.Plan, error) {
	return p.Lease(ctx, LeaseRenew, tenant, lease, 0, bucket.NoCost, bucket.Report{})
}
