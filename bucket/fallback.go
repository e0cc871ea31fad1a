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
// the call left it (Batch.Mirror; lua/admit.lua), and the copy takes it as is: a tenant's queue
// is decided by one replica, so its copy is exact as of its latest step. A tenant the copy does
// not know when Redis fails (none of its jobs decided here lately) is taken as Redis takes a
// tenant it forgot, at the moment of the failure (lua/state.lua load): a bucket empty then, a
// window full for one window, a quota the share of its period elapsed, every concurrency slot
// held until its jobs' workers report. A pool is taken the same way: every slot held until the
// workers report (see Pool).
//
// The switch. The first call that Redis fails (an error that is not the request's own fault, or
// its deadline) turns the limiter local: that call, and every call after it, is decided on the
// copy at once (answers say so: BatchResult.Local, Result.Local, LeaseResult.Local); nothing
// waits for Redis's timeout again. Redis is asked every probeEvery whether it answers. When it
// does, what was decided on the copy during the outage is charged to Redis (lua/merge.lua: the
// difference between each tenant's copy at the outage's start and now, on top of what Redis
// holds), while the decisions wait; then Redis decides again. A tenant therefore gets no second
// burst when Redis returns: its limits count what went during the outage.
//
// One replica. Without a Router, every decision is this replica's: right for one replica. With
// several, a tenant's decisions are its queue's owner's and a pool's are one replica's, asked
// over the Router while Redis is away (see Router).
type Fallback struct {
	redis *Redis
	local *Memory
	// clock, when set, is the copy's clock (tests); otherwise this host's clock moved by offset.
	clock  func() time.Time
	offset atomic.Int64 // µs: Redis's clock minus this host's, from the latest mirrored reply
	hooks  FallbackHooks
	probe  time.Duration
	// timeout bounds one probe and one merge call.
	timeout time.Duration

	router atomic.Pointer[routing] // nil: one replica (see Router)
	// pools is the copy's pool backend: this replica's pools, and another's asked (see Router).
	pools routedPools
	// known holds the tenants whose state the copy has from Redis (tenant → unix ns of the last
	// mirror; their state may be absent: full); the others are forgotten at the switch.
	known   sync.Map
	mirrors atomic.Int64

	// settled is when, after an outage, this replica stops routing what another decides (see
	// settleFor): unix ns; probeNow wakes the probing of an outage (another replica found Redis).
	settled  atomic.Int64
	probeNow chan struct{}

	mu    sync.RWMutex // held for reading by a decision on the copy, for writing to change mode
	mode  atomic.Int32 // fallbackUp, fallbackDown or fallbackMerging
	out   *outage      // the outage under way (nil when up), under mu
	gate  chan struct{}
	quit  chan struct{}
	wg    sync.WaitGroup
	close sync.Once
}

const (
	fallbackUp int32 = iota
	fallbackDown
	fallbackMerging
)

// probeEvery is how often Redis is asked whether it answers again during an outage.
const probeEvery = 250 * time.Millisecond

// settleFor is how long after an outage a replica goes on routing to the replica that decides
// them the decisions of another's tenants and pools, as during the outage: that replica may not
// have found Redis again and charged it with what its copy holds (a pool's slots taken on it),
// and until it has, Redis would hand them out again.
const settleFor = 3 * time.Second

// Probe asks Redis at once whether it answers again, during an outage (another replica found it
// did: Router.Back).
func (f *Fallback) Probe() {
	select {
	case f.probeNow <- struct{}{}:
	default:
	}
}

// settling reports whether this replica still routes, after an outage, what another decides.
func (f *Fallback) settling() bool { return f.settled.Load() > time.Now().UnixNano() }

// FallbackHooks are told of the outages (all optional): Down when one starts, with the error
// that started it; Up when it ends, with what was decided on the copy meanwhile.
type FallbackHooks struct {
	Down func(err error)
	Up   func(o Outage)
}

// Outage is what a replica decided on its copy during an outage.
type Outage struct {
	// Began is when Redis first failed; Lasted how long until it answered again and was
	// charged with what was decided meanwhile.
	Began  time.Time
	Lasted time.Duration
	// Tenants and Pools decided on the copy; Admitted and Waited the queue's jobs admitted and
	// told to wait, Allowed and Refused the requests (Decide), Leases the releases and renewals.
	Tenants, Pools           int
	Admitted, Waited         int64
	Allowed, Refused, Leases int64
}

// outage is the outage under way: the tenants and pools decided on the copy, each with its
// state at the outage's start (to charge Redis with the difference), and counts.
type outage struct {
	began                                      time.Time
	born                                       int64 // µs of the copy's clock: the switch, when what the copy does not know was lost
	mu                                         sync.Mutex
	tenants                                    map[string]*touched
	pools                                      map[string]*Pool
	admitted, waited, allowed, refused, leases atomic.Int64
	nTenants, nPools                           atomic.Int64 // tenants and pools decided on the copy
}

// touched is a tenant decided on the copy during an outage: its plan, and its state when the
// outage began (nil: the copy did not know it; it was taken as forgotten at born).
type touched struct {
	plan *Plan
	base *memState
}

// NewFallback returns the limiter of fail mode local over r, its copy kept with opts (those of
// r). timeout bounds a probe and a merge call during an outage (0: 1 s).
func NewFallback(r *Redis, opts Options, timeout time.Duration, hooks FallbackHooks) *Fallback {
	if timeout <= 0 {
		timeout = time.Second
	}
	f := &Fallback{redis: r, hooks: hooks, probe: probeEvery, timeout: timeout, quit: make(chan struct{}), probeNow: make(chan struct{}, 1)}
	f.clock = r.clock
	f.local = NewMemory(opts, f.now)
	f.pools = routedPools{f}
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
func (f *Fallback) Local() bool { return f.mode.Load() != fallbackUp }

// Since is when the outage under way began; zero when Redis decides.
func (f *Fallback) Since() time.Time {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.out == nil {
		return time.Time{}
	}
	return f.out.began
}

// Close stops the probing of an outage under way (the copy keeps deciding until the process
// ends). Safe to call twice.
func (f *Fallback) Close() {
	f.close.Do(func() { close(f.quit) })
	f.wg.Wait()
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

// goDown turns the limiter local after err (a no-op when it already is).
func (f *Fallback) goDown(err error) {
	f.mu.Lock()
	if f.mode.Load() != fallbackUp {
		f.mu.Unlock()
		return
	}
	born := f.now().UnixMicro()
	f.local.pools.reset(born)
	o := &outage{began: time.Now(), born: born, tenants: map[string]*touched{}, pools: map[string]*Pool{}}
	f.out = o
	f.mode.Store(fallbackDown)
	f.mu.Unlock()
	if f.hooks.Down != nil {
		f.hooks.Down(err)
	}
	f.wg.Go(func() { f.recover(o) })
}

// recover probes Redis until it answers, then charges it with the outage and turns the limiter
// back to Redis; it ends early when the limiter is closed.
func (f *Fallback) recover(o *outage) {
	t := time.NewTicker(f.probe)
	defer t.Stop()
	for {
		select {
		case <-f.quit:
			return
		case <-t.C:
		case <-f.probeNow:
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		err := f.redis.Ping(ctx)
		if err == nil {
			err = f.redis.refreshBorn(ctx)
		}
		cancel()
		if err != nil {
			continue
		}
		if f.merge(o) {
			return
		}
	}
}

// merge charges Redis with what the copy decided during o while no decision is made, and turns
// the limiter back to Redis when every tenant and pool is charged. It reports whether it did.
func (f *Fallback) merge(o *outage) bool {
	f.mu.Lock()
	f.mode.Store(fallbackMerging)
	f.gate = make(chan struct{})
	gate := f.gate
	f.mu.Unlock()
	// No decision is made on the copy from here until the gate opens: the copy holds still.
	err := f.charge(o)
	f.mu.Lock()
	if err != nil {
		f.mode.Store(fallbackDown)
	} else {
		f.settled.Store(time.Now().Add(settleFor).UnixNano())
		f.mode.Store(fallbackUp)
		f.out = nil
	}
	close(gate)
	f.mu.Unlock()
	if rt := f.router.Load(); err == nil && rt != nil {
		rt.r.Back() // the other replicas probe at once
	}
	if err == nil && f.hooks.Up != nil {
		f.hooks.Up(Outage{Began: o.began, Lasted: time.Since(o.began), Tenants: int(o.nTenants.Load()), Pools: int(o.nPools.Load()),
			Admitted: o.admitted.Load(), Waited: o.waited.Load(), Allowed: o.allowed.Load(), Refused: o.refused.Load(), Leases: o.leases.Load()})
	}
	return err == nil
}

// charge pushes every tenant and pool decided on the copy during o to Redis, a few at a time;
// each one charged is not charged again (its base becomes the copy as charged).
func (f *Fallback) charge(o *outage) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	var emu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	now := f.now().UnixMicro()
	for tenant, t := range o.tenants {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			cur := f.local.copyOf(tenant)
			if err := f.redis.mergeTenant(ctx, tenant, t.plan, outageDelta(t.plan, t.base, cur, o.born, now)); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
				return
			}
			emu.Lock()
			t.base = cur // charged: a later try charges only what comes after
			if t.base == nil {
				t.base = &memState{}
			}
			emu.Unlock()
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for name, p := range o.pools {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		err := f.redis.mergePool(ctx, p, f.local.pools.outageLeases(p.Name, o.born, now), f.local.pools.downstreamHold(p.Name, now), now)
		cancel()
		if err != nil {
			return err
		}
		delete(o.pools, name)
	}
	clear(o.tenants)
	return nil
}

// local runs decide on the copy, for tenant under plan, unless the limiter is not local (then
// ok is false: ask Redis). While a merge is under way it waits for it (bounded by ctx).
func (f *Fallback) onCopy(ctx context.Context, tenant string, plan *Plan, decide func(o *outage)) (ok bool, err error) {
	for {
		switch f.mode.Load() {
		case fallbackUp:
			return false, nil
		case fallbackMerging:
			f.mu.RLock()
			gate := f.gate
			f.mu.RUnlock()
			select {
			case <-gate:
				continue
			case <-ctx.Done():
				return true, fmt.Errorf("bucket: waiting for Redis to be charged with the outage: %w", ctx.Err())
			}
		}
		f.mu.RLock()
		if f.mode.Load() != fallbackDown {
			f.mu.RUnlock()
			continue
		}
		o := f.out
		if tenant != "" {
			f.touch(o, tenant, plan)
		} else if plan != nil && plan.Pool != nil {
			f.touchPool(o, plan.Pool)
		}
		decide(o)
		f.mu.RUnlock()
		return true, nil
	}
}

// touch records that tenant is decided on the copy during o, with its state at the outage's
// start (nothing was decided on the copy for it before its first touch). A tenant the copy
// knows keeps its state, each lease held until the running jobs report (one may have been
// renewed on Redis since it was copied); one it does not know is taken as forgotten at the
// switch.
func (f *Fallback) touch(o *outage, tenant string, plan *Plan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t, ok := o.tenants[tenant]; ok {
		t.plan = plan
	} else {
		if _, known := f.known.Load(tenant); known {
			f.local.holdLeases(tenant, plan, o.born)
		} else {
			f.local.forget(tenant, plan, o.born)
		}
		t := &touched{plan: plan, base: f.local.copyOf(tenant)}
		if _, known := f.known.Load(tenant); !known {
			t.base = nil // its state at the switch was the forgotten one
		}
		o.tenants[tenant] = t
		o.nTenants.Add(1)
	}
}

// touchPool records that pool is decided on the copy during o (this replica decides its slots:
// see Router).
func (f *Fallback) touchPool(o *outage, pool *Pool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.pools[pool.Name]; !ok {
		o.nPools.Add(1)
	}
	o.pools[pool.Name] = pool
}

// knownFor is how long the copy of a tenant's state stays known without a new mirror.
const knownFor = time.Hour

// disown forgets the copy of tenant's state: it may predate another replica's decisions (see
// Batch.Fresh).
func (f *Fallback) disown(tenant string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if o := f.out; o != nil {
		o.mu.Lock()
		_, decided := o.tenants[tenant]
		o.mu.Unlock()
		if decided {
			return // decided here during this outage: the copy is the truth now
		}
	}
	f.known.Delete(tenant)
	f.local.restore(tenant, nil)
}

// Admit decides on Redis, the tenant's state mirrored in the copy; on the copy while Redis is
// away.
func (f *Fallback) Admit(ctx context.Context, b Batch) (BatchResult, error) {
	if b.Fresh {
		f.disown(b.Tenant)
	}
	for {
		if f.mode.Load() == fallbackUp {
			var pb poolBackend = f.redis
			if f.settling() {
				pb = f.pools
			}
			res, err := admitPooled(ctx, pb, b, f.admitMirrored)
			if !outageError(ctx, err) {
				if res.Pool != nil {
					f.local.pools.seen(*res.Pool)
				}
				return res, err
			}
			f.goDown(err)
		}
		var res BatchResult
		var err error
		if ok, werr := f.onCopy(ctx, b.Tenant, b.Plan, func(o *outage) {
			res, err = admitPooled(ctx, f.pools, b, f.local.admit)
			res.Local = true
			for _, oc := range res.Outcomes {
				if oc.Admitted() {
					o.admitted.Add(1)
				} else if oc == JobNotYet {
					o.waited.Add(1)
				}
			}
		}); ok {
			if werr != nil {
				return BatchResult{}, werr
			}
			return res, err
		}
	}
}

// admitMirrored decides a batch on Redis and keeps the tenant's state it returns in the copy.
func (f *Fallback) admitMirrored(ctx context.Context, b Batch) (BatchResult, error) {
	res, m, err := f.redis.admitState(ctx, b, true)
	if err == nil && !b.Plan.Shadow {
		f.mirror(b.Tenant, m)
	}
	return res, err
}

// mirror makes the copy of tenant's state the one Redis returned. A state the copy cannot read
// leaves the tenant unknown to it (taken as forgotten if Redis fails). During an outage a
// tenant already decided on the copy keeps its copy.
func (f *Fallback) mirror(tenant string, m mirrored) {
	if f.clock == nil && m.now > 0 {
		f.offset.Store(m.now - time.Now().UnixMicro())
	}
	var st *memState
	if len(m.raw) > 0 {
		st, _ = decodeState(m.raw)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if o := f.out; o != nil {
		o.mu.Lock()
		_, decided := o.tenants[tenant]
		o.mu.Unlock()
		if decided {
			return
		}
	}
	now := time.Now()
	f.known.Store(tenant, now.UnixNano())
	f.local.restore(tenant, st)
	if f.mirrors.Add(1)%4096 == 0 {
		cut := now.Add(-knownFor).UnixNano()
		f.known.Range(func(k, v any) bool {
			if v.(int64) < cut {
				f.known.Delete(k)
			}
			return true
		})
	}
}

// Decide decides a request on Redis, or while Redis is away on the copy of the replica that
// decides the tenant (see Router).
func (f *Fallback) Decide(ctx context.Context, req Request) (Result, error) {
	return f.decide(ctx, req, true)
}

// decideHere is Decide on this replica, asked by another (see Serve).
func (f *Fallback) decideHere(ctx context.Context, req Request) (Result, error) {
	return f.decide(ctx, req, false)
}

func (f *Fallback) decide(ctx context.Context, req Request, route bool) (Result, error) {
	for {
		up := f.mode.Load() == fallbackUp
		if r := f.remote(RouteTenant(req.Tenant)); route && r != nil && req.Plan != nil && (!up || f.settling()) {
			if rep, ok := f.ask(ctx, r, RouteTenant(req.Tenant), routed{Op: "decide", Tenant: req.Tenant, Plan: req.Plan.Name, Weight: req.Weight, JobID: req.JobID}); ok {
				if rep.Error != "" || rep.Result == nil {
					return Result{}, fmt.Errorf("bucket: the replica deciding tenant %q: %s", req.Tenant, rep.Error)
				}
				res := *rep.Result
				res.Local = !up
				return res, nil
			}
		}
		if up {
			res, err := f.redis.Decide(ctx, req)
			if !outageError(ctx, err) {
				return res, err
			}
			f.goDown(err)
		}
		var res Result
		var err error
		if ok, werr := f.onCopy(ctx, req.Tenant, req.Plan, func(o *outage) {
			res, err = f.local.Decide(ctx, req)
			res.Local = true
			if res.Allowed {
				o.allowed.Add(1)
			} else {
				o.refused.Add(1)
			}
		}); ok {
			if werr != nil {
				return Result{}, werr
			}
			return res, err
		}
	}
}

// Release ends a lease on Redis, or on the copy while Redis is away.
func (f *Fallback) Release(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	return f.lease(ctx, req, leaseRelease, true)
}

// Renew extends a lease on Redis, or on the copy while Redis is away.
func (f *Fallback) Renew(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	req.Cost = NoCost
	return f.lease(ctx, req, leaseRenew, true)
}

// Start renews or takes again a lease as its job begins, on Redis, or on the copy while Redis is
// away.
func (f *Fallback) Start(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	req.Cost = NoCost
	return f.lease(ctx, req, leaseStart, true)
}

// leaseHere is a lease operation on this replica, asked by another (see Serve).
func (f *Fallback) leaseHere(ctx context.Context, req LeaseRequest, mode int) (LeaseResult, error) {
	return f.lease(ctx, req, mode, false)
}

// leaseModes names the lease modes in routed questions.
var leaseModes = map[int]string{leaseRelease: "release", leaseRenew: "renew", leaseStart: "start"}

func (f *Fallback) lease(ctx context.Context, req LeaseRequest, mode int, route bool) (LeaseResult, error) {
	for {
		up := f.mode.Load() == fallbackUp
		if r := f.remote(RouteTenant(req.Tenant)); route && r != nil && req.Plan != nil && (!up || f.settling()) {
			q := routed{Op: leaseModes[mode], Tenant: req.Tenant, Plan: req.Plan.Name, Lease: req.Lease, Cost: req.Cost, Weight: req.Weight}
			if req.Report != (Report{}) {
				q.Report = &req.Report
			}
			if rep, ok := f.ask(ctx, r, RouteTenant(req.Tenant), q); ok {
				if rep.Error != "" || rep.Lease == nil {
					return LeaseResult{}, fmt.Errorf("bucket: the replica deciding tenant %q: %s", req.Tenant, rep.Error)
				}
				res := *rep.Lease
				res.Local = !up
				return res, nil
			}
		}
		if up {
			var pb poolBackend = f.redis
			if f.settling() {
				pb = f.pools
			}
			res, err := leasePooled(ctx, pb, req, mode, f.redis.leaseCall)
			if !outageError(ctx, err) {
				if res.Pool != nil {
					f.local.pools.seen(*res.Pool)
				}
				return res, err
			}
			f.goDown(err)
		}
		var res LeaseResult
		var err error
		if ok, werr := f.onCopy(ctx, req.Tenant, req.Plan, func(o *outage) {
			res, err = leasePooled(ctx, f.pools, req, mode, f.local.leaseCall)
			res.Local = true
			o.leases.Add(1)
		}); ok {
			if werr != nil {
				return LeaseResult{}, werr
			}
			return res, err
		}
	}
}

// routedPools is the copy's pool backend: a pool this replica decides is on the copy (or on
// Redis when it answers here), another's is asked of the replica that decides it (see Router).
type routedPools struct{ f *Fallback }

// A pool's slots are decided by one replica or by none: a question its replica does not answer
// is an error (the job waits), not a decision on this replica's copy, which would hand the pool
// out a second time.
func (rp routedPools) poolCall(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) (poolReply, error) {
	f := rp.f
	if r := f.remote(RoutePool(p.Name)); r != nil {
		q := routed{Op: "pool", Tenant: tenant, Pool: p.Name, PoolOp: op, Share: share, Jobs: jobs, Cost: cost}
		if rep != (Report{}) {
			q.Report = &rep
		}
		ans, ok := f.ask(ctx, r, RoutePool(p.Name), q)
		switch {
		case !ok:
			return poolReply{}, fmt.Errorf("bucket: the replica deciding pool %s did not answer", p.Name)
		case ans.Error != "" || ans.Pool == nil:
			return poolReply{}, fmt.Errorf("bucket: the replica deciding pool %s: %s", p.Name, ans.Error)
		}
		return ans.Pool.reply(), nil
	}
	return f.poolHere(ctx, op, p, tenant, share, jobs, cost, rep)
}

// poolHere is a pool operation decided by this replica: on Redis while it answers here, else on
// the copy (the pool then counted as decided here during the outage).
func (f *Fallback) poolHere(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) (poolReply, error) {
	if f.mode.Load() == fallbackUp {
		r, err := f.redis.poolCall(ctx, op, p, tenant, share, jobs, cost, rep)
		if !outageError(ctx, err) {
			if err == nil {
				st := r.state
				st.Name = p.Name
				f.local.pools.seen(st)
			}
			return r, err
		}
		f.goDown(err)
	}
	var r poolReply
	var err error
	pl := &Plan{Pool: p}
	if ok, werr := f.onCopy(ctx, "", pl, func(*outage) { r, err = f.local.poolCall(ctx, op, p, tenant, share, jobs, cost, rep) }); ok {
		if werr != nil {
			return poolReply{}, werr
		}
		return r, err
	}
	return f.redis.poolCall(ctx, op, p, tenant, share, jobs, cost, rep) // up again meanwhile
}

// Inspect reads a tenant's state on Redis, or on the copy while Redis is away.
func (f *Fallback) Inspect(ctx context.Context, tenant string, plan *Plan) (Snapshot, error) {
	if f.mode.Load() == fallbackUp {
		snap, err := f.redis.Inspect(ctx, tenant, plan)
		if !outageError(ctx, err) {
			return snap, err
		}
	}
	return f.local.Inspect(ctx, tenant, plan)
}

// InspectPool reads a pool on Redis, or on the copy while Redis is away.
func (f *Fallback) InspectPool(ctx context.Context, p *Pool) (PoolSnapshot, error) {
	if f.mode.Load() == fallbackUp {
		snap, err := f.redis.InspectPool(ctx, p)
		if !outageError(ctx, err) {
			return snap, err
		}
	}
	return f.local.InspectPool(ctx, p)
}

// Ping reports whether Redis answers (the copy always does: see Local).
func (f *Fallback) Ping(ctx context.Context) error { return f.redis.Ping(ctx) }

// Late is Redis's Options.Late.
func (f *Fallback) Late() time.Duration { return f.redis.Late() }
