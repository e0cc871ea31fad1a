package bucket

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// poolPlans are plans of pool with shares 1, 2 and 5, of generous limits of their own.
func poolPlans(t *testing.T, pool *Pool) []*Plan {
	var out []*Plan
	for i, share := range []int64{1, 2, 5} {
		p := mustPlan(t, fmt.Sprint("p", i), lim("own", 1_000_000, time.Microsecond))
		p.Pool, p.Share = pool, share
		out = append(out, p)
	}
	return out
}

// TestPoolDifferential feeds the same random grants, releases, renewals and time to both
// backends' pools and requires the same answers: grants, waits, what is in flight, whom to
// wake. At every step the weight in flight is at most the pool's concurrency, and the bucket
// never gives more than its capacity and rate allow (the invariant, as a property).
func TestPoolDifferential(t *testing.T) {
	breakers, whys, limits := map[int64]int{}, map[int64]int{}, map[int64]int{}
	defer func() {
		if breakers[BreakerClosed] == 0 || breakers[BreakerOpen] == 0 || breakers[BreakerHalfOpen] == 0 {
			t.Errorf("the breaker was closed, open, half-open at %v grants: the sequence proves little", breakers)
		}
		if len(whys) < 3 || len(limits) < 2 { // TestPoolAdaptiveDifferential moves it further
			t.Errorf("the adaptive limit moved for %v and was %v at the grants: the sequence proves little", whys, limits)
		}
		t.Logf("breaker states %v; limits in force %v, why %v", breakers, limits, whys)
	}()
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := newClock()
			mem := NewMemory(Options{}, c.Now)
			red := NewRedis(redisClient(t), "", Options{})
			red.pin(c.Now)
			pool, err := NewPool(Pool{Name: uniqueTenant("pool"), Concurrency: 6, Lease: 2 * time.Second, Capacity: 8, Rate: "4/s", Interval: 250 * ms,
				Breaker: &Breaker{Failures: 60, Window: 2 * time.Second, Cooldown: 700 * ms, Probes: 2, MinJobs: 3}, Adaptive: &Adaptive{Min: 2}})
			if err != nil {
				t.Fatal(err)
			}
			plans := poolPlans(t, pool)
			tenants := []string{uniqueTenant("a"), uniqueTenant("b"), uniqueTenant("c"), uniqueTenant("d")}
			ctx := context.Background()
			var held []int64
			next := int64(1)
			granted := int64(0)
			start := c.Now()
			for step := range 2000 {
				if rng.IntN(3) == 0 {
					c.Advance(time.Duration(rng.IntN(300_000)) * time.Microsecond)
				}
				ti := rng.IntN(len(tenants))
				tenant, p := tenants[ti], plans[ti%len(plans)]
				switch op := rng.IntN(10); {
				case op < 6: // ask for a few jobs
					jobs := make([]Job, 1+rng.IntN(3))
					for i := range jobs {
						jobs[i] = Job{ID: next, Weight: 1 + rng.Int64N(3)}
						next++
					}
					want, err1 := mem.poolCall(ctx, poolAcquire, pool, tenant, p.share(), jobs, NoCost, Report{})
					got, err2 := red.poolCall(ctx, poolAcquire, pool, tenant, p.share(), jobs, NoCost, Report{})
					if err1 != nil || err2 != nil {
						t.Fatalf("step %d: %v / %v", step, err1, err2)
					}
					breakers[want.state.Breaker]++
					whys[want.state.LimitWhy]++
					limits[want.state.Limit]++
					if want.granted != got.granted || want.wait != got.wait || want.state != got.state {
						t.Fatalf("step %d: acquire %v for %s: memory %+v, redis %+v", step, jobs, tenant, want, got)
					}
					for _, j := range jobs[:want.granted] {
						held = append(held, j.ID)
						granted += j.Weight
					}
					if want.state.InFlight > pool.Concurrency {
						t.Fatalf("step %d: %d in flight in a pool of %d", step, want.state.InFlight, pool.Concurrency)
					}
					if most := pool.Capacity + int64(c.Now().Sub(start)/pool.Interval); granted > most {
						t.Fatalf("step %d: %d granted by %v, more than %d (capacity + rate × time)", step, granted, c.Now().Sub(start), most)
					}
				case op < 9 && len(held) > 0: // one ends (or gets renewed)
					k := rng.IntN(len(held))
					id := held[k]
					o := poolRelease
					if op == 8 {
						o = poolRenew
					} else {
						held = append(held[:k], held[k+1:]...)
					}
					cost := int64(NoCost)
					if rng.IntN(2) == 0 {
						cost = rng.Int64N(4)
					}
					if o == poolRenew {
						cost = NoCost
					}
					var rep Report
					if o == poolRelease {
						rep.Outcome = DownstreamOutcome(rng.IntN(3))
						if seed == 1 {
							rep.Outcome = DownstreamOutcome(rng.IntN(2) * rng.IntN(3)) // mostly ok: the breaker closes
						}
						if rng.IntN(10) == 0 { // the downstream asks the pool for a pause
							rep.RetryAfter, rep.PoolScope = time.Duration(rng.IntN(1_500_000))*time.Microsecond, true
						}
					}
					want, err1 := mem.poolCall(ctx, o, pool, tenant, p.share(), []Job{{ID: id}}, cost, rep)
					got, err2 := red.poolCall(ctx, o, pool, tenant, p.share(), []Job{{ID: id}}, cost, rep)
					if err1 != nil || err2 != nil {
						t.Fatalf("step %d: %v / %v", step, err1, err2)
					}
					if want.found != got.found || want.weight != got.weight || want.ends != got.ends || want.state != got.state || !slices.Equal(want.wakes, got.wakes) {
						t.Fatalf("step %d: op %d of lease %d: memory %+v, redis %+v", step, o, id, want, got)
					}
					if o == poolRelease && want.found && cost >= 0 && cost < want.weight {
						granted -= want.weight - cost // reconciled: given back (a cost above the weight is a debt, not a grant)
					}
				}
			}
		})
	}
}

// failing is a pool backend whose give-backs fail.
type failing struct{ poolBackend }

func (f failing) poolCall(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) (poolReply, error) {
	if op == poolGiveBack {
		return poolReply{}, errors.New("connection lost")
	}
	return f.poolBackend.poolCall(ctx, op, p, tenant, share, jobs, cost, rep)
}

// TestPooledFailureBetweenTheCalls: the pool grants, then the tenant's call fails (on Redis
// Cluster the two keys may be on different nodes). The grants are given back; and when the
// give-back fails too, their slots come back when their leases end: the pool is below its
// capacity for a lease at most, never above it.
func TestPooledFailureBetweenTheCalls(t *testing.T) {
	c := newClock()
	backends := map[string]interface {
		Limiter
		poolBackend
	}{"memory": NewMemory(Options{}, c.Now), "redis": NewTestRedis(t, false, c.Now, Options{})}
	for name, l := range backends {
		t.Run(name, func(t *testing.T) {
			pool, _ := NewPool(Pool{Name: uniqueTenant("pool"), Concurrency: 2, Lease: 10 * time.Second})
			p := poolPlans(t, pool)[0]
			tenant := uniqueTenant("t")
			ctx := context.Background()
			broken := func(context.Context, Batch) (BatchResult, error) {
				return BatchResult{}, errors.New("the tenant's node is down")
			}
			b := Batch{Tenant: tenant, Plan: p, Owner: 1, Jobs: []Job{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}}}
			if _, err := admitPooled(ctx, l, b, broken); err == nil {
				t.Fatal("a failed tenant call succeeded")
			}
			if s, _ := inspectPool(ctx, l, tenant, p); s.InFlight != 0 {
				t.Fatalf("%d in flight after the tenant's call failed, want 0 (given back)", s.InFlight)
			}
			if _, err := admitPooled(ctx, failing{l}, b, broken); err == nil {
				t.Fatal("a failed tenant call succeeded")
			}
			s, _ := inspectPool(ctx, l, tenant, p)
			if s.InFlight != 2 {
				t.Fatalf("%d in flight when the give-back failed too, want 2 (held until their leases end)", s.InFlight)
			}
			c.Advance(10 * time.Second)
			if s, _ = inspectPool(ctx, l, tenant, p); s.InFlight != 0 {
				t.Fatalf("%d in flight after the leases ended, want 0", s.InFlight)
			}
			r, err := l.Admit(ctx, Batch{Tenant: tenant, Plan: p, Owner: 1, Jobs: []Job{{ID: 3, Weight: 1}, {ID: 4, Weight: 1}}})
			if err != nil || !r.Outcomes[0].Admitted() || !r.Outcomes[1].Admitted() {
				t.Fatalf("after the leases ended: %+v %v, want both admitted", r, err)
			}
		})
	}
}

// TestPooledAdmissionKeepsEveryWake: the pool's grant names a waiter to wake (the job it refused
// was that waiter's turn), then the tenant's own limits refuse what the pool granted, which is
// given back and names waiters of its own: the result names both. Before, the give-back's
// wakes replaced the grant's: the waiter whose turn it was slept until it asked again (a
// second, or the end of a lease).
func TestPooledAdmissionKeepsEveryWake(t *testing.T) {
	c := newClock()
	m := NewMemory(Options{}, c.Now)
	pool, err := NewPool(Pool{Name: "w", Concurrency: 3, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	plans := map[string]*Plan{}
	for _, name := range []string{"a", "c"} {
		p := mustPlan(t, name, lim("own", 1_000_000, time.Microsecond))
		p.Pool, p.Share = pool, 1
		plans[name] = p
	}
	ctx := context.Background()
	refused := func(_ context.Context, b Batch) (BatchResult, error) { // c's own limits: nothing fits
		r := BatchResult{Outcomes: make([]JobOutcome, len(b.Jobs)), Limit: "own"}
		for i := range r.Outcomes {
			r.Outcomes[i] = JobNotYet
		}
		return r, nil
	}
	ask := func(pb poolBackend, tenant string, own func(context.Context, Batch) (BatchResult, error), ids ...int64) BatchResult {
		t.Helper()
		b := Batch{Tenant: tenant, Plan: plans[tenant], Owner: 1}
		for _, id := range ids {
			b.Jobs = append(b.Jobs, Job{ID: id, Weight: 1})
		}
		res, err := admitPooled(ctx, pb, b, own)
		if err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Millisecond)
		return res
	}
	ask(m, "a", m.admitTenant, 1, 2)
	if r := ask(m, "a", m.admitTenant, 3, 4); r.Outcomes[1] != JobNotYet || !r.PoolBound {
		t.Fatalf("a's job 4 in a full pool: %+v, want it waiting for the pool", r)
	}
	for _, id := range []int64{1, 2} {
		if _, err := m.Release(ctx, LeaseRequest{Tenant: "a", Plan: plans["a"], Lease: id, Cost: NoCost}); err != nil {
			t.Fatal(err)
		}
	}
	// c asks for 2 of the 2 free slots: the pool grants the first, the second is a's turn (a is
	// woken); c's own limits refuse the first, given back.
	r := ask(m, "c", refused, 5, 6)
	if !slices.Contains(r.Wakes, "a") {
		t.Errorf("wakes %v, want a among them (the pool refused c's job 6 for a's turn)", r.Wakes)
	}
	if r.GiveBackErr != nil {
		t.Errorf("give-back error %v, want none", r.GiveBackErr)
	}
}

// TestPooledGiveBackErrorIsReported: when the grants the tenant's limits did not use cannot be
// given back, the decision stands and says so (BatchResult.GiveBackErr, naming the pool and the
// tenant): the slots stay taken until their leases end, and a caller can count and log it.
// Before, the error was dropped: a leak of the pool's capacity was invisible.
func TestPooledGiveBackErrorIsReported(t *testing.T) {
	c := newClock()
	m := NewMemory(Options{}, c.Now)
	pool, _ := NewPool(Pool{Name: "w", Concurrency: 2, Lease: 10 * time.Second})
	p := poolPlans(t, pool)[0]
	own := func(_ context.Context, b Batch) (BatchResult, error) {
		return BatchResult{Outcomes: []JobOutcome{JobAdmitted, JobNotYet}, Limit: "own"}, nil
	}
	b := Batch{Tenant: "t", Plan: p, Owner: 1, Jobs: []Job{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}}}
	res, err := admitPooled(context.Background(), failing{m}, b, own)
	if err != nil {
		t.Fatalf("the decision failed (%v): it stands, only the give-back failed", err)
	}
	if !res.Outcomes[0].Admitted() || res.Outcomes[1] != JobNotYet {
		t.Errorf("outcomes %v, want admitted, not-yet", res.Outcomes)
	}
	if res.GiveBackErr == nil || !strings.Contains(res.GiveBackErr.Error(), `pool w`) || !strings.Contains(res.GiveBackErr.Error(), `"t"`) ||
		!strings.Contains(res.GiveBackErr.Error(), "connection lost") {
		t.Errorf("give-back error %v, want one naming pool w, tenant \"t\" and the cause", res.GiveBackErr)
	}
	if s, _ := inspectPool(context.Background(), m, "t", p); s.InFlight != 2 {
		t.Errorf("%d in flight, want 2 (job 2's slot held until its lease ends)", s.InFlight)
	}
}

// FuzzDecodePoolReply: a pool script's reply that does not have the layout is an error, never a
// panic.
func FuzzDecodePoolReply(f *testing.F) {
	f.Add(0, []byte{}, "")
	f.Add(poolAcquire, packInts(nil, 1, 0, 1, -1, 0, 0), "t")
	f.Add(poolInspect, packInts(nil, 0, -1, 1, 1, 5, 1, 1), "t")
	f.Fuzz(func(t *testing.T, op int, packed []byte, names string) {
		if len(packed)%8 != 0 || op < 0 || op > poolInspect {
			return
		}
		vals := make([]int64, len(packed)/8)
		if err := unpackInts(packed, vals); err != nil {
			t.Fatal(err)
		}
		var ns []string
		if names != "" {
			ns = strings.Split(names, ",")
		}
		r, err := decodePoolReply(op, vals, nil, ns)
		if err == nil && op == poolInspect && len(r.tenants) != len(ns) {
			t.Fatalf("%d tenants decoded of %d names", len(r.tenants), len(ns))
		}
	})
}

// TestPoolAdaptiveDifferential runs an adaptive pool on both backends in front of the
// simulation's downstream (adaptsim_test.go: flat up to 8 at once, slower above, overloaded
// above 16, halved for a while): a tenant asks for as many jobs as the pool grants whenever
// one ends, and each ends after the downstream's time with its outcome. Both backends answer
// alike at every call, and the limit in force grows, shrinks, halves and measures its floor.
func TestPoolAdaptiveDifferential(t *testing.T) {
	c := newClock()
	mem := NewMemory(Options{}, c.Now)
	red := NewRedis(redisClient(t), "", Options{})
	red.pin(c.Now)
	pool, err := NewPool(Pool{Name: uniqueTenant("adaptive"), Concurrency: 24, Lease: time.Minute, Adaptive: &Adaptive{Min: 2}})
	if err != nil {
		t.Fatal(err)
	}
	tenant := uniqueTenant("t")
	ctx := context.Background()
	start := c.Now()
	type job struct {
		id, end    int64
		overloaded bool
	}
	var running []job
	next := int64(1)
	whys, limits := map[int64]int{}, map[int64]int{}
	check := func(what string, a, b poolReply) {
		t.Helper()
		if a.granted != b.granted || a.wait != b.wait || a.found != b.found || a.ran != b.ran || a.state != b.state {
			t.Fatalf("%s at +%v: memory %+v, redis %+v", what, c.Now().Sub(start), a, b)
		}
		whys[a.state.LimitWhy]++
		limits[a.state.Limit]++
	}
	for c.Now().Sub(start) < 40*time.Second {
		now := c.Now().UnixMicro()
		phase := simDownstream[0]
		for _, ph := range simDownstream {
			if c.Now().Sub(start) >= ph.from {
				phase = ph
			}
		}
		jobs := make([]Job, 4)
		for i := range jobs {
			jobs[i] = Job{ID: next + int64(i), Weight: 1}
		}
		a, err1 := mem.poolCall(ctx, poolAcquire, pool, tenant, 1, jobs, NoCost, Report{})
		b, err2 := red.poolCall(ctx, poolAcquire, pool, tenant, 1, jobs, NoCost, Report{})
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		check("acquire", a, b)
		for _, j := range jobs[:a.granted] {
			n := 1
			for _, r := range running {
				if !r.overloaded {
					n++
				}
			}
			d, over := simBase.Microseconds(), n > phase.overload
			if over {
				d = 1000
			} else if n > phase.knee {
				x := float64(n - phase.knee)
				d = int64(float64(d) * (1 + x*x/float64(phase.knee)))
			}
			running = append(running, job{j.ID, now + d, over})
			next = j.ID + 1
		}
		if len(running) == 0 {
			c.Advance(time.Duration(a.wait) * time.Microsecond)
			continue
		}
		slices.SortFunc(running, func(x, y job) int { return int(x.end - y.end) })
		e := running[0]
		running = running[1:]
		c.Advance(time.Duration(e.end-now) * time.Microsecond)
		rep := Report{}
		if e.overloaded {
			rep.Outcome = DownstreamOverloaded
		}
		a, err1 = mem.poolCall(ctx, poolRelease, pool, tenant, 1, []Job{{ID: e.id, Weight: 1}}, NoCost, rep)
		b, err2 = red.poolCall(ctx, poolRelease, pool, tenant, 1, []Job{{ID: e.id, Weight: 1}}, NoCost, rep)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		check("release", a, b)
	}
	for _, w := range []int64{LimitGrew, LimitShrank, LimitOverloaded, LimitMeasuring} {
		if whys[w] == 0 {
			t.Errorf("the limit never moved for %q: %v", LimitWhyText(w), whys)
		}
	}
	t.Logf("limits in force %v; why %v", limits, whys)
}
