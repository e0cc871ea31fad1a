package bucket

import (
	"context"
	"testing"
	"time"
)

// Defects the simulation found on the merged fallback, each left failing in a focused test until
// it is fixed (see TestSimulation's table).

// TestRequestsAllowedOnTheCopyHoldTheirSlotsAfterTheMerge: a tenant with a concurrency limit of
// 3, one job running, decided by this replica; Redis goes away and two requests (no JobID: a lease
// that only ends) are allowed on the copy, which then holds all 3 slots. When Redis is charged
// with the outage, it must count them: of the tenant's next two jobs, none may go until a slot
// frees.
//
// Found by the simulation (seed 3 of make test's 200): a request's lease has no id, and the merge
// skips every lease without one as "the forgotten slots" (outageDelta): Redis counted the
// running job alone, and a plan of 2 had 4 in flight.
func TestRequestsAllowedOnTheCopyHoldTheirSlotsAfterTheMerge(t *testing.T) {
	c := newClock()
	r := newReplica(t, c, Options{})
	p := mustPlan(t, "c", conc("c", 3, 10*time.Second))
	tn := uniqueTenant("requests")
	ctx := context.Background()
	if res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 1, Weight: 1}}}); err != nil || res.Local || res.Outcomes[0] != JobAdmitted {
		t.Fatalf("a job on Redis: %+v %v", res, err)
	}
	r.goDown(t, c)
	c.Advance(time.Second)
	for i := range 2 {
		if res, err := r.Decide(ctx, Request{Tenant: tn, Plan: p, Weight: 1}); err != nil || !res.Local || !res.Allowed {
			t.Fatalf("request %d on the copy: %+v %v", i, res, err)
		}
	}
	if res, err := r.Decide(ctx, Request{Tenant: tn, Plan: p, Weight: 1}); err != nil || res.Allowed {
		t.Fatalf("a third request on the copy: %+v %v, want refused (3 of 3 held)", res, err)
	}
	r.recover(t)
	res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 2, Weight: 1}, {ID: 3, Weight: 1}}})
	if err != nil || res.Local {
		t.Fatalf("the next jobs after the outage: %+v %v", res, err)
	}
	if res.Outcomes[0] == JobAdmitted {
		t.Fatalf("the next jobs after the outage: %v, want none admitted (the job and the 2 requests hold the 3 slots)", res.Outcomes)
	}
}
