package bucket

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/admitter/admitter/lua"
	"github.com/redis/rueidis"
)

// Pools. A Pool is capacity downstream that the tenants of every plan naming it share (plans
// file: pools:, and a plan's pool: and share:): at most Concurrency weighted jobs in flight, each
// holding a slot from its forward until its done message releases it (the release paths of a
// concurrency limit, see leases) or Lease after, and/or a bucket of Capacity refilling at Rate
// (the downstream's own rate). A job is forwarded only when its tenant's plan and its pool both
// let it go.
//
// When the pool is the bottleneck, what it frees goes to the tenants that wait, in proportion to
// their plans' shares, on cost: a job of weight 5 uses 5 of its tenant's share (start-time fair
// queuing: every tenant's jobs go in the order of their start tags, whoever asks first; see
// lua/pool.lua). A tenant with nothing waiting leaves its share to the others and
// banks none of it; a tenant never exceeds its own plan; the share is the tenant's, whatever
// subjects its jobs use. Capacity that frees is reserved for the waiters in the order of their
// turns (each for its next job), so a waiter slow to ask again holds back its own job only. A
// tenant that waits is woken by the release that frees what it needs (LeaseResult.Wakes,
// BatchResult.Wakes), and asks again at most poolReask later in any case.
//
// Invariant: the weight in flight is at most Concurrency at any instant, counting every job
// from its grant until its release or the end of its lease: a job still running after its lease
// ended unrenewed (a worker that stalled) is no longer counted. The pool's state is one place
// (one Redis key set, under the hash tag of the pool's name), shared by every replica, and
// survives them.
//
// A pooled batch is two calls: the pool grants a prefix of the jobs (taking their slots and
// tokens), then the tenant's limits decide that prefix; grants the tenant's limits did not use
// are given back. On Redis Cluster the two keys may live on different nodes: nothing spans
// them atomically. A failure between the calls leaves grants unused: they are given back when
// the tenant's call fails, and otherwise (the second call's answer lost, the process gone) their
// slots return when their leases end. So a failure can only leave the pool below its capacity
// for a lease, never above it.
type Pool struct {
	Name string
	// Concurrency is the most weight in flight (0: no such limit); Lease how long a slot is held
	// unless released or renewed.
	Concurrency int64
	Lease       time.Duration
	// Capacity and Interval make the pool's bucket (0: none): Capacity tokens, one more every
	// Interval; Rate is how the plans file wrote it.
	Capacity int64
	Rate     string
	Interval time.Duration
	// Breaker, when set, stops the pool's forwards while most of its jobs fail (see Breaker);
	// it needs a Concurrency (its jobs' done messages say how they went).
	Breaker *Breaker
	// Adaptive, when set, makes Concurrency the ceiling of a limit in force that follows the
	// workers' time per job and overloaded outcomes (see Adaptive).
	Adaptive *Adaptive
}

// MaxShare bounds a plan's share of its pool.
const MaxShare = 1000

// The pool's timing: a tenant that waits asks again at least every poolReask, and a waiter not
// heard from for poolTTL is forgotten (its reservation of freed capacity ends).
const (
	poolReask = time.Second
	poolTTL   = 3 * time.Second
)

// poolScan bounds the waiters a pool call looks at (passed to lua/pool.lua as SCAN): a job with
// more than poolScan waiters ahead of it is not granted until some of them have gone;
// poolWakeJobs bounds the reserved jobs a release looks at to find whom to wake (WAKE_JOBS).
const (
	poolScan     = 64
	poolWakeJobs = 256
)

// NewPool checks a pool and returns it. A problem is a *LimitError naming the pool (Index -1)
// and the field.
func NewPool(p Pool) (*Pool, error) {
	bad := func(field, format string, args ...any) error {
		return &LimitError{Plan: p.Name, Index: -1, Label: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case p.Name == "":
		return nil, fmt.Errorf("bucket: a pool without a name")
	case strings.ContainsAny(p.Name, "{}"):
		return nil, bad("name", "pool name %q contains '{' or '}'", p.Name)
	case p.Concurrency == 0 && p.Capacity == 0:
		return nil, bad("concurrency", "a pool takes a concurrency (and a lease), a capacity and a rate, or both")
	case p.Concurrency < 0 || p.Concurrency > MaxConcurrency:
		return nil, bad("concurrency", "must be 1 to %d, got %d", MaxConcurrency, p.Concurrency)
	case p.Concurrency > 0 && (p.Lease < time.Microsecond || p.Lease%time.Microsecond != 0 || p.Lease > MaxWindow):
		return nil, bad("lease", "must be a whole number of microseconds from 1µs to 100 years, got %v", p.Lease)
	case p.Concurrency == 0 && p.Lease != 0:
		return nil, bad("lease", "a lease goes with a concurrency")
	case p.Capacity < 0:
		return nil, bad("capacity", "must be ≥ 1, got %d", p.Capacity)
	case p.Capacity > 0 && (p.Interval < time.Microsecond || p.Interval%time.Microsecond != 0):
		return nil, bad("rate", "the interval must be a whole number of microseconds ≥ 1µs, got %v", p.Interval)
	case p.Capacity > 0 && p.Capacity > maxWindow/p.Interval.Microseconds():
		return nil, bad("capacity", "capacity %d takes longer than 285 years to refill", p.Capacity)
	case p.Capacity == 0 && p.Interval != 0:
		return nil, bad("rate", "a rate goes with a capacity")
	case p.Breaker != nil && p.Concurrency == 0:
		return nil, bad("breaker", "a breaker goes with a concurrency (its jobs' done messages say how they went)")
	case p.Adaptive != nil && p.Concurrency == 0:
		return nil, bad("adaptive", "an adaptive pool needs a concurrency: its ceiling")
	case p.Adaptive != nil:
		if err := p.Adaptive.check(p.Concurrency); err != nil {
			return nil, bad("adaptive.min", "%v", err)
		}
	}
	out := p
	if p.Breaker != nil {
		b := *p.Breaker
		if b.Probes == 0 {
			b.Probes = defaultProbes
		}
		if b.MinJobs == 0 {
			b.MinJobs = defaultMinJobs
		}
		if field, err := b.check(); err != nil {
			return nil, bad(field, "%v", err)
		}
		out.Breaker = &b
	}
	return &out, nil
}

// maxWeight is the largest weight the pool can ever grant.
func (p *Pool) maxWeight() int64 {
	m := int64(math.MaxInt64)
	if p.Concurrency > 0 {
		m = p.Concurrency
	}
	if p.Capacity > 0 {
		m = min(m, p.Capacity)
	}
	return m
}

// Rule is the pool's rule for people: "8 in flight, lease 30s, capacity 100 at 50/s".
func (p *Pool) Rule() string { return p.describe() }

// describe is the pool's rule for people.
func (p *Pool) describe() string {
	var parts []string
	if p.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d in flight, lease %v", p.Concurrency, p.Lease))
	}
	if p.Capacity > 0 {
		parts = append(parts, fmt.Sprintf("capacity %d at %s", p.Capacity, p.Rate))
	}
	if p.Adaptive != nil {
		parts = append(parts, p.Adaptive.rule())
	}
	if p.Breaker != nil {
		parts = append(parts, p.Breaker.rule())
	}
	return strings.Join(parts, ", ")
}

// share is the plan's share of its pool (1 when the plans file says none).
func (p *Plan) share() int64 { return max(p.Share, 1) }

// PoolState is a pool as a call found it.
type PoolState struct {
	// Name and rule: Concurrency (0: none) and Capacity (0: no bucket).
	Name                  string
	Concurrency, Capacity int64
	// InFlight is the weight in flight (holding slots); Tokens the bucket's tokens now.
	InFlight, Tokens int64
	// Waiting is how many tenants wait for the pool; WaitingShares their shares together.
	Waiting, WaitingShares int64
	// DownstreamUntil is until when the downstream holds the pool's forwards (µs since the Unix
	// epoch, the limiter's clock; 0: it does not): a done message's Admit-Retry-After with
	// Admit-Retry-Scope: pool. Nothing new is granted before.
	DownstreamUntil int64
	// Breaker is the pool's breaker: BreakerClosed, BreakerOpen or BreakerHalfOpen;
	// BreakerUntil (µs since the Unix epoch; 0 when closed) when it turns half-open (open), or
	// when its probes out are taken for lost (half-open); Probes the jobs a half-open breaker
	// let through.
	Breaker, BreakerUntil, Probes int64
	// Limit is the limit in force (Concurrency for a pool that is not adaptive: see Adaptive);
	// Floor the time per job at the minimum (µs; 0: not measured yet), TimePerJob the last
	// window's (µs), LimitWhy why the limit last moved (LimitGrew, ...).
	Limit, Floor, TimePerJob, LimitWhy int64
	// BreakerSince is when the breaker last changed state (µs since the Unix epoch; 0: never):
	// it orders two states of the pool that calls made at once report.
	BreakerSince int64
}

// poolStateLen is the number of integers of a pool's state in lua/pool.lua's replies.
const poolStateLen = 13

// Reason is why a job of tenant (whose plan has share) waits for the pool, for people: "pool
// workers: 8 of 8 in flight; acme's share 3 of 5".
func (s PoolState) Reason(tenant string, share int64) string {
	var b strings.Builder
	b.WriteString("pool ")
	b.WriteString(s.Name)
	b.WriteString(": ")
	if s.DownstreamUntil > 0 {
		b.WriteString(DownstreamReason(time.UnixMicro(s.DownstreamUntil)))
		return b.String()
	}
	switch s.Breaker {
	case BreakerOpen:
		b.WriteString("breaker open until " + timeOfDay(time.UnixMicro(s.BreakerUntil)) + " (most of its recent jobs failed or were overloaded)")
		return b.String()
	case BreakerHalfOpen:
		fmt.Fprintf(&b, "breaker half-open: %d probe jobs out, the others wait for their outcomes", s.Probes)
		return b.String()
	}
	switch {
	case s.Concurrency > 0 && (s.Capacity == 0 || s.InFlight >= s.Concurrency):
		fmt.Fprintf(&b, "%d of %d in flight", s.InFlight, s.Concurrency)
	default:
		fmt.Fprintf(&b, "%d of %d tokens left", max(s.Tokens, 0), s.Capacity)
	}
	total := max(s.WaitingShares, share)
	fmt.Fprintf(&b, "; %s's share %d of %d", tenant, share, total)
	return b.String()
}

// DownstreamReason is why jobs wait for a downstream that asked for no more until until:
// "downstream asked to wait until 14:03:10" (UTC, rounded up to the second; a wait is at most a
// day).
func DownstreamReason(until time.Time) string {
	return "downstream asked to wait until " + timeOfDay(until)
}

// timeOfDay is t's time of day for people: UTC, rounded up to the second ("14:03:10").
func timeOfDay(t time.Time) string {
	u := t.UTC().Truncate(time.Second)
	if u.Before(t) {
		u = u.Add(time.Second)
	}
	return u.Format("15:04:05")
}

// PoolTenant is a tenant a pool serves lately: its share (0 when the pool does not know it: it
// does not wait), what it received (the weight granted since it last had nothing waiting and
// nothing ahead of the clock), and whether it waits.
type PoolTenant struct {
	Tenant          string
	Share, Received int64
	Waiting         bool
}

// PoolSnapshot is a pool's state and the tenants it serves lately (waiting first, by turn; at
// most 100).
type PoolSnapshot struct {
	PoolState
	Tenants []PoolTenant
}

// pool operations (lua/pool.lua's op).
const (
	poolAcquire = iota
	poolGiveBack
	poolRelease
	poolRenew
	poolInspect
	poolStart
	poolMerge
)

// poolReply is a pool operation's answer.
type poolReply struct {
	granted     int   // acquire: the jobs granted (a prefix)
	before      []int // acquire: the indices (0-based) of the jobs granted before (a lease of theirs held: nothing taken now)
	wait        int64 // acquire, start: µs until the first job not granted (the job) may fit
	found       bool  // give back, release, renew: a lease was held
	weight, ran int64 // release: its weight and the time from its take to now (µs)
	ends        int64 // renew: its new end
	state       PoolState
	wakes       []string // the waiters to wake
	tenants     []PoolTenant
	local       bool // decided on a copy of the pool (see Fallback)
}

// poolBackend is a backend's side of the pools: one operation on one pool, for tenant (with
// its share) and jobs, or a lease (jobs[0].ID) and its cost.
type poolBackend interface {
	poolCall(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) (poolReply, error)
}

// admitPooled decides a batch of a plan with a pool or leases: the pool grants a prefix of the
// jobs, the tenant's limits decide that prefix (admit), and the grants they did not use are
// given back. Jobs beyond the grant wait for the pool (BatchResult.Pool). Leading jobs that may
// have been admitted before are looked up first (admittedBefore); when one was, and the plan
// takes slots, the jobs after them wait (BatchResult.AfterRedeemed).
func admitPooled(ctx context.Context, pb poolBackend, b Batch, admit func(context.Context, Batch) (BatchResult, error)) (BatchResult, error) {
	p := b.Plan
	if p == nil || p.Pool == nil && !p.Leases() || p.Shadow || len(b.Jobs) == 0 {
		return admit(ctx, b)
	}
	if err := b.check(); err != nil {
		return BatchResult{}, err
	}
	known, err := admittedBefore(ctx, b, admit)
	if err != nil {
		return BatchResult{}, err
	}
	rest := b
	rest.Jobs = b.Jobs[len(known.Outcomes):]
	after := p.Leases() && slices.Contains(known.Outcomes, JobRedeemed) && len(rest.Jobs) > 0
	if after {
		rest.Jobs = nil // the claims alone
	}
	var res BatchResult
	if p.Pool != nil {
		res, err = admitGranted(ctx, pb, rest, admit)
	} else {
		res, err = admit(ctx, rest)
	}
	if err != nil || len(known.Outcomes) == 0 {
		return res, err
	}
	if res.AdmittedAgo != nil || known.AdmittedAgo != nil {
		ages := make([]time.Duration, len(b.Jobs))
		copy(ages, known.AdmittedAgo)
		if res.AdmittedAgo != nil {
			copy(ages[len(known.Outcomes):], res.AdmittedAgo)
		}
		res.AdmittedAgo = ages
	}
	res.Outcomes = append(known.Outcomes, res.Outcomes...)
	if after {
		for len(res.Outcomes) < len(b.Jobs) {
			res.Outcomes = append(res.Outcomes, JobNotYet)
		}
		res.Wait, res.AfterRedeemed = 0, true
	}
	return res, nil
}

// admittedBefore looks the leading jobs of b that may have been admitted before (Job.Again) up in
// the tenant's state (Batch.Peek), and returns the answers of those it stored or admitted
// before: they are not asked of the pool, which would take a slot for a job whose forward may
// be downstream already (and done: a slot nobody uses). None when no job leads with Again.
func admittedBefore(ctx context.Context, b Batch, admit func(context.Context, Batch) (BatchResult, error)) (BatchResult, error) {
	n := 0
	for n < len(b.Jobs) && b.Jobs[n].Again {
		n++
	}
	if n == 0 {
		return BatchResult{}, nil
	}
	peek := b
	peek.Jobs, peek.Peek = b.Jobs[:n], true
	r, err := admit(ctx, peek)
	if err != nil {
		return BatchResult{}, err
	}
	k := 0
	for k < len(r.Outcomes) && (r.Outcomes[k] == JobStored || r.Outcomes[k] == JobRedeemed) {
		k++
	}
	r.Outcomes = r.Outcomes[:k]
	if r.AdmittedAgo != nil {
		r.AdmittedAgo = r.AdmittedAgo[:k]
	}
	return r, nil
}

// admitGranted decides a batch of a plan with a pool, none of whose jobs was admitted before:
// see admitPooled. Without jobs, it says the batch's claims alone.
func admitGranted(ctx context.Context, pb poolBackend, b Batch, admit func(context.Context, Batch) (BatchResult, error)) (BatchResult, error) {
	if len(b.Jobs) == 0 {
		return admit(ctx, b)
	}
	p := b.Plan
	pool, share := p.Pool, p.share()
	g, err := pb.poolCall(ctx, poolAcquire, pool, b.Tenant, share, b.Jobs, NoCost, Report{})
	if err != nil {
		return BatchResult{}, fmt.Errorf("bucket: pool %s for tenant %q: %w", pool.Name, b.Tenant, err)
	}
	sub := b
	sub.Jobs = b.Jobs[:g.granted]
	res, err := admit(ctx, sub)
	if err != nil {
		if g.granted > 0 {
			// Nothing was forwarded: the grants go back (were this to fail too, their slots
			// return when their leases end).
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_, gerr := pb.poolCall(gctx, poolGiveBack, pool, b.Tenant, share, sub.Jobs, NoCost, Report{})
			cancel()
			if gerr != nil {
				return BatchResult{}, fmt.Errorf("%w (and %w)", err, giveBackError(pool, b.Tenant, len(sub.Jobs), gerr))
			}
		}
		return BatchResult{}, err
	}
	// What the tenant's limits did not admit goes back, and so does what was granted now to a
	// job they redeemed: it was admitted before, its forward may be downstream already, and if
	// it is not, its slots are taken again before it is forwarded (see JobRedeemed). A grant
	// made before (the job's lease held already) stays: it is the job's own.
	var unused []Job
	for i, o := range res.Outcomes {
		if !o.Admitted() || o == JobRedeemed && !slices.Contains(g.before, i) {
			unused = append(unused, sub.Jobs[i])
		}
	}
	res.Wakes = g.wakes // whose turn refused a job of this batch
	res.Local = res.Local || g.local
	if len(unused) > 0 {
		r, err := pb.poolCall(ctx, poolGiveBack, pool, b.Tenant, share, unused, NoCost, Report{})
		if err != nil {
			res.GiveBackErr = giveBackError(pool, b.Tenant, len(unused), err)
		} else {
			g.state = r.state
			for _, w := range r.wakes { // and the waiters what was given back is for
				if !slices.Contains(res.Wakes, w) {
					res.Wakes = append(res.Wakes, w)
				}
			}
		}
	}
	g.state.Name, g.state.Concurrency, g.state.Capacity = pool.Name, pool.Concurrency, pool.Capacity
	res.Pool = &g.state
	if g.granted < len(b.Jobs) {
		waited := false
		for _, o := range res.Outcomes {
			waited = waited || o == JobNotYet
		}
		for range len(b.Jobs) - g.granted {
			res.Outcomes = append(res.Outcomes, JobNotYet)
		}
		if !waited { // the first job that waits, waits for the pool
			res.Wait, res.PoolBound = time.Duration(g.wait)*time.Microsecond, true
			res.Limit, res.LimitIndex = "pool "+pool.Name, -1
			if g.state.DownstreamUntil > 0 {
				res.Downstream, res.LimitIndex = true, bindDownstream
			}
		}
	}
	return res, nil
}

// giveBackError says that n grants of pool to tenant could not be given back, and why.
func giveBackError(pool *Pool, tenant string, n int, err error) error {
	return fmt.Errorf("bucket: pool %s: %d unused grants of tenant %q not given back (their slots stay taken until their leases end): %w", pool.Name, n, tenant, err)
}

// leasePooled releases or renews a job's lease (mode) on its tenant's concurrency limits (lease)
// and on its pool's slots; the result is held if either held it, and names the pool's next
// waiter to wake.
func leasePooled(ctx context.Context, pb poolBackend, req LeaseRequest, mode int, lease func(context.Context, LeaseRequest, int) (LeaseResult, error)) (LeaseResult, error) {
	p := req.Plan
	var res LeaseResult
	var err error
	if p == nil || p.concurrent || p.Pool == nil || p.Pool.Concurrency == 0 {
		if res, err = lease(ctx, req, mode); err != nil || p == nil || p.Pool == nil || p.Pool.Concurrency == 0 {
			return res, err
		}
	} else if err := req.check(mode); err != nil {
		return LeaseResult{}, err
	}
	if mode == leaseStart && p.concurrent && !res.Held {
		return res, nil // the tenant's own slots are taken: the pool is not asked
	}
	if mode == leaseRelease && req.Report.tenantHold() > 0 && !p.concurrent {
		// The tenant's own state holds its forwards (lua/lease.lua), though it holds no lease.
		if _, err := lease(ctx, req, mode); err != nil {
			return res, err
		}
	}
	op := map[int]int{leaseRelease: poolRelease, leaseRenew: poolRenew, leaseStart: poolStart}[mode]
	r, err := pb.poolCall(ctx, op, p.Pool, req.Tenant, p.share(), []Job{{ID: req.Lease, Weight: req.weight()}}, req.Cost, req.Report)
	if err != nil {
		return res, fmt.Errorf("bucket: pool %s lease of tenant %q: %w", p.Pool.Name, req.Tenant, err)
	}
	if mode == leaseStart && !r.found {
		if res.Held {
			// The tenant's slots were taken for a job the pool has no room for: they go back.
			_, _ = lease(ctx, req, leaseRelease)
		}
		return LeaseResult{Wait: time.Duration(r.wait) * time.Microsecond, Wakes: r.wakes, LeasesExpired: res.LeasesExpired, Local: res.Local || r.local}, nil
	}
	r.state.Name, r.state.Concurrency, r.state.Capacity = p.Pool.Name, p.Pool.Concurrency, p.Pool.Capacity
	res.Pool = &r.state
	if r.found {
		res.PoolOnly = !res.Held
		res.Held = true
		res.Weight = max(res.Weight, r.weight)
		res.Ran = max(res.Ran, time.Duration(r.ran)*time.Microsecond)
		if ends := time.UnixMicro(r.ends); r.ends > 0 && (res.Ends.IsZero() || ends.Before(res.Ends)) {
			res.Ends = ends
		}
	}
	res.Wakes = r.wakes
	res.Local = res.Local || r.local
	return res, nil
}

// InspectPool reads a pool without changing it.
func (m *Memory) InspectPool(ctx context.Context, p *Pool) (PoolSnapshot, error) {
	return poolSnapshot(ctx, m, p)
}

// InspectPool reads a pool without changing it.
func (r *Redis) InspectPool(ctx context.Context, p *Pool) (PoolSnapshot, error) {
	return poolSnapshot(ctx, r, p)
}

func poolSnapshot(ctx context.Context, pb poolBackend, p *Pool) (PoolSnapshot, error) {
	if p == nil {
		return PoolSnapshot{}, fmt.Errorf("bucket: no pool given")
	}
	s, err := inspectPool(ctx, pb, "", &Plan{Pool: p})
	if err != nil {
		return PoolSnapshot{}, err
	}
	return *s, nil
}

// inspectPool reads the pool of a plan, when it has one.
func inspectPool(ctx context.Context, pb poolBackend, tenant string, p *Plan) (*PoolSnapshot, error) {
	if p == nil || p.Pool == nil {
		return nil, nil
	}
	r, err := pb.poolCall(ctx, poolInspect, p.Pool, tenant, p.share(), nil, NoCost, Report{})
	if err != nil {
		return nil, fmt.Errorf("bucket: pool %s: %w", p.Pool.Name, err)
	}
	r.state.Name, r.state.Concurrency, r.state.Capacity = p.Pool.Name, p.Pool.Concurrency, p.Pool.Capacity
	return &PoolSnapshot{PoolState: r.state, Tenants: r.tenants}, nil
}

// poolArgs packs a pool call's argument (see lua/pool.lua); owed is the merge's.
func poolArgs(now, born, memTag int64, op int, p *Pool, share int64, jobs []Job, cost, owed int64, rep Report) []byte {
	arg := make([]byte, 0, 8*(25+2*len(jobs)))
	arg = packInts(arg, int64(op), now, p.Concurrency, p.Lease.Microseconds(), p.Capacity, p.Interval.Microseconds(), share,
		poolTTL.Microseconds(), poolReask.Microseconds(), cost, poolScan, poolWakeJobs, MaxConcurrency, born,
		int64(rep.Outcome), rep.poolHold(), owed)
	arg = packInts(arg, p.Breaker.args()...)
	arg = packInts(arg, p.Adaptive.args()...)
	arg = packInts(arg, memTag, int64(len(jobs)))
	for _, j := range jobs {
		arg = packInts(arg, j.ID, j.Weight)
	}
	return arg
}

// poolKeys are a pool's keys: its hash, its two sets of waiters and its leases, under one hash
// tag.
func (r *Redis) poolKeys(p *Pool) []string {
	base := r.prefix + "pool{pool:" + p.Name + "}"
	return []string{base, base + ":w", base + ":a", base + ":l"}
}

// poolCall runs lua/pool.lua.
func (r *Redis) poolCall(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) (poolReply, error) {
	return r.poolOp(ctx, op, p, tenant, share, jobs, cost, 0, rep)
}

// poolOp is poolCall with a merge's owed µs.
func (r *Redis) poolOp(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost, owed int64, rep Report) (poolReply, error) {
	res := r.exec(ctx, r.pool, func() (keys, args []string) {
		arg := poolArgs(r.now(), r.born.at.Load(), r.markerTag(), op, p, share, jobs, cost, owed, rep)
		return r.poolKeys(p), []string{unsafe.String(&arg[0], len(arg)), tenant}
	})
	parts, err := res.ToArray()
	if err != nil {
		return poolReply{}, err
	}
	if len(parts) < 2 {
		return poolReply{}, fmt.Errorf("pool reply of %d parts, want 2 or 3", len(parts))
	}
	packed, err := parts[0].AsBytes()
	if err != nil {
		return poolReply{}, err
	}
	var wakes []string
	if op != poolInspect {
		if wakes, err = parts[1].AsStrSlice(); err != nil && !rueidis.IsRedisNil(err) {
			return poolReply{}, err
		}
	}
	var names []string
	if len(parts) > 2 {
		if names, err = parts[2].AsStrSlice(); err != nil && !rueidis.IsRedisNil(err) {
			return poolReply{}, err
		}
	}
	if len(packed)%8 != 0 {
		return poolReply{}, fmt.Errorf("pool reply of %d bytes", len(packed))
	}
	vals := make([]int64, len(packed)/8)
	if err := unpackInts(packed, vals); err != nil {
		return poolReply{}, err
	}
	return decodePoolReply(op, vals, wakes, names)
}

// decodePoolReply reads a pool operation's integers (see lua/pool.lua's reply).
func decodePoolReply(op int, vals []int64, wakes []string, names []string) (poolReply, error) {
	head := map[int]int{poolAcquire: 2, poolGiveBack: 3, poolRelease: 3, poolRenew: 2, poolInspect: 0, poolStart: 3, poolMerge: 1}[op]
	if len(vals) < head+poolStateLen {
		return poolReply{}, fmt.Errorf("pool reply of %d values, want at least %d", len(vals), head+poolStateLen)
	}
	r := poolReply{wakes: wakes}
	switch op {
	case poolAcquire:
		r.granted, r.wait = int(vals[0]), vals[1]
	case poolGiveBack, poolRelease:
		r.found, r.weight, r.ran = vals[0] == 1, vals[1], vals[2]
	case poolRenew:
		r.found, r.ends = vals[0] == 1, vals[1]
	case poolStart:
		r.found, r.ends, r.wait = vals[0] == 1, vals[1], vals[2]
	}
	st := vals[head:]
	r.state = PoolState{InFlight: st[0], Tokens: st[1], Waiting: st[2], WaitingShares: st[3], DownstreamUntil: st[4],
		Breaker: st[5], BreakerUntil: st[6], Probes: st[7], Limit: st[8], Floor: st[9], TimePerJob: st[10], LimitWhy: st[11], BreakerSince: st[12]}
	if op == poolAcquire {
		for _, i := range st[poolStateLen:] {
			if i < 1 || i > vals[0] {
				return poolReply{}, fmt.Errorf("pool reply: job %d granted before, of %d granted", i, vals[0])
			}
			r.before = append(r.before, int(i-1))
		}
	}
	if op == poolInspect {
		rest := st[poolStateLen:]
		if len(rest) != 3*len(names) {
			return poolReply{}, fmt.Errorf("pool inspection of %d tenants and %d values", len(names), len(rest))
		}
		for i, n := range names {
			r.tenants = append(r.tenants, PoolTenant{Tenant: n, Received: rest[3*i], Share: rest[3*i+1], Waiting: rest[3*i+2] == 1})
		}
	}
	return r, nil
}

// Memory's pools: poolCall mirrors lua/pool.lua step by step, but for its merge (only Redis is
// charged with an outage: see Fallback).

// memPool is a pool's state in memory.
type memPool struct {
	brk     breakerState
	ad      adaptState
	tat     int64
	hold    int64          // until when the downstream holds the pool's forwards (µs; 0: it does not)
	leases  []memPoolLease // by death
	v       float64
	tenants map[string]*memPoolTenant
	// released is a copy's own (see Fallback): the leases released on it during an outage
	// (Redis may hold them: they are dropped there when it is charged), at most maxReported;
	// nil when none are kept (not a copy taken on during an outage: see adoptPool).
	released []int64
}

type memPoolLease struct{ death, weight, id, at int64 }

// forgottenReport takes weight w of a lease the pool does not hold out of its forgotten slots
// (the lease of id 0: see lua/pool.lua), if they are still counted.
func (mp *memPool) forgottenReport(w int64) bool {
	z := slices.IndexFunc(mp.leases, func(l memPoolLease) bool { return l.id == 0 })
	if z < 0 {
		return false
	}
	if mp.leases[z].weight > w {
		mp.leases[z].weight -= w
	} else {
		mp.leases = slices.Delete(mp.leases, z, z+1)
	}
	return true
}

type memPoolTenant struct {
	f        float64
	received int64
	waiting  bool
	start    float64 // waiting: its start tag
	cost     int64   // waiting: its next job's
	share    int64
	asked    int64 // waiting: when it last asked (µs)
}

// memPools holds the memory backend's pools.
type memPools struct {
	mu    sync.Mutex
	pools map[string]*memPool
	seeds map[string]PoolState // the pools as Redis last answered (see seen)
}

// maxReported bounds the leases a copy remembers released during an outage (memPool.released,
// memState.released).
const maxReported = 4096

func (m *Memory) poolCall(_ context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) (poolReply, error) {
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	now := m.now().UnixMicro()
	mp := m.pools.pools[p.Name]
	if mp == nil {
		mp = m.pools.forgotten(p, m.born(), now)
		if op != poolInspect {
			m.pools.pools[p.Name] = mp
		}
	}
	return mp.call(now, op, p, tenant, share, jobs, cost, rep), nil
}

// forgotten is pool p as a backend that forgot it at born (µs; 0: it never knew it, the pool is
// unused) holds it at now, under mp.mu: every slot held until the running jobs report, its
// bucket empty at born, and what Redis last said of its downstream (see seen).
func (mp *memPools) forgotten(p *Pool, born, now int64) *memPool {
	pl := &memPool{tenants: map[string]*memPoolTenant{}}
	if born == 0 {
		return pl
	}
	if p.Capacity > 0 {
		pl.tat = born + p.Capacity*p.Interval.Microseconds()
	}
	if end := phantomEnd(born, p.Lease.Microseconds()); p.Concurrency > 0 && end > now {
		pl.leases = append(pl.leases, memPoolLease{end, p.Concurrency, 0, born})
	}
	if sd, ok := mp.seeds[p.Name]; ok {
		pl.seed(sd, now)
	}
	return pl
}

// seed takes what Redis last said of a pool's downstream into a copy of the pool that is
// forgotten otherwise, at now: the downstream's hold, the breaker (its state, not its window),
// and an adaptive pool's limit and floor (not its window; the floor is not measured again for a
// while).
func (mp *memPool) seed(st PoolState, now int64) {
	mp.hold = st.DownstreamUntil
	mp.brk = breakerState{state: st.Breaker, until: st.BreakerUntil, probes: st.Probes, since: st.BreakerSince}
	mp.ad = adaptState{limit: float64(st.Limit), floor: st.Floor, last: st.TimePerJob, why: st.LimitWhy, nextProbe: now + adaptProbeEvery}
}

// seen keeps st, a pool's state as Redis answered it, to seed the copy of the pool when an
// outage begins (see seed).
func (m *Memory) seen(st PoolState) {
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	if m.pools.seeds == nil {
		m.pools.seeds = map[string]PoolState{}
	}
	m.pools.seeds[st.Name] = st
}

// adoptPool takes pool p as forgotten at at (µs): the copy of a pool as this replica begins to
// decide it during an outage (see Fallback). It returns its bucket's tat then.
func (m *Memory) adoptPool(p *Pool, at int64) int64 {
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	mp := m.pools.forgotten(p, at, m.now().UnixMicro())
	mp.released = []int64{}
	m.pools.pools[p.Name] = mp
	return mp.tat
}

// poolDelta is what a copy of a pool holds that Redis must be told after an outage.
type poolDelta struct {
	// leases are the leases taken on the copy and still held, as merge pairs of (id, weight),
	// (death, taken at), and the leases the copy did not know that were released meanwhile
	// (weight 0: to drop).
	leases []Job
	// hold is how long from now (µs) the downstream holds the pool's forwards on the copy (0:
	// it does not).
	hold int64
	// owed is what the copy's bucket took beyond what it owed at base and has not refilled by
	// now (µs); tat is the copy's bucket now (the base of a later merge).
	owed, tat int64
}

// poolDelta is what the copy of pool p holds at now beyond its bucket's base (its tat then)
// that Redis must be told after an outage.
func (m *Memory) poolDelta(p *Pool, base, now int64) poolDelta {
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	mp := m.pools.pools[p.Name]
	if mp == nil {
		return poolDelta{tat: base}
	}
	d := poolDelta{tat: max(mp.tat, now)}
	if p.Capacity > 0 {
		d.owed = max(d.tat-max(base, now), 0)
	}
	for _, l := range mp.leases {
		if l.id != 0 && l.death > now {
			d.leases = append(d.leases, Job{ID: l.id, Weight: l.weight}, Job{ID: l.death, Weight: l.at})
		}
	}
	for _, id := range mp.released {
		if !slices.ContainsFunc(mp.leases, func(l memPoolLease) bool { return l.id == id }) {
			d.leases = append(d.leases, Job{ID: id}, Job{})
		}
	}
	if mp.hold > now {
		d.hold = mp.hold - now
	}
	return d
}

func (mp *memPool) call(now int64, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) poolReply {
	conc, lease, capacity, iv := p.Concurrency, p.Lease.Microseconds(), p.Capacity, p.Interval.Microseconds()
	live := mp.leases[:0]
	for _, l := range mp.leases {
		if l.death > now {
			live = append(live, l)
		}
	}
	mp.leases = live
	inuse := int64(0)
	for _, l := range mp.leases {
		inuse += l.weight
	}
	mp.tat = max(mp.tat, now)
	if mp.hold <= now {
		mp.hold = 0
	}
	mp.brk.tick(now, p.Breaker)
	tokens := func() int64 {
		if capacity <= 0 {
			return -1
		}
		return int64(math.Floor(float64(capacity*iv-(mp.tat-now)) / float64(iv)))
	}
	limit := func() int64 { return mp.ad.inForce(p.Adaptive, conc) }
	leaseAt := func(id int64) int {
		for j, l := range mp.leases {
			if l.id == id {
				return j
			}
		}
		return -1
	}
	leasePut := func(l memPoolLease) {
		j := len(mp.leases)
		for j > 0 && mp.leases[j-1].death > l.death {
			j--
		}
		mp.leases = slices.Insert(mp.leases, j, l)
	}
	t := mp.tenants[tenant]
	if t == nil && op != poolInspect {
		t = &memPoolTenant{}
		mp.tenants[tenant] = t
	}
	for name, u := range mp.tenants { // waiters not heard from for ttl are forgotten
		if u.waiting && u.asked <= now-poolTTL.Microseconds() {
			u.waiting = false
			if u.f <= mp.v && u != t {
				delete(mp.tenants, name)
			}
		}
	}
	waiters := func() []string {
		var ws []string
		for name, u := range mp.tenants {
			if u.waiting {
				ws = append(ws, name)
			}
		}
		slices.SortFunc(ws, func(a, b string) int {
			if c := cmpFloat(mp.tenants[a].start, mp.tenants[b].start); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		return ws
	}
	state := func() PoolState {
		st := PoolState{InFlight: inuse, Tokens: tokens(), DownstreamUntil: mp.hold, Breaker: mp.brk.state, Probes: mp.brk.probes,
			Limit: limit(), Floor: mp.ad.floor, TimePerJob: mp.ad.last, LimitWhy: mp.ad.why, BreakerSince: mp.brk.since}
		if mp.brk.state != BreakerClosed {
			st.BreakerUntil = mp.brk.until
		}
		for _, u := range mp.tenants {
			if u.waiting {
				st.Waiting++
				st.WaitingShares += u.share
			}
		}
		return st
	}
	freeNow := func() int64 {
		f := int64(math.MaxInt64)
		if conc > 0 {
			f = limit() - inuse
		}
		if capacity > 0 {
			f = min(f, tokens())
		}
		return f
	}
	// freedWakes names the owners of the waiters' reserved jobs (in the order of their starts)
	// that what is free now covers and what was free before did not (at least the last that
	// fits); at most poolWakeJobs jobs are looked at.
	freedWakes := func(before int64) []string {
		free := freeNow()
		from := free - max(free-before, 1)
		type head struct {
			name  string
			start float64
			cost  int64
			share int64
		}
		var heads []*head
		ws := waiters()
		for _, name := range ws[:min(len(ws), poolScan)] {
			if u := mp.tenants[name]; u.cost > 0 {
				heads = append(heads, &head{name, u.start, u.cost, u.share})
			}
		}
		var wakes []string
		var pos int64
		for range poolWakeJobs {
			if len(heads) == 0 {
				break
			}
			h := heads[0]
			for _, o := range heads[1:] {
				if o.start < h.start || (o.start == h.start && o.name < h.name) {
					h = o
				}
			}
			if pos+h.cost > free {
				break
			}
			pos += h.cost
			if pos > from && !slices.Contains(wakes, h.name) {
				wakes = append(wakes, h.name)
			}
			h.start += float64(h.cost) / float64(h.share)
		}
		return wakes
	}
	switch op {
	case poolAcquire:
		free := freeNow()
		var others []string
		for _, name := range waiters() {
			if name != tenant {
				others = append(others, name)
			}
		}
		more := len(others) > poolScan
		others = others[:min(len(others), poolScan)]
		// reservedBefore is the weight of the others' jobs that start before start (ties: by
		// name), taking each to have a backlog like its next job; over is set once it is more
		// than limit.
		reservedBefore := func(start float64, limit int64) (r int64, over bool) {
			for _, name := range others {
				u := mp.tenants[name]
				if u.start > start || (u.start == start && name > tenant) {
					return r, false // it and those after it are later
				}
				if u.cost <= 0 {
					continue
				}
				x := (start - u.start) * float64(u.share) / float64(u.cost)
				n := math.Ceil(x)
				if n == x && name < tenant {
					n++
				}
				if n*float64(u.cost) > float64(limit-r) {
					return r, true
				}
				r += int64(n) * u.cost
			}
			return r, more
		}
		granted, got, turn, held, broken := 0, int64(0), false, false, false
		var before []int
		for i, j := range jobs {
			if conc > 0 && leaseAt(j.ID) >= 0 {
				granted = i + 1
				before = append(before, i)
				continue
			}
			if mp.hold > 0 {
				held = true
				break
			}
			if mp.brk.state == BreakerOpen {
				broken = true
				break
			}
			if j.Weight > free {
				break
			}
			start := max(t.f, mp.v)
			if r, over := reservedBefore(start, free-j.Weight); over || j.Weight > free-r {
				turn = true
				break
			}
			if !mp.brk.admits(p.Breaker) {
				broken = true
				break
			}
			free -= j.Weight
			inuse += j.Weight
			if conc > 0 {
				leasePut(memPoolLease{now + lease, j.Weight, j.ID, now})
			}
			if capacity > 0 {
				mp.tat += j.Weight * iv
			}
			t.f = start + float64(j.Weight)/float64(share)
			vs := start
			if len(others) > 0 {
				vs = min(vs, mp.tenants[others[0]].start)
			}
			mp.v = max(mp.v, vs)
			got += j.Weight
			granted = i + 1
		}
		var wait int64
		var wakes []string
		if held {
			wait = mp.hold - now
		} else if broken {
			wait = mp.brk.wait(now, poolReask.Microseconds())
		} else if granted < len(jobs) {
			w := jobs[granted].Weight
			t.waiting, t.start, t.cost, t.share, t.asked = true, max(t.f, mp.v), w, share, now
			wait = poolReask.Microseconds()
			switch {
			case turn:
				wakes = others[:1]
			default:
				if conc > 0 && inuse+w > limit() && len(mp.leases) > 0 {
					wait = min(wait, max(mp.leases[0].death-now, 0))
				}
				if capacity > 0 && w > tokens() {
					wait = min(wait, (w-tokens())*iv)
				}
			}
		} else {
			t.waiting = false
		}
		t.received += got
		mp.sweep()
		return poolReply{granted: granted, before: before, wait: wait, state: state(), wakes: wakes}
	case poolGiveBack, poolRelease:
		var r poolReply
		before := freeNow()
		if h := rep.poolHold(); op == poolRelease && h > 0 && now+h > mp.hold {
			mp.hold = now + h
		}
		back := int64(0)
		for _, j := range jobs {
			if op == poolRelease && mp.released != nil && len(mp.released) < maxReported {
				mp.released = append(mp.released, j.ID)
			}
			w, held := j.Weight, false
			if conc > 0 {
				if k := leaseAt(j.ID); k >= 0 {
					l := mp.leases[k]
					mp.leases = slices.Delete(mp.leases, k, k+1)
					r.found, r.weight, r.ran = true, l.weight, max(now-l.at, 0)
					if op == poolRelease {
						mp.ad.report(now, r.ran, rep.Outcome == DownstreamOverloaded, p.Adaptive, conc)
					}
					w, held = l.weight, true
				}
			}
			if !held && op == poolRelease && conc > 0 && mp.forgottenReport(max(j.Weight, 1)) {
				r.found, r.weight = true, max(j.Weight, 1)
			}
			if !held && (conc > 0 || op == poolRelease) {
				continue
			}
			if op == poolGiveBack {
				back += w
				if capacity > 0 {
					mp.tat = max(mp.tat-w*iv, now)
				}
			} else if cost >= 0 && cost != w {
				d := cost - w
				if capacity > 0 {
					mp.tat = max(mp.tat+d*iv, now)
				}
				t.f += float64(d) / float64(share)
				t.received += d
			}
		}
		if op == poolGiveBack && back > 0 {
			t.f -= float64(back) / float64(share)
			t.received -= back
		}
		if op == poolRelease && r.found {
			mp.brk.report(now, rep.Outcome != DownstreamOK, p.Breaker)
		}
		inuse = 0
		for _, l := range mp.leases {
			inuse += l.weight
		}
		r.state, r.wakes = state(), freedWakes(before)
		return r
	case poolRenew, poolStart:
		var r poolReply
		id, w := jobs[0].ID, max(jobs[0].Weight, 1)
		if k := leaseAt(id); k >= 0 {
			l := mp.leases[k]
			mp.leases = slices.Delete(mp.leases, k, k+1)
			l.death = now + lease
			leasePut(l)
			r.found, r.ends = true, l.death
		} else if conc > 0 && op == poolStart && mp.hold > 0 {
			r.wait = mp.hold - now
		} else if conc > 0 && ((op == poolRenew && mp.forgottenReport(w)) || (op == poolStart && inuse+w <= limit() && mp.brk.admits(p.Breaker))) {
			r.ends = now + lease
			leasePut(memPoolLease{r.ends, w, id, now})
			r.found = true
		} else if op == poolStart && conc > 0 && inuse+w <= limit() {
			r.wait = mp.brk.wait(now, poolReask.Microseconds())
		} else if op == poolStart && conc > 0 {
			r.wait = poolReask.Microseconds()
			if len(mp.leases) > 0 {
				r.wait = max(mp.leases[0].death-now, 1)
			}
		}
		inuse = 0
		for _, l := range mp.leases {
			inuse += l.weight
		}
		r.state = state()
		return r
	}
	r := poolReply{state: state()}
	listed := waiters()
	if len(listed) > lua.MaxListed {
		listed = listed[:lua.MaxListed]
	}
	var others []string
	for name, u := range mp.tenants {
		if !u.waiting && u.received != 0 {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	listed = append(listed, others[:min(len(others), lua.MaxListed-len(listed))]...)
	for _, name := range listed {
		u := mp.tenants[name]
		pt := PoolTenant{Tenant: name, Received: u.received, Waiting: u.waiting}
		if u.waiting {
			pt.Share = u.share
		}
		r.tenants = append(r.tenants, pt)
	}
	return r
}

// sweep forgets the tenants whose finish tag the clock has passed and that do not wait: they
// start at the clock again anyway.
func (mp *memPool) sweep() {
	for name, u := range mp.tenants {
		if !u.waiting && u.f <= mp.v {
			delete(mp.tenants, name)
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
