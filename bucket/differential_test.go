package bucket

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// differentialPlans are the plans the differential tests decide under: buckets, exact and
// approximate windows, quotas (one in a zone with a 45-minute offset) and mixtures of all.
func differentialPlans(t *testing.T) []*Plan {
	return []*Plan{
		mustPlan(t, "free", lim("", 5, 500*ms)),
		mustPlan(t, "gold", lim("burst", 20, 100*ms), lim("daily", 60, 2*time.Second)),
		mustPlan(t, "odd", lim("a", 7, 333334*time.Microsecond), lim("b", 3, 77*ms), lim("c", 9, 41*ms)),
		mustPlan(t, "window", win("", 7, 2*time.Second)),
		mustPlan(t, "wide", win("wide", 200, 3*time.Second), lim("burst", 60, 5*ms)), // sub-windows of 46.875ms
		mustPlan(t, "quota", quota("", 25, Minute, nil)),
		mustPlan(t, "mixed", lim("burst", 6, 150*ms), win("w", 9, 1500*ms), quota("q", 40, Minute, nil)),
		mustPlan(t, "fast", lim("", 2, 20*ms)), // books more slots than a state keeps entries for
		mustPlan(t, "running", conc("running", 3, 4*time.Second), lim("burst", 5, 50*ms)),
		mustPlan(t, "leased", conc("c", 8, 6*time.Second), win("w", 12, 1500*ms), quota("q", 60, Minute, nil), lim("b", 6, 80*ms)),
		mustPlan(t, "zoned", quota("h", 300, Hour, mustLoc(t, "Asia/Kathmandu")), win("w", 100, 700*ms), quota("m", 30, Minute, nil)),
	}
}

// TestDifferential feeds the same random sequence of (time, tenant, weight, job id) to both
// backends and requires identical decisions and identical state.
func TestDifferential(t *testing.T) {
	plans := differentialPlans(t)
	seen := map[Outcome]int{}
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			c := newClock()
			opts := Options{Horizon: 2 * time.Second, SlotGrace: 500 * ms, MarkerTTL: 3 * time.Second}
			mem := NewMemory(opts, c.Now)
			red := NewRedis(redisClient(t), "", opts)
			red.pin(c.Now)
			tenants := make([]string, len(plans))
			for i := range tenants {
				tenants[i] = uniqueTenant("t")
			}
			ctx := context.Background()
			for step := 0; step < 1500; step++ {
				switch rng.IntN(4) {
				case 0:
					c.Advance(time.Duration(rng.IntN(1_000_000)) * time.Microsecond)
				case 1:
					c.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
				}
				ti := rng.IntN(len(tenants))
				p := plans[ti]
				req := Request{Tenant: tenants[ti], Plan: p, Weight: 1 + rng.Int64N(p.MaxWeight())}
				if rng.IntN(5) > 0 {
					req.JobID = fmt.Sprint("job-", rng.IntN(40))
				}
				want, err1 := mem.Decide(ctx, req)
				got, err2 := red.Decide(ctx, req)
				if err1 != nil || err2 != nil {
					t.Fatalf("step %d: errors memory=%v redis=%v", step, err1, err2)
				}
				if got != want {
					t.Fatalf("step %d %+v at %v:\nredis  %+v\nmemory %+v", step, req, c.Now(), got, want)
				}
				seen[got.Outcome]++
				if step%50 == 0 {
					for i, tn := range tenants {
						a, _ := mem.Inspect(ctx, tn, plans[i])
						b, err := red.Inspect(ctx, tn, plans[i])
						if err != nil {
							t.Fatal(err)
						}
						if fmt.Sprint(a) != fmt.Sprint(b) {
							t.Fatalf("step %d tenant %s state:\nredis  %+v\nmemory %+v", step, tn, b, a)
						}
					}
				}
			}
		})
	}
	// The sequence must reach every outcome, or the comparison proves little.
	for o := Admitted; o <= Early; o++ {
		if seen[o] == 0 {
			t.Errorf("outcome %v never occurred: %v", o, seen)
		}
	}
	t.Logf("outcomes: %v", seen)
}

// goldEdited is plan gold of the differential tests with other capacities and rates.
var goldEdited = func() *Plan {
	p, err := NewPlan("gold", lim("burst", 10, 50*ms), lim("daily", 90, time.Second))
	if err != nil {
		panic(err)
	}
	return p
}()

// shadowOf is p in shadow mode.
func shadowOf(p *Plan) *Plan {
	q := *p
	q.Shadow = true
	return &q
}

// TestDifferentialAdmit feeds the same random mix of Admit (two owners taking turns, jobs seen
// stored, late charges, calls without jobs), lease and Decide calls to both backends, with clock
// steps around the redeem window and the owner's hold, and requires identical answers and
// identical state.
func TestDifferentialAdmit(t *testing.T) {
	plans := differentialPlans(t)
	seen := map[JobOutcome]int{}
	var leases, expired, tries, holds int64
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := newClock()
			opts := Options{Horizon: 2 * time.Second, SlotGrace: 500 * ms, MarkerTTL: 3 * time.Second, Redeem: 700 * ms, Hold: 1500 * ms}
			mem := NewMemory(opts, c.Now)
			red := NewRedis(redisClient(t), "", opts)
			red.pin(c.Now)
			if seed%2 == 0 { // a limiter that forgot a moment ago
				forget(mem, c.Now().Add(-1500*ms))
				forget(red, c.Now().Add(-1500*ms))
			}
			tenants := make([]string, len(plans))
			next := make([]int64, len(plans))
			admitted := make([][]int64, len(plans))
			for i := range tenants {
				tenants[i], next[i] = uniqueTenant("a"), 1
			}
			ctx := context.Background()
			for step := 0; step < 1500; step++ {
				switch rng.IntN(4) {
				case 0:
					c.Advance(time.Duration(rng.IntN(1_000_000)) * time.Microsecond)
				case 1:
					c.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
				}
				ti := rng.IntN(len(tenants))
				p := plans[ti]
				if ti == 1 && rng.IntN(8) == 0 { // the plan edited: same limits, other rates
					p = goldEdited
				}
				if rng.IntN(6) == 0 { // the plan in shadow mode: its shadow state
					p = shadowOf(p)
				}
				var want, got string
				switch op := rng.IntN(10); {
				case op < 8:
					b := Batch{Tenant: tenants[ti], Plan: p, Owner: 1 + rng.Int64N(2)}
					if rng.IntN(5) == 0 {
						b.Stored = max(0, next[ti]-1-rng.Int64N(4))
						if rng.IntN(2) == 0 {
							b.Keep = time.Duration(rng.IntN(5)) * time.Second
						}
					}
					if rng.IntN(6) == 0 {
						b.LateWeight, b.Late = 1+rng.Int64N(3), time.Duration(rng.IntN(400_000))*time.Microsecond
					}
					for range rng.IntN(7) {
						id := next[ti]
						if rng.IntN(4) == 0 && id > 5 {
							id -= 1 + rng.Int64N(5) // asked again: redeemed or charged anew
						} else {
							next[ti]++
						}
						b.Jobs = append(b.Jobs, Job{ID: id, Weight: 1 + rng.Int64N(p.MaxWeight())})
					}
					a, err1 := mem.Admit(ctx, b)
					r, err2 := red.Admit(ctx, b)
					if err1 != nil || err2 != nil {
						t.Fatalf("step %d: errors memory=%v redis=%v", step, err1, err2)
					}
					for i, o := range r.Outcomes {
						seen[o]++
						if o == JobAdmitted {
							admitted[ti] = append(admitted[ti], b.Jobs[i].ID)
						}
					}
					expired += r.LeasesExpired
					want, got = fmt.Sprintf("%+v %+v", b, a), fmt.Sprintf("%+v %+v", b, r)
				case op < 9 && p.Leases():
					id := max(1, next[ti]-1-rng.Int64N(6))
					if a := admitted[ti]; len(a) > 0 && rng.IntN(4) > 0 { // mostly a job that holds a lease
						id = a[len(a)-1-rng.IntN(min(len(a), 3))]
					}
					if rng.IntN(5) == 0 { // a job that was running when the limiter forgot, reporting
						id = 1_000_000 + rng.Int64N(50)
					}
					req := LeaseRequest{Tenant: tenants[ti], Plan: p, Lease: id, Cost: NoCost, Weight: rng.Int64N(3)}
					var a, r LeaseResult
					var err1, err2 error
					switch rng.IntN(4) {
					case 0:
						a, err1 = mem.Renew(ctx, req)
						r, err2 = red.Renew(ctx, req)
					case 1:
						a, err1 = mem.Start(ctx, req)
						r, err2 = red.Start(ctx, req)
					default:
						if rng.IntN(2) == 0 {
							req.Cost = rng.Int64N(2 * p.MaxWeight())
						}
						req.Report.Outcome = DownstreamOutcome(rng.IntN(3))
						if rng.IntN(6) == 0 { // the downstream asks for no more for a while
							req.Report.RetryAfter = time.Duration(rng.IntN(2_000_000)) * time.Microsecond
							holds++
						}
						a, err1 = mem.Release(ctx, req)
						r, err2 = red.Release(ctx, req)
					}
					if err1 != nil || err2 != nil {
						t.Fatalf("step %d: errors memory=%v redis=%v", step, err1, err2)
					}
					tries++
					if r.Held {
						leases++
					}
					want, got = fmt.Sprintf("lease %+v", a), fmt.Sprintf("lease %+v", r)
				default:
					req := Request{Tenant: tenants[ti], Plan: p, Weight: 1 + rng.Int64N(p.MaxWeight()), JobID: fmt.Sprint("r-", rng.IntN(5))}
					a, err1 := mem.Decide(ctx, req)
					r, err2 := red.Decide(ctx, req)
					if err1 != nil || err2 != nil {
						t.Fatalf("step %d: errors memory=%v redis=%v", step, err1, err2)
					}
					want, got = fmt.Sprintf("decide %+v", a), fmt.Sprintf("decide %+v", r)
				}
				if got != want {
					t.Fatalf("step %d at %v:\nredis  %s\nmemory %s", step, c.Now(), got, want)
				}
				if step%25 == 0 {
					for i, tn := range tenants {
						for _, p := range []*Plan{plans[i], shadowOf(plans[i])} {
							a, _ := mem.Inspect(ctx, tn, p)
							b, err := red.Inspect(ctx, tn, p)
							if err != nil {
								t.Fatal(err)
							}
							if fmt.Sprint(a) != fmt.Sprint(b) {
								t.Fatalf("step %d tenant %s state (shadow %v):\nredis  %+v\nmemory %+v", step, tn, p.Shadow, b, a)
							}
						}
					}
				}
			}
		})
	}
	for o := JobAdmitted; o <= JobStored; o++ {
		if seen[o] == 0 {
			t.Errorf("outcome %v never occurred: %v", o, seen)
		}
	}
	if leases == 0 || expired == 0 || holds == 0 {
		t.Errorf("%d leases released or renewed, %d expired, %d held by the downstream: the sequence proves little", leases, expired, holds)
	}
	t.Logf("outcomes: %v; %d leases released or renewed of %d tried, %d expired", seen, leases, tries, expired)
}
