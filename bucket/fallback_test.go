package bucket

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/redis/rueidis"
)

// fallbackRedis is a Redis backend on a redis-server of the test's own, which the test may kill
// and restart (with its data: an append-only file written at every command), deciding at
// clock's time.
func fallbackRedis(t *testing.T, clock func() time.Time, o Options) (*Redis, *testenv.RedisServer) {
	t.Helper()
	srv := testenv.StartRedisWith(t, "--appendfsync", "always")
	opt, err := RedisClientOption(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	// A reply later than the connection's write timeout fails the call, which turns the
	// fallback local: on a loaded machine redis-server can be starved past the service's 300 ms.
	// The tests' calls are bounded by their contexts (those that pause Redis) or meet a closed
	// connection (those that kill it).
	opt.ConnWriteTimeout = 10 * time.Second
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	r := NewRedis(client, "", o)
	r.pin(clock)
	return r, srv
}

// TestMirrorCopiesTheState: after every admission on Redis, the state it returns (Batch.Mirror),
// read into a memory backend, reads there exactly as on Redis.
func TestMirrorCopiesTheState(t *testing.T) {
	plans := differentialPlans(t)
	c := newClock()
	opts := Options{Horizon: 2 * time.Second, SlotGrace: 500 * ms, MarkerTTL: 3 * time.Second, Redeem: 700 * ms, Hold: 1500 * ms}
	red := NewRedis(redisClient(t), "", opts)
	red.pin(c.Now)
	cp := NewMemory(opts, c.Now)
	rng := rand.New(rand.NewPCG(3, 3))
	ctx := context.Background()
	tenants := make([]string, len(plans))
	next := make([]int64, len(plans))
	for i := range tenants {
		tenants[i], next[i] = uniqueTenant("m"), 1
	}
	mirrored := 0
	for step := 0; step < 600; step++ {
		c.Advance(time.Duration(rng.IntN(400_000)) * time.Microsecond)
		ti := rng.IntN(len(plans))
		p := plans[ti]
		b := Batch{Tenant: tenants[ti], Plan: p, Owner: 1}
		for range 1 + rng.IntN(4) {
			b.Jobs = append(b.Jobs, Job{ID: next[ti], Weight: 1 + rng.Int64N(p.MaxWeight())})
			next[ti]++
		}
		if rng.IntN(4) == 0 && p.Leases() {
			_, _ = red.Release(ctx, LeaseRequest{Tenant: b.Tenant, Plan: p, Lease: next[ti] - 2 - rng.Int64N(3), Cost: NoCost})
		}
		_, m, err := red.admitState(ctx, b, true)
		if err != nil {
			t.Fatal(err)
		}
		var st *memState
		if len(m.raw) > 0 {
			if st, err = decodeState(m.raw); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			mirrored++
		}
		if m.now != c.Now().UnixMicro() {
			t.Fatalf("step %d: mirrored at %d, want the call's time %d", step, m.now, c.Now().UnixMicro())
		}
		cp.restore(b.Tenant, st, 0)
		want, err := red.Inspect(ctx, b.Tenant, p)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := cp.Inspect(ctx, b.Tenant, p)
		want.Pool, got.Pool = nil, nil
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d tenant %s:\nredis %+v\ncopy  %+v", step, b.Tenant, want, got)
		}
	}
	if mirrored < 300 {
		t.Errorf("only %d states mirrored: the test proves little", mirrored)
	}
}

// TestFallbackChangesNothing: the same random admissions on a Fallback and on a memory backend
// that never fails, under buckets, windows and quotas; Redis is killed a third of the way and
// started again (with its data) at two thirds. Every answer is the memory backend's, before,
// during and after the outage: the copy takes over where Redis left off, and Redis, charged with
// the outage, where the copy did; at the end Redis holds the memory backend's state. (A
// concurrency limit differs by design: see TestFallbackHoldsLeasesUntilTheyReport.)
func TestFallbackChangesNothing(t *testing.T) {
	c := newClock()
	opts := Options{Redeem: 700 * ms, Hold: 1500 * ms}
	red, srv := fallbackRedis(t, c.Now, opts)
	downs, ups := 0, []Outage{}
	f := NewFallback(red, opts, time.Second, FallbackHooks{Down: func(err error) { downs++; t.Logf("outage %d begins at %v: %v", downs, c.Now(), err) }, Up: func(o Outage) { ups = append(ups, o) }})
	f.Watch()
	t.Cleanup(f.Close)
	ref := NewMemory(opts, c.Now)
	plans := []*Plan{
		mustPlan(t, "mixed", lim("burst", 6, 150*ms), win("w", 9, 1500*ms), quota("q", 40, Minute, nil)),
		mustPlan(t, "odd", lim("a", 7, 333334*time.Microsecond), quota("q", 60, Minute, nil), lim("b", 6, 80*ms)),
		mustPlan(t, "wide", win("wide", 200, 3*time.Second), lim("burst", 60, 5*ms)),
	}
	tenants := make([]string, len(plans))
	next := make([]int64, len(plans))
	admitted := make([][]int64, len(plans))
	for i := range tenants {
		tenants[i], next[i] = uniqueTenant("f"), 1
	}
	rng := rand.New(rand.NewPCG(9, 9))
	ctx := context.Background()
	local := 0
	for step := 0; step < 900; step++ {
		switch step {
		case 300:
			srv.Kill()
		case 600:
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 20*time.Second, "the fallback to charge Redis and return to it", func() bool { return !f.Local() })
		}
		c.Advance(time.Duration(rng.IntN(300_000)) * time.Microsecond)
		ti := rng.IntN(len(plans))
		p := plans[ti]
		if a := admitted[ti]; p.Leases() && len(a) > 0 && rng.IntN(3) == 0 {
			req := LeaseRequest{Tenant: tenants[ti], Plan: p, Lease: a[rng.IntN(len(a))], Cost: NoCost}
			got, err := f.Release(ctx, req)
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			want, _ := ref.Release(ctx, req)
			got.Local, got.LeasesExpired, want.LeasesExpired = false, 0, 0
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d release %d:\nfallback %+v\nmemory   %+v", step, req.Lease, got, want)
			}
			continue
		}
		b := Batch{Tenant: tenants[ti], Plan: p, Owner: 1}
		for range 1 + rng.IntN(3) {
			b.Jobs = append(b.Jobs, Job{ID: next[ti], Weight: 1 + rng.Int64N(min(p.MaxWeight(), 3))})
			next[ti]++
		}
		got, err := f.Admit(ctx, b)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		want, _ := ref.Admit(ctx, b)
		if got.Local {
			local++
		}
		for i, o := range want.Outcomes {
			if o == JobAdmitted {
				admitted[ti] = append(admitted[ti], b.Jobs[i].ID)
			}
		}
		got.Local, got.LeasesExpired, want.LeasesExpired = false, 0, 0
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d (%d jobs of %s) at %v, Redis away %v:\nfallback %+v\nmemory   %+v", step, len(b.Jobs), p.Name, c.Now(), step >= 300 && step < 600, got, want)
		}
	}
	// A restarted server slow to answer its first calls (an i/o timeout under a loaded machine)
	// makes another outage, which changes nothing either.
	testenv.WaitFor(t, 20*time.Second, "the fallback to be back on Redis", func() bool { return !f.Local() })
	if local < 250 || downs < 1 || len(ups) != downs {
		t.Fatalf("%d answers decided on the copy, %d outages begun and %v ended: want about 300, each outage ended", local, downs, ups)
	}
	if ups[0].Tenants != len(plans) || ups[0].Admitted == 0 || ups[0].Waited == 0 {
		t.Errorf("the outage's summary %+v: want every tenant, admissions and waits", ups[0])
	}
	for i, tn := range tenants {
		want, _ := ref.Inspect(ctx, tn, plans[i])
		got, err := red.Inspect(ctx, tn, plans[i])
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("tenant %s on Redis after the outage:\nredis  %+v\nmemory %+v", tn, got, want)
		}
	}
}

// TestFallbackHoldsLeasesUntilTheyReport: a concurrency limit of 3 full when Redis fails. On the
// copy, each lease copied from Redis is held until 60 % of a lease after the switch (it may have
// been renewed on Redis since it was copied), unless its job reports: a done message frees its
// slot at once, a renewal keeps it. Never more than 3 are held; after the outage Redis counts
// what the copy held, not what it released.
func TestFallbackHoldsLeasesUntilTheyReport(t *testing.T) {
	c := newClock()
	opts := Options{}
	red, srv := fallbackRedis(t, c.Now, opts)
	f := NewFallback(red, opts, time.Second, FallbackHooks{})
	f.Watch()
	t.Cleanup(f.Close)
	p := mustPlan(t, "c", conc("c", 3, 10*time.Second))
	tn := uniqueTenant("h")
	ctx := context.Background()
	admit := func(id int64, want JobOutcome) BatchResult {
		t.Helper()
		r, err := f.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: id, Weight: 1}}})
		if err != nil || r.Outcomes[0] != want {
			t.Fatalf("job %d at +%v: %+v %v, want %v", id, c.Now().Sub(newClock().Now()), r, err, want)
		}
		return r
	}
	for id := int64(1); id <= 3; id++ {
		admit(id, JobAdmitted)
	}
	c.Advance(6 * time.Second) // leases 1-3 end at +10s as copied; Redis may have renewed them
	srv.Kill()
	if r := admit(4, JobNotYet); !r.Local || r.Wait != 6*time.Second {
		t.Fatalf("after the switch: %+v, want decided locally, waiting 6s (60%% of a lease)", r)
	}
	if r, err := f.Release(ctx, LeaseRequest{Tenant: tn, Plan: p, Lease: 1, Cost: NoCost}); err != nil || !r.Held || !r.Local {
		t.Fatalf("job 1 done: %+v %v", r, err)
	}
	admit(4, JobAdmitted)
	if r, err := f.Renew(ctx, LeaseRequest{Tenant: tn, Plan: p, Lease: 2, Cost: NoCost}); err != nil || !r.Held {
		t.Fatalf("job 2 renewed: %+v %v", r, err)
	}
	c.Advance(6 * time.Second) // +12s: job 3 never reported; its lease is gone; 2 and 4 hold theirs
	admit(5, JobAdmitted)
	admit(6, JobNotYet)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the fallback to charge Redis and return to it", func() bool { return !f.Local() })
	snap, err := red.Inspect(ctx, tn, p)
	if err != nil {
		t.Fatal(err)
	}
	if l := snap.Limits[0]; l.Used != 3 {
		t.Fatalf("Redis counts %d in flight after the outage, want 3 (jobs 2, 4 and 5)", l.Used)
	}
	admit(6, JobNotYet)
}

// TestFallbackRoutesBetweenReplicas: two replicas share Redis and a pool of 3; each runs one
// tenant's queue; the pool's slots are the first's to decide. Redis is killed with the pool
// full. While it is away, the pool never holds more than 3 however both replicas' queues ask;
// a request and a done message for a tenant reaching the other replica are decided by the
// tenant's own (its copy knows the tenant's leases); and after the outage Redis counts what the
// copies held.
func TestFallbackRoutesBetweenReplicas(t *testing.T) {
	c := newClock()
	opts := Options{}
	red, srv := fallbackRedis(t, c.Now, opts)
	fa := NewFallback(red, opts, time.Second, FallbackHooks{})
	fb := NewFallback(red, opts, time.Second, FallbackHooks{})
	fa.Watch()
	fb.Watch()
	t.Cleanup(fa.Close)
	t.Cleanup(fb.Close)
	pool, err := NewPool(Pool{Name: uniqueTenant("pool"), Concurrency: 3, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, "pooled", lim("own", 1000, time.Millisecond), conc("running", 2, 10*time.Second))
	p.Pool = pool
	a, b := uniqueTenant("a"), uniqueTenant("b")
	plans, err := NewPlans([]*Plan{p}, map[string]string{a: "pooled", b: "pooled"}, "")
	if err != nil {
		t.Fatal(err)
	}
	n := newRoutes()
	n.move(RouteTenant(a), fa, c.Now())
	n.move(RouteTenant(b), fb, c.Now())
	n.move(RoutePool(pool.Name), fa, c.Now())
	n.router(fa, plans)
	n.router(fb, plans)
	ctx := context.Background()
	admit := func(f *Fallback, tenant string, id int64) BatchResult {
		t.Helper()
		r, err := f.Admit(ctx, Batch{Tenant: tenant, Plan: p, Owner: 1, Jobs: []Job{{ID: id, Weight: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Lease ids are input sequences: one space for every tenant.
	admit(fa, a, 1)
	admit(fa, a, 2)
	admit(fb, b, 11) // the pool is full
	srv.Kill()
	// Both copies take the pool as forgotten at the switch: every slot held until 60 % of a lease
	// after it, unless the running jobs report. a's job 1 is done (the message reaches b's
	// replica), b's job 11 renews (it reaches a's).
	if r := admit(fb, b, 12); r.Outcomes[0] != JobNotYet || !r.Local {
		t.Fatalf("b's job 12 right after the switch: %+v, want it to wait for the pool", r)
	}
	if r, err := fb.Release(ctx, LeaseRequest{Tenant: a, Plan: p, Lease: 1, Cost: NoCost, Weight: 1}); err != nil || !r.Held {
		t.Fatalf("a's job 1 done, on b's replica: %+v %v", r, err)
	}
	if r, err := fa.Renew(ctx, LeaseRequest{Tenant: b, Plan: p, Lease: 11, Cost: NoCost, Weight: 1}); err != nil || !r.Held {
		t.Fatalf("b's job 11 renewed, on a's replica: %+v %v", r, err)
	}
	// One slot is free (a's job 1): whichever replica asks first takes it, and no other.
	if r := admit(fb, b, 12); r.Outcomes[0] != JobAdmitted {
		t.Fatalf("b's job 12 after a's job 1 is done: %+v, want admitted", r)
	}
	if r := admit(fa, a, 3); r.Outcomes[0] != JobNotYet || !r.PoolBound {
		t.Fatalf("a's job 3 with the pool full again: %+v, want it to wait for the pool", r)
	}
	// A request for a reaching b's replica is a's replica's to decide: a holds one lease of 2.
	if r, err := fb.Decide(ctx, Request{Tenant: a, Plan: p, Weight: 1}); err != nil || !r.Allowed || !r.Local {
		t.Fatalf("a request of a's on b's replica: %+v %v, want allowed by a's copy", r, err)
	}
	if r, err := fb.Decide(ctx, Request{Tenant: a, Plan: p, Weight: 1}); err != nil || r.Allowed {
		t.Fatalf("a second request of a's on b's replica: %+v %v, want refused (a's 2 slots taken)", r, err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "both replicas to charge Redis and return to it", func() bool { return !fa.Local() && !fb.Local() })
	// The client's other connections may still hold the killed server's: a read of them fails
	// once (EOF) and is made again.
	var snap PoolSnapshot
	testenv.WaitFor(t, 10*time.Second, "the pool read from Redis", func() bool {
		snap, err = red.InspectPool(ctx, pool)
		return err == nil
	})
	// a's job 2 (never reported: its Redis lease lasts), b's job 11 (renewed), b's job 12.
	if snap.InFlight != 3 {
		t.Fatalf("the pool holds %d on Redis after the outage, want 3", snap.InFlight)
	}
}

// TestFallbackKeepsTheDownstreamsHold: a Retry-After the downstream gave while Redis answered
// holds the tenant on the copy after Redis is lost (it rides in the mirrored state); one given
// during the outage holds it on the copy and, charged back, on Redis when it answers again.
func TestFallbackKeepsTheDownstreamsHold(t *testing.T) {
	c := newClock()
	opts := Options{}
	red, srv := fallbackRedis(t, c.Now, opts)
	f := NewFallback(red, opts, time.Second, FallbackHooks{})
	f.Watch()
	t.Cleanup(f.Close)
	p := mustPlan(t, "c", conc("c", 5, 10*time.Second))
	tn := uniqueTenant("h")
	ctx := context.Background()
	// A call that outlasts its bound turns the limiter local, so while Redis answers the bound is
	// long (a busy machine once took over 500 ms for a pooled admission: decided on the copy, the
	// pool taken as forgotten: not-yet, wait 1s); once Redis is paused, the bound ends the first
	// call's wait.
	bound := 10 * time.Second
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, bound) }
	admit := func(id int64, want JobOutcome, wait time.Duration) BatchResult {
		t.Helper()
		cctx, cancel := call()
		defer cancel()
		r, err := f.Admit(cctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: id, Weight: 1}}})
		if err != nil || r.Outcomes[0] != want || r.Wait != wait {
			t.Fatalf("job %d at +%v: %+v %v, want %v, wait %v", id, c.Now().Sub(newClock().Now()), r, err, want, wait)
		}
		return r
	}
	release := func(id int64, after time.Duration) {
		t.Helper()
		cctx, cancel := call()
		defer cancel()
		if _, err := f.Release(cctx, LeaseRequest{Tenant: tn, Plan: p, Lease: id, Cost: NoCost, Report: Report{RetryAfter: after}}); err != nil {
			t.Fatal(err)
		}
	}
	admit(1, JobAdmitted, 0)
	admit(2, JobAdmitted, 0)
	release(1, 4*time.Second)
	admit(3, JobNotYet, 4*time.Second) // on Redis, which mirrors the state and its hold
	c.Advance(time.Second)
	srv.Pause() // not killed: a port nobody listens on can connect to itself, and seem to answer
	bound = 500 * time.Millisecond
	if r := admit(3, JobNotYet, 3*time.Second); !r.Local || !r.Downstream {
		t.Fatalf("on the copy: %+v, want decided locally, held by the downstream", r)
	}
	c.Advance(3 * time.Second)
	admit(3, JobAdmitted, 0)
	release(2, 5*time.Second) // on the copy
	admit(4, JobNotYet, 5*time.Second)
	srv.Resume()
	var r BatchResult
	testenv.WaitFor(t, 20*time.Second, "the fallback to charge Redis and decide on it", func() bool {
		r = admit(4, JobNotYet, 5*time.Second) // a reconnection may fail a first call: the copy again
		return !r.Local
	})
	if !r.Downstream {
		t.Fatalf("back on Redis: %+v, want the hold given during the outage", r)
	}
}

// TestFallbackKeepsThePoolsDownstream: a pool's breaker opened while Redis answered stays open on
// the copy after Redis is lost (the copy takes what Redis last said of the pool's downstream);
// a pool-wide Retry-After given during the outage holds the pool on the copy and, charged back,
// on Redis when it answers again.
func TestFallbackKeepsThePoolsDownstream(t *testing.T) {
	c := newClock()
	opts := Options{}
	red, srv := fallbackRedis(t, c.Now, opts)
	f := NewFallback(red, opts, time.Second, FallbackHooks{})
	f.Watch()
	t.Cleanup(f.Close)
	pool, err := NewPool(Pool{Name: uniqueTenant("pool"), Concurrency: 8, Lease: 10 * time.Second,
		Breaker: &Breaker{Failures: 50, Window: 10 * time.Second, Cooldown: 3 * time.Second, MinJobs: 2}, Adaptive: &Adaptive{Min: 3}})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, "p", lim("own", 1_000_000, time.Microsecond))
	p.Pool = pool
	tn := uniqueTenant("t")
	ctx := context.Background()
	// A call that outlasts its bound turns the limiter local, so while Redis answers the bound is
	// long (a busy machine once took over 500 ms for a pooled admission: decided on the copy, the
	// pool taken as forgotten: not-yet, wait 1s); once Redis is paused, the bound ends the first
	// call's wait.
	bound := 10 * time.Second
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, bound) }
	admit := func(id int64, want JobOutcome, wait time.Duration) BatchResult {
		t.Helper()
		cctx, cancel := call()
		defer cancel()
		r, err := f.Admit(cctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: id, Weight: 1}}})
		if err != nil || r.Outcomes[0] != want || r.Wait != wait {
			t.Fatalf("job %d at +%v: %+v %v, want %v, wait %v", id, c.Now().Sub(newClock().Now()), r, err, want, wait)
		}
		return r
	}
	release := func(id int64, rep Report) LeaseResult {
		t.Helper()
		cctx, cancel := call()
		defer cancel()
		r, err := f.Release(cctx, LeaseRequest{Tenant: tn, Plan: p, Lease: id, Cost: NoCost, Report: rep})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	admit(1, JobAdmitted, 0)
	admit(2, JobAdmitted, 0)
	admit(3, JobAdmitted, 0)
	release(1, Report{Outcome: DownstreamFailed})
	if r := release(2, Report{Outcome: DownstreamFailed}); r.Pool.Breaker != BreakerOpen {
		t.Fatalf("2 of 2 failed on Redis: breaker %d, want open", r.Pool.Breaker)
	}
	srv.Pause() // not killed: a port nobody listens on can connect to itself, and seem to answer
	bound = 500 * time.Millisecond
	if r := admit(4, JobNotYet, 3*time.Second); !r.Local || r.Pool.Breaker != BreakerOpen || r.Pool.Limit != 3 {
		t.Fatalf("on the copy: %+v (pool %+v), want decided locally, the breaker open, the limit in force 3", r, r.Pool)
	}
	if r := release(3, Report{RetryAfter: 5 * time.Second, PoolScope: true}); r.Pool == nil || r.Pool.DownstreamUntil == 0 {
		t.Fatalf("release on the copy: %+v (pool %+v)", r, r.Pool)
	}
	admit(5, JobNotYet, 5*time.Second)
	srv.Resume()
	var r BatchResult
	testenv.WaitFor(t, 20*time.Second, "the fallback to charge Redis and decide on it", func() bool {
		r = admit(5, JobNotYet, 5*time.Second) // a reconnection may fail a first call: the copy again
		return !r.Local
	})
	if !r.Downstream || !r.PoolBound {
		t.Fatalf("back on Redis: %+v, want the pool's hold given during the outage", r)
	}
}
