package buckettest

import (
	"context"
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
