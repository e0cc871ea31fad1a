package buckettest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
)

// pools is what a case of capacity pools needs: queues, leases, and pools.
func pools() Features {
	return Features{Kinds: []bucket.Kind{bucket.KindConcurrency}, Queues: true, Leases: true, Pools: true}
}

// pooled is a plan of one generous bucket (the tenant's own limits never bind) in pool with
// share.
func pooled(t testing.TB, name string, pool *bucket.Pool, share int64) *bucket.Plan {
	p := mustPlan(t, name, lim("own", 1_000_000, time.Microsecond))
	p.Pool, p.Share = pool, share
	return p
}

// newPool builds a pool named after the case (cases may share a Redis).
func newPool(t testing.TB, h *harness, p bucket.Pool) *bucket.Pool {
	p.Name = h.tenant
	pool, err := bucket.NewPool(p)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// as is the case's harness for another tenant of the same case.
func (h *harness) as(suffix string) *harness {
	c := *h
	c.tenant = h.tenant + "-" + suffix
	return &c
}

// inFlight is the pool's weight in flight as a batch found it.
func inFlight(t testing.TB, r bucket.BatchResult) int64 {
	t.Helper()
	if r.Pool == nil {
		t.Fatalf("a pooled batch's result has no pool state: %+v", r)
	}
	return r.Pool.InFlight
}

// poolCases exercise capacity pools shared by tenants: their count, their fairness, their
// leases and what a failure between the pool and the tenant's limits leaves.
var poolCases = []testCase{
	{name: "pool: at most its concurrency in flight over every tenant; a release wakes the next waiter", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 3, Lease: 10 * time.Second})
		a, b := h.as("a"), h.as("b")
		pa, pb := pooled(t, "pa", pool, 1), pooled(t, "pb", pool, 1)
		if r := a.admit(pa, jobs("1", "2", "3"), "AAA", 0); inFlight(t, r) != 3 {
			t.Fatalf("in flight %d, want 3", inFlight(t, r))
		}
		// Full: b waits, and asks again within a second (sooner when woken).
		r := b.admit(pb, jobs("4"), "N", time.Second)
		if !r.PoolBound || r.Limit != "pool "+pool.Name || inFlight(t, r) != 3 || r.Pool.Waiting != 1 {
			t.Fatalf("b's job: %+v (pool %+v), want it bound by the pool with 3 in flight and b waiting", r, r.Pool)
		}
		if want := fmt.Sprintf("pool %s: 3 of 3 in flight; %s's share 1 of 1", pool.Name, b.tenant); r.Pool.Reason(b.tenant, 1) != want {
			t.Fatalf("reason %q, want %q", r.Pool.Reason(b.tenant, 1), want)
		}
		h.c.Advance(100 * ms)
		if rel := a.lease(pa, 1, false, bucket.NoCost, true); !slices.Equal(rel.Wakes, []string{b.tenant}) {
			t.Fatalf("the release woke %q, want %q (the tenant waiting)", rel.Wakes, b.tenant)
		}
		a.admit(pa, jobs("5"), "N", time.Second) // the freed slot is b's until it asks again (or forgets to, for 3s)
		b.admit(pb, jobs("4"), "A", 0)
		a.lease(pa, 2, false, bucket.NoCost, true)
		a.admit(pa, jobs("5"), "A", 0)
	}},
	{name: "pool: what is freed is reserved for the waiters' jobs in turn; one slow to ask holds back only its own", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 3, Lease: time.Hour})
		a, w1, w2, c := h.as("a"), h.as("w1"), h.as("w2"), h.as("c")
		pa, p1, p2, pc := pooled(t, "pa", pool, 1), pooled(t, "p1", pool, 1), pooled(t, "p2", pool, 1), pooled(t, "pc", pool, 1)
		// a's jobs start at 0 and 1, c's at 1 (the clock): the waiters' next jobs start at 1,
		// before c's next (at 2).
		a.admit(pa, jobs("1", "2"), "AA", 0)
		c.admit(pc, jobs("3"), "A", 0)
		w1.admit(p1, jobs("10"), "N", time.Second)
		h.c.Advance(ms)
		w2.admit(p2, jobs("20"), "N", time.Second)
		// Each release wakes the waiter whose reserved job the slot it freed covers.
		if rel := a.lease(pa, 1, false, bucket.NoCost, true); !slices.Equal(rel.Wakes, []string{w1.tenant}) {
			t.Fatalf("the first release woke %q, want %q", rel.Wakes, w1.tenant)
		}
		if rel := a.lease(pa, 2, false, bucket.NoCost, true); !slices.Equal(rel.Wakes, []string{w2.tenant}) {
			t.Fatalf("the second release woke %q, want %q", rel.Wakes, w2.tenant)
		}
		// w1 is slow to ask: w2 goes in the slot past w1's, and c, whose turn comes later, finds
		// w1's kept.
		w2.admit(p2, jobs("20"), "A", 0)
		r := c.admit(pc, jobs("30"), "N", time.Second)
		if !slices.Equal(r.Wakes, []string{w1.tenant}) {
			t.Fatalf("c refused for w1's turn woke %q, want %q", r.Wakes, w1.tenant)
		}
		w1.admit(p1, jobs("10"), "A", 0)
	}},
	{name: "pool: what is freed goes to the waiting tenants by their shares", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 4, Lease: time.Hour})
		three, one := h.as("three"), h.as("one")
		p3, p1 := pooled(t, "p3", pool, 3), pooled(t, "p1", pool, 1)
		var held []int64
		next := int64(1)
		// Each asks for its next two jobs: with a backlog, it always has more than it is given.
		ask := func(hh *harness, p *bucket.Plan) bool {
			b := bucket.Batch{Tenant: hh.tenant, Plan: p, Owner: 1, Jobs: []bucket.Job{{ID: next, Weight: 1}, {ID: next + 1, Weight: 1}}}
			r, err := hh.l.Admit(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcomes[1].Admitted() {
				t.Fatalf("both of %s's jobs granted with at most one slot free", hh.tenant)
			}
			if r.Outcomes[0].Admitted() {
				held = append(held, next)
				next += 2
				return true
			}
			next += 2
			return false
		}
		got := map[string]int{}
		for _, id := range []int64{1001, 1002, 1003, 1004} { // the pool is full
			h.admit(p3, jobs(fmt.Sprint(id)), "A", 0)
			held = append(held, id)
		}
		for round := range 200 {
			if len(held) == 4 { // a job ends: its slot is free
				h.lease(p3, held[0], false, bucket.NoCost, true)
				held = held[1:]
			}
			// both ask, in turns of who asks first
			first, second := three, one
			fp, sp := p3, p1
			if round%2 == 1 {
				first, second, fp, sp = one, three, p1, p3
			}
			if ask(first, fp) {
				got[first.tenant]++
			}
			if ask(second, sp) {
				got[second.tenant]++
			}
			h.c.Advance(time.Millisecond)
		}
		ratio := float64(got[three.tenant]) / float64(got[one.tenant])
		if ratio < 2.7 || ratio > 3.3 {
			t.Fatalf("granted %v: ratio %.2f, want 3 (±10%%) by the shares 3 and 1", got, ratio)
		}
	}},
	{name: "pool: a tenant that had nothing waiting banks nothing; a quiet one gets the next freed slot", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 1, Lease: time.Hour})
		heavy, quiet := h.as("heavy"), h.as("quiet")
		ph, pq := pooled(t, "ph", pool, 1), pooled(t, "pq", pool, 1)
		id := int64(1)
		for range 50 { // heavy alone, for a long time
			heavy.admit(ph, jobs(fmt.Sprint(id)), "A", 0)
			h.lease(ph, id, false, bucket.NoCost, true)
			id++
		}
		heavy.admit(ph, jobs(fmt.Sprint(id)), "A", 0) // heavy holds the slot
		heavy.admit(ph, jobs(fmt.Sprint(id+1)), "N", time.Second)
		quiet.admit(pq, jobs("1000"), "N", time.Second)
		if rel := h.lease(ph, id, false, bucket.NoCost, true); !slices.Equal(rel.Wakes, []string{quiet.tenant}) {
			t.Fatalf("the release woke %q, want the quiet tenant %q", rel.Wakes, quiet.tenant)
		}
		heavy.admit(ph, jobs(fmt.Sprint(id+1)), "N", time.Second)
		quiet.admit(pq, jobs("1000"), "A", 0)
		// Quiet's 50 idle rounds are not banked: after its job, heavy's turn comes again.
		quiet.admit(pq, jobs("1001"), "N", time.Second)
		if rel := h.lease(pq, 1000, false, bucket.NoCost, true); !slices.Equal(rel.Wakes, []string{heavy.tenant}) {
			t.Fatalf("the release woke %q, want heavy %q: quiet banked its idle rounds", rel.Wakes, heavy.tenant)
		}
	}},
	{name: "pool: weights count against the slots and the shares", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 5, Lease: time.Hour})
		p := pooled(t, "p", pool, 1)
		if p.MaxWeight() != 5 {
			t.Fatalf("MaxWeight %d, want the pool's 5", p.MaxWeight())
		}
		r := h.admit(p, jobs("1:3", "2:3"), "AN", time.Second)
		if inFlight(t, r) != 3 {
			t.Fatalf("in flight %d, want 3", inFlight(t, r))
		}
		if _, err := h.l.Admit(context.Background(), bucket.Batch{Tenant: h.tenant, Plan: p, Owner: 1, Jobs: jobs("3:6")}); err == nil || !strings.Contains(err.Error(), "exceeds") {
			t.Fatalf("a job of weight 6 in a pool of 5: %v, want weight over capacity", err)
		}
	}},
	{name: "pool: a slot ends with its lease; a renewal moves its end", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 1, Lease: 10 * time.Second})
		p := pooled(t, "p", pool, 1)
		h.admit(p, jobs("1"), "A", 0)
		h.c.Advance(6 * time.Second)
		if r := h.lease(p, 1, true, bucket.NoCost, true); !r.Ends.Equal(h.c.Now().Add(10 * time.Second)) {
			t.Fatalf("renewed to +%v, want +16s", r.Ends.Sub(Start))
		}
		h.admit(p, jobs("2"), "N", time.Second) // asks again within a second
		h.c.Advance(10 * time.Second)
		h.admit(p, jobs("2"), "A", 0)
		h.lease(p, 1, false, bucket.NoCost, false) // ended: not held
	}},
	{name: "pool bucket: the pool's rate holds for every tenant together", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Capacity: 2, Rate: "1/s", Interval: time.Second})
		a, b := h.as("a"), h.as("b")
		pa, pb := pooled(t, "pa", pool, 1), pooled(t, "pb", pool, 1)
		a.admit(pa, jobs("1", "2"), "AA", 0)
		r := b.admit(pb, jobs("3"), "N", time.Second)
		if r.Pool.Tokens != 0 || !strings.Contains(r.Pool.Reason(b.tenant, 1), "0 of 2 tokens left") {
			t.Fatalf("pool %+v, reason %q; want 0 tokens", r.Pool, r.Pool.Reason(b.tenant, 1))
		}
		h.c.Advance(time.Second)
		a.admit(pa, jobs("4"), "N", time.Second) // the token is b's, who waited first
		b.admit(pb, jobs("3"), "A", 0)
	}},
	{name: "pool: grants the tenant's own limits do not use go back", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 5, Lease: time.Hour})
		p := mustPlan(t, "own", lim("own", 1, time.Hour))
		p.Pool = pool
		r := h.admit(p, jobs("1", "2", "3"), "ANN", time.Hour)
		if r.PoolBound || inFlight(t, r) != 1 || r.Limit != "own" {
			t.Fatalf("%+v (pool %+v): want bound by its own limit, 1 in flight (the 2 others given back)", r, r.Pool)
		}
	}},
	{name: "pool: a limiter that forgot holds every slot until the running jobs report", needs: forget(pools()), opts: bucket.Options{Born: Start.Add(-time.Minute)}, run: func(t *testing.T, h *harness) {
		// Lease 5m, forgotten 1m ago: every slot is held until +2m (60 % of a lease after the
		// loss) by a lease nobody can name; the jobs running at the loss report meanwhile.
		pool := newPool(t, h, bucket.Pool{Concurrency: 3, Lease: 5 * time.Minute})
		p := pooled(t, "p", pool, 1)
		if r := h.admit(p, jobs("1"), "N", time.Second); inFlight(t, r) != 3 {
			t.Fatalf("in flight %d after the loss, want 3 (every slot)", inFlight(t, r))
		}
		h.leaseWeighted(p, 901, leaseDone, 1, true)    // a running job is done: its slot is free
		h.leaseWeighted(p, 902, leaseRenewed, 1, true) // another renews: it holds its own again
		h.admit(p, jobs("1"), "A", 0)
		h.admit(p, jobs("2"), "N", time.Second)
		h.c.Advance(2 * time.Minute) // the forgotten slots are gone: 902 and 1 hold theirs
		if r := h.admit(p, jobs("2"), "A", 0); inFlight(t, r) != 3 {
			t.Fatalf("in flight %d, want 3 (902, 1 and 2)", inFlight(t, r))
		}
	}},
	{name: "pool: a start renews a held slot, takes an ended one again when one is free", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 2, Lease: time.Minute})
		p := pooled(t, "p", pool, 1)
		h.admit(p, jobs("1", "2"), "AA", 0)
		h.c.Advance(30 * time.Second)
		h.leaseWeighted(p, 1, leaseStarted, 1, true) // held: renewed to +1m30s
		h.c.Advance(45 * time.Second)                // 2 ended while it waited for a worker
		h.admit(p, jobs("3"), "A", 0)
		if r := h.leaseWeighted(p, 2, leaseStarted, 1, false); r.Wait != 15*time.Second {
			t.Fatalf("a start with no slot free waits %v, want 15s (until 1's lease ends)", r.Wait)
		}
		h.leaseWeighted(p, 1, leaseDone, 1, true)
		h.leaseWeighted(p, 2, leaseStarted, 1, true)
		h.admit(p, jobs("4"), "N", time.Second)
	}},
	{name: "pool: a job asked about again keeps its one slot", needs: pools(), run: func(t *testing.T, h *harness) {
		pool := newPool(t, h, bucket.Pool{Concurrency: 2, Lease: time.Hour})
		p := pooled(t, "p", pool, 1)
		h.admit(p, jobs("1"), "A", 0)
		if r := h.admit(p, jobs("1", "2"), "RA", 0); inFlight(t, r) != 2 { // 1 redeemed: still one slot
			t.Fatalf("in flight %d, want 2", inFlight(t, r))
		}
	}},
	{name: "pool: a job redeemed after it was done takes no slot", needs: pools(), run: func(t *testing.T, h *harness) {
		// Job 1 ran and was done; a replica that took the queue over (the first stopped before
		// removing it) reads it again: redeemed, its forward may be downstream already. What the
		// pool granted it in the call is given back at once, not held by a job nobody runs (were
		// it not downstream, a start takes its slot again before it is forwarded), and its tenant
		// is woken for it. Job 2, which the grant kept out of the one slot, goes next.
		pool := newPool(t, h, bucket.Pool{Concurrency: 1, Lease: time.Hour})
		p := pooled(t, "p", pool, 1)
		h.admit(p, jobs("1"), "A", 0)
		h.leaseWeighted(p, 1, leaseDone, 1, true)
		h.c.Advance(time.Minute) // the first replica's hold has ended
		r := h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("1", "2")}, "RN", time.Second)
		if inFlight(t, r) != 0 || !slices.Contains(r.Wakes, h.tenant) {
			t.Fatalf("in flight %d, wakes %v after job 1 redeemed: want 0, its tenant woken", inFlight(t, r), r.Wakes)
		}
		// Its forward was found downstream: settled, said stored.
		if r := h.step(bucket.Batch{Plan: p, Owner: 2, Stored: 1, Jobs: jobs("2")}, "A", 0); inFlight(t, r) != 1 {
			t.Fatalf("in flight %d after job 2 admitted, want 1", inFlight(t, r))
		}
	}},
	{name: "pool: jobs that may have been admitted before are looked up before the pool is asked", needs: pools(), run: func(t *testing.T, h *harness) {
		// Jobs 1 and 2 were admitted and done; the replica stopped before removing them. The pool
		// is full (job 3 runs) when another replica reads them again (Again): their tenant's state
		// answers them redeemed without the pool being asked, so a full pool does not make them wait
		// (and then expire, as jobs never admitted), nor a free one give them slots nobody uses.
		// Job 4, never admitted, is asked about once they are settled, and waits for the pool.
		pool := newPool(t, h, bucket.Pool{Concurrency: 1, Lease: time.Hour})
		p := pooled(t, "p", pool, 1)
		h.admit(p, jobs("1"), "A", 0)
		h.leaseWeighted(p, 1, leaseDone, 1, true)
		h.admit(p, jobs("2"), "A", 0)
		h.leaseWeighted(p, 2, leaseDone, 1, true)
		h.admit(p, jobs("3"), "A", 0)
		h.c.Advance(time.Minute) // the first replica's hold has ended
		again := jobs("1", "2", "4")
		again[0].Again, again[1].Again, again[2].Again = true, true, true
		r := h.step(bucket.Batch{Plan: p, Owner: 2, Stored: 0, Jobs: again}, "RRN", 0)
		if r.AdmittedAgo[0] != time.Minute || r.AdmittedAgo[2] != 0 {
			t.Fatalf("admitted ago %v, want 1m for jobs 1 and 2", r.AdmittedAgo)
		}
		if r := h.step(bucket.Batch{Plan: p, Owner: 2, Stored: 2, Jobs: jobs("4")}, "N", time.Second); inFlight(t, r) != 1 {
			t.Fatalf("in flight %d, want 1 (job 3's)", inFlight(t, r))
		}
	}},
	{name: "pool: the jobs behind a job redeemed are asked about once its slot is taken again", needs: pools(), run: func(t *testing.T, h *harness) {
		// Job 1 was admitted by a replica that stopped before forwarding it; its lease ended.
		// The replica that took the queue over reads it again with job 2 behind it (Again): 1 is
		// redeemed, and 2 is not granted the pool's one slot in the same call: 1's start takes
		// it (were it granted to 2, 1 would wait for it and 2 behind 1, the slot held by nobody).
		pool := newPool(t, h, bucket.Pool{Concurrency: 1, Lease: 10 * time.Second})
		p := pooled(t, "p", pool, 1)
		h.admit(p, jobs("1"), "A", 0)
		h.c.Advance(time.Minute) // its lease and the first replica's hold ended
		again := jobs("1", "2")
		again[0].Again, again[1].Again = true, true
		h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: again}, "RN", 0)
		h.leaseWeighted(p, 1, leaseStarted, 1, true) // not found downstream: its slot taken again
		h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("2")}, "N", time.Second)
	}},
}
