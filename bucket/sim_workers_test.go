//go:build sim

package bucket

import (
	"context"
	"fmt"
	"time"
)

// The workers downstream, as the worker library runs them: a job forwarded with a lease is taken
// by a worker (at once, or after waiting in the output), which sends a start first when its lease
// is past its middle, renews it every half lease while it runs, and reports it done with its
// outcome, its cost and sometimes a Retry-After; or dies and never reports. Each lease message
// reaches a random replica that runs (core NATS: any of them).

// Lease modes of the worker's messages.
const (
	msgRenew = iota
	msgStart
	msgDone
)

var msgNames = [...]string{"renew", "start", "done"}

// worker schedules the life of f's job downstream.
func (w *world) worker(f *flight) {
	rng := w.rng
	wait := between(rng, 0, 300*time.Millisecond)
	if rng.IntN(7) == 0 {
		wait = between(rng, w.lease/2+time.Millisecond, 2*w.lease) // it waited in the output
	}
	run := between(rng, 100*time.Millisecond, w.lease)
	if rng.IntN(4) == 0 {
		run = between(rng, w.lease, 3*w.lease) // a long job: renewals
	}
	die := time.Duration(-1)
	if w.swarm.deaths && rng.IntN(10) == 0 {
		die = between(rng, 0, run)
	}
	w.at(wait, "take", func() {
		if w.now.Sub(f.at) > w.lease/2 {
			w.begin(f, run, die, 0)
			return
		}
		w.running(f, f.at, run, die)
	})
}

// begin sends a start for f's job (the tries-th); held, the job runs; otherwise it is put back
// for the wait the answer gives, and started again.
func (w *world) begin(f *flight, run, die time.Duration, tries int) {
	w.lease1(f, msgStart, func(res LeaseResult) {
		switch {
		case res.Held:
			w.running(f, w.now, run, die)
		case tries < 10:
			w.at(min(max(res.Wait, 100*time.Millisecond), w.lease), "start", func() { w.begin(f, run, die, tries+1) })
		default:
			f.done, f.freed = true, true // given up: never ran
		}
	}, func() { f.done, f.freed = true, true })
}

// running is f's job under way from its lease's start `from`: renewals every half lease, then
// done after run, unless the worker dies after die (≥ 0).
func (w *world) running(f *flight, from time.Time, run, die time.Duration) {
	began := w.now
	var renew func(from time.Time)
	renew = func(from time.Time) {
		next := from.Add(w.lease / 2)
		if next.After(began.Add(run)) {
			return
		}
		w.at(next.Sub(w.now), "renew", func() {
			if f.dead || f.done {
				return
			}
			w.lease1(f, msgRenew, func(res LeaseResult) {
				if res.Held {
					renew(w.now)
				}
			}, func() {})
		})
	}
	renew(from)
	if die >= 0 {
		w.at(die, "die", func() {
			f.dead = true
			w.logf("worker of %s #%d died", f.tenant.name, f.id)
		})
		return
	}
	w.at(run, "done", func() {
		if !f.dead {
			w.lease1(f, msgDone, func(LeaseResult) {}, func() { f.done = true })
		}
	})
}

// lease1 sends one lease message of f's job to a random replica that runs, and applies its
// answer: the job's lease as the limiter left it. then follows a message answered, failed
// (after three tries) one that was not.
func (w *world) lease1(f *flight, mode int, then func(LeaseResult), failed func()) {
	if op, ok := w.leaseOp(nil, f, mode, then, failed, 0); ok {
		w.do(op)
	}
}

// leaseOp is the call of a lease message of f's job (the tries-th) reaching replica r (nil: a
// random one that runs), if one runs.
func (w *world) leaseOp(r *simReplica, f *flight, mode int, then func(LeaseResult), failed func(), tries int) (simOp, bool) {
	if r == nil {
		var ok bool
		if r, ok = pick(w.rng, w.live()); !ok {
			failed()
			return simOp{}, false
		}
	}
	t := f.tenant
	req := LeaseRequest{Tenant: t.name, Plan: t.plan, Lease: f.id, Weight: f.weight, Cost: NoCost}
	if mode == msgDone && w.swarm.reports {
		switch n := w.rng.IntN(10); {
		case n < 2:
			req.Cost = w.rng.Int64N(f.weight) // it cost less: given back
		case n < 3:
			req.Cost = f.weight + 1
		}
		switch n := w.rng.IntN(10); {
		case n == 0:
			req.Report.Outcome = DownstreamFailed
		case n == 1:
			req.Report.Outcome = DownstreamOverloaded
		}
		if w.rng.IntN(20) == 0 {
			req.Report.RetryAfter = between(w.rng, time.Second, 4*time.Second).Truncate(time.Millisecond)
			req.Report.PoolScope = t.plan.Pool != nil && w.rng.IntN(2) == 0
		}
	}
	var res LeaseResult
	var err error
	op := simOp{what: fmt.Sprintf("%s %s(%s #%d)", r.name, msgNames[mode], t.name, f.id)}
	op.run = func(ctx context.Context) {
		switch mode {
		case msgRenew:
			res, err = r.lim.Renew(ctx, req)
		case msgStart:
			res, err = r.lim.Start(ctx, req)
		default:
			res, err = r.lim.Release(ctx, req)
		}
	}
	op.apply = func(asked map[string]*simReplica) {
		if err != nil {
			w.logf("%s %s %s #%d: error %v", r.name, msgNames[mode], t.name, f.id, err)
			if tries < 2 {
				w.at(200*time.Millisecond, "retry", func() {
					if op, ok := w.leaseOp(nil, f, mode, then, failed, tries+1); ok {
						w.do(op)
					}
				})
			} else {
				failed()
			}
			return
		}
		d := asked[RouteTenant(t.name)]
		if d == nil {
			d = r
		}
		w.logf("%s %s %s #%d w%d%s: held %v wait %v%s%s", r.name, msgNames[mode], t.name, f.id, f.weight,
			note(req.Cost >= 0 && mode == msgDone, fmt.Sprintf(" cost %d", req.Cost)), res.Held, res.Wait, note(d != r, " by "+d.name), note(res.Local, " (copy)"))
		if res.Local {
			w.onCopy(t, d)
			if p := t.plan.Pool; p != nil && p.Concurrency > 0 {
				w.onPoolCopy(p, asked[RoutePool(p.Name)], d)
			}
		}
		switch {
		case mode == msgDone:
			f.done, f.freed = true, true
			if res.Held && req.Cost >= 0 && req.Cost < f.weight {
				if t.plan.concurrent {
					w.books[t.name].giveBack(w.now, f.at, f.weight-req.Cost)
				}
				if p := t.plan.Pool; p != nil && p.Concurrency > 0 && w.pgcra[p.Name] != nil {
					w.pgcra[p.Name].giveBack(w.now.UnixMicro(), f.weight-req.Cost)
				}
			}
			w.wake(t, 0)
		case res.Held:
			f.end, f.capAt = w.now.Add(w.lease), time.Time{}
		case mode == msgStart && w.now.Before(f.end):
			f.end = w.now // put back, not run: its slots were given back
		}
		w.wakePool(res.Wakes)
		then(res)
	}
	return op, true
}
