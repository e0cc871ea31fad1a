package bucket

import (
	"context"
	"testing"
	"time"
)

// partialScene is the partial outage of issue 38, item 2, at the package level: two replicas on
// one redis-server; a is cut from Redis for cut (b still reaches it), then reaches it again. The
// tenant, on a bucket of 10 refilling 1 a second, has its queue on a (a job arrives every 200 ms)
// while a service asks b for a synchronous decision every 200 ms. It returns what was let
// through in all (queued jobs admitted plus requests allowed) by cut and by cut+after, and the
// queued jobs' mean wait.
type partialFigures struct {
	during, total          int // let through by the end of the cut, and by the end
	fromCopy               int // of them, decided on a copy
	jobsAdmitted, requests int // by kind, in all
	meanWait               time.Duration
}

func partialScene(t *testing.T, known bool, cut, after time.Duration) partialFigures {
	t.Helper()
	c := newClock()
	opts := Options{}
	a, b := newReplica(t, c, opts), newReplica(t, c, opts)
	p := mustPlan(t, "s", lim("b", 10, time.Second))
	tn := uniqueTenant("partial")
	plans, err := NewPlans([]*Plan{p}, map[string]string{tn: "s"}, "")
	if err != nil {
		t.Fatal(err)
	}
	n := newRoutes()
	n.router(a.Fallback, plans)
	n.router(b.Fallback, plans)
	n.move(RouteTenant(tn), a.Fallback, c.Now())
	ctx := context.Background()
	type queued struct {
		job Job
		at  time.Time
	}
	var queue []queued
	var fig partialFigures
	var waited time.Duration
	next := int64(1)
	const step = 200 * time.Millisecond
	for at := time.Duration(0); at < cut+after; at += step {
		if at == 0 && !known || at == step {
			a.redis.fault.Store(away) // known: the queue's first step reached Redis, a's copy is exact
		}
		if at == cut {
			a.redis.fault.Store(reach)
		}
		if at >= cut && a.Local() {
			_ = a.Recover(ctx)
		}
		queue = append(queue, queued{Job{ID: next, Weight: 1}, c.Now()})
		next++
		var jobs []Job
		for _, q := range queue[:min(len(queue), 8)] {
			jobs = append(jobs, q.job)
		}
		res, err := a.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: jobs})
		if err != nil {
			t.Fatalf("+%v: the queue's step on a: %v", at, err)
		}
		let := 0
		for i, o := range res.Outcomes {
			if o.Admitted() {
				let++
				waited += c.Now().Sub(queue[i].at)
			}
		}
		queue = queue[let:]
		fig.jobsAdmitted += let
		if res.Local {
			fig.fromCopy += let
		}
		r, err := b.Decide(ctx, Request{Tenant: tn, Plan: p, Weight: 1})
		if err != nil {
			t.Fatalf("+%v: a request on b: %v", at, err)
		}
		if r.Allowed {
			fig.requests++
			let++
			if r.Local {
				fig.fromCopy++
			}
		}
		if at < cut {
			fig.during += let
		}
		fig.total += let
		c.Advance(step)
	}
	if fig.jobsAdmitted > 0 {
		fig.meanWait = waited / time.Duration(fig.jobsAdmitted)
	}
	return fig
}

// TestAPartialOutageKeepsTheLimit: a replica cut from Redis while its peer reaches it decides
// nothing on its copy: its decisions are relayed to the peer and decided on Redis (Router.Relay).
// Across both, the tenant gets at most C + r·t, during the cut and after it, whether the cut
// replica's copy knew the tenant (its queue's first step reached Redis) or not.
//
// Issue 38, item 2: before, the cut replica decided its queue on its copy while the other
// decided the requests on Redis: 37 let through in the 10 s cut where 20 are allowed (a copy that
// knew the tenant), 28 (one that did not: the figure).
func TestAPartialOutageKeepsTheLimit(t *testing.T) {
	const cut, after = 10 * time.Second, 5 * time.Second
	for _, known := range []bool{true, false} {
		fig := partialScene(t, known, cut, after)
		t.Logf("the cut replica's copy knew the tenant %v: %+v", known, fig)
		if max := 10 + int(cut/time.Second); fig.during > max || fig.fromCopy > 0 {
			t.Errorf("known %v: %d let through in the %v cut (%d decided on a copy), want at most C + r·t = %d, none on a copy", known, fig.during, cut, fig.fromCopy, max)
		}
		if max := 10 + int((cut+after)/time.Second); fig.total > max {
			t.Errorf("known %v: %d let through in %v, want at most C + r·t = %d", known, fig.total, cut+after, max)
		}
	}
}
