package bucket

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Fallback is the limiter of fail mode local: it decides on Redis while Redis answers and, while
// it does not, on this replica's own copy of the tenants' state, under the same plans. Nothing is
// lifted while Redis is away, and nothing is held that the plans would let through.
//
// The copy. Every admission Redis decides for this replica's queues returns the tenant's state as
// the call left it (lua/admit.lua's mirror), and the copy takes it as is: a tenant's queue is
// decided by one replica, so its copy is exact as of its latest step, as long as the Router says
// this replica still decides the tenant in the tenure the copy was made in (Router.Since: a queue
// made again in that tenure keeps it; a partition that left and came back does not). When Redis
// fails, a tenant the copy does not know (or not in this tenure) is taken as Redis takes a tenant it forgot (lua/state.lua load), from
// the moment this replica begins to decide it (the outage's start, or later: its partition, or
// its question, came here then): a bucket empty, a window full for one window, a quota the share
// of its period elapsed, every concurrency slot held until its jobs' workers report. So is a
// pool (there is no copy of a pool).
//
// The switch. The first call that Redis fails (an error that is not the request's own fault, or
// its caller giving up) turns the limiter local: that call, and every call after it, is decided
// on the copy at once (answers say so: Local); nothing waits for Redis's timeout again. Redis is
// asked whether it answers again (Recover: by Watch's watcher, or by the caller); when it does,
// what the copy decided is charged to it (lua/merge.lua: the difference between the copy when
// this replica began deciding each tenant and pool and now, on top of what Redis holds), while
// no decision is made on the copy; then Redis decides again. No second burst when it returns.
//
// One path. Every verb is made of decisions about one key each (a tenant's admission, request,
// lease or inspection; a pool's operation: see admitPooled, leasePooled), and each decision goes
// one way (run): on Redis while it answers; otherwise where its key is decided, this replica's
// copy or, asked over the Router, another's; and while another replica reaches Redis, on Redis
// through it (Router.Relay: a replica cut from Redis alone is not a second decider). No lock is held across a decision's call to Redis or
// to another replica: a decision on the copy is counted for as long as it runs (in memory), and
// a merge waits for none of them to run before it charges Redis, and makes new ones wait.
type Fallback struct {
	shared shared
	local  replicaCopy
	up     decider // shared, as this replica decides on it (see upstream)
	// clock, when set, is the copy's clock (tests); otherwise this host's clock moved by offset.
	clock   func() time.Time
	offset  atomic.Int64 // µs: Redis's clock minus this host's, from the latest mirrored reply
	timeout time.Duration
	hooks   FallbackHooks
	router  atomic.Pointer[routing] // nil: one replica (see Router)

	out     atomic.Pointer[outage] // the outage under way; nil while Redis decides
	outages atomic.Int64           // outages begun, each one's number (see memState.outage)
	// settled is until when, after an outage, this replica goes on routing what another decides
	// (µs of the copy's clock; see settleFor).
	settled atomic.Int64
	// known holds the tenants whose state the copy has from Redis: tenant → the tenure (see
	// since) it was last mirrored under (their state may be absent: full). A copy is exact only
	// within its tenure: nothing else decided the tenant since (see take).
	known   sync.Map
	mirrors atomic.Int64

	recovering sync.Mutex // held by the one Recover under way
	wake       chan struct{}
	stop       context.CancelFunc
	done       context.Context // the watcher's lifetime (see Watch)
	probers    sync.WaitGroup
	started    sync.Once
}

// FallbackHooks are told of the outages (all optional): Down when one starts, with the error
// that started it; Up when it ends, with what was decided on the copy meanwhile.
type FallbackHooks struct {
	Down func(err error)
	Up   func(o Outage)
}

// Outage is what a replica decided on its copy during an outage.
type Outage struct {
	// Began is when Redis first failed; Lasted how long until it answered again and was
	// charged with what was decided meanwhile (the copy's clock: Redis's time).
	Began  time.Time
	Lasted time.Duration
	// Tenants and Pools decided on the copy; Admitted and Waited the queue's jobs admitted and
	// told to wait (each job once, as admitter_decisions_total counts it), Allowed and Refused
	// the requests (Decide), Leases the releases and renewals.
	Tenants, Pools           int
	Admitted, Waited         int64
	Allowed, Refused, Leases int64
}

// probeEvery is how often Watch's watcher asks Redis whether it answers again during an outage.
const probeEvery = 250 * time.Millisecond

// settleFor is how long after an outage a replica goes on routing to the replica that decides
// them the decisions of another's tenants and pools, as during the outage: that replica may not
// have found Redis again and charged it with what its copy holds (a pool's slots taken on it),
// and until it has, Redis would hand them out again.
const settleFor = 3 * time.Second

// mergeCalls bounds the merge calls under way at once after an outage.
const mergeCalls = 32

// NewFallback returns the limiter of fail mode local over r, its copy kept with opts (those of
// r). timeout bounds a probe and a merge call during an outage (0: 1 s). Start probes Redis in the
// background during outages; Close stops it.
func NewFallback(r *Redis, opts Options, timeout time.Duration, hooks FallbackHooks) *Fallback {
	return newFallback(r, r.clock, opts, timeout, hooks)
}

// newFallback is NewFallback over any shared backend (a test's may fail on purpose), its copy on
// clock (nil: Redis's time as this host estimates it).
func newFallback(s shared, clock func() time.Time, opts Options, timeout time.Duration, hooks FallbackHooks) *Fallback {
	if timeout <= 0 {
		timeout = time.Second
	}
	f := &Fallback{shared: s, clock: clock, timeout: timeout, hooks: hooks, wake: make(chan struct{}, 1)}
	f.local = NewMemory(opts, f.now)
	f.up = upstream{f}
	f.done, f.stop = context.WithCancel(context.Background())
	return f
}

// now is the copy's clock: Redis's time as this host estimates it.
func (f *Fallback) now() time.Time {
	if f.clock != nil {
		return f.clock()
	}
	return time.Now().Add(time.Duration(f.offset.Load()) * time.Microsecond)
}

// Local reports whether decisions are made on the copy now (Redis is away, or what was decided
// during its absence is being charged to it).
func (f *Fallback) Local() bool { return f.out.Load() != nil }

// settling reports whether this replica still routes, after an outage, what another decides.
func (f *Fallback) settling() bool { return f.settled.Load() > f.now().UnixMicro() }

// Watch watches in the background for Redis to answer again during every outage: Recover every
// probeEvery, and at once on Probe, until Close. Without it, the caller steps Recover. Watching
// twice starts one watcher.
func (f *Fallback) Watch() {
	f.started.Do(func() {
		f.probers.Go(func() {
			t := time.NewTicker(probeEvery)
			defer t.Stop()
			for {
				select {
				case <-f.done.Done():
					return
				case <-t.C:
				case <-f.wake:
				}
				_ = f.Recover(f.done)
			}
		})
	})
}

// Probe makes Watch's watcher ask Redis at once whether it answers again (another replica found
// it did: Router.Back).
func (f *Fallback) Probe() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Close stops Watch's watcher, waiting for a merge under way (the copy keeps deciding until the
// process ends). Safe to call twice, and without Watch.
func (f *Fallback) Close() {
	f.stop()
	f.probers.Wait()
}

// Recover is one attempt to end the outage under way: it asks Redis whether it answers and, when
// it does, charges it with what the copy decided and turns the limiter back to it. Nil when Redis
// decides (already, or now); each Redis call is bounded by the timeout and ctx.
func (f *Fallback) Recover(ctx context.Context) error {
	f.recovering.Lock()
	defer f.recovering.Unlock()
	o := f.out.Load()
	if o == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, f.timeout)
	err := f.shared.probe(pctx)
	cancel()
	if err != nil {
		return err
	}
	return f.merge(ctx, o)
}

// outageError reports whether err, from a Redis call made for ctx, means Redis is away: not
// the request's own fault (its validation) and not its caller giving up.
func outageError(ctx context.Context, err error) bool {
	if err == nil || (ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded)) {
		return false
	}
	for _, e := range []error{ErrInvalidWeight, ErrWeightOverCapacity, ErrUnknownTenant, ErrInvalidTenant, ErrInvalidLease, ErrInvalidCost} {
		if errors.Is(err, e) {
			return false
		}
	}
	var le *LimitError
	return !errors.As(err, &le)
}

// The outage under way. Decisions on the copy are counted (busy) while they run; they run in
// memory and wait for nothing. A merge closes the gate (new decisions wait for it to open),
// waits until none runs, charges Redis, and ends the outage or opens the gate again.
type outage struct {
	n     int64     // its number
	began time.Time // the copy's clock
	mu    sync.Mutex
	busy  int
	idle  chan struct{} // closed when busy falls to 0 while a merge waits for it
	gate  chan struct{} // set while a merge charges Redis: closed when it is done
	over  bool          // charged to Redis: Redis decides again
	// taken are the tenants and pools decided on the copy, by Router key.
	taken                                      map[string]*taken
	admitted, waited, allowed, refused, leases atomic.Int64
	// told is, by tenant, the highest job ID told to wait during o (see count).
	told map[string]int64
}

// taken is a tenant (under its plan) or a pool decided on the copy during an outage: since when
// (µs of the copy's clock), and what it held then, to charge Redis with the difference: the
// tenant's state (nil: taken as forgotten then), the pool's bucket (its tat).
type taken struct {
	about
	from    int64
	base    *memState
	poolTat int64
}

// about names what a decision is about: a tenant under its plan, or a pool.
type about struct {
	tenant string
	plan   *Plan
	pool   *Pool
}

// key is the Router key of a.
func (a about) key() string {
	if a.pool != nil {
		return RoutePool(a.pool.Name)
	}
	return RouteTenant(a.tenant)
}

// goDown turns the limiter local after err; nothing when it already is.
func (f *Fallback) goDown(err error) {
	if f.out.Load() != nil {
		return
	}
	now := f.now()
	if !f.out.CompareAndSwap(nil, &outage{n: f.outages.Add(1), began: now, taken: map[string]*taken{}, told: map[string]int64{}}) {
		return
	}
	f.tell(true)
	if f.hooks.Down != nil {
		f.hooks.Down(err)
	}
	f.Probe()
}

// enter counts a decision about a on the copy during o, taking a on at its first decision (see
// take; since: this replica's tenure of a); while a merge charges Redis it waits (bounded by
// ctx). False: o is over.
func (o *outage) enter(ctx context.Context, f *Fallback, a about, since int64) (bool, error) {
	o.mu.Lock()
	for o.gate != nil {
		gate := o.gate
		o.mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
			return false, fmt.Errorf("bucket: waiting for Redis to be charged with the outage: %w", ctx.Err())
		}
		o.mu.Lock()
	}
	defer o.mu.Unlock()
	if o.over {
		return false, nil
	}
	if o.taken[a.key()] == nil {
		o.take(f, a, since)
	}
	o.busy++
	return true, nil
}

// leave ends a decision that entered.
func (o *outage) leave() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.busy--; o.busy == 0 && o.idle != nil {
		close(o.idle)
		o.idle = nil
	}
}

// take begins deciding a on the copy now, under o.mu. A tenant whose copy was mirrored in this
// replica's tenure of it (since) keeps its state, each lease held until the running jobs report
// (one may have been renewed on Redis since it was copied); any other, and every pool, is taken
// as forgotten now: its slots held and its limits emptied from when this replica decides it,
// whenever in the outage that is, so the jobs still running report before they are free
// (conservative at any time).
func (o *outage) take(f *Fallback, a about, since int64) {
	t := &taken{about: a, from: f.now().UnixMicro()}
	if a.pool != nil {
		t.poolTat = f.local.adoptPool(a.pool, t.from)
	} else {
		mirrored, _ := f.known.Load(a.tenant)
		t.base = f.local.adopt(a.tenant, a.plan, t.from, since != 0 && mirrored == since, o.n)
	}
	o.taken[a.key()] = t
}

// merge charges Redis with what the copy decided during o, while no decision is made on the
// copy, and turns the limiter back to Redis when all of it is charged.
func (f *Fallback) merge(ctx context.Context, o *outage) error {
	o.mu.Lock()
	gate := make(chan struct{})
	o.gate = gate
	var idle chan struct{}
	if o.busy > 0 {
		idle = make(chan struct{})
		o.idle = idle
	}
	o.mu.Unlock()
	var err error
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err == nil {
		err = f.charge(ctx, o) // the copy holds still: no decision runs on it
	}
	now := f.now()
	o.mu.Lock()
	o.gate = nil
	if err == nil {
		o.over = true
		f.settled.Store(now.Add(settleFor).UnixMicro())
		f.out.CompareAndSwap(o, nil)
	}
	o.mu.Unlock()
	close(gate)
	if err != nil {
		return err
	}
	f.tell(false)
	if rt := f.router.Load(); rt != nil {
		rt.r.Back() // the other replicas probe at once
	}
	if f.hooks.Up != nil {
		u := Outage{Began: o.began, Lasted: now.Sub(o.began), Admitted: o.admitted.Load(), Waited: o.waited.Load(),
			Allowed: o.allowed.Load(), Refused: o.refused.Load(), Leases: o.leases.Load()}
		for _, t := range o.taken {
			if t.pool != nil {
				u.Pools++
			} else {
				u.Tenants++
			}
		}
		f.hooks.Up(u)
	}
	return nil
}

// charge pushes every tenant and pool decided on the copy during o to Redis, mergeCalls at a
// time; each one charged is not charged again (its base becomes the copy as charged).
func (f *Fallback) charge(ctx context.Context, o *outage) error {
	now := f.now().UnixMicro()
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, mergeCalls)
	for _, t := range o.taken {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, f.timeout)
			defer cancel()
			if err := f.chargeOne(cctx, t, now); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// chargeOne charges Redis with what the copy decided of t by now.
func (f *Fallback) chargeOne(ctx context.Context, t *taken, now int64) error {
	if t.pool != nil {
		d := f.local.poolDelta(t.pool, t.poolTat, now)
		if err := f.shared.mergePool(ctx, t.pool, d); err != nil {
			return err
		}
		t.poolTat = d.tat // charged: a later try charges only what comes after
		return nil
	}
	cur := f.local.copyOf(t.tenant)
	if err := f.shared.mergeTenant(ctx, t.tenant, t.plan, outageDelta(t.plan, t.base, cur, t.from, now)); err != nil {
		return err
	}
	t.base = cur // charged: a later try charges only what comes after
	if t.base == nil {
		t.base = &memState{}
	}
	return nil
}

// run makes one decision about a where it is decided: on Redis while Redis answers here (an
// outage error turns the limiter local); otherwise (and for a while after an outage) by the
// replica deciding a, asked q over the Router when it is another and route is set (a queue's own
// admission never is); when it is this one, on Redis through a replica that reaches it (q
// relayed: Router.Relay), and only when none does on this replica's copy. A tenant's question
// that finds no answer is decided here; a pool's is an error (the job waits).
func run[R fromCopy[R]](ctx context.Context, f *Fallback, a about, q routed, route bool, op func(context.Context, decider) (R, error)) (R, error) {
	var zero R
	for {
		o := f.out.Load()
		route := route && (o != nil || f.settling())
		var since int64
		if o != nil || route {
			since = f.since(a.key())
		}
		if route && since == 0 {
			if r, answered, err := ask[R](ctx, f, a.key(), q); answered {
				return r, err
			} else if a.pool != nil {
				return zero, fmt.Errorf("bucket: the replica deciding pool %s did not answer", a.pool.Name)
			}
		}
		if o == nil {
			r, err := op(ctx, f.up)
			if errors.Is(err, errAnsweredLate) {
				continue // decided again where a is decided now
			}
			if !outageError(ctx, err) {
				return r, err
			}
			f.goDown(err)
			continue
		}
		if r, answered, err := relay[R](ctx, f, q); answered {
			if a.pool == nil {
				f.known.Delete(a.tenant) // decided on Redis, not mirrored: the copy no longer knows it
			}
			return r, err
		}
		if ok, err := o.enter(ctx, f, a, since); err != nil {
			return zero, err
		} else if !ok {
			continue // Redis decides again
		}
		r, err := op(ctx, f.local)
		o.leave()
		return r.onCopy(), err
	}
}

// fromCopy is a decision's result, which says when it was decided on a copy.
type fromCopy[R any] interface{ onCopy() R }

func (r BatchResult) onCopy() BatchResult { r.Local = true; return r }
func (r Result) onCopy() Result           { r.Local = true; return r }
func (r LeaseResult) onCopy() LeaseResult { r.Local = true; return r }
func (r poolReply) onCopy() poolReply     { r.local = true; return r }
func (r Snapshot) onCopy() Snapshot       { return r }

// The decisions, each about one key; route false: this replica's (see Serve).

func (f *Fallback) admitTenant(ctx context.Context, b Batch) (BatchResult, error) {
	q := routed{Op: opAdmit, Tenant: b.Tenant, Plan: b.Plan.Name, Jobs: b.Jobs, Owner: b.Owner, Stored: b.Stored, Keep: b.Keep,
		LateWeight: b.LateWeight, Late: b.Late, Release: b.Release, Peek: b.Peek}
	return run(ctx, f, about{tenant: b.Tenant, plan: b.Plan}, q, false, func(ctx context.Context, d decider) (BatchResult, error) {
		return d.admitTenant(ctx, b)
	})
}

func (f *Fallback) decide(ctx context.Context, req Request, route bool) (Result, error) {
	var q routed
	if req.Plan != nil {
		q = routed{Op: opDecide, Tenant: req.Tenant, Plan: req.Plan.Name, Weight: req.Weight, JobID: req.JobID}
	}
	return run(ctx, f, about{tenant: req.Tenant, plan: req.Plan}, q, route && q.Op != "", func(ctx context.Context, d decider) (Result, error) {
		return d.Decide(ctx, req)
	})
}

func (f *Fallback) lease(ctx context.Context, req LeaseRequest, mode int, route bool) (LeaseResult, error) {
	var q routed
	if req.Plan != nil {
		q = routed{Op: opLease, Mode: mode, Tenant: req.Tenant, Plan: req.Plan.Name, Lease: req.Lease, Cost: req.Cost, Weight: req.Weight, Report: req.Report}
	}
	return run(ctx, f, about{tenant: req.Tenant, plan: req.Plan}, q, route && q.Op != "", func(ctx context.Context, d decider) (LeaseResult, error) {
		return d.leaseCall(ctx, req, mode)
	})
}

func (f *Fallback) pool(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report, route bool) (poolReply, error) {
	q := routed{Op: opPool, Mode: op, Tenant: tenant, Pool: p.Name, Share: share, Jobs: jobs, Cost: cost, Report: rep}
	return run(ctx, f, about{pool: p}, q, route, func(ctx context.Context, d decider) (poolReply, error) {
		return d.poolCall(ctx, op, p, tenant, share, jobs, cost, rep)
	})
}

func (f *Fallback) inspect(ctx context.Context, tenant string, plan *Plan, route bool) (Snapshot, error) {
	var q routed
	if plan != nil {
		q = routed{Op: opInspect, Tenant: tenant, Plan: plan.Name}
	}
	return run(ctx, f, about{tenant: tenant, plan: plan}, q, route && q.Op != "", func(ctx context.Context, d decider) (Snapshot, error) {
		return d.inspectTenant(ctx, tenant, plan)
	})
}

// The verbs: the decisions above put together as on every backend.

// Admit decides the head of a tenant's queue on Redis, the tenant's state mirrored in the copy;
// on the copy while Redis is away.
func (f *Fallback) Admit(ctx context.Context, b Batch) (BatchResult, error) {
	res, err := admitPooled(ctx, f, b, f.admitTenant)
	if o := f.out.Load(); o != nil && err == nil && res.Local {
		o.count(b.Tenant, b.Jobs, res.Outcomes)
	}
	return res, err
}

// count adds a tenant's jobs decided on the copy to o's summary, each job once, as
// admitter_decisions_total counts them: admitted when it goes, told to wait when first told (a
// queue asks about its head again and again; its jobs' IDs rise in its order).
func (o *outage) count(tenant string, jobs []Job, outcomes []JobOutcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	told := o.told[tenant]
	for i, oc := range outcomes {
		switch {
		case oc.Admitted():
			o.admitted.Add(1)
		case oc == JobNotYet && jobs[i].ID > told:
			o.waited.Add(1)
			told = jobs[i].ID
		}
	}
	o.told[tenant] = told
}

// Decide decides a request on Redis, or while Redis is away on the copy of the replica that
// decides the tenant (see Router).
func (f *Fallback) Decide(ctx context.Context, req Request) (Result, error) {
	res, err := f.decide(ctx, req, true)
	if o := f.out.Load(); o != nil && err == nil && res.Local {
		if res.Allowed {
			o.allowed.Add(1)
		} else {
			o.refused.Add(1)
		}
	}
	return res, err
}

// Release ends a lease on Redis, or on the copy while Redis is away.
func (f *Fallback) Release(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	return f.leasePooled(ctx, req, leaseRelease)
}

// Renew extends a lease on Redis, or on the copy while Redis is away.
func (f *Fallback) Renew(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	req.Cost = NoCost
	return f.leasePooled(ctx, req, leaseRenew)
}

// Start renews or takes again a lease as its job begins, on Redis, or on the copy while Redis is
// away.
func (f *Fallback) Start(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	req.Cost = NoCost
	return f.leasePooled(ctx, req, leaseStart)
}

func (f *Fallback) leasePooled(ctx context.Context, req LeaseRequest, mode int) (LeaseResult, error) {
	res, err := leasePooled(ctx, f, req, mode, f.leaseCall)
	if o := f.out.Load(); o != nil && err == nil && res.Local {
		o.leases.Add(1)
	}
	return res, err
}

// leaseCall and poolCall are the tenant's and the pool's parts of a pooled verb, routed.
func (f *Fallback) leaseCall(ctx context.Context, req LeaseRequest, mode int) (LeaseResult, error) {
	return f.lease(ctx, req, mode, true)
}

func (f *Fallback) poolCall(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) (poolReply, error) {
	return f.pool(ctx, op, p, tenant, share, jobs, cost, rep, true)
}

// Inspect reads a tenant's state on Redis, or while Redis is away on the copy of the replica that
// decides it.
func (f *Fallback) Inspect(ctx context.Context, tenant string, plan *Plan) (Snapshot, error) {
	snap, err := f.inspect(ctx, tenant, plan, true)
	if err == nil {
		snap.Pool, err = inspectPool(ctx, f, tenant, plan)
	}
	return snap, err
}

// InspectPool reads a pool on Redis, or while Redis is away on the copy of the replica that
// decides it.
func (f *Fallback) InspectPool(ctx context.Context, p *Pool) (PoolSnapshot, error) {
	return poolSnapshot(ctx, f, p)
}

// Ping reports whether Redis answers (the copy always does: see Local).
func (f *Fallback) Ping(ctx context.Context) error { return f.shared.probe(ctx) }

// Late is Redis's Options.Late.
func (f *Fallback) Late() time.Duration { return f.shared.Late() }

// maxKnown bounds the tenants the copy knows (see Fallback.known): past it, those of an ended
// tenure are dropped, and if that is not enough every one (each taken as forgotten at the next
// outage: conservative).
const maxKnown = 1 << 18

// errAnsweredLate is an admission's answer that came from Redis after this replica began to
// decide the tenant on its copy: it ran on Redis (Redis counts it), and is decided again on the
// copy, or on Redis (the same answer, redeemed) if that outage is over. Charged twice, never
// missed.
var errAnsweredLate = errors.New("bucket: Redis answered after the copy took the tenant on")

// mirror makes the copy of tenant's state the one Redis returned to a call made while outage
// since was the latest begun, known in this replica's tenure of the tenant; false when the copy
// decided the tenant in a later outage (see Memory.restore). A state the copy cannot read
// leaves the tenant unknown to it (taken as forgotten if Redis fails).
func (f *Fallback) mirror(tenant string, m mirrored, since int64) bool {
	if f.clock == nil && m.now > 0 {
		f.offset.Store(m.now - time.Now().UnixMicro())
	}
	var st *memState
	var err error
	if len(m.raw) > 0 {
		st, err = decodeState(m.raw)
	}
	tenure := f.since(RouteTenant(tenant))
	if !f.local.restore(tenant, st, since) {
		return false
	}
	if err == nil && tenure != 0 {
		f.known.Store(tenant, tenure)
	} else {
		f.known.Delete(tenant)
	}
	if f.mirrors.Add(1)%4096 == 0 {
		f.forgetKnown()
	}
	return true
}

// forgetKnown drops the tenants known in a tenure that ended, and every one past maxKnown.
func (f *Fallback) forgetKnown() {
	n := 0
	f.known.Range(func(k, v any) bool {
		if f.since(RouteTenant(k.(string))) != v.(int64) {
			f.known.Delete(k)
		} else {
			n++
		}
		return true
	})
	if n > maxKnown {
		f.known.Clear()
	}
}

// decider is what a decision asks of its backend: Redis (through upstream) or a copy.
type decider interface {
	admitTenant(ctx context.Context, b Batch) (BatchResult, error)
	Decide(ctx context.Context, req Request) (Result, error)
	leaseCall(ctx context.Context, req LeaseRequest, mode int) (LeaseResult, error)
	poolBackend
	inspectTenant(ctx context.Context, tenant string, plan *Plan) (Snapshot, error)
}

// shared is what the Fallback asks of the backend every replica shares (*Redis): its decisions,
// an admission that returns the tenant's state, the merges after an outage, and a probe.
type shared interface {
	decider
	admitState(ctx context.Context, b Batch, mirror bool) (BatchResult, mirrored, error)
	mergeTenant(ctx context.Context, tenant string, p *Plan, d tenantDelta) error
	mergePool(ctx context.Context, p *Pool, d poolDelta) error
	probe(ctx context.Context) error
	Late() time.Duration
}

// replicaCopy is what the Fallback asks of its copy (*Memory, on Redis's clock): the same
// decisions, and a tenant's state as Redis left it (restore), as it is (copyOf), and taken on at
// an outage (adopt); a pool taken on (adoptPool), seeded with what Redis last said of it (seen),
// and what of it to charge Redis with (poolDelta).
type replicaCopy interface {
	decider
	restore(tenant string, st *memState, since int64) bool
	copyOf(tenant string) *memState
	adopt(tenant string, p *Plan, at int64, exact bool, outage int64) (base *memState)
	adoptPool(p *Pool, at int64) (tat int64)
	seen(st PoolState)
	poolDelta(p *Pool, base, now int64) poolDelta
}

var (
	_ shared      = (*Redis)(nil)
	_ replicaCopy = (*Memory)(nil)
	_ decider     = upstream{}
)

// upstream is Redis as the Fallback decides on it: an admission's state is mirrored in the copy,
// what a pool call says of the pool's downstream kept to seed the copy's pool, and an inspection
// leaves its caller at least half its time (for its other figures, or the copy).
type upstream struct{ f *Fallback }

func (u upstream) admitTenant(ctx context.Context, b Batch) (BatchResult, error) {
	since := u.f.outages.Load()
	res, m, err := u.f.shared.admitState(ctx, b, !b.Peek)
	if err == nil && !b.Plan.Shadow && !b.Peek && !u.f.mirror(b.Tenant, m, since) { // a peek returns no state
		return BatchResult{}, errAnsweredLate
	}
	return res, err
}

func (u upstream) Decide(ctx context.Context, req Request) (Result, error) {
	return u.f.shared.Decide(ctx, req)
}

func (u upstream) leaseCall(ctx context.Context, req LeaseRequest, mode int) (LeaseResult, error) {
	return u.f.shared.leaseCall(ctx, req, mode)
}

func (u upstream) poolCall(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) (poolReply, error) {
	r, err := u.f.shared.poolCall(ctx, op, p, tenant, share, jobs, cost, rep)
	if err == nil {
		st := r.state
		st.Name = p.Name
		u.f.local.seen(st)
	}
	return r, err
}

func (u upstream) inspectTenant(ctx context.Context, tenant string, plan *Plan) (Snapshot, error) {
	bound := u.f.timeout
	if dl, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(dl)/2)
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return u.f.shared.inspectTenant(ctx, tenant, plan)
}
