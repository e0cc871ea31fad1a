package bucket

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"
	"unsafe"

	"github.com/admitter/admitter/wire"
)

// Leases. A plan with a concurrency limit (KindConcurrency) counts the weight of its tenant's jobs
// in flight: each job admitted takes a lease of its weight, by its lease id, that ends Lease after
// it was taken unless released first (Release: the job is done) or renewed (Renew: it still
// runs). A queued job's lease id is its Job.ID (its input sequence); a request decided by Decide
// has LeaseKey(JobID) (0 without a JobID: a lease that only ends). A job holds one lease at most:
// admitted again (after Options.Redeem), it takes a new one in place of the old.

// NoCost is LeaseRequest.Cost when the job's actual cost is not known: nothing is reconciled.
const NoCost = -1

// MaxCost bounds LeaseRequest.Cost, as weights are bounded by the API (2^40).
const MaxCost = 1 << 40

// A LeaseRequest names a job's lease.
type LeaseRequest struct {
	// Tenant names the bucket set; non-empty, without '{' or '}'.
	Tenant string
	// Plan is the tenant's plan (its concurrency limits hold the leases).
	Plan *Plan
	// Lease is the job's lease id: 1 to 2^53-1 (see the package's note on leases).
	Lease int64
	// Cost (Release only) is what the job really cost, 0 to MaxCost, or NoCost. When it differs
	// from the weight the lease was taken with, the difference is charged to (or given back by)
	// the plan's other limits at once, atomically with the release (see lua/lease.lua for each
	// kind). Only a lease still held is reconciled: a repeated release charges nothing.
	Cost int64
	// Weight is the job's weight (the forward's Admit-Weight; 0 reads as 1): what a start takes
	// again for a lease that ended, and what a release or renewal of a lease the state lost
	// names of the slots it counts as forgotten (see Start and lua/lease.lua).
	Weight int64
	// Report (Release only) is what the job's worker said of it.
	Report Report
}

// A Report is what a job's worker says of it when it is done (the done message's
// Admit-Outcome, Admit-Retry-After and Admit-Retry-Scope). The zero Report is a job that went
// well.
type Report struct {
	// Outcome is how the job went downstream.
	Outcome DownstreamOutcome `json:"outcome,omitempty"`
	// RetryAfter is how long from now the downstream asked for no more jobs (0: it did not):
	// the tenant's forwards wait until then (PoolScope: every tenant's of the plan's pool),
	// later if they already wait longer. Whole microseconds, at most a day.
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	PoolScope  bool          `json:"pool_scope,omitempty"`
}

// MaxRetryAfter bounds Report.RetryAfter.
const MaxRetryAfter = 24 * time.Hour

// poolHold is the µs the pool's forwards are held for (0: none).
func (r Report) poolHold() int64 {
	if !r.PoolScope {
		return 0
	}
	return r.RetryAfter.Microseconds()
}

// tenantHold is the µs the tenant's own forwards are held for (0: none).
func (r Report) tenantHold() int64 {
	if r.PoolScope {
		return 0
	}
	return r.RetryAfter.Microseconds()
}

// A DownstreamOutcome is how a job went downstream.
type DownstreamOutcome uint8

const (
	// DownstreamOK: the job was done.
	DownstreamOK DownstreamOutcome = iota
	// DownstreamFailed: the job failed for its own reasons.
	DownstreamFailed
	// DownstreamOverloaded: the downstream refused the job, or timed out, because it was
	// overloaded.
	DownstreamOverloaded
	numDownstreamOutcomes
)

var downstreamNames = [...]string{wire.OutcomeOK, wire.OutcomeFailed, wire.OutcomeOverloaded}

// String is the outcome as the done message's Admit-Outcome says it: ok, failed, overloaded.
func (o DownstreamOutcome) String() string {
	if o < numDownstreamOutcomes {
		return downstreamNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// ParseDownstreamOutcome is the DownstreamOutcome String names.
func ParseDownstreamOutcome(s string) (DownstreamOutcome, error) {
	for i, n := range downstreamNames {
		if n == s {
			return DownstreamOutcome(i), nil
		}
	}
	return 0, fmt.Errorf("bucket: no outcome %q (want ok, failed or overloaded)", s)
}

// LeaseResult is Release's or Renew's answer.
type LeaseResult struct {
	// Held reports whether the lease was held: released or renewed now. False when it was never
	// taken, already released, or ended: nothing changed.
	Held bool
	// Weight is the weight the lease was taken with (0 when not held).
	Weight int64
	// Ends is, for Renew, when the renewed lease ends (zero when not held).
	Ends time.Time
	// LeasesExpired counts the tenant's leases that this call found ended unreleased, and
	// dropped.
	LeasesExpired int64
	// Wakes names the tenants whose queues the pool's freed capacity is for (the waiters whose
	// turn it is): their queues may go now.
	Wakes []string
	// PoolOnly reports that only the plan's pool held the lease: the tenant's own limits
	// (none of them a concurrency limit) freed nothing, so its queue has no more reason to go
	// now than any waiter's (Wakes names it when it is its turn).
	PoolOnly bool
	// Wait is, for a Start not held (its slots are taken), how long until they may be free.
	Wait time.Duration
	// Ran is, for a Release of a lease held, the time from the lease's take (the job's admission,
	// or a start that took its slots again) to its release, on the limiter's clock: the job's
	// time downstream. Zero otherwise.
	Ran time.Duration
	// Pool is the plan's pool as the call left it (nil: no pool, or the pool was not asked).
	Pool *PoolState
	// Local: decided on this replica's copy while Redis was unreachable (see Fallback).
	Local bool
}

// LeaseKey is the lease id of a request decided by Decide with this JobID: a 52-bit hash, never
// 0; 0 for an empty JobID (a lease nobody can release).
func LeaseKey(jobID string) int64 {
	if jobID == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write(unsafe.Slice(unsafe.StringData(jobID), len(jobID)))
	if k := int64(h.Sum64() & (1<<52 - 1)); k != 0 {
		return k
	}
	return 1
}

// lease modes of lua/lease.lua.
const (
	leaseRelease = 0
	leaseRenew   = 1
	leaseStart   = 2
)

// weight is the request's weight, 1 when unset.
func (l *LeaseRequest) weight() int64 { return max(l.Weight, 1) }

// check validates a lease request before any state is touched.
func (l *LeaseRequest) check(mode int) error {
	if l.Plan == nil {
		return fmt.Errorf("bucket: tenant %q: no plan given", l.Tenant)
	}
	if err := checkTenant(l.Tenant); err != nil {
		return err
	}
	if l.Lease < 1 || l.Lease > maxJobID {
		return fmt.Errorf("%w: lease %d, want 1 to 2^53-1", ErrInvalidLease, l.Lease)
	}
	if mode != leaseRelease && l.Cost != NoCost && l.Cost != 0 {
		return fmt.Errorf("bucket: a renewal or a start carries no cost, got %d", l.Cost)
	}
	if l.Weight < 0 || l.Weight > MaxCost {
		return fmt.Errorf("%w: weight %d, want 1 to 2^40", ErrInvalidWeight, l.Weight)
	}
	if mode == leaseRelease && (l.Cost < NoCost || l.Cost > MaxCost) {
		return fmt.Errorf("%w: cost %d, want 0 to 2^40", ErrInvalidCost, l.Cost)
	}
	if r := l.Report; r.RetryAfter < 0 || r.RetryAfter > MaxRetryAfter || r.Outcome >= numDownstreamOutcomes ||
		(mode != leaseRelease && r != (Report{})) {
		return fmt.Errorf("bucket: report %+v: want an outcome, a retry after of 0 to 24h, and a release", r)
	}
	return nil
}

// Release ends the job's lease now (the job is done), reconciling its cost (LeaseRequest.Cost),
// and frees its pool slot.
func (m *Memory) Release(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	return leasePooled(ctx, m, req, leaseRelease, m.leaseCall)
}

// Renew moves the end of the job's lease, and of its pool slot, to their lease from now (the
// job still runs).
func (m *Memory) Renew(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	req.Cost = NoCost
	return leasePooled(ctx, m, req, leaseRenew, m.leaseCall)
}

// Start renews the job's lease as its worker begins it, or takes its slots again when the
// lease ended while the job waited for a worker: see Limiter.Start.
func (m *Memory) Start(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	req.Cost = NoCost
	return leasePooled(ctx, m, req, leaseStart, m.leaseCall)
}

// leaseCall is lease with the signature leasePooled takes.
func (m *Memory) leaseCall(_ context.Context, req LeaseRequest, mode int) (LeaseResult, error) {
	return m.lease(req, mode)
}

func (m *Memory) lease(req LeaseRequest, mode int) (LeaseResult, error) {
	if err := req.check(mode); err != nil {
		return LeaseResult{}, err
	}
	sh, st, now := m.lock(req.Tenant)
	defer sh.mu.Unlock()
	found, weight, expired, ends, wait, ran := sh.lease(now, m.born(), st, &req, mode, m.opts)
	return leaseResult(found, weight, expired, ends, wait, ran), nil
}

func leaseResult(found, weight, expired, ends, wait, ran int64) LeaseResult {
	res := LeaseResult{Held: found == 1, Weight: weight, LeasesExpired: expired, Wait: time.Duration(wait) * time.Microsecond,
		Ran: time.Duration(ran) * time.Microsecond}
	if ends > 0 {
		res.Ends = time.UnixMicro(ends)
	}
	return res
}

// lease mirrors lua/lease.lua step by step; the differential test holds them together.
func (sh *memShard) lease(now, born int64, st *memState, req *LeaseRequest, mode int, o Options) (found, weight, expired, ends, wait, ran int64) {
	p := req.Plan
	ws := sh.load(st, p, now, born)
	jw := req.weight()
	var taken int64
	held := false
	for i := range p.specs {
		if p.specs[i].kind != KindConcurrency {
			continue
		}
		if j := ws[i].leaseFind(req.Lease); j >= 0 {
			e, t := ws[i].leaseDrop(j)
			if mode != leaseRelease {
				ends = now + p.specs[i].span
				ws[i].leasePut(ends, e.weight, t)
			}
			found, weight, taken, held = 1, e.weight, t.at, true
		} else if mode != leaseStart {
			if z := ws[i].leaseFind(0); z >= 0 {
				e, t := ws[i].leaseDrop(z)
				if e.weight > jw {
					ws[i].leasePut(e.death, e.weight-jw, t)
				}
				if mode == leaseRenew {
					ends = now + p.specs[i].span
					ws[i].leasePut(ends, jw, leaseTag{req.Lease, now})
				}
				found, weight = 1, jw
			}
		}
	}
	changed := false // the state changed though no lease was found
	if !held && mode == leaseRelease && p.concurrent && st != nil && st.outage != 0 && len(st.released) < maxReported {
		st.released, changed = append(st.released, req.Lease), true // a copy's (see Fallback)
	}
	if h := req.Report.tenantHold(); mode == leaseRelease && h > 0 && now+h > st.holdAt() {
		if st == nil {
			st = &memState{}
		}
		st.hold, changed = now+h, true
	}
	if found == 0 && mode == leaseStart {
		fits := true
		for i := range p.specs {
			sp := &p.specs[i]
			if sp.kind != KindConcurrency {
				continue
			}
			if s := logFit(ws[i].log, sp.cap, now, jw); s > now || used(ws[i].log, now)+jw > sp.cap {
				fits = false
				wait = max(wait, s-now)
			}
		}
		if fits {
			for i := range p.specs {
				if p.specs[i].kind == KindConcurrency {
					ends = now + p.specs[i].span
					ws[i].leasePut(ends, jw, leaseTag{req.Lease, now})
				}
			}
			found, weight = 1, jw
		}
	}
	if found == 0 {
		if changed {
			sh.store(req.Tenant, st, p, ws, now, o)
		}
		return 0, 0, 0, 0, wait, 0
	}
	if d := req.Cost - weight; held && mode == leaseRelease && req.Cost >= 0 && d != 0 {
		p.reconcile(ws, now, taken, d)
	}
	if st == nil {
		st = &memState{}
	}
	sh.store(req.Tenant, st, p, ws, now, o)
	if held && mode == leaseRelease {
		ran = max(now-taken, 0)
	}
	return 1, weight, sh.expired, ends, 0, ran
}

// chargeLate takes w again for jobs that reached downstream late µs after their admission, at
// now (lua/state.lua's charge_late): Batch.LateWeight, and a job redeemed Options.Late or more
// after its admission.
func (p *Plan) chargeLate(ws []work, now, w, late int64) {
	for i := range p.specs {
		sp := &p.specs[i]
		switch sp.kind {
		case KindBucket:
			ws[i].tat = max(ws[i].tat, now) + min(late, w*sp.iv)
		case KindWindow, KindQuota:
			ws[i].log = logAdd(ws[i].log, sp.death(now), w)
		}
	}
}

// reconcile charges d more (d > 0) or gives -d back (d < 0) on every limit but the concurrency
// ones, for a job taken at `taken`, at now (see lua/lease.lua).
func (p *Plan) reconcile(ws []work, now, taken, d int64) {
	for i := range p.specs {
		sp := &p.specs[i]
		switch sp.kind {
		case KindBucket:
			// a tat as loaded is never before now: more is taken from there, what is given back
			// never makes the bucket more than full
			ws[i].tat = max(ws[i].tat+d*sp.iv, now)
		case KindWindow, KindQuota:
			if d > 0 {
				ws[i].log = logAdd(ws[i].log, sp.death(now), d)
				continue
			}
			death := sp.death(taken)
			for j, e := range ws[i].log {
				if e.death == death {
					if back := min(-d, e.weight); back == e.weight {
						ws[i].log = append(ws[i].log[:j], ws[i].log[j+1:]...)
					} else {
						ws[i].log[j].weight -= back
					}
					break
				}
			}
		}
	}
}

// Release ends the job's lease now (the job is done), reconciling its cost (LeaseRequest.Cost),
// in one script call, and frees its pool slot in another. A call that fails or times out may
// have run: asking again is harmless (the lease is no longer held; nothing is charged twice).
func (r *Redis) Release(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	return leasePooled(ctx, r, req, leaseRelease, r.leaseCall)
}

// Renew moves the end of the job's lease, and of its pool slot, to their lease from now (the
// job still runs).
func (r *Redis) Renew(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	req.Cost = NoCost
	return leasePooled(ctx, r, req, leaseRenew, r.leaseCall)
}

// Start renews the job's lease as its worker begins it, or takes its slots again when the
// lease ended while the job waited for a worker: see Limiter.Start.
func (r *Redis) Start(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	req.Cost = NoCost
	return leasePooled(ctx, r, req, leaseStart, r.leaseCall)
}

// leaseCall runs lua/lease.lua in mode.
func (r *Redis) leaseCall(ctx context.Context, req LeaseRequest, mode int) (LeaseResult, error) {
	if err := req.check(mode); err != nil {
		return LeaseResult{}, err
	}
	p := req.Plan
	if err := r.refreshBorn(ctx); err != nil {
		return LeaseResult{}, fmt.Errorf("bucket: redis lease of tenant %q: %w", req.Tenant, err)
	}
	key := r.keys(req.Tenant)
	reply, err := r.run(ctx, r.lease, func() (keys, args []string) {
		arg := make([]byte, 0, 8*10+len(p.packed)+p.calendarsLen())
		arg = packInts(arg, r.now(), int64(mode), req.Lease, req.Cost, req.weight(), r.redeem, r.pad, r.born.at.Load(), req.Report.tenantHold(), int64(len(p.Limits)), r.markerTag())
		arg = p.calendars(append(arg, p.packed...), r.estimate(), r.reach)
		return key, []string{unsafe.String(&arg[0], len(arg))}
	})
	if err != nil {
		return LeaseResult{}, fmt.Errorf("bucket: redis lease of tenant %q: %w", req.Tenant, err)
	}
	var v [6]int64
	if err := unpackInts(reply, v[:]); err != nil {
		return LeaseResult{}, fmt.Errorf("bucket: redis lease of tenant %q: %w", req.Tenant, err)
	}
	return leaseResult(v[0], v[1], v[2], v[3], v[4], v[5]), nil
}
