package bucket

import (
	"context"
	"testing"
	"time"
)

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

// TestTheForgottenSlotsAreNotChargedAsARequest: another replica's tenant runs job 1 (weight 2 of
// a concurrency limit of 4) when Redis goes away; this replica first decides the tenant on its
// copy by renewing job 1 (taken as forgotten: the slots of the jobs running are held until 60 %
// of a lease, less what the jobs report). The merge must charge Redis with job 1's renewal and
// nothing else: the forgotten slots are no lease of a request, and a job of weight 2 goes at once.
//
// Failed with the first fix of the requests' leases (every lease without an id not in the base
// added): the forgotten slots, shrunk by job 1's report, differed from the base's and were added
// as a request's, and the job waited for them (found by the simulation, seed 86: a queue stalled
// on Redis with 2 of 4 slots held).
func TestTheForgottenSlotsAreNotChargedAsARequest(t *testing.T) {
	c := newClock()
	r := newReplica(t, c, Options{})
	p := mustPlan(t, "c", conc("c", 4, 10*time.Second))
	tn := uniqueTenant("forgotten")
	ctx := context.Background()
	other := NewRedis(redisClient(t), "", Options{})
	other.pin(c.Now)
	if res, err := other.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 2, Jobs: []Job{{ID: 1, Weight: 2}}}); err != nil || res.Outcomes[0] != JobAdmitted {
		t.Fatalf("job 1 on Redis: %+v %v", res, err)
	}
	r.goDown(t, c)
	c.Advance(time.Second)
	if res, err := r.Renew(ctx, LeaseRequest{Tenant: tn, Plan: p, Lease: 1, Weight: 2}); err != nil || !res.Local || !res.Held {
		t.Fatalf("job 1 renewed on the copy: %+v %v", res, err)
	}
	r.recover(t)
	c.Advance(3 * time.Second) // past the other replica's hold on the queue, within the forgotten slots' end
	res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 2, Weight: 2}}})
	if err != nil || res.Local {
		t.Fatalf("job 2 after the outage: %+v %v", res, err)
	}
	if res.Outcomes[0] != JobAdmitted {
		t.Fatalf("job 2 after the outage: %v wait %v, want admitted (job 1 holds 2 of 4)", res.Outcomes, res.Wait)
	}
}
