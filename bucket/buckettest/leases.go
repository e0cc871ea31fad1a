package buckettest

import (
	"context"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
)

// LeaseLimiter is a Limiter that releases and renews leases (Features.Leases): *bucket.Memory and
// *bucket.Redis implement it.
type LeaseLimiter interface {
	Limiter
	Release(ctx context.Context, req bucket.LeaseRequest) (bucket.LeaseResult, error)
	Renew(ctx context.Context, req bucket.LeaseRequest) (bucket.LeaseResult, error)
	Charge(ctx context.Context, tenant string, plan *bucket.Plan, weight int64, late time.Duration, fence string) error
	Fence(ctx context.Context, tenant, id string, life time.Duration) error
	Unfence(ctx context.Context, tenant, id string) error
}

var (
	_ LeaseLimiter = (*bucket.Memory)(nil)
	_ LeaseLimiter = (*bucket.Redis)(nil)
)

// leases is what a case of concurrency limits needs: the kind, lanes, and Release and Renew.
func leases(kinds ...bucket.Kind) Features {
	return Features{Kinds: append([]bucket.Kind{bucket.KindConcurrency}, kinds...), Lanes: true, Leases: true}
}

// conc builds a concurrency limit of at most limit in flight, each for at most lease.
func conc(name string, limit int64, lease time.Duration) bucket.Limit {
	return bucket.Limit{Name: name, Kind: bucket.KindConcurrency, Capacity: limit, Lease: lease}
}

// lease releases (renew false) or renews a lease and checks whether it was held.
func (h *harness) lease(p *bucket.Plan, id int64, renew bool, cost int64, held bool) bucket.LeaseResult {
	h.t.Helper()
	ll, ok := h.l.(LeaseLimiter)
	if !ok {
		h.t.Fatalf("the backend %T promises leases but has no Release and Renew", h.l)
	}
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

// charge charges weight stored late (LeaseLimiter.Charge).
func (h *harness) charge(p *bucket.Plan, weight int64, late time.Duration) {
	h.t.Helper()
	ll, ok := h.l.(LeaseLimiter)
	if !ok {
		h.t.Fatalf("the backend %T promises leases but has no Charge", h.l)
	}
	if err := ll.Charge(context.Background(), h.tenant, p, weight, late, ""); err != nil {
		h.t.Fatalf("charge %d late by %v: %v", weight, late, err)
	}
}

// fence raises (life > 0) or lowers (life 0) the fence id (LeaseLimiter.Fence, Unfence).
func (h *harness) fence(id string, life time.Duration) {
	h.t.Helper()
	ll, ok := h.l.(LeaseLimiter)
	if !ok {
		h.t.Fatalf("the backend %T promises leases but has no Fence", h.l)
	}
	var err error
	if life > 0 {
		err = ll.Fence(context.Background(), h.tenant, id, life)
	} else {
		err = ll.Unfence(context.Background(), h.tenant, id)
	}
	if err != nil {
		h.t.Fatalf("fence %s (life %v): %v", id, life, err)
	}
}

// expectFenced checks whether a batch's result says a fence held its jobs back.
func (h *harness) expectFenced(r bucket.BatchResult, want bool) {
	h.t.Helper()
	if r.Fenced != want || (want && (r.Limit != "" || r.LimitIndex != -1)) {
		h.t.Fatalf("at +%v: fenced %v (limit %q, index %d), want fenced %v", h.c.Now().Sub(Start), r.Fenced, r.Limit, r.LimitIndex, want)
	}
}

// leaseCases exercise concurrency limits: leases taken, released, renewed, ended, reconciled.
var leaseCases = []testCase{
	{name: "fence: nothing is admitted while a fence stands, until it is lowered or ends", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "fenced", lim("rate", 4, 250*time.Millisecond))
		h.expectFenced(h.admit(p, bucket.Ingest, jobs("1", "2"), "AA", 0, false), false)
		h.fence("d1", 2*time.Second)
		if snap, err := h.l.Inspect(context.Background(), h.tenant, p); err != nil || !snap.FencedUntil.Equal(h.c.Now().Add(2*time.Second)) {
			t.Fatalf("inspect while fenced: fenced until %v (%v), want %v", snap.FencedUntil, err, h.c.Now().Add(2*time.Second))
		}
		// Ingest moves what would fit to the lane; the lane's head waits for the fence.
		h.expectFenced(h.admit(p, bucket.Ingest, jobs("3", "4"), "LL", 2*time.Second, true), true)
		h.expectFenced(h.admit(p, bucket.Lane, jobs("3", "4"), "NN", 2*time.Second, true), true)
		// A job admitted before is still answered so: its forward is a duplicate, not a new one.
		h.admit(p, bucket.Lane, jobs("1", "3"), "RN", 2*time.Second, true)
		// Requests forward nothing: Decide is not fenced.
		h.expect(p, 1, "", bucket.Admitted, 0, 1)
		h.c.Advance(500 * time.Millisecond)
		h.fence("d1", 2*time.Second) // extended: ends 2 s from now
		h.admit(p, bucket.Lane, jobs("3"), "N", 2*time.Second, true)
		h.fence("d1", 0)
		h.expectFenced(h.admit(p, bucket.Lane, jobs("3", "4"), "AA", 0, true), false)
		// Two deciders' fences: the tenant is fenced while either stands.
		h.fence("d2", time.Second)
		h.fence("d3", 3*time.Second)
		h.admit(p, bucket.Lane, jobs("5"), "N", 3*time.Second, true)
		h.fence("d3", 0)
		h.admit(p, bucket.Lane, jobs("5"), "N", time.Second, true)
		h.fence("d3", 0)         // lowering a fence not held is harmless
		h.c.Advance(time.Second) // d2 ends on its own (a decider that died)
		h.expectFenced(h.admit(p, bucket.Lane, jobs("5"), "A", 0, true), false)
		if snap, err := h.l.Inspect(context.Background(), h.tenant, p); err != nil || !snap.FencedUntil.IsZero() {
			t.Fatalf("inspect after the fences: fenced until %v (%v), want none", snap.FencedUntil, err)
		}
		// The charge of a late batch lowers its decider's fence in the same call.
		h.fence("d4", 3*time.Second)
		h.admit(p, bucket.Lane, jobs("6"), "N", 3*time.Second, true)
		if err := h.l.(LeaseLimiter).Charge(context.Background(), h.tenant, p, 1, 500*time.Millisecond, "d4"); err != nil {
			t.Fatal(err)
		}
		h.expectFenced(h.admit(p, bucket.Lane, jobs("6"), "A", 0, true), false)
	}},
	{name: "charge: jobs stored late take back what the limits gave meanwhile", needs: leases(bucket.KindWindow), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "late", lim("rate", 4, 250*time.Millisecond), win("day", 100, time.Hour))
		h.admit(p, bucket.Ingest, jobs("1", "2", "3", "4"), "AAAA", 0, false)
		h.expectTokens(p, 0, 96)
		h.c.Advance(2 * time.Second) // full again; the 4 are stored only now
		h.expectTokens(p, 4, 96)
		h.charge(p, 4, 2*time.Second) // a bucket takes back what it refilled, at most the weight
		h.expectTokens(p, 0, 92)
		h.c.Advance(2 * time.Second)
		h.charge(p, 3, 500*time.Millisecond) // 2 tokens refilled in the 500 ms they were late
		h.expectTokens(p, 2, 89)
		h.charge(p, 5, 2*time.Second) // into debt: a token again only 1 s from now
		h.expectTokens(p, -3, 84)
		h.c.Advance(999 * time.Millisecond)
		h.expectTokens(p, 0, 84)
		h.c.Advance(time.Millisecond)
		h.expectTokens(p, 1, 84)
	}},
	{name: "concurrency: at most the limit in flight, a release frees a slot", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 2, 10*time.Second))
		r := h.admit(p, bucket.Ingest, jobs("1", "2", "3", "4"), "AALL", 10*time.Second, true)
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
		h.admit(p, bucket.Lane, jobs("3", "4"), "AN", 9*time.Second, true)
		h.c.Advance(time.Second)
		h.admit(p, bucket.Lane, jobs("3", "4"), "RN", 8*time.Second, true) // 3 redeemed: still one lease
		h.lease(p, 2, false, bucket.NoCost, true)
		h.admit(p, bucket.Lane, jobs("4"), "A", 0, true)
		h.expectLimit(p, 0, 0, 2, 9*time.Second)
	}},
	{name: "concurrency: weights count, a heavier job waits for enough to end", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 5, time.Minute))
		h.admit(p, bucket.Lane, jobs("1:2", "2:2", "3:2"), "AAN", time.Minute, false)
		h.c.Advance(10 * time.Second)
		h.admit(p, bucket.Lane, jobs("3:2"), "N", 50*time.Second, false)
		h.lease(p, 2, false, bucket.NoCost, true)
		h.admit(p, bucket.Lane, jobs("3:2", "4:2"), "AN", 50*time.Second, false)
		if p.MaxWeight() != 5 {
			t.Fatalf("MaxWeight %d, want the limit 5", p.MaxWeight())
		}
	}},
	{name: "concurrency: a lease ends by itself, once, and a renewal moves its end", needs: leases(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 2, 10*time.Second))
		h.admit(p, bucket.Lane, jobs("1", "2", "3"), "AAN", 10*time.Second, false)
		h.c.Advance(6 * time.Second)
		if r := h.lease(p, 2, true, bucket.NoCost, true); !r.Ends.Equal(Start.Add(16 * time.Second)) {
			t.Fatalf("renewed lease ends at +%v, want +16s", r.Ends.Sub(Start))
		}
		h.c.Advance(4 * time.Second) // lease 1 ends unreleased
		r := h.admit(p, bucket.Lane, jobs("3", "4"), "AN", 6*time.Second, false)
		if r.LeasesExpired != 1 {
			t.Fatalf("%d leases expired, want 1 (lease 1)", r.LeasesExpired)
		}
		h.lease(p, 1, false, bucket.NoCost, false) // too late: it ended
		h.c.Advance(6 * time.Second)               // lease 2 ends
		r = h.admit(p, bucket.Lane, jobs("4"), "A", 0, false)
		if r.LeasesExpired != 1 {
			t.Fatalf("%d leases expired, want 1 (lease 2)", r.LeasesExpired)
		}
		h.lease(p, 3, true, bucket.NoCost, true)
		h.expectLimit(p, 0, 0, 2, 10*time.Second)
	}},
	{name: "concurrency: a done job's cost is reconciled on every other limit", needs: leases(bucket.KindWindow, bucket.KindQuota), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "r", conc("running", 10, time.Hour), lim("burst", 10, time.Second), win("w", 20, time.Minute), quota("q", 100, bucket.Hour, nil))
		h.admit(p, bucket.Lane, jobs("1:2", "2:4"), "AA", 0, false)
		h.expectTokens(p, 4, 4, 14, 94)
		h.lease(p, 1, false, 5, true) // cost 5 for weight 2: 3 more
		h.expectTokens(p, 6, 1, 11, 91)
		h.lease(p, 1, false, 9, false) // again: nothing more
		h.expectTokens(p, 6, 1, 11, 91)
		h.c.Advance(2 * time.Second)
		h.lease(p, 2, false, 1, true) // cost 1 for weight 4: 3 back, off job 2's own take
		h.expectTokens(p, 10, 6, 14, 94)
		h.admit(p, bucket.Lane, jobs("3:6"), "A", 0, false)
		h.lease(p, 3, false, 20, true) // an overspend of 14: every limit goes into debt
		h.expectTokens(p, 10, -14, -6, 74)
		// the window counts 20 until +60s, when the takes at +0 leave: the overspend's until +62s
		r := h.admit(p, bucket.Lane, jobs("4"), "N", 60*time.Second, false)
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
		h.admit(p, bucket.Ingest, jobs("1", "2", "3", "4"), "AAAL", 5*time.Minute, true)
	}},
	{name: "concurrency: a limiter that forgot takes every slot for held, one lease long", needs: forget(leases()), opts: bucket.Options{Born: Start.Add(-time.Minute)}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "c", conc("running", 3, 5*time.Minute))
		h.expectLimit(p, 0, 0, 3, 4*time.Minute)
		h.admit(p, bucket.Lane, jobs("1"), "N", 4*time.Minute, false)
		h.lease(p, 1, false, bucket.NoCost, false) // nobody can release what was forgotten
		h.c.Advance(4 * time.Minute)
		r := h.admit(p, bucket.Lane, jobs("1"), "A", 0, false)
		if r.LeasesExpired != 0 {
			t.Fatalf("%d leases expired: the forgotten ones are not leases of jobs", r.LeasesExpired)
		}
	}},
}
