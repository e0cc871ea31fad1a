package buckettest

import (
	"context"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
)

// leases is what a case of concurrency limits needs: the kind, queues, and Release and Renew.
func leases(kinds ...bucket.Kind) Features {
	return Features{Kinds: append([]bucket.Kind{bucket.KindConcurrency}, kinds...), Queues: true, Leases: true}
}

// conc builds a concurrency limit of at most limit in flight, each for at most lease.
func conc(name string, limit int64, lease time.Duration) bucket.Limit {
	return bucket.Limit{Name: name, Kind: bucket.KindConcurrency, Capacity: limit, Lease: lease}
}

// lease releases (renew false) or renews a lease and checks whether it was held.
func (h *harness) lease(p *bucket.Plan, id int64, renew bool, cost int64, held bool) bucket.LeaseResult {
	h.t.Helper()
	ll := h.l
	req := bucket.LeaseRequest{Tenant: h.tenant, Plan: p, Lease: id, Cost: cost}
	var r bucket.LeaseResult
	var err error
	if renew {
		r, err = ll.Renew(context.Background(), req)
	} else {
		r, err = ll.Release(context.Background(), req)
	}
	if err != nil {
		h.t.Fatalf("lease %d (renew %v): %v", id, renew, err)
	}
	if r.Held != held {
		h.t.Fatalf("lease %d (renew %v) at +%v: %+v, want held %v", id, renew, h.c.Now().Sub(Start), r, held)
	}
	return r
}

// leaseCases exercise concurrency limits: leases taken, released, renewed, ended, reconciled.
var leaseCases = []testCase{
	{name: "concurrency: at most the limit in flight, a release frees a slot", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 2, 10*time.Second))
		r := h.admit(p, jobs("1", "2", "3", "4"), "AANN", 10*time.Second)
		if r.Limit != "running" {
			t.Fatalf("binding limit %q, want running", r.Limit)
		}
		h.expectLimit(p, 0, 0, 2, 10*time.Second)
		h.c.Advance(time.Second)
		if got := h.lease(p, 1, false, bucket.NoCost, true); got.Weight != 1 {
			t.Fatalf("released weight %d, want 1", got.Weight)
		}
		h.lease(p, 1, false, bucket.NoCost, false) // twice: nothing more
		h.expectLimit(p, 0, 1, 1, 9*time.Second)
		h.admit(p, jobs("3", "4"), "AN", 9*time.Second)
		h.c.Advance(time.Second)
		h.admit(p, jobs("3", "4"), "RN", 8*time.Second) // 3 redeemed: still one lease
		h.lease(p, 2, false, bucket.NoCost, true)
		h.admit(p, jobs("4"), "A", 0)
		h.expectLimit(p, 0, 0, 2, 9*time.Second)
	}},
	{name: "concurrency: weights count, a heavier job waits for enough to end", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 5, time.Minute))
		h.admit(p, jobs("1:2", "2:2", "3:2"), "AAN", time.Minute)
		h.c.Advance(10 * time.Second)
		h.admit(p, jobs("3:2"), "N", 50*time.Second)
		h.lease(p, 2, false, bucket.NoCost, true)
		h.admit(p, jobs("3:2", "4:2"), "AN", 50*time.Second)
		if p.MaxWeight() != 5 {
			t.Fatalf("MaxWeight %d, want the limit 5", p.MaxWeight())
		}
	}},
	{name: "concurrency: a lease ends by itself, once, and a renewal moves its end", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 2, 10*time.Second))
		h.admit(p, jobs("1", "2", "3"), "AAN", 10*time.Second)
		h.c.Advance(6 * time.Second)
		if r := h.lease(p, 2, true, bucket.NoCost, true); !r.Ends.Equal(Start.Add(16 * time.Second)) {
			t.Fatalf("renewed lease ends at +%v, want +16s", r.Ends.Sub(Start))
		}
		h.c.Advance(4 * time.Second) // lease 1 ends unreleased
		r := h.admit(p, jobs("3", "4"), "AN", 6*time.Second)
		if r.LeasesExpired != 1 {
			t.Fatalf("%d leases expired, want 1 (lease 1)", r.LeasesExpired)
		}
		h.lease(p, 1, false, bucket.NoCost, false) // too late: it ended
		h.c.Advance(6 * time.Second)               // lease 2 ends
		r = h.admit(p, jobs("4"), "A", 0)
		if r.LeasesExpired != 1 {
			t.Fatalf("%d leases expired, want 1 (lease 2)", r.LeasesExpired)
		}
		h.lease(p, 3, true, bucket.NoCost, true)
		h.expectLimit(p, 0, 0, 2, 10*time.Second)
	}},
	{name: "concurrency: a done job's cost is reconciled on every other limit", needs: leases(bucket.KindWindow, bucket.KindQuota), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "r", conc("running", 10, time.Hour), lim("burst", 10, time.Second), win("w", 20, time.Minute), quota("q", 100, bucket.Hour, nil))
		h.admit(p, jobs("1:2", "2:4"), "AA", 0)
		h.expectTokens(p, 4, 4, 14, 94)
		h.lease(p, 1, false, 5, true) // cost 5 for weight 2: 3 more
		h.expectTokens(p, 6, 1, 11, 91)
		h.lease(p, 1, false, 9, false) // again: nothing more
		h.expectTokens(p, 6, 1, 11, 91)
		h.c.Advance(2 * time.Second)
		h.lease(p, 2, false, 1, true) // cost 1 for weight 4: 3 back, off job 2's own take
		h.expectTokens(p, 10, 6, 14, 94)
		h.admit(p, jobs("3:6"), "A", 0)
		h.lease(p, 3, false, 20, true) // an overspend of 14: every limit goes into debt
		h.expectTokens(p, 10, -14, -6, 74)
		// the window counts 20 until +60s, when the takes at +0 leave: the overspend's until +62s
		r := h.admit(p, jobs("4"), "N", 60*time.Second)
		if r.Limit != "w" {
			t.Fatalf("binding limit %q, want w", r.Limit)
		}
		h.c.Advance(50 * time.Second)
		h.lease(p, 4, false, 0, false)
		h.expectTokens(p, 10, 10, -6, 74)
	}},
	{name: "concurrency: a request decided alone holds a lease by its key", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 1, time.Minute))
		h.expect(p, 1, "a", bucket.Admitted, 0, 0)
		h.expect(p, 1, "", bucket.Throttled, time.Minute, 0)
		h.lease(p, bucket.LeaseKey("a"), false, bucket.NoCost, true)
		h.expect(p, 1, "", bucket.Admitted, 0, 0) // no key: a lease that only ends
		h.c.Advance(time.Minute)
		h.expect(p, 1, "b", bucket.Admitted, 0, 0)
	}},
	{name: "concurrency: a limiter that never knew the tenant has every slot free", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 3, 5*time.Minute))
		h.expectLimit(p, 0, 3, 0, 0)
		h.admit(p, jobs("1", "2", "3", "4"), "AAAN", 5*time.Minute)
	}},
	{name: "concurrency: a limiter that forgot holds every slot until the running jobs report", needs: forget(leases()), opts: bucket.Options{Born: Start.Add(-time.Minute)}, run: func(t *testing.T, h *harness) {
		// Lease 5m, forgotten 1m ago: the slots are held until 60 % of a lease after the loss
		// (+2m), by a lease nobody can name.
		p := mustPlan(t, "c", conc("running", 3, 5*time.Minute))
		h.expectLimit(p, 0, 0, 3, 2*time.Minute)
		h.admit(p, jobs("1"), "N", 2*time.Minute)
		// A job running at the loss is done: its slot is free at once.
		h.leaseWeighted(p, 901, leaseDone, 1, true)
		h.expectLimit(p, 0, 1, 2, 2*time.Minute)
		// Another renews its lease: it holds a slot of its own again, out of the forgotten ones.
		h.leaseWeighted(p, 902, leaseRenewed, 1, true)
		h.expectLimit(p, 0, 1, 2, 2*time.Minute)
		h.admit(p, jobs("1"), "A", 0)
		h.admit(p, jobs("2"), "N", 2*time.Minute)
		h.c.Advance(2 * time.Minute)
		// The forgotten slots are gone; the renewed job and job 1 hold theirs.
		r := h.admit(p, jobs("2"), "A", 0)
		if r.LeasesExpired != 0 {
			t.Fatalf("%d leases expired: the forgotten ones are not leases of jobs", r.LeasesExpired)
		}
		h.admit(p, jobs("3"), "N", 3*time.Minute)    // 902's renewed lease ends 5m after +1m
		h.leaseWeighted(p, 903, leaseDone, 1, false) // nothing forgotten is counted any more
	}},
	{name: "concurrency: a start renews a held lease, takes an ended one again when a slot is free", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 2, time.Minute))
		h.admit(p, jobs("1", "2"), "AA", 0)
		h.c.Advance(30 * time.Second)
		r := h.leaseWeighted(p, 1, leaseStarted, 1, true)
		if want := h.c.Now().Add(time.Minute); !r.Ends.Equal(want) {
			t.Fatalf("start of a held lease ends at %v, want %v", r.Ends, want)
		}
		h.c.Advance(45 * time.Second) // lease 2 ended while its job waited for a worker
		h.admit(p, jobs("3"), "A", 0)
		r = h.leaseWeighted(p, 2, leaseStarted, 1, false) // 1 and 3 hold both slots
		if r.Wait != 15*time.Second {
			t.Fatalf("a start with no slot free waits %v, want 15s (until lease 1 ends)", r.Wait)
		}
		h.leaseWeighted(p, 1, leaseDone, 1, true)
		h.leaseWeighted(p, 2, leaseStarted, 1, true) // a slot is free: taken again
		h.admit(p, jobs("4"), "N", time.Minute)      // jobs 3 and 2 hold both slots for a lease
	}},
	{name: "concurrency: the jobs behind a job redeemed are asked about once its slots are taken again", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		// Job 1 was admitted by a replica that stopped before forwarding it; its lease ended.
		// The replica that took the queue over reads it again with job 2 behind it (Again): 1 is
		// redeemed, and 2 is not decided in the same call, which would give it the one slot 1's
		// start needs (1 waiting for it, 2 waiting behind 1, the slot held by nobody; then 2
		// redeemed in its turn and 3 taking the slot, and so on).
		p := mustPlan(t, "c", conc("running", 1, 10*time.Second))
		h.admit(p, jobs("1"), "A", 0)
		h.c.Advance(time.Minute) // its lease and the first replica's hold ended
		again := jobs("1", "2")
		again[0].Again, again[1].Again = true, true
		h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: again}, "RN", 0)
		h.leaseWeighted(p, 1, leaseStarted, 1, true) // not found downstream: its slot taken again
		h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("2")}, "N", 10*time.Second)
	}},
}

// lease operations of leaseWeighted.
const (
	leaseDone = iota
	leaseRenewed
	leaseStarted
)

// leaseWeighted is a release (done), renewal or start of lease id naming the job's weight, and
// checks whether it held.
func (h *harness) leaseWeighted(p *bucket.Plan, id int64, op int, weight int64, held bool) bucket.LeaseResult {
	h.t.Helper()
	req := bucket.LeaseRequest{Tenant: h.tenant, Plan: p, Lease: id, Cost: bucket.NoCost, Weight: weight}
	var r bucket.LeaseResult
	var err error
	switch op {
	case leaseDone:
		r, err = h.l.Release(context.Background(), req)
	case leaseRenewed:
		r, err = h.l.Renew(context.Background(), req)
	default:
		r, err = h.l.Start(context.Background(), req)
	}
	if err != nil {
		h.t.Fatalf("lease %d (op %d): %v", id, op, err)
	}
	if r.Held != held {
		h.t.Fatalf("lease %d (op %d) at +%v: %+v, want held %v", id, op, h.c.Now().Sub(Start), r, held)
	}
	return r
}
