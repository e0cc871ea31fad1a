package buckettest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
)

// downstream is what a case of the workers' reports needs: leases, pools, and Downstream.
func downstream() Features {
	return Features{Kinds: []bucket.Kind{bucket.KindConcurrency}, Queues: true, Leases: true, Pools: true, Downstream: true}
}

// release ends a lease with what its worker reports, and fails the test on error.
func (h *harness) release(p *bucket.Plan, id int64, r bucket.LeaseRequest) bucket.LeaseResult {
	h.t.Helper()
	r.Tenant, r.Plan, r.Lease = h.tenant, p, id
	if r.Cost == 0 {
		r.Cost = bucket.NoCost
	}
	res, err := h.l.Release(context.Background(), r)
	if err != nil {
		h.t.Fatalf("release %d: %v", id, err)
	}
	return res
}

// downstreamCases exercise what the workers report when a job is done.
var downstreamCases = []testCase{
	{name: "downstream: a release tells the job's time downstream, from its take, renewals or not", needs: downstream(), run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 2, 10*time.Second))
		h.admit(p, jobs("1", "2"), "AA", 0)
		h.c.Advance(1500 * time.Millisecond)
		if r := h.release(p, 1, bucket.LeaseRequest{}); !r.Held || r.Ran != 1500*time.Millisecond {
			t.Fatalf("release of lease 1 after 1.5s: %+v, want held, ran 1.5s", r)
		}
		h.lease(p, 2, true, bucket.NoCost, true)
		h.c.Advance(2 * time.Second)
		if r := h.release(p, 2, bucket.LeaseRequest{}); r.Ran != 3500*time.Millisecond {
			t.Fatalf("release of lease 2, renewed, after 3.5s: ran %v, want 3.5s", r.Ran)
		}
		if r := h.release(p, 2, bucket.LeaseRequest{}); r.Held || r.Ran != 0 {
			t.Fatalf("a repeated release: %+v, want not held, ran 0", r)
		}
		// A pool's lease tells it too, and the pool as the release left it.
		pool := newPool(t, h, bucket.Pool{Concurrency: 4, Lease: 10 * time.Second})
		pp := pooled(t, "pp", pool, 1)
		a := h.as("a")
		a.admit(pp, jobs("7", "8"), "AA", 0)
		h.c.Advance(250 * time.Millisecond)
		r := a.release(pp, 7, bucket.LeaseRequest{})
		if !r.Held || r.Ran != 250*time.Millisecond || r.Pool == nil || r.Pool.InFlight != 1 || r.Pool.Name != pool.Name {
			t.Fatalf("release of a pooled lease after 250ms: %+v (pool %+v), want held, ran 250ms, 1 in flight", r, r.Pool)
		}
	}},
}

func init() {
	downstreamCases = append(downstreamCases, holdCases...)
}

// holdCases exercise a downstream's Retry-After.
var holdCases = []testCase{
	{name: "downstream: a Retry-After holds the tenant's forwards until then, not another tenant's", needs: downstream(), run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 4, 10*time.Second))
		other := h.as("other")
		h.admit(p, jobs("1", "2"), "AA", 0)
		h.c.Advance(time.Second)
		h.release(p, 1, bucket.LeaseRequest{Report: bucket.Report{Outcome: bucket.DownstreamOverloaded, RetryAfter: 5 * time.Second}})
		r := h.admit(p, jobs("3", "4"), "NN", 5*time.Second)
		if !r.Downstream || r.Limit != bucket.LimitDownstream || r.LimitIndex != -2 || r.PoolBound {
			t.Fatalf("held by the downstream: %+v, want Downstream, limit %q, index -2", r, bucket.LimitDownstream)
		}
		if s, err := h.l.Inspect(context.Background(), h.tenant, p); err != nil || !s.DownstreamUntil.Equal(Start.Add(6*time.Second)) {
			t.Fatalf("inspect: downstream until %v (%v), want +6s", s.DownstreamUntil.Sub(Start), err)
		}
		other.admit(p, jobs("1", "2"), "AA", 0)
		// A shorter Retry-After, and one of a lease not held, do not shorten it; a longer one
		// lengthens it.
		h.c.Advance(time.Second)
		h.release(p, 2, bucket.LeaseRequest{Report: bucket.Report{RetryAfter: time.Second}})
		h.release(p, 99, bucket.LeaseRequest{Report: bucket.Report{RetryAfter: 2 * time.Second}})
		h.admit(p, jobs("3", "4"), "NN", 4*time.Second)
		h.c.Advance(4 * time.Second)
		h.admit(p, jobs("3", "4"), "AA", 0)
		h.release(p, 3, bucket.LeaseRequest{Report: bucket.Report{RetryAfter: 3 * time.Second}})
		h.admit(p, jobs("5"), "N", 3*time.Second)
		h.c.Advance(3 * time.Second)
		h.admit(p, jobs("5"), "A", 0)
		if s, _ := h.l.Inspect(context.Background(), h.tenant, p); !s.DownstreamUntil.IsZero() {
			t.Fatalf("inspect after the hold: downstream until %v, want none", s.DownstreamUntil)
		}
	}},
	{name: "downstream: a Retry-After holds a pooled tenant without a concurrency limit of its own", needs: downstream(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 4, Lease: 10 * time.Second})
		a, b := h.as("a"), h.as("b")
		pa, pb := pooled(t, "pa", pool, 1), pooled(t, "pb", pool, 1)
		a.admit(pa, jobs("1"), "A", 0)
		if r := a.release(pa, 1, bucket.LeaseRequest{Report: bucket.Report{RetryAfter: 2 * time.Second}}); !r.Held || !r.PoolOnly {
			t.Fatalf("release: %+v, want held by the pool only", r)
		}
		if r := a.admit(pa, jobs("2"), "N", 2*time.Second); !r.Downstream || r.Limit != bucket.LimitDownstream {
			t.Fatalf("held by the downstream: %+v", r)
		}
		if r := b.admit(pb, jobs("1", "2"), "AA", 0); inFlight(t, r) != 2 {
			t.Fatalf("the other tenant: %d in flight, want 2 (the held tenant's grant was given back)", inFlight(t, r))
		}
		h.c.Advance(2 * time.Second)
		a.admit(pa, jobs("2"), "A", 0)
	}},
	{name: "downstream: a Retry-After holds a tenant whose plan takes no lease, and a pool that counts no job in flight", needs: downstream(), run: func(t *testing.T, h *harness) {
		// A plan of a bucket alone: its jobs hold no lease, the done message names one the
		// limiter never took, and still holds the tenant.
		p := mustPlan(t, "b", lim("burst", 5, 200*time.Millisecond))
		h.admit(p, jobs("1", "2"), "AA", 0)
		if r := h.release(p, 1, bucket.LeaseRequest{Report: bucket.Report{Outcome: bucket.DownstreamOverloaded, RetryAfter: 5 * time.Second}}); r.Held {
			t.Fatalf("release of a job without a lease: %+v, want not held", r)
		}
		if r := h.admit(p, jobs("3"), "N", 5*time.Second); !r.Downstream || r.Limit != bucket.LimitDownstream {
			t.Fatalf("held by the downstream: %+v", r)
		}
		h.c.Advance(5 * time.Second)
		h.admit(p, jobs("3"), "A", 0)
		// A pool of a bucket alone: one of the pool's scope holds every tenant of it.
		pool := newPool(t, h, bucket.Pool{Capacity: 100, Interval: 10 * time.Millisecond})
		a, b := h.as("a"), h.as("b")
		pa, pb := pooled(t, "pa", pool, 1), pooled(t, "pb", pool, 1)
		a.admit(pa, jobs("1"), "A", 0)
		r := a.release(pa, 1, bucket.LeaseRequest{Report: bucket.Report{RetryAfter: 3 * time.Second, PoolScope: true}})
		if r.Held || r.Pool == nil || r.Pool.DownstreamUntil != h.c.Now().Add(3*time.Second).UnixMicro() {
			t.Fatalf("release: %+v (pool %+v), want not held, the pool held for 3s", r, r.Pool)
		}
		for _, x := range []*harness{a, b} {
			if r := x.admit(pb, jobs("2"), "N", 3*time.Second); !r.Downstream || !r.PoolBound {
				t.Fatalf("%s held by the pool's downstream: %+v", x.tenant, r)
			}
		}
		h.c.Advance(3 * time.Second)
		b.admit(pb, jobs("2"), "A", 0)
	}},
	{name: "downstream: a Retry-After of the pool's scope holds every tenant of the pool", needs: downstream(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 4, Lease: 10 * time.Second})
		a, b := h.as("a"), h.as("b")
		pa, pb := pooled(t, "pa", pool, 1), pooled(t, "pb", pool, 3)
		a.admit(pa, jobs("1", "2"), "AA", 0)
		h.c.Advance(500 * time.Millisecond)
		r := a.release(pa, 1, bucket.LeaseRequest{Report: bucket.Report{Outcome: bucket.DownstreamOverloaded, RetryAfter: 3 * time.Second, PoolScope: true}})
		if r.Pool == nil || r.Pool.DownstreamUntil != Start.Add(3500*time.Millisecond).UnixMicro() {
			t.Fatalf("release: pool %+v, want held until +3.5s", r.Pool)
		}
		for _, x := range []struct {
			h *harness
			p *bucket.Plan
		}{{a, pa}, {b, pb}} {
			r := x.h.admit(x.p, jobs("5", "6"), "NN", 3*time.Second)
			if !r.Downstream || !r.PoolBound || r.Pool == nil || r.Pool.DownstreamUntil == 0 {
				t.Fatalf("%s held by the pool's downstream: %+v (pool %+v)", x.h.tenant, r, r.Pool)
			}
			if got, want := r.Pool.Reason(x.h.tenant, 1), "pool "+pool.Name+": downstream asked to wait until 12:00:04"; !strings.HasPrefix(got, want) {
				t.Fatalf("reason %q, want %q", got, want)
			}
		}
		// The lease it held still ends as usual, and a renewal still renews.
		a.lease(pa, 2, true, bucket.NoCost, true)
		h.c.Advance(3 * time.Second)
		b.admit(pb, jobs("5", "6"), "AA", 0)
		a.admit(pa, jobs("5"), "A", 0)
	}},
}

func init() {
	downstreamCases = append(downstreamCases, breakerCases...)
}

// breakerCases exercise a pool's breaker.
var breakerCases = []testCase{
	{name: "downstream: most of a pool's jobs failing opens its breaker; after the cool-down probes go, and their success closes it", needs: downstream(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 10, Lease: time.Minute,
			Breaker: &bucket.Breaker{Failures: 50, Window: 10 * time.Second, Cooldown: 5 * time.Second, Probes: 2, MinJobs: 4}})
		a, b := h.as("a"), h.as("b")
		pa, pb := pooled(t, "pa", pool, 1), pooled(t, "pb", pool, 1)
		a.admit(pa, jobs("1", "2", "3", "4", "5", "6"), "AAAAAA", 0)
		failed := bucket.LeaseRequest{Report: bucket.Report{Outcome: bucket.DownstreamFailed}}
		a.release(pa, 1, bucket.LeaseRequest{})
		a.release(pa, 2, failed)
		if r := a.release(pa, 3, bucket.LeaseRequest{Report: bucket.Report{Outcome: bucket.DownstreamOverloaded}}); r.Pool.Breaker != bucket.BreakerClosed {
			t.Fatalf("3 outcomes, fewer than the 4 that count: breaker %d, want closed", r.Pool.Breaker)
		}
		h.c.Advance(time.Second)
		r := a.release(pa, 4, failed)
		if r.Pool.Breaker != bucket.BreakerOpen || r.Pool.BreakerUntil != Start.Add(6*time.Second).UnixMicro() {
			t.Fatalf("3 of 4 bad: pool %+v, want the breaker open until +6s", r.Pool)
		}
		for _, x := range []struct {
			h *harness
			p *bucket.Plan
		}{{a, pa}, {b, pb}} {
			r := x.h.admit(x.p, jobs("7", "8"), "NN", 5*time.Second)
			if !r.PoolBound || r.Pool.Breaker != bucket.BreakerOpen {
				t.Fatalf("%s while open: %+v, want held by the pool's breaker", x.h.tenant, r)
			}
			if got, want := r.Pool.Reason(x.h.tenant, 1), "pool "+pool.Name+": breaker open until 12:00:06"; !strings.HasPrefix(got, want) {
				t.Fatalf("reason %q, want %q", got, want)
			}
		}
		a.release(pa, 5, bucket.LeaseRequest{}) // a straggler's outcome while open changes nothing
		h.c.Advance(5 * time.Second)
		r2 := a.admit(pa, jobs("7", "8", "9"), "AAN", time.Second)
		if r2.Pool.Breaker != bucket.BreakerHalfOpen || r2.Pool.Probes != 2 {
			t.Fatalf("after the cool-down: pool %+v, want half-open with 2 probes out", r2.Pool)
		}
		b.admit(pb, jobs("1"), "N", time.Second)
		a.release(pa, 7, bucket.LeaseRequest{})
		if r := a.release(pa, 8, bucket.LeaseRequest{}); r.Pool.Breaker != bucket.BreakerClosed {
			t.Fatalf("both probes ok: breaker %d, want closed", r.Pool.Breaker)
		}
		a.admit(pa, jobs("9"), "A", 0)
		b.admit(pb, jobs("1"), "A", 0)
	}},
	{name: "downstream: a half-open breaker whose probe fails opens again; probes lost are replaced after a cool-down", needs: downstream(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 10, Lease: time.Minute,
			Breaker: &bucket.Breaker{Failures: 100, Window: 10 * time.Second, Cooldown: 2 * time.Second, Probes: 1, MinJobs: 2}})
		a := h.as("a")
		pa := pooled(t, "pa", pool, 1)
		a.admit(pa, jobs("1", "2"), "AA", 0)
		failed := bucket.LeaseRequest{Report: bucket.Report{Outcome: bucket.DownstreamFailed}}
		a.release(pa, 1, failed)
		if r := a.release(pa, 2, failed); r.Pool.Breaker != bucket.BreakerOpen {
			t.Fatalf("2 of 2 failed: breaker %d, want open", r.Pool.Breaker)
		}
		h.c.Advance(2 * time.Second)
		a.admit(pa, jobs("3", "4"), "AN", time.Second)
		if r := a.release(pa, 3, failed); r.Pool.Breaker != bucket.BreakerOpen || r.Pool.BreakerUntil != Start.Add(4*time.Second).UnixMicro() {
			t.Fatalf("the probe failed: pool %+v, want open again until +4s", r.Pool)
		}
		h.c.Advance(2 * time.Second)
		a.admit(pa, jobs("4", "5"), "AN", time.Second) // probe 4 never comes back
		h.c.Advance(time.Second)
		a.admit(pa, jobs("5"), "N", time.Second)
		h.c.Advance(time.Second) // a cool-down since the probe went: another goes
		a.admit(pa, jobs("5", "6"), "AN", time.Second)
		a.release(pa, 5, bucket.LeaseRequest{})
		a.admit(pa, jobs("6"), "A", 0)
	}},
}

func init() {
	downstreamCases = append(downstreamCases, testCase{name: "downstream: an adaptive pool starts at its minimum, measures its floor, grows while the time per job stays near it, halves when jobs come back overloaded, and measures a slower floor again", needs: downstream(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 10, Lease: time.Minute, Adaptive: &bucket.Adaptive{Min: 2}})
		p := pooled(t, "p", pool, 1)
		next := int64(1)
		// cycle asks for 12 jobs, lets those granted run for took, and ends them with rep; it
		// returns the pool as the last release left it.
		cycle := func(took time.Duration, rep bucket.Report) *bucket.PoolState {
			var js []bucket.Job
			for i := range 12 {
				js = append(js, bucket.Job{ID: next + int64(i), Weight: 1})
			}
			r, err := h.l.Admit(context.Background(), bucket.Batch{Tenant: h.tenant, Plan: p, Owner: 1, Jobs: js})
			if err != nil {
				t.Fatal(err)
			}
			var granted []int64
			for i, o := range r.Outcomes {
				if o == bucket.JobAdmitted {
					granted = append(granted, js[i].ID)
				}
			}
			if int64(len(granted)) > r.Pool.Limit {
				t.Fatalf("granted %d with a limit in force of %d", len(granted), r.Pool.Limit)
			}
			next += 12
			h.c.Advance(took)
			var last *bucket.PoolState
			for _, id := range granted {
				last = h.release(p, id, bucket.LeaseRequest{Report: rep}).Pool
			}
			return last
		}
		st := cycle(20*time.Millisecond, bucket.Report{})
		if st.Limit != 2 || st.LimitWhy != bucket.LimitStarting || st.InFlight != 0 {
			t.Fatalf("at the start: %+v, want the limit at its minimum 2, starting", st)
		}
		for range 40 {
			st = cycle(20*time.Millisecond, bucket.Report{})
		}
		if st.Floor != 20_000 || st.Limit < 6 || st.TimePerJob != 20_000 {
			t.Fatalf("after 40 cycles of 20ms jobs: %+v, want the floor at 20ms and the limit grown to 6 or more", st)
		}
		before := st.Limit
		for range 8 {
			st = cycle(20*time.Millisecond, bucket.Report{Outcome: bucket.DownstreamOverloaded})
		}
		if st.Limit >= before || st.LimitWhy != bucket.LimitOverloaded {
			t.Fatalf("after overloaded jobs: %+v, want the limit below %d, halved for them", st, before)
		}
		// The downstream gets three times slower: the limit, at its minimum, measures the floor
		// again, and grows from there.
		for range 20 {
			st = cycle(60*time.Millisecond, bucket.Report{})
		}
		if st.Floor != 60_000 || st.LimitWhy != bucket.LimitGrew || st.Limit < 3 {
			t.Fatalf("with jobs 3× the floor: %+v, want the floor measured again at 60ms, the limit growing from there", st)
		}
	}})
}
